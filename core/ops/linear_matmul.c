/* linear_matmul.c — rows of the matrix products: linear (a layer with its own weight) and matmul
 * (two activations or constants, numpy batch broadcasting, transposes, scales). */
#include <limits.h>

#include "op_rows.h"

/* ---- linear ---- */

static void linear_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    w[0] = (dl_shape){2, {p->units, x->d[1]}};
    if (p->has_bias) w[1] = (dl_shape){1, {p->units}};
}

static int linear_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    (void)cx;
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1];
    char s[128];
    if (x->ndim != 2)
        DL_NO(why, "needs a 2-D input [N, features], got %s (add a flatten layer before it)",
              dl_shape_txt(x, s, sizeof s));
    if (w->ndim != 2 || w->shape[1] != x->shape[1])
        DL_NO(why, "weight %s does not take %lld features", dl_shape_txt(w, s, sizeof s), (long long)x->shape[1]);
    if (op->n_inputs == 3 && !dl_is_vec(&op->inputs[2], w->shape[0]))
        DL_NO(why, "bias must be [%lld], got %s", (long long)w->shape[0], dl_shape_txt(&op->inputs[2], s, sizeof s));
    *y = (dl_shape){2, {x->shape[0], w->shape[0]}};
    return 1;
}

static double linear_flops(const dl_op *op) {
    return 2.0 * (double)dl_tensor_numel(&op->outputs[0]) * (double)op->inputs[1].shape[1];
}

const dl_op_def dl_op_row_linear = {
    .name = "linear",
    .abi_minor = 0,
    .flags = DL_OPF_FUSES_RELU | DL_OPF_RESIDUAL,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights =
        (const dl_weight_def[]){{"weight", DL_INIT_KAIMING_UNIFORM, 0}, {"bias", DL_INIT_FAN_IN_UNIFORM, 1}, {0}},
    .attrs = (const dl_attr_def[]){{"units", DL_ATTR_INT, DL_ATTR_REQUIRED, DL_ATTR_AT(units), 1, INT_MAX, 0, 0},
                                   {"bias", DL_ATTR_BOOL, 0, DL_ATTR_AT(has_bias), 0, 1, 1, 0},
                                   {0}},
    .nmse = DL_NMSE_GEMM,
    .cases = (const dl_op_case[]){{"linear batch 1", "[[1, 37]]", "units: 23", 1},
                                  {"linear batch 5", "[[5, 129]]", "units: 67, bias: false", 1},
                                  {"linear wide", "[[1, 513]]", "units: 1001", 1},
                                  {"linear batch 3, 520 in", "[[3, 520]]", "units: 45", 1},
                                  {"linear batch 19", "[[19, 264]]", "units: 150", 1},
                                  {"linear + residual + relu", "[[7, 90]]", "units: 41", 1, 0, 1},
                                  {0}},
    .weight_shapes = linear_weights,
    .infer = linear_infer,
    .flops = linear_flops,
};

/* ---- matmul ---- */

static int matmul_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *b = &op->inputs[1];
    char xs[160], bs[160];
    dl_in_str(op, cx, 0, xs, sizeof xs);
    dl_in_str(op, cx, 1, bs, sizeof bs);
    if (x->ndim < 2 || b->ndim < 2) DL_NO(why, "needs operands of at least 2 dimensions, got %s and %s", xs, bs);
    if ((a->trans_a | a->trans_b) & ~1) DL_NO(why, "trans_a and trans_b must be 0 or 1");
    int64_t m = x->shape[x->ndim - (a->trans_a ? 1 : 2)], k = x->shape[x->ndim - (a->trans_a ? 2 : 1)];
    int64_t kb = b->shape[b->ndim - (a->trans_b ? 1 : 2)], n = b->shape[b->ndim - (a->trans_b ? 2 : 1)];
    if (k != kb)
        DL_NO(why, "inner dimensions differ: %s%s has %lld, %s%s has %lld", xs, a->trans_a ? " (transposed)" : "",
              (long long)k, bs, a->trans_b ? " (transposed)" : "", (long long)kb);
    if (!dl_broadcast(x->shape, x->ndim - 2, b->shape, b->ndim - 2, y) || y->ndim + 2 > DL_MAX_DIMS)
        DL_NO(why, "batch dimensions of %s and %s do not broadcast", xs, bs);
    y->d[y->ndim] = m;
    y->d[y->ndim + 1] = n;
    y->ndim += 2;
    if (op->n_inputs == 3) { /* c must broadcast to the product's shape, not widen it */
        const dl_tensor *c = &op->inputs[2];
        dl_tensor yt = {NULL, {DL_DEVICE_CPU, 0}, y->ndim, DL_F32, y->d, NULL, 0};
        if (!dl_broadcasts_to(c, &yt)) {
            char cs[160], ys[128];
            dl_shape_str(y->d, y->ndim, ys, sizeof ys);
            DL_NO(why, "%s does not broadcast to the product's shape %s", dl_in_str(op, cx, 2, cs, sizeof cs), ys);
        }
    }
    return 1;
}

static double matmul_flops(const dl_op *op) { /* K is a's last dim, or its second last when transposed */
    const dl_tensor *a = &op->inputs[0];
    return 2.0 * (double)dl_tensor_numel(&op->outputs[0]) * (double)a->shape[a->ndim - (op->attrs->trans_a ? 2 : 1)];
}

const dl_op_def dl_op_row_matmul = {
    .name = "matmul",
    .abi_minor = 2,
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = (const dl_attr_def[]){{"trans_a", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.trans_a), 0, 1, 0, 0},
                                   {"trans_b", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.trans_b), 0, 1, 0, 0},
                                   {"alpha", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.alpha), -INFINITY, INFINITY, 1, 0},
                                   {"beta", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.beta), -INFINITY, INFINITY, 1, 0},
                                   {0}},
    .nmse = DL_NMSE_GEMM,
    .cases = (const dl_op_case[]){{"matmul", "[[3, 5], [5, 7]]", "", 1},
                                  {"matmul batch bcast + c", "[[2, 1, 4, 6], [3, 6, 5], [5]]", "", 1},
                                  {"matmul trans alpha beta", "[[6, 4], [9, 6], [4, 1]]",
                                   "trans_a: true, trans_b: true, alpha: 0.25, beta: -0.5", 1},
                                  {"matmul wide", "[[37, 129], [301, 129], [37, 301]]", "trans_b: true", 1},
                                  {0}},
    .infer = matmul_infer,
    .flops = matmul_flops,
};
