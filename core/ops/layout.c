/* layout.c — rows of the ops that move elements without arithmetic: flatten, reshape (the same
 * elements in row-major order) and concat (inputs joined along an axis); and softmax and
 * log_softmax, which keep their input's layout and normalise along one axis. */
#include <limits.h>

#include "op_rows.h"

/* axis (negative counts from the end) in [0, ndim - 1 + extra]; -1 if out of range. */
static int axis_of(int axis, int ndim, int extra) {
    int a = axis < 0 ? axis + ndim : axis;
    return a >= 0 && a < ndim + extra ? a : -1;
}

/* The `axis` key of flatten, softmax and concat, with its default. */
#define AXIS_ATTR(def) \
    { "axis", DL_ATTR_INT, 0, DL_ATTR_AT(attrs.axis), -DL_MAX_DIMS, DL_MAX_DIMS - 1, def, 0 }

/* ---- flatten ---- */

static int flatten_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    (void)cx;
    const dl_tensor *x = &op->inputs[0];
    char s[128];
    int axis = axis_of(op->attrs->axis, x->ndim, 1); /* flatten's axis may be ndim: [N..., 1] */
    if (axis < 0) DL_NO(why, "axis %d is out of range for input %s", op->attrs->axis, dl_shape_txt(x, s, sizeof s));
    int64_t lead = 1, rest = 1;
    for (int i = 0; i < x->ndim; i++) *(i < axis ? &lead : &rest) *= x->shape[i];
    *y = (dl_shape){2, {lead, rest}};
    return 1;
}

const dl_op_def dl_op_row_flatten = {
    .name = "flatten",
    .abi_minor = 0,
    .flags = DL_OPF_ELEMENTWISE | DL_OPF_AXIS,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){AXIS_ATTR(1), {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"flatten", "[[2, 3, 5, 7]]", "", 1}, {0}},
    .infer = flatten_infer,
    .flops = dl_flops_none,
};

/* ---- reshape ---- */

/* The model gives the target with 0 (copy the input's size) and one -1 (what is left); a
 * backend sees the resolved output shape, which must hold the input's elements. */
static int reshape_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char xs[128], ts[128];
    dl_shape_txt(x, xs, sizeof xs);
    int64_t total = dl_tensor_numel(x), known = 1;
    if (!cx || !cx->params) {
        dl_shape_of(&op->outputs[0], y);
        if (dl_shape_numel(y) != total) DL_NO(why, "output does not hold the input's %lld elements", (long long)total);
        return 1;
    }
    const dl_shape *t = &cx->params->reshape;
    int infer = -1;
    *y = *t;
    for (int i = 0; i < t->ndim; i++) {
        if (y->d[i] == 0) {
            if (i >= x->ndim)
                DL_NO(why, "dimension %d is 0 (copy the input's) but input %s has only %d", i, xs, x->ndim);
            y->d[i] = x->shape[i];
        }
        if (y->d[i] == -1) infer = i;
        else if (known < 0 || y->d[i] < 1 || known > total / y->d[i]) known = -2; /* more than the input: no wrap */
        else known *= y->d[i];
    }
    if (infer >= 0 && known > 0 && total % known == 0) y->d[infer] = total / known;
    else if (infer >= 0) known = -1;
    if (infer < 0 ? known != total : known < 0)
        DL_NO(why, "cannot reshape %s (%lld elements) to %s", xs, (long long)total,
              (dl_shape_str(t->d, t->ndim, ts, sizeof ts), ts));
    return 1;
}

const dl_op_def dl_op_row_reshape = {
    .name = "reshape",
    .abi_minor = 2,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){{"shape", DL_ATTR_DIMS, DL_ATTR_REQUIRED, DL_ATTR_AT(reshape), 0, 0, 0, 0}, {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"reshape", "[[2, 3, 5, 7]]", "shape: [0, -1, 5]", 1}, {0}},
    .infer = reshape_infer,
    .flops = dl_flops_none,
};

/* ---- concat ---- */

static int concat_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char xs[160], bs[160];
    dl_in_str(op, cx, 0, xs, sizeof xs);
    int axis = axis_of(op->attrs->axis, x->ndim, 0);
    if (axis < 0) DL_NO(why, "axis %d is out of range for input %s", op->attrs->axis, dl_shape_txt(x, bs, sizeof bs));
    dl_shape_of(x, y);
    for (int i = 1; i < op->n_inputs; i++) {
        const dl_tensor *b = &op->inputs[i];
        int ok = b->ndim == x->ndim;
        for (int d = 0; ok && d < x->ndim; d++) ok = d == axis || b->shape[d] == x->shape[d];
        if (!ok)
            DL_NO(why, "input %s does not match %s outside axis %d", dl_in_str(op, cx, i, bs, sizeof bs), xs, axis);
        y->d[axis] += b->shape[axis];
    }
    return 1;
}

const dl_op_def dl_op_row_concat = {
    .name = "concat",
    .abi_minor = 0,
    .flags = DL_OPF_AXIS,
    .min_inputs = 2,
    .max_inputs = 64,
    .attrs = (const dl_attr_def[]){AXIS_ATTR(1), {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"concat axis 1", "[[2, 1, 4, 5], [2, 3, 4, 5], [2, 2, 4, 5]]", "axis: 1", 1},
                                  {"concat axis 3", "[[2, 3, 4, 1], [2, 3, 4, 3]]", "axis: 3", 1},
                                  {0}},
    .infer = concat_infer,
    .flops = dl_flops_none,
};

/* ---- softmax ---- */

static int softmax_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char s[128];
    if (axis_of(op->attrs->axis, x->ndim, 0) < 0)
        DL_NO(why, "axis %d is out of range for input %s", op->attrs->axis, dl_shape_txt(x, s, sizeof s));
    return dl_infer_same(op, cx, y, why);
}

static double softmax_flops(const dl_op *op) { return 3.0 * (double)dl_tensor_numel(&op->outputs[0]); }

const dl_op_def dl_op_row_softmax = {
    .name = "softmax",
    .abi_minor = 0,
    .flags = DL_OPF_AXIS,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){AXIS_ATTR(-1), {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"softmax axis 1", "[[3, 5, 4, 7]]", "axis: 1", 3},
                                  {"softmax last", "[[4, 1000]]", "", 3},
                                  {"softmax large values", "[[2, 37]]", "", 1000},
                                  {"softmax many rows", "[[37, 29]]", "", 3},
                                  {0}},
    .infer = softmax_infer,
    .flops = softmax_flops,
};

const dl_op_def dl_op_row_log_softmax = {
    .name = "log_softmax",
    .abi_minor = 4,
    .flags = DL_OPF_AXIS,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){AXIS_ATTR(-1), {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"log_softmax axis 1", "[[3, 5, 4, 7]]", "axis: 1", 3},
                                  {"log_softmax last", "[[4, 1000]]", "", 3},
                                  {"log_softmax large values", "[[2, 37]]", "", 1000},
                                  {"log_softmax many rows", "[[37, 29]]", "", 3},
                                  {0}},
    .infer = softmax_infer,
    .flops = softmax_flops,
};
