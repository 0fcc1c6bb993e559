/* shape.c — shape inference over a model: every value's shape at a batch size, each node's from
 * its row in the op table (core/ops/), with errors that name the layer and where it is declared.
 * The model is only read: the loader and every session keep their own shapes. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

static dl_status bad(const dl_graph *g, const dl_node *n, dl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dl_status bad(const dl_graph *g, const dl_node *n, dl_error *err, const char *fmt, ...) {
    char where[300], msg[DL_ERROR_LEN];
    dl_graph_where(g, n->loc, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dl_fail(err, DL_E_INVALID, "%s%s '%s': %s", where, dl_op_kind_name(n->kind), n->name, msg);
}

/* 1 if a shape is within the limit of one tensor (op_table.h), counted without overflow. */
static int fits(const dl_shape *s) {
    int64_t n;
    return dl_dims_numel(s->d, s->ndim, &n);
}

/* "[65536, 65536, 65536] (more than the limit of 17179869184 elements per tensor)" */
static const char *too_big(const dl_shape *s, char *buf, size_t len) {
    char dims[160];
    dl_shape_str(s->d, s->ndim, dims, sizeof dims);
    snprintf(buf, len, "%s is more than the %lld elements a tensor may have", dims, (long long)DL_MAX_TENSOR_ELEMENTS);
    return buf;
}

static dl_status infer_node(const dl_graph *g, int i, dl_shape *shapes, dl_error *err) {
    const dl_node *n = &g->nodes[i];
    const dl_op_def *row = dl_op_def_of(n->kind);
    int own = dl_op_weight_count(row, &n->params), acts = n->n_inputs - own;
    if (row->weight_shapes) {
        dl_shape w[DL_MAX_NODE_INPUTS];
        row->weight_shapes(&n->params, &shapes[n->inputs[0]], w);
        for (int j = 0; j < own; j++) {
            shapes[n->inputs[acts + j]] = w[j];
            char why[300];
            if (!fits(&w[j]))
                return bad(g, n, err, "weight '%s' of shape %s", g->values[n->inputs[acts + j]].name,
                           too_big(&w[j], why, sizeof why));
        }
    }
    dl_tensor in[DL_MAX_NODE_INPUTS], out;
    const char *names[DL_MAX_NODE_INPUTS];
    dl_op op;
    dl_node_op(g, i, n->inputs, n->n_inputs, shapes, &n->params.attrs, DL_PRECISION_F32, &op, in, &out);
    for (int j = 0; j < n->n_inputs; j++) names[j] = g->values[n->inputs[j]].name;
    for (int j = 0; j < acts; j++) { /* integers only where the row takes them (gather's indices) */
        const dl_value *in_v = &g->values[n->inputs[j]];
        int want_int = row->int_inputs >> j & 1, is_int = !dl_dtype_is_f32(in_v->dtype);
        if (is_int && !want_int)
            return bad(g, n, err, "input '%s' is int64; %s takes float tensors (int64 feeds gather's indices)",
                       in_v->name, row->name);
        if (want_int && !is_int)
            return bad(g, n, err, "input %d ('%s') must be int64 (a model input of dtype int64)", j + 1, in_v->name);
    }
    dl_infer_ctx cx = {&n->params, names};
    dl_error why = {{0}};
    dl_shape *y = &shapes[n->output];
    if (!row->infer(&op, &cx, y, &why)) return bad(g, n, err, "%s", why.msg);
    char big[300];
    if (!fits(y)) return bad(g, n, err, "output of shape %s", too_big(y, big, sizeof big));
    return DL_OK;
}

dl_status dl_graph_infer(const dl_graph *g, int64_t batch, dl_shape *shapes, dl_error *err) {
    for (int v = 0; v < g->n_values; v++) {
        const dl_value *val = &g->values[v];
        memset(&shapes[v], 0, sizeof shapes[v]);
        if (val->kind == DL_VALUE_INPUT || val->constant) shapes[v] = val->shape; /* as declared */
    }
    char why[300];
    for (int i = 0; i < g->n_inputs; i++) {
        dl_shape *x = &shapes[g->inputs[i]];
        if (batch > 0) x->d[0] = batch;
        if (!fits(x)) {
            char where[300];
            dl_graph_where(g, g->values[g->inputs[i]].loc, where, sizeof where);
            return dl_fail(err, DL_E_INVALID, "%sinput '%s' at batch %lld: shape %s", where,
                           g->values[g->inputs[i]].name, (long long)x->d[0], too_big(x, why, sizeof why));
        }
    }
    for (int v = 0; v < g->n_values; v++) /* constants as declared, before anything is bound */
        if (g->values[v].constant && !fits(&shapes[v])) {
            char where[300];
            dl_graph_where(g, g->values[v].loc, where, sizeof where);
            return dl_fail(err, DL_E_INVALID, "%sconstant '%s' of shape %s", where, g->values[v].name,
                           too_big(&shapes[v], why, sizeof why));
        }
    for (int i = 0; i < g->n_nodes; i++) {
        dl_status st = infer_node(g, i, shapes, err);
        if (st != DL_OK) return st;
    }
    return DL_OK;
}
