/* ops.c — the oneDNN plugin's ops besides conv2d and the pools: linear (as a matmul), matmul,
 * (a fused residual as a binary add post-op), the eltwise functions, softmax and log_softmax, concat, add (binary, with
 * its fused activation) inference batchnorm, and flatten / dropout / reshape as copies. Each builds one primitive
 * descriptor on dlrun's row-major f32 tensors and refuses, with the reason, the attributes oneDNN would compute
 * differently. */
#include <math.h>

#include "onednn.h"

/* Creates pd from an op descriptor with user scratchpad and the activation as a post-op. */
static dl_status make_pd(odn_build *b, const void *desc, const dl_op_attrs *a, const dnnl_memory_desc_t *residual,
                         const char *what, dnnl_primitive_desc_t *pd) {
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, a, residual, 0));
    dnnl_status_t st = dnnl_primitive_desc_create(pd, desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    return st == dnnl_success ? DL_OK : odn_fail(b, st, what);
}

/* ---- linear: y = x W^T + b as a matmul, the weights reordered once ----
 * A matmul, not an inner product: for ViT-B/16's linears (197 tokens, 768 -> 2304, 3072 or 768
 * features) oneDNN 2.6's matmul took 1.41, 0.44, 1.92 and 1.94 ms on 2 Zen 5 cores (410-520
 * GFLOP/s), its inner product 1.83, 0.58, 2.38 and 2.08 (docs/onednn.md). */

dl_status odn_linear(odn_build *b) {
    const dl_op *op = b->op;
    if (!odn_activation_ok(op->attrs->activation))
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: activation with no oneDNN post-op", b->what);
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1], *y = &op->outputs[0];
    const int res = dl_op_residual(op), has_bias = op->n_inputs - (res > 0) > 2;
    dnnl_memory_desc_t x_md, w_md, w_any, b_md, y_md;
    ODN_TRY(b, "source", odn_plain_md(&x_md, 2, x->shape));
    ODN_TRY(b, "destination", odn_plain_md(&y_md, 2, y->shape));
    /* W [out, in] as it lies is matmul's [in, out] weights with strides {1, in}; the bias [out]
     * the same bytes as a [1, out] row, which matmul broadcasts */
    dnnl_dims_t wd = {w->shape[1], w->shape[0]}, ws = {1, w->shape[1]}, bd = {1, w->shape[0]};
    ODN_TRY(b, "weights", dnnl_memory_desc_init_by_strides(&w_md, 2, wd, dnnl_f32, ws));
    ODN_TRY(b, "weights", dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dnnl_f32, dnnl_format_tag_any));
    if (has_bias) ODN_TRY(b, "bias", odn_plain_md(&b_md, 2, bd));
    dnnl_matmul_desc_t desc;
    ODN_TRY(b, "matmul descriptor", dnnl_matmul_desc_init(&desc, &x_md, &w_any, has_bias ? &b_md : NULL, &y_md));
    dnnl_primitive_desc_t pd;
    dl_status st = make_pd(b, &desc, op->attrs, res ? &y_md : NULL, "matmul", &pd);
    if (st != DL_OK) return st;
    odn_tensor_arg args[5] = {{DNNL_ARG_SRC, ODN_INPUT, 0, x_md},
                              {DNNL_ARG_WEIGHTS, ODN_INPUT, 1, w_md},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md},
                              {DNNL_ARG_BIAS, ODN_INPUT, 2, b_md},
                              {ODN_ARG_RESIDUAL, ODN_INPUT, res, y_md}};
    if (!has_bias) args[3] = args[4];
    return odn_add_primitive(b, pd, args, 3 + has_bias + (res > 0));
}

/* ---- matmul: y = alpha op(a) op(b) (+ c as oneDNN's bias where alpha and beta are 1) ---- */

/* t's row-major layout seen with `rank` dims (leading 1s added), its last two dims swapped when
 * trans: the transpose is a matter of strides. */
static dnnl_status_t matmul_md(dnnl_memory_desc_t *md, const dl_tensor *t, int rank, int trans) {
    dnnl_dims_t dims, strides;
    int lead = rank - t->ndim;
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; d--) {
        dims[d] = d < lead ? 1 : t->shape[d - lead];
        strides[d] = step;
        step *= dims[d];
    }
    if (trans) {
        int64_t t0 = dims[rank - 1];
        dims[rank - 1] = dims[rank - 2], dims[rank - 2] = t0;
        t0 = strides[rank - 1];
        strides[rank - 1] = strides[rank - 2], strides[rank - 2] = t0;
    }
    return dnnl_memory_desc_init_by_strides(md, rank, dims, dnnl_f32, strides);
}

dl_status odn_matmul(odn_build *b) {
    const dl_op *op = b->op;
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *y = &op->outputs[0];
    const int has_c = op->n_inputs > 2, rank = y->ndim;
    if (op->inputs[0].ndim < 2 || op->inputs[1].ndim < 2)
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: a 1-D operand", b->what);
    if (has_c && (a->alpha != 1.0f || a->beta != 1.0f))
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: c with alpha or beta other than 1", b->what);
    dnnl_memory_desc_t a_md, b_md, c_md, y_md;
    ODN_TRY(b, "source", matmul_md(&a_md, &op->inputs[0], rank, a->trans_a));
    ODN_TRY(b, "weights", matmul_md(&b_md, &op->inputs[1], rank, a->trans_b));
    ODN_TRY(b, "destination", matmul_md(&y_md, y, rank, 0));
    if (has_c) ODN_TRY(b, "bias", matmul_md(&c_md, &op->inputs[2], rank, 0));
    dnnl_matmul_desc_t desc;
    ODN_TRY(b, "matmul descriptor", dnnl_matmul_desc_init(&desc, &a_md, &b_md, has_c ? &c_md : NULL, &y_md));
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, NULL, NULL, 0));
    dnnl_status_t st = a->alpha != 1.0f ? dnnl_primitive_attr_set_output_scales(attr, 1, 0, &a->alpha) : dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "matmul");
    odn_tensor_arg args[4] = {{DNNL_ARG_SRC, ODN_INPUT, 0, a_md},
                              {DNNL_ARG_WEIGHTS, ODN_INPUT, 1, b_md},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md},
                              {DNNL_ARG_BIAS, ODN_INPUT, 2, c_md}};
    return odn_add_primitive(b, pd, args, has_c ? 4 : 3);
}

/* ---- eltwise: one oneDNN algorithm per kind ----
 * Not softplus: oneDNN's soft_relu gives 7.6e-6 at x = -86.5, where log(1 + e^x) is 2.7e-38. Not
 * erf, hard_sigmoid (no such eltwise in 2.6). */

typedef struct eltwise_map {
    int kind;
    dnnl_alg_kind_t alg;
    float alpha, beta;
} eltwise_map;

static const eltwise_map eltwise_kinds[] = {
    {DL_OP_RELU, dnnl_eltwise_relu, 0, 0},
    {DL_OP_LEAKY_RELU, dnnl_eltwise_relu, 0, 0}, /* alpha: the op's slope */
    {DL_OP_SIGMOID, dnnl_eltwise_logistic, 0, 0},
    {DL_OP_CLIP, dnnl_eltwise_clip, 0, 0}, /* alpha, beta: the op's bounds */
    {DL_OP_SQRT, dnnl_eltwise_sqrt, 0, 0},
    {DL_OP_EXP, dnnl_eltwise_exp, 0, 0},
    {DL_OP_LOG, dnnl_eltwise_log, 0, 0},
    {DL_OP_TANH, dnnl_eltwise_tanh, 0, 0},
    {DL_OP_NEG, dnnl_eltwise_linear, -1, 0}, /* -1 x + 0 */
    {DL_OP_ABS, dnnl_eltwise_abs, 0, 0},
    {DL_OP_RECIPROCAL, dnnl_eltwise_pow, 1, -1}, /* 1 x^-1 */
    {DL_OP_HARD_SWISH, dnnl_eltwise_hardswish, 0, 0},
    {DL_OP_SILU, dnnl_eltwise_swish, 1, 0},    /* x sigmoid(1 x) */
    {DL_OP_GELU, dnnl_eltwise_gelu_erf, 0, 0}, /* gelu_tanh where attrs.mode says */
};

static const eltwise_map *eltwise_of(int kind) {
    for (size_t i = 0; i < sizeof eltwise_kinds / sizeof eltwise_kinds[0]; i++)
        if (eltwise_kinds[i].kind == kind) return &eltwise_kinds[i];
    return NULL;
}

int odn_is_eltwise(int kind) { return eltwise_of(kind) != NULL; }

dl_status odn_eltwise(odn_build *b) {
    const dl_op *op = b->op;
    const dl_op_attrs *a = op->attrs;
    eltwise_map m = *eltwise_of(op->kind);
    if (op->kind == DL_OP_LEAKY_RELU) m.alpha = a->alpha;
    if (op->kind == DL_OP_GELU && a->mode == DL_GELU_TANH) m.alg = dnnl_eltwise_gelu_tanh;
    if (op->kind == DL_OP_CLIP) {
        /* oneDNN computes max(lo, min(hi, x)), the reference min(max(x, lo), hi): the same unless lo > hi */
        if (!(a->clip_min <= a->clip_max))
            return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: clip with min above max", b->what);
        m.alpha = a->clip_min, m.beta = a->clip_max;
    }
    dnnl_memory_desc_t md;
    ODN_TRY(b, "tensor", odn_tensor_md(&md, &op->inputs[0]));
    dnnl_eltwise_desc_t desc;
    ODN_TRY(b, "eltwise descriptor",
            dnnl_eltwise_forward_desc_init(&desc, dnnl_forward_inference, m.alg, &md, m.alpha, m.beta));
    dnnl_primitive_desc_t pd;
    dl_status st = make_pd(b, &desc, NULL, NULL, "eltwise", &pd);
    if (st != DL_OK) return st;
    odn_tensor_arg args[2] = {{DNNL_ARG_SRC, ODN_INPUT, 0, md}, {DNNL_ARG_DST, ODN_OUTPUT, 0, md}};
    return odn_add_primitive(b, pd, args, 2);
}

/* ---- softmax and log_softmax along attrs.axis ---- */

dl_status odn_softmax(odn_build *b) {
    const dl_op *op = b->op;
    dnnl_memory_desc_t md;
    ODN_TRY(b, "tensor", odn_plain_md(&md, op->inputs[0].ndim, op->inputs[0].shape));
    int axis = op->inputs[0].ndim == 0 ? 0 : op->attrs->axis;
    dnnl_primitive_desc_t pd;
    dl_status st;
    if (op->kind == DL_OP_LOG_SOFTMAX) {
        dnnl_logsoftmax_desc_t desc;
        ODN_TRY(b, "logsoftmax descriptor",
                dnnl_logsoftmax_forward_desc_init(&desc, dnnl_forward_inference, &md, axis));
        st = make_pd(b, &desc, NULL, NULL, "logsoftmax", &pd);
    } else {
        dnnl_softmax_desc_t desc;
        ODN_TRY(b, "softmax descriptor", dnnl_softmax_forward_desc_init(&desc, dnnl_forward_inference, &md, axis));
        st = make_pd(b, &desc, NULL, NULL, "softmax", &pd);
    }
    if (st != DL_OK) return st;
    odn_tensor_arg args[2] = {{DNNL_ARG_SRC, ODN_INPUT, 0, md}, {DNNL_ARG_DST, ODN_OUTPUT, 0, md}};
    return odn_add_primitive(b, pd, args, 2);
}

/* ---- concat along attrs.axis ---- */

dl_status odn_concat(odn_build *b) {
    const dl_op *op = b->op;
    enum { MAX_IN = 63 };
    if (op->n_inputs > MAX_IN) return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: more than %d inputs", b->what, MAX_IN);
    dnnl_memory_desc_t src[MAX_IN], y_md;
    odn_tensor_arg args[MAX_IN + 1];
    for (int i = 0; i < op->n_inputs; i++) {
        ODN_TRY(b, "source", odn_tensor_md(&src[i], &op->inputs[i]));
        args[i] = (odn_tensor_arg){DNNL_ARG_MULTIPLE_SRC + i, ODN_INPUT, i, src[i]};
    }
    ODN_TRY(b, "destination", odn_tensor_md(&y_md, &op->outputs[0]));
    args[op->n_inputs] = (odn_tensor_arg){DNNL_ARG_DST, ODN_OUTPUT, 0, y_md};
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, NULL, NULL, 0));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st =
        dnnl_concat_primitive_desc_create(&pd, &y_md, op->n_inputs, op->attrs->axis, src, attr, b->s->engine);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "concat");
    return odn_add_primitive(b, pd, args, op->n_inputs + 1);
}

/* ---- add: binary add, one input broadcasting, the fused activation as a post-op ---- */

dl_status odn_add(odn_build *b) {
    const dl_op *op = b->op;
    const dl_tensor *y = &op->outputs[0];
    if (!odn_activation_ok(op->attrs->activation))
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: activation with no oneDNN post-op", b->what);
    dnnl_memory_desc_t md[2], y_md;
    int full[2];
    for (int i = 0; i < 2; i++) {
        const dl_tensor *t = &op->inputs[i];
        ODN_TRY(b, "source", t->strides ? odn_tensor_md(&md[i], t) : matmul_md(&md[i], t, y->ndim ? y->ndim : 1, 0));
        full[i] = dl_tensor_numel(t) == dl_tensor_numel(y);
    }
    ODN_TRY(b, "destination", odn_tensor_md(&y_md, y));
    /* oneDNN broadcasts its second source only: a + b = b + a puts the full one first */
    int first = full[0] ? 0 : full[1] ? 1 : -1;
    if (first < 0) return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: both inputs broadcast", b->what);
    dnnl_binary_desc_t desc;
    ODN_TRY(b, "binary descriptor", dnnl_binary_desc_init(&desc, dnnl_binary_add, &md[first], &md[1 - first], &y_md));
    dnnl_primitive_desc_t pd;
    dl_status st = make_pd(b, &desc, op->attrs, NULL, "binary add", &pd);
    if (st != DL_OK) return st;
    odn_tensor_arg args[3] = {{DNNL_ARG_SRC_0, ODN_INPUT, first, md[first]},
                              {DNNL_ARG_SRC_1, ODN_INPUT, 1 - first, md[1 - first]},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md}};
    return odn_add_primitive(b, pd, args, 3);
}

/* ---- batchnorm: inference with the stored statistics; relu fused by oneDNN's flag ---- */

dl_status odn_batchnorm(odn_build *b) {
    const dl_op *op = b->op;
    int act = op->attrs->activation;
    if (act != DL_ACT_NONE && act != DL_ACT_RELU)
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: oneDNN fuses only relu into batchnorm", b->what);
    const dl_tensor *x = &op->inputs[0];
    dnnl_memory_desc_t x_md, c_md;
    ODN_TRY(b, "tensor", odn_tensor_md(&x_md, x));
    ODN_TRY(b, "statistics", odn_plain_md(&c_md, 1, &x->shape[1]));
    unsigned flags = dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift;
    if (act == DL_ACT_RELU) flags |= dnnl_fuse_norm_relu;
    dnnl_batch_normalization_desc_t desc;
    ODN_TRY(
        b, "batch normalization descriptor",
        dnnl_batch_normalization_forward_desc_init(&desc, dnnl_forward_inference, &x_md, op->attrs->epsilon, flags));
    dnnl_primitive_desc_t pd;
    dl_status st = make_pd(b, &desc, NULL, NULL, "batch normalization", &pd);
    if (st != DL_OK) return st;
    odn_tensor_arg args[6] = {{DNNL_ARG_SRC, ODN_INPUT, 0, x_md},      {DNNL_ARG_SCALE, ODN_INPUT, 1, c_md},
                              {DNNL_ARG_SHIFT, ODN_INPUT, 2, c_md},    {DNNL_ARG_MEAN, ODN_INPUT, 3, c_md},
                              {DNNL_ARG_VARIANCE, ODN_INPUT, 4, c_md}, {DNNL_ARG_DST, ODN_OUTPUT, 0, x_md}};
    return odn_add_primitive(b, pd, args, 6);
}

/* ---- flatten, dropout (inference), reshape: the same elements in the same order, a copy ---- */

dl_status odn_copy_op(odn_build *b) {
    const dl_op *op = b->op;
    int64_t n = dl_tensor_numel(&op->inputs[0]);
    dnnl_memory_desc_t md;
    ODN_TRY(b, "tensor", odn_plain_md(&md, 1, &n));
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, NULL, NULL, 0));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, &md, b->s->engine, &md, b->s->engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "reorder");
    odn_tensor_arg args[2] = {{DNNL_ARG_FROM, ODN_INPUT, 0, md}, {DNNL_ARG_TO, ODN_OUTPUT, 0, md}};
    return odn_add_primitive(b, pd, args, 2);
}
