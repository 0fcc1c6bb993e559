/* graph.c — building and querying the in-memory model (graph.h): values, nodes, op names,
 * default attributes, shape strings and FLOP counts. */
#define _POSIX_C_SOURCE 200809L
#include "graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[DL_OP_COUNT] = {
    [DL_OP_CONV2D] = "conv2d",       [DL_OP_RELU] = "relu",     [DL_OP_MAXPOOL2D] = "maxpool2d",
    [DL_OP_AVGPOOL2D] = "avgpool2d", [DL_OP_GLOBAL_AVGPOOL] = "global_avgpool",
    [DL_OP_LINEAR] = "linear",       [DL_OP_FLATTEN] = "flatten", [DL_OP_DROPOUT] = "dropout",
    [DL_OP_SOFTMAX] = "softmax",     [DL_OP_ADD] = "add",       [DL_OP_CONCAT] = "concat",
    [DL_OP_BATCHNORM] = "batchnorm", [DL_OP_LEAKY_RELU] = "leaky_relu", [DL_OP_SIGMOID] = "sigmoid",
    [DL_OP_CLIP] = "clip",           [DL_OP_MATMUL] = "matmul", [DL_OP_RESHAPE] = "reshape"};

const char *dl_op_kind_name(dl_op_kind kind) {
    return (unsigned)kind < DL_OP_COUNT ? op_names[kind] : "unknown";
}

int dl_op_kind_from_name(const char *name) {
    for (int i = 0; i < DL_OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}

dl_graph *dl_graph_new(void) { return calloc(1, sizeof(dl_graph)); }

void dl_graph_free(dl_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) free(g->values[i].name);
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].inputs);
        free(g->nodes[i].backend);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name);
    free(g->path);
    free(g->weights_path);
    free(g);
}

int dl_graph_add_value(dl_graph *g, const char *name, dl_value_kind kind, dl_srcloc loc) {
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? 2 * g->cap_values : 32;
        dl_value *p = realloc(g->values, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->values = p;
        g->cap_values = cap;
    }
    dl_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return -1;
    v->kind = kind;
    v->dtype = DL_F32;
    v->producer = -1;
    v->loc = loc;
    return g->n_values++;
}

int dl_graph_add_node(dl_graph *g, const char *name, dl_op_kind kind, dl_srcloc loc) {
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 32;
        dl_node *p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->nodes = p;
        g->cap_nodes = cap;
    }
    dl_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    if (!n->name) return -1;
    n->kind = kind;
    n->loc = loc;
    n->output = -1;
    dl_attrs_default(&n->attrs, kind);
    return g->n_nodes++;
}

int dl_graph_find_value(const dl_graph *g, const char *name) {
    for (int i = 0; i < g->n_values; i++)
        if (strcmp(g->values[i].name, name) == 0) return i;
    return -1;
}

void dl_attrs_default(dl_op_attrs *a, dl_op_kind kind) {
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->stride[0] = a->stride[1] = 1;
    a->dilation[0] = a->dilation[1] = 1;
    a->groups = 1;
    a->count_include_pad = 1;
    a->epsilon = 1e-5f;
    a->alpha = 0.01f; /* PyTorch's and ONNX's LeakyReLU default */
    a->clip_min = -INFINITY;
    a->clip_max = INFINITY;
    a->axis = kind == DL_OP_SOFTMAX ? -1 : 1;
    if (kind == DL_OP_MATMUL) a->alpha = 1.0f; /* y = a·b + c by default */
    a->beta = 1.0f;
}

void dl_graph_where(const dl_graph *g, dl_srcloc loc, char *buf, size_t len) {
    if (loc.line > 0) snprintf(buf, len, "%s:%d:%d: ", g->path ? g->path : "<model>", loc.line, loc.col);
    else snprintf(buf, len, "%s: ", g->path ? g->path : "<model>");
}

void dl_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t u = 0;
    if (len == 0) return;
    buf[0] = 0;
    u += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

int64_t dl_value_numel(const dl_value *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

double dl_node_flops(const dl_graph *g, const dl_node *n) {
    const dl_value *out = &g->values[n->output];
    double numel = (double)dl_value_numel(out);
    switch (n->kind) {
    case DL_OP_CONV2D: {
        const dl_value *w = &g->values[n->inputs[1]]; /* [OC, C/groups, KH, KW] */
        return 2.0 * numel * (double)(w->shape[1] * w->shape[2] * w->shape[3]);
    }
    case DL_OP_LINEAR: {
        const dl_value *w = &g->values[n->inputs[1]]; /* [OUT, IN] */
        return 2.0 * numel * (double)w->shape[1];
    }
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D: return numel * n->attrs.kernel[0] * n->attrs.kernel[1];
    case DL_OP_GLOBAL_AVGPOOL: return (double)dl_value_numel(&g->values[n->inputs[0]]);
    case DL_OP_SOFTMAX: return 3.0 * numel;
    case DL_OP_BATCHNORM: return 2.0 * numel;
    case DL_OP_RELU:
    case DL_OP_LEAKY_RELU:
    case DL_OP_CLIP:
    case DL_OP_ADD: return numel;
    case DL_OP_SIGMOID: return 4.0 * numel;
    case DL_OP_MATMUL: { /* K is a's last dim, or its second last when transposed */
        const dl_value *a = &g->values[n->inputs[0]];
        return 2.0 * numel * (double)a->shape[a->ndim - (n->attrs.trans_a ? 2 : 1)];
    }
    default: return 0;
    }
}

int dl_graph_consumers(const dl_graph *g, int v) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) c += g->nodes[i].inputs[j] == v;
    return c;
}

int dl_graph_is_output(const dl_graph *g, int v) {
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}
