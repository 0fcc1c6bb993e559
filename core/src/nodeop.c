/* nodeop.c — the dl_op view of a node: what a backend is shown of a layer (kind, attributes,
 * input and output tensors with shapes), used by shape inference, placement, sessions and check. */
#include "graph.h"

static dl_tensor host_tensor(const dl_shape *s, dl_dtype dtype) {
    return (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, s->ndim, dtype, (int64_t *)s->d, NULL, 0};
}

void dl_node_op(const dl_graph *g, int n, const int *ins, int n_in, const dl_shape *shapes, const dl_op_attrs *attrs,
                int precision, dl_op *op, dl_tensor *in, dl_tensor *out) {
    const dl_node *node = &g->nodes[n];
    for (int i = 0; i < n_in; i++) in[i] = host_tensor(&shapes[ins[i]], g->values[ins[i]].dtype);
    *out = host_tensor(&shapes[node->output], g->values[node->output].dtype);
    *op = (dl_op){sizeof *op, (int32_t)node->kind, node->name, attrs, n_in, in, 1, out, precision};
}
