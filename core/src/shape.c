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

/* Elements of a shape as a double, so that a hostile one cannot overflow the count. */
static double elements(const dl_shape *s) {
    double n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (double)s->d[d];
    return n;
}

#define MAX_ELEMENTS 4e12 /* sizes computed from counts stay far from overflowing 64 bits */

static dl_status infer_node(const dl_graph *g, int i, dl_shape *shapes, dl_error *err) {
    const dl_node *n = &g->nodes[i];
    const dl_op_def *row = dl_op_def_of(n->kind);
    int own = dl_op_weight_count(row, &n->params), acts = n->n_inputs - own;
    if (row->weight_shapes) {
        dl_shape w[DL_MAX_NODE_INPUTS];
        row->weight_shapes(&n->params, &shapes[n->inputs[0]], w);
        for (int j = 0; j < own; j++) {
            shapes[n->inputs[acts + j]] = w[j];
            if (elements(&w[j]) > MAX_ELEMENTS)
                return bad(g, n, err, "weight '%s' of %.3g elements is too large", g->values[n->inputs[acts + j]].name,
                           elements(&w[j]));
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
    if (elements(y) > MAX_ELEMENTS) return bad(g, n, err, "output of %.3g elements is too large", elements(y));
    return DL_OK;
}

dl_status dl_graph_infer(const dl_graph *g, int64_t batch, dl_shape *shapes, dl_error *err) {
    for (int v = 0; v < g->n_values; v++) {
        const dl_value *val = &g->values[v];
        memset(&shapes[v], 0, sizeof shapes[v]);
        if (val->kind == DL_VALUE_INPUT || val->constant) shapes[v] = val->shape; /* as declared */
    }
    for (int i = 0; i < g->n_inputs; i++) {
        dl_shape *x = &shapes[g->inputs[i]];
        if (batch > 0) x->d[0] = batch;
        if (elements(x) > MAX_ELEMENTS)
            return dl_fail(err, DL_E_INVALID, "%s: input '%s' of %.3g elements at batch %lld is too large",
                           g->path ? g->path : "<model>", g->values[g->inputs[i]].name, elements(x),
                           (long long)x->d[0]);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        dl_status st = infer_node(g, i, shapes, err);
        if (st != DL_OK) return st;
    }
    return DL_OK;
}
