/* math.c — rows of the elementwise arithmetic ops of ABI 1.4: the binary ones with numpy
 * broadcasting (mul, sub, div, pow, min, max; add lives in elementwise.c) and the functions of
 * one element (sqrt, exp, log, tanh, erf, neg, abs, reciprocal, hard_sigmoid, hard_swish, silu,
 * gelu, softplus). */
#include "op_rows.h"

/* ---- binary, numpy broadcasting ---- */

/* Same shapes, one operand broadcast, both broadcast, a scalar; on U(lo or -scale, scale). */
#define BINARY_ROW(op, nmse_, scale, lo)                                                                            \
    static const dl_op_case op##_cases[] = {{#op, "[[3, 7, 5, 3], [3, 7, 5, 3]]", "", scale, lo},                   \
                                            {#op " broadcast channel", "[[3, 7, 5, 3], [7, 1, 1]]", "", scale, lo}, \
                                            {#op " broadcast both", "[[2, 1, 5], [3, 1]]", "", scale, lo},          \
                                            {#op " scalar", "[[4, 9], [1]]", "", scale, lo},                        \
                                            {0}};                                                                   \
    const dl_op_def dl_op_row_##op = {                                                                              \
        .name = #op,                                                                                                \
        .abi_minor = 4,                                                                                             \
        .flags = DL_OPF_ELEMENTWISE,                                                                                \
        .min_inputs = 2,                                                                                            \
        .max_inputs = 2,                                                                                            \
        .nmse = DL_NMSE_##nmse_,                                                                                    \
        .cases = op##_cases,                                                                                        \
        .infer = dl_infer_broadcast,                                                                                \
        .flops = dl_flops_numel,                                                                                    \
    }

BINARY_ROW(mul, EXACT, 2, 0);
BINARY_ROW(sub, EXACT, 2, 0);
BINARY_ROW(div, ROUNDING, 2, 0.25f); /* divisors away from 0 */
BINARY_ROW(pow, ROUNDING, 2, 0.25f); /* positive bases: a negative one to a fraction is NaN */
BINARY_ROW(min, EXACT, 2, 0);
BINARY_ROW(max, EXACT, 2, 0);

/* ---- one element ---- */

static double flops4(const dl_op *op) { return 4.0 * (double)dl_tensor_numel(&op->outputs[0]); }
static double flops8(const dl_op *op) { return 8.0 * (double)dl_tensor_numel(&op->outputs[0]); }

#define UNARY_ROW_WITH(op, nmse_, flops_, attrs_, cases_, infer_) \
    const dl_op_def dl_op_row_##op = {                            \
        .name = #op,                                              \
        .abi_minor = 4,                                           \
        .flags = DL_OPF_ELEMENTWISE,                              \
        .min_inputs = 1,                                          \
        .max_inputs = 1,                                          \
        .attrs = attrs_,                                          \
        .nmse = DL_NMSE_##nmse_,                                  \
        .cases = cases_,                                          \
        .infer = infer_,                                          \
        .flops = flops_,                                          \
    }
/* A function of one element without attributes: a 4-D and a long 1-D case on U(lo or -scale, scale). */
#define UNARY_ROW(op, nmse_, flops_, scale, lo)                                                   \
    static const dl_op_case op##_cases[] = {                                                      \
        {#op, "[[3, 7, 5, 3]]", "", scale, lo}, {#op " 1-D", "[[1, 1001]]", "", scale, lo}, {0}}; \
    UNARY_ROW_WITH(op, nmse_, flops_, NULL, op##_cases, dl_infer_same)

UNARY_ROW(sqrt, ROUNDING, dl_flops_numel, 4, 1e-3f);
/* exp's relative error is |x| times its input's: on U(-4, 4) rounding the input to f16 (bf16) keeps
 * the NMSE against f32 near 4e-7 (3e-5), inside the 16-bit thresholds; U(-10, 10) did not (6e-6). */
UNARY_ROW(exp, ROUNDING, flops4, 4, 0);
UNARY_ROW(log, ROUNDING, flops4, 4, 1e-3f);
UNARY_ROW(tanh, ROUNDING, flops4, 5, 0);
UNARY_ROW(erf, ROUNDING, flops8, 3, 0);
UNARY_ROW(neg, EXACT, dl_flops_numel, 2, 0);
UNARY_ROW(abs, EXACT, dl_flops_numel, 2, 0);
UNARY_ROW(reciprocal, ROUNDING, dl_flops_numel, 4, 0.25f);
UNARY_ROW(hard_swish, ROUNDING, flops4, 5, 0);
UNARY_ROW(silu, ROUNDING, flops4, 8, 0);
UNARY_ROW(softplus, ROUNDING, flops4, 25, 0);

static const dl_attr_def hard_sigmoid_attrs[] = {
    {"alpha", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.alpha), -INFINITY, INFINITY, 0.2, 0},
    {"beta", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.beta), -INFINITY, INFINITY, 0.5, 0},
    {0}};
static const dl_op_case hard_sigmoid_cases[] = {
    {"hard_sigmoid", "[[3, 7, 5, 3]]", "", 5}, {"hard_sigmoid PyTorch's", "[[2, 101]]", "alpha: 0.16666667", 5}, {0}};
UNARY_ROW_WITH(hard_sigmoid, ROUNDING, flops4, hard_sigmoid_attrs, hard_sigmoid_cases, dl_infer_same);

static const char *const gelu_modes[] = {"none", "tanh", NULL};
static const dl_attr_def gelu_attrs[] = {
    {"approximate", DL_ATTR_ENUM, 0, DL_ATTR_AT(attrs.mode), 0, 0, DL_GELU_ERF, 0, gelu_modes}, {0}};
static const dl_op_case gelu_cases[] = {
    {"gelu", "[[3, 7, 5, 3]]", "", 5}, {"gelu tanh form", "[[2, 101]]", "approximate: tanh", 5}, {0}};

static int gelu_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    if (op->attrs->mode != DL_GELU_ERF && op->attrs->mode != DL_GELU_TANH)
        DL_NO(why, "gelu mode %d is unknown", op->attrs->mode);
    return dl_infer_same(op, cx, y, why);
}
UNARY_ROW_WITH(gelu, ROUNDING, flops8, gelu_attrs, gelu_cases, gelu_infer);
