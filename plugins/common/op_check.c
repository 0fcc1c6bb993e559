/* op_check.c — exact checks of an op's kind, dtypes, input counts, attributes and every shape,
 * shared by the cpu and cuda plugins' supports(): what passes here, both can run (f32, NCHW,
 * dense), so nothing they accept fails later. Compiled into each plugin (plugins link nothing of
 * dlrun's core). */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "op_check.h"

int64_t dl_window_out(int64_t in, int k, int s, int pb, int pe, int d, int ceil_mode) {
    int64_t span = in + pb + pe - (int64_t)d * (k - 1) - 1;
    if (span < 0 || s < 1) return 0;
    int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (out - 1) * s >= in + pb) out--;
    return out;
}

#define NO(...) return (dl_fail(why, DL_E_UNSUPPORTED, __VA_ARGS__), 0)

static int same(const dl_tensor *a, const dl_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int vec_of(const dl_tensor *t, int64_t n) { return t->ndim == 1 && t->shape[0] == n; }

int dl_broadcasts_to(const dl_tensor *t, const dl_tensor *y) {
    if (t->ndim > y->ndim) return 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->shape[t->ndim - 1 - i];
        if (d != 1 && d != y->shape[y->ndim - 1 - i]) return 0;
    }
    return 1;
}

void dl_bcast_strides(int tnd, const int64_t *ts, int ynd, const int64_t *ys, int64_t *st) {
    int64_t step = 1;
    for (int d = ynd - 1; d >= 0; d--) {
        int td = d - (ynd - tnd); /* t's dimension aligned with y's dimension d, if any */
        int64_t extent = td >= 0 ? ts[td] : 1;
        st[d] = extent == 1 && ys[d] != 1 ? 0 : step;
        step *= extent;
    }
}

int64_t dl_bcast_offset(int64_t i, int nd, const int64_t *ys, const int64_t *st) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0 && i; d--) {
        off += (i % ys[d]) * st[d];
        i /= ys[d];
    }
    return off;
}

/* y's shape is the numpy broadcast of a and b */
static int is_broadcast_of(const dl_tensor *a, const dl_tensor *b, const dl_tensor *y) {
    if (y->ndim != (a->ndim > b->ndim ? a->ndim : b->ndim) || !dl_broadcasts_to(a, y) || !dl_broadcasts_to(b, y)) return 0;
    for (int i = 0; i < y->ndim; i++) {
        int64_t da = i < y->ndim - a->ndim ? 1 : a->shape[i - (y->ndim - a->ndim)];
        int64_t db = i < y->ndim - b->ndim ? 1 : b->shape[i - (y->ndim - b->ndim)];
        if (y->shape[i] != (da == 1 ? db : da)) return 0;
    }
    return 1;
}

static int check_window(const dl_op *op, int conv, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *y = &op->outputs[0];
    if (x->ndim != 4 || y->ndim != 4) NO("needs 4-D input and output");
    for (int i = 0; i < 2; i++) {
        int d = op->kind == DL_OP_AVGPOOL2D ? 1 : a->dilation[i], ext = d * (a->kernel[i] - 1) + 1;
        if (a->kernel[i] < 1 || a->stride[i] < 1 || a->pad_begin[i] < 0 || a->pad_end[i] < 0 || a->dilation[i] < 1)
            NO("bad kernel, stride, padding or dilation");
        if (op->kind == DL_OP_AVGPOOL2D && a->dilation[i] != 1) NO("avgpool2d has no dilation");
        if (!conv && (a->pad_begin[i] >= ext || a->pad_end[i] >= ext)) NO("pool padding must be less than the window extent %d", ext);
        int64_t o = dl_window_out(x->shape[2 + i], a->kernel[i], a->stride[i], a->pad_begin[i], a->pad_end[i],
                                   d, conv ? 0 : a->ceil_mode);
        if (o < 1 || o != y->shape[2 + i]) NO("output size %lld does not follow from the attributes (expected %lld)", (long long)y->shape[2 + i], (long long)o);
    }
    if (y->shape[0] != x->shape[0]) NO("batch of output differs from input");
    return 1;
}

int dl_op_check(const dl_op *op, dl_error *why) {
    if (op->kind < 0 || op->kind >= DL_OP_COUNT) NO("op kind %d is unknown to this plugin", op->kind);
    if (op->kind >= DL_OP_COUNT_V1 && (!op->attrs || op->attrs->struct_size < offsetof(dl_op_attrs, beta)))
        NO("op kind %d needs the ABI 1.1 attributes", op->kind);
    if (op->kind >= DL_OP_COUNT_V1_1 && op->attrs->struct_size < sizeof(dl_op_attrs))
        NO("op kind %d needs the ABI 1.2 attributes", op->kind);
    if (!op->attrs) NO("no attributes");
    if (op->n_outputs != 1 || op->n_inputs < 1) NO("expects one output and at least one input");
    for (int i = 0; i < op->n_inputs; i++)
        if (!dl_dtype_is_f32(op->inputs[i].dtype)) NO("only f32 tensors (input %d is not f32)", i);
    if (!dl_dtype_is_f32(op->outputs[0].dtype)) NO("only f32 tensors");
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].strides || op->inputs[i].ndim > 8) NO("only dense tensors up to 8-D");
    const dl_op_attrs *a = op->attrs;
    int act_ok = op->kind == DL_OP_CONV2D || op->kind == DL_OP_LINEAR || op->kind == DL_OP_ADD || op->kind == DL_OP_BATCHNORM;
    if (a->activation != DL_ACT_NONE && !(act_ok && a->activation == DL_ACT_RELU)) NO("fused activation %d is not supported here", a->activation);
    const dl_tensor *x = &op->inputs[0], *y = &op->outputs[0];
    int n = op->n_inputs;
    switch ((dl_op_kind)op->kind) {
    case DL_OP_CONV2D: {
        if (n != 2 && n != 3) NO("conv2d takes x, weight and an optional bias");
        const dl_tensor *w = &op->inputs[1];
        if (x->ndim != 4 || w->ndim != 4) NO("conv2d needs 4-D input and weight");
        if (a->groups < 1 || x->shape[1] % a->groups || w->shape[0] % a->groups) NO("channels not divisible by groups");
        if (w->shape[1] * a->groups != x->shape[1]) NO("weight has %lld input channels per group, input has %lld channels in %d groups", (long long)w->shape[1], (long long)x->shape[1], a->groups);
        if (w->shape[2] != a->kernel[0] || w->shape[3] != a->kernel[1]) NO("weight kernel differs from the kernel attribute");
        if (n == 3 && !vec_of(&op->inputs[2], w->shape[0])) NO("bias must be [%lld]", (long long)w->shape[0]);
        if (!check_window(op, 1, why)) return 0;
        if (y->shape[1] != w->shape[0]) NO("output channels differ from the weight's");
        return 1;
    }
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
        if (n != 1) NO("pooling takes one input");
        if (!check_window(op, 0, why)) return 0;
        if (y->shape[1] != x->shape[1]) NO("pooling keeps the channels");
        return 1;
    case DL_OP_GLOBAL_AVGPOOL:
        if (n != 1 || x->ndim != 4 || y->ndim != 4 || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1] || y->shape[2] != 1 || y->shape[3] != 1)
            NO("global_avgpool maps [N, C, H, W] to [N, C, 1, 1]");
        return 1;
    case DL_OP_LINEAR: {
        if (n != 2 && n != 3) NO("linear takes x, weight and an optional bias");
        const dl_tensor *w = &op->inputs[1];
        if (x->ndim != 2 || w->ndim != 2 || y->ndim != 2) NO("linear needs 2-D input, weight and output");
        if (w->shape[1] != x->shape[1]) NO("weight has %lld inputs, x has %lld features", (long long)w->shape[1], (long long)x->shape[1]);
        if (y->shape[0] != x->shape[0] || y->shape[1] != w->shape[0]) NO("output shape does not match");
        if (n == 3 && !vec_of(&op->inputs[2], w->shape[0])) NO("bias must be [%lld]", (long long)w->shape[0]);
        return 1;
    }
    case DL_OP_RELU:
    case DL_OP_LEAKY_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
    case DL_OP_FLATTEN:
    case DL_OP_DROPOUT:
    case DL_OP_RESHAPE:
        if (n != 1 || dl_tensor_numel(x) != dl_tensor_numel(y)) NO("output must have as many elements as the input");
        return 1;
    case DL_OP_MATMUL: {
        if (n != 2 && n != 3) NO("matmul takes a, b and an optional c");
        const dl_tensor *b = &op->inputs[1];
        if (x->ndim < 2 || b->ndim < 2 || y->ndim < 2) NO("matmul needs operands of at least 2 dimensions");
        if ((a->trans_a | a->trans_b) & ~1) NO("trans_a and trans_b must be 0 or 1");
        int64_t m = x->shape[x->ndim - (a->trans_a ? 1 : 2)], k = x->shape[x->ndim - (a->trans_a ? 2 : 1)];
        int64_t kb = b->shape[b->ndim - (a->trans_b ? 1 : 2)], nn = b->shape[b->ndim - (a->trans_b ? 2 : 1)];
        if (k != kb || y->shape[y->ndim - 2] != m || y->shape[y->ndim - 1] != nn) NO("matmul shapes do not agree");
        /* batch dimensions: y's leading dims are the broadcast of a's and b's */
        dl_tensor ab = *x, bb = *b, yb = *y;
        ab.ndim -= 2, bb.ndim -= 2, yb.ndim -= 2;
        if (!is_broadcast_of(&ab, &bb, &yb)) NO("matmul batch dimensions do not broadcast to the output's");
        if (n == 3 && !dl_broadcasts_to(&op->inputs[2], y)) NO("c does not broadcast to the output");
        return 1;
    }
    case DL_OP_SOFTMAX:
        if (n != 1 || !same(x, y)) NO("softmax keeps the shape");
        if (a->axis < 0 || a->axis >= x->ndim) NO("axis %d out of range", a->axis);
        return 1;
    case DL_OP_ADD:
        if (n != 2 || !is_broadcast_of(x, &op->inputs[1], y)) NO("add needs two inputs whose numpy broadcast is the output's shape");
        return 1;
    case DL_OP_CONCAT: {
        if (a->axis < 0 || a->axis >= x->ndim || y->ndim != x->ndim) NO("axis %d out of range", a->axis);
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            const dl_tensor *t = &op->inputs[i];
            if (t->ndim != x->ndim) NO("inputs differ in rank");
            for (int d = 0; d < x->ndim; d++)
                if (d != a->axis && (t->shape[d] != x->shape[d] || y->shape[d] != x->shape[d])) NO("inputs differ outside the axis");
            total += t->shape[a->axis];
        }
        if (total != y->shape[a->axis]) NO("output extent along the axis is not the sum");
        return 1;
    }
    case DL_OP_BATCHNORM:
        if (n != 5 || x->ndim < 2 || !same(x, y)) NO("batchnorm takes x, gamma, beta, mean, var");
        for (int i = 1; i < 5; i++)
            if (!vec_of(&op->inputs[i], x->shape[1])) NO("batchnorm parameters must be [%lld]", (long long)x->shape[1]);
        if (!(a->epsilon > 0)) NO("epsilon must be positive");
        return 1;
    default: NO("op kind %d is unknown to this plugin", op->kind);
    }
}

int dl_op_is_elementwise(int kind) {
    return kind == DL_OP_RELU || kind == DL_OP_ADD || kind == DL_OP_BATCHNORM || kind == DL_OP_DROPOUT ||
           kind == DL_OP_FLATTEN || kind == DL_OP_LEAKY_RELU || kind == DL_OP_SIGMOID || kind == DL_OP_CLIP ||
           kind == DL_OP_RESHAPE;
}

int dl_op_geom_init(dl_op_geom *g, const dl_op *op) {
    memset(g, 0, sizeof *g);
    g->kind = (dl_op_kind)op->kind;
    /* a host of an older ABI passes a shorter struct: copy what it has, the rest stays 0 */
    size_t have = op->attrs->struct_size < sizeof g->a ? op->attrs->struct_size : sizeof g->a;
    memcpy(&g->a, op->attrs, have);
    g->n_inputs = op->n_inputs;
    g->xnd = op->inputs[0].ndim;
    g->ynd = op->outputs[0].ndim;
    memcpy(g->xs, op->inputs[0].shape, (size_t)g->xnd * sizeof(int64_t));
    memcpy(g->ys, op->outputs[0].shape, (size_t)g->ynd * sizeof(int64_t));
    if (op->n_inputs > 1) g->bnd = op->inputs[1].ndim, memcpy(g->bs, op->inputs[1].shape, (size_t)g->bnd * sizeof(int64_t));
    if (op->n_inputs > 2) g->cnd = op->inputs[2].ndim, memcpy(g->cs, op->inputs[2].shape, (size_t)g->cnd * sizeof(int64_t));
    g->numel = dl_tensor_numel(&op->outputs[0]);
    g->has_bias = (g->kind == DL_OP_CONV2D || g->kind == DL_OP_LINEAR) && op->n_inputs == 3;
    if (g->kind == DL_OP_CONCAT) {
        g->cat_len = malloc((size_t)op->n_inputs * sizeof *g->cat_len);
        if (!g->cat_len) return 0;
        for (int i = 0; i < op->n_inputs; i++) g->cat_len[i] = op->inputs[i].shape[g->a.axis];
    }
    return 1;
}

void dl_op_geom_free(dl_op_geom *g) {
    free(g->cat_len);
    g->cat_len = NULL;
}
