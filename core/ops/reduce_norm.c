/* reduce_norm.c — rows of the ops of ABI 1.4 that combine many elements into one: the reductions
 * over any axes (reduce_mean, reduce_sum, reduce_max, reduce_min, with keepdims), layer_norm
 * (each slice over the trailing dimensions normalised, then scaled and shifted) and group_norm
 * (each group of channels normalised; instance norm is one channel per group). */
#include "op_rows.h"

/* ---- reductions ---- */

static void reduce_complete(dl_op_params *p, uint32_t given) {
    (void)given;
    p->attrs.n_axes = p->axes.n;
    for (int i = 0; i < DL_MAX_DIMS; i++) p->attrs.axes[i] = i < p->axes.n ? (int32_t)p->axes.v[i] : 0;
}

static int reduce_validate(const dl_op_params *p, const char **key, char *msg, size_t len) {
    *key = "axes";
    for (int i = 0; i < p->axes.n; i++)
        if (p->axes.v[i] < -DL_MAX_DIMS || p->axes.v[i] >= DL_MAX_DIMS)
            return snprintf(msg, len, "axis %lld is out of range [-8, 8)", (long long)p->axes.v[i]), 0;
    return 1;
}

/* Bit d set: dimension d is reduced (every one when no axes are given); -1 when invalid. */
static int reduce_mask(const dl_op *op, const dl_infer_ctx *cx, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    const dl_op_attrs *a = op->attrs;
    char s[200];
    if (a->n_axes < 0 || a->n_axes > x->ndim)
        return dl_fail(why, DL_E_UNSUPPORTED, "reduces %d axes of input %s", a->n_axes,
                       dl_in_str(op, cx, 0, s, sizeof s)),
               -1;
    if (a->n_axes == 0) return (1 << x->ndim) - 1;
    int mask = 0;
    for (int i = 0; i < a->n_axes; i++) {
        int d = dl_axis_norm(a->axes[i], x->ndim);
        if (d < 0 || (mask >> d & 1))
            return dl_fail(why, DL_E_UNSUPPORTED, "axis %d is out of range or repeated for input %s", a->axes[i],
                           dl_in_str(op, cx, 0, s, sizeof s)),
                   -1;
        mask |= 1 << d;
    }
    return mask;
}

static int reduce_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    int mask = reduce_mask(op, cx, why);
    if (mask < 0) return 0;
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!(mask >> d & 1)) y->d[y->ndim++] = x->shape[d];
        else if (op->attrs->keepdims) y->d[y->ndim++] = 1;
    }
    if (y->ndim == 0) y->d[y->ndim++] = 1; /* everything reduced: dlrun keeps a scalar as [1] */
    return 1;
}

static double reduce_flops(const dl_op *op) { return (double)dl_tensor_numel(&op->inputs[0]); }

#define REDUCE_ROW(op, nmse_)                                                                                        \
    const dl_op_def dl_op_row_##op = {                                                                               \
        .name = #op,                                                                                                 \
        .abi_minor = 4,                                                                                              \
        .min_inputs = 1,                                                                                             \
        .max_inputs = 1,                                                                                             \
        .attrs = (const dl_attr_def[]){{"axes", DL_ATTR_INTS, 0, DL_ATTR_AT(axes), -DL_MAX_DIMS, DL_MAX_DIMS, 0, 0}, \
                                       {"keepdims", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.keepdims), 0, 1, 1, 0},        \
                                       {0}},                                                                         \
        .nmse = nmse_, /* "all" draws positive values: one sum of signed ones may cancel to near 0, where the 16-bit \
                        * rounding of the inputs alone is a large relative error */                                  \
        .cases =                                                                                                     \
            (const dl_op_case[]){{#op " spatial", "[[2, 5, 7, 9]]", "axes: [2, 3]", 1},                              \
                                 {#op " channels, no keepdims", "[[3, 7, 5, 3]]", "axes: [1], keepdims: false", 1},  \
                                 {#op " last", "[[4, 3, 101]]", "axes: [-1]", 1},                                    \
                                 {#op " all", "[[3, 5, 7]]", "keepdims: false", 1, 0.25f},                           \
                                 {0}},                                                                               \
        .complete = reduce_complete,                                                                                 \
        .validate = reduce_validate,                                                                                 \
        .infer = reduce_infer,                                                                                       \
        .flops = reduce_flops,                                                                                       \
    }

REDUCE_ROW(reduce_mean, DL_NMSE_ROUNDING);
REDUCE_ROW(reduce_sum, DL_NMSE_ROUNDING);
REDUCE_ROW(reduce_max, DL_NMSE_EXACT);
REDUCE_ROW(reduce_min, DL_NMSE_EXACT);

/* ---- layer_norm ---- */

/* weight and bias: the input's dimensions from axis on. */
static void layer_norm_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    int axis = dl_axis_norm(p->attrs.axis, x->ndim);
    if (axis < 0) axis = 0; /* infer reports the axis */
    w[0].ndim = x->ndim - axis;
    for (int d = axis; d < x->ndim; d++) w[0].d[d - axis] = x->d[d];
    w[1] = w[0];
}

static int layer_norm_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char s[200], ws[128];
    int axis = dl_axis_norm(op->attrs->axis, x->ndim);
    if (axis < 0)
        DL_NO(why, "axis %d is out of range for input %s", op->attrs->axis, dl_in_str(op, cx, 0, s, sizeof s));
    for (int i = 1; i < 3; i++) {
        const dl_tensor *w = &op->inputs[i];
        int ok = w->ndim == x->ndim - axis;
        for (int d = 0; ok && d < w->ndim; d++) ok = w->shape[d] == x->shape[axis + d];
        if (!ok)
            DL_NO(why, "%s %s must be the input's dimensions from axis %d on", i == 1 ? "weight" : "bias",
                  dl_shape_txt(w, ws, sizeof ws), axis);
    }
    if (!(op->attrs->epsilon > 0)) DL_NO(why, "eps must be positive");
    return dl_infer_same(op, cx, y, why);
}

static double layer_norm_flops(const dl_op *op) { return 8.0 * (double)dl_tensor_numel(&op->outputs[0]); }

const dl_op_def dl_op_row_layer_norm = {
    .name = "layer_norm",
    .abi_minor = 4,
    .flags = DL_OPF_AXIS,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights = (const dl_weight_def[]){{"weight", DL_INIT_ONES, 0}, {"bias", DL_INIT_ZEROS, 0}, {0}},
    .attrs =
        (const dl_attr_def[]){{"axis", DL_ATTR_INT, 0, DL_ATTR_AT(attrs.axis), -DL_MAX_DIMS, DL_MAX_DIMS - 1, -1, 0},
                              {"eps", DL_ATTR_FLOAT, DL_ATTR_OPEN_LO, DL_ATTR_AT(attrs.epsilon), 0, INFINITY, 1e-5, 0},
                              {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"layer_norm last", "[[2, 7, 97]]", "", 3},
                                  {"layer_norm two dims", "[[3, 5, 7, 9]]", "axis: 2, eps: 0.001", 3},
                                  {0}},
    .weight_shapes = layer_norm_weights,
    .infer = layer_norm_infer,
    .flops = layer_norm_flops,
};

/* ---- group_norm ---- */

static void group_norm_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    (void)p;
    w[0] = w[1] = (dl_shape){1, {x->ndim > 1 ? x->d[1] : 0}};
}

static int group_norm_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char ws[128];
    if (!dl_check_channel_groups(op, cx, why)) return 0;
    for (int i = 1; i < 3; i++)
        if (!dl_is_vec(&op->inputs[i], x->shape[1]))
            DL_NO(why, "%s must be [%lld], got %s", i == 1 ? "weight" : "bias", (long long)x->shape[1],
                  dl_shape_txt(&op->inputs[i], ws, sizeof ws));
    if (!(op->attrs->epsilon > 0)) DL_NO(why, "eps must be positive");
    return dl_infer_same(op, cx, y, why);
}

const dl_op_def dl_op_row_group_norm = {
    .name = "group_norm",
    .abi_minor = 4,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights = (const dl_weight_def[]){{"weight", DL_INIT_ONES, 0}, {"bias", DL_INIT_ZEROS, 0}, {0}},
    .attrs =
        (const dl_attr_def[]){{"groups", DL_ATTR_INT, DL_ATTR_REQUIRED, DL_ATTR_AT(attrs.groups), 1, 1 << 30, 1, 0},
                              {"eps", DL_ATTR_FLOAT, DL_ATTR_OPEN_LO, DL_ATTR_AT(attrs.epsilon), 0, INFINITY, 1e-5, 0},
                              {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"group_norm", "[[2, 6, 5, 7]]", "groups: 3", 3},
                                  {"instance_norm", "[[2, 5, 9]]", "groups: 5, eps: 0.001", 3},
                                  {0}},
    .weight_shapes = group_norm_weights,
    .infer = group_norm_infer,
    .flops = layer_norm_flops,
};
