/* movement.c — rows of the ops of ABI 1.4 that move elements to new places without arithmetic:
 * transpose (any permutation), slice (ONNX Slice: steps, negative indices, clamping) and pad
 * (constant, reflect, edge); and resize (nearest or linear resampling of H and W), which reads
 * its input at computed places; gather (ONNX Gather: an embedding lookup by int64 indices); and
 * channel_shuffle (ABI 1.11: ShuffleNet's channels dealt out group by group). */
#include <limits.h>
#include <stdint.h>

#include "op_rows.h"

#define INTS_ATTR(key, flags, member, lo, max) \
    { key, DL_ATTR_INTS, flags, DL_ATTR_AT(member), lo, max, 0, 0 }

/* ---- transpose ---- */

/* The model's `perm` into attrs; absent, every entry is -1 until resolve knows the rank. */
static void transpose_complete(dl_op_params *p, uint32_t given) {
    (void)given;
    for (int d = 0; d < DL_MAX_DIMS; d++) p->attrs.perm[d] = d < p->perm.n ? (int32_t)p->perm.v[d] : -1;
}

/* 1 if every value of an axes-like list is in [lo, hi); else 0 with the message for validate. */
static int ints_within(const dl_ints *l, int64_t lo, int64_t hi, const char *what, char *msg, size_t len) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i] < lo || l->v[i] >= hi) {
            snprintf(msg, len, "%s %lld is out of range [%lld, %lld)", what, (long long)l->v[i], (long long)lo,
                     (long long)hi);
            return 0;
        }
    return 1;
}

static int transpose_validate(const dl_op_params *p, const char **key, char *msg, size_t len) {
    *key = "perm";
    return ints_within(&p->perm, 0, DL_MAX_DIMS, "perm entry", msg, len);
}

static void transpose_resolve(dl_op_params *p, int rank) {
    if (p->perm.n == 0)
        for (int d = 0; d < rank; d++) p->attrs.perm[d] = rank - 1 - d;
}

static int transpose_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    const int32_t *perm = op->attrs->perm;
    int nd = x->ndim, seen = 0;
    char s[200];
    if (cx && cx->params && cx->params->perm.n == 0) { /* the default before resolve: reversed */
        y->ndim = nd;
        for (int d = 0; d < nd; d++) y->d[d] = x->shape[nd - 1 - d];
        return 1;
    }
    if (cx && cx->params && cx->params->perm.n != nd)
        DL_NO(why, "perm has %d entries for input %s of rank %d", cx->params->perm.n, dl_shape_txt(x, s, sizeof s), nd);
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        if (perm[d] < 0 || perm[d] >= nd || (seen >> perm[d] & 1))
            DL_NO(why, "perm is not a permutation of the %d dimensions of input %s", nd, dl_shape_txt(x, s, sizeof s));
        seen |= 1 << perm[d];
        y->d[d] = x->shape[perm[d]];
    }
    return 1;
}

const dl_op_def dl_op_row_transpose = {
    .name = "transpose",
    .abi_minor = 4,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){INTS_ATTR("perm", 0, perm, 0, DL_MAX_DIMS), {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"transpose 4-D", "[[2, 3, 5, 7]]", "perm: [0, 2, 3, 1]", 1},
                                  {"transpose reversed", "[[3, 5, 7]]", "", 1},
                                  {"transpose heads", "[[2, 7, 3, 5]]", "perm: [0, 2, 1, 3]", 1},
                                  {0}},
    .complete = transpose_complete,
    .validate = transpose_validate,
    .infer = transpose_infer,
    .flops = dl_flops_none,
    .resolve = transpose_resolve,
};

/* ---- slice ---- */

static void slice_complete(dl_op_params *p, uint32_t given) {
    (void)given;
    dl_op_attrs *a = &p->attrs;
    a->n_axes = p->starts.n;
    for (int i = 0; i < DL_MAX_DIMS; i++) {
        int on = i < p->starts.n;
        a->axes[i] = on ? (p->axes.n ? (int32_t)p->axes.v[i] : i) : 0;
        a->starts[i] = on ? p->starts.v[i] : 0;
        a->ends[i] = on && i < p->ends.n ? p->ends.v[i] : 0;
        a->steps[i] = on ? (p->steps.n ? p->steps.v[i] : 1) : 1;
    }
}

static int slice_validate(const dl_op_params *p, const char **key, char *msg, size_t len) {
    int n = p->starts.n;
    const char *bad = p->ends.n != n                  ? "ends"
                      : p->axes.n && p->axes.n != n   ? "axes"
                      : p->steps.n && p->steps.n != n ? "steps"
                                                      : NULL;
    if (bad) {
        *key = bad;
        snprintf(msg, len, "%s must have as many values as starts (%d)", bad, n);
        return 0;
    }
    if (n == 0) return *key = "starts", snprintf(msg, len, "starts must name at least one value"), 0;
    *key = "axes";
    if (!ints_within(&p->axes, -DL_MAX_DIMS, DL_MAX_DIMS, "axis", msg, len)) return 0;
    for (int i = 0; i < p->steps.n; i++)
        if (p->steps.v[i] == 0) return *key = "steps", snprintf(msg, len, "steps must not be 0"), 0;
    return 1;
}

static int slice_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    const dl_op_attrs *a = op->attrs;
    char s[200];
    dl_shape_of(x, y);
    if (a->n_axes < 1 || a->n_axes > x->ndim)
        DL_NO(why, "slices %d axes of input %s", a->n_axes, dl_in_str(op, cx, 0, s, sizeof s));
    int seen = 0;
    for (int i = 0; i < a->n_axes; i++) {
        int d = dl_axis_norm(a->axes[i], x->ndim);
        if (d < 0 || (seen >> d & 1))
            DL_NO(why, "axis %d is out of range or repeated for input %s", a->axes[i],
                  dl_in_str(op, cx, 0, s, sizeof s));
        seen |= 1 << d;
        if (a->steps[i] == 0) DL_NO(why, "step 0 along axis %d", a->axes[i]);
        int64_t first;
        y->d[d] = dl_slice_dim(x->shape[d], a->starts[i], a->ends[i], a->steps[i], &first);
        if (y->d[d] < 1)
            DL_NO(why, "takes no element along axis %d of input %s (start %lld, end %lld, step %lld)", a->axes[i],
                  dl_in_str(op, cx, 0, s, sizeof s), (long long)a->starts[i], (long long)a->ends[i],
                  (long long)a->steps[i]);
    }
    return 1;
}

const dl_op_def dl_op_row_slice = {
    .name = "slice",
    .abi_minor = 4,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){INTS_ATTR("starts", DL_ATTR_REQUIRED, starts, INT64_MIN, DL_MAX_DIMS),
                                   INTS_ATTR("ends", DL_ATTR_REQUIRED, ends, INT64_MIN, DL_MAX_DIMS),
                                   INTS_ATTR("axes", 0, axes, -DL_MAX_DIMS, DL_MAX_DIMS),
                                   INTS_ATTR("steps", 0, steps, INT64_MIN, DL_MAX_DIMS),
                                   {0}},
    .nmse = DL_NMSE_EXACT,
    .cases =
        (const dl_op_case[]){
            {"slice spatial", "[[2, 3, 9, 7]]", "starts: [1, 0], ends: [8, -1], axes: [2, 3]", 1},
            {"slice steps", "[[3, 11, 5]]", "starts: [1, 0], ends: [100, 5], axes: [1, -1], steps: [3, 2]", 1},
            {"slice backwards", "[[4, 13]]", "starts: [-1], ends: [-100], axes: [1], steps: [-2]", 1},
            {0}},
    .complete = slice_complete,
    .validate = slice_validate,
    .infer = slice_infer,
    .flops = dl_flops_none,
};

/* ---- pad ---- */

static const char *const pad_modes[] = {"constant", "reflect", "edge", NULL};

/* `pads` lists the begins of every dimension, then the ends (ONNX's order). */
static void pad_complete(dl_op_params *p, uint32_t given) {
    (void)given;
    int n = p->pads.n / 2;
    for (int d = 0; d < DL_MAX_DIMS; d++) {
        p->attrs.pads_before[d] = d < n ? p->pads.v[d] : 0;
        p->attrs.pads_after[d] = d < n ? p->pads.v[n + d] : 0;
    }
}

static int pad_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    const dl_op_attrs *a = op->attrs;
    char s[200];
    dl_in_str(op, cx, 0, s, sizeof s);
    if (cx && cx->params && cx->params->pads.n != 2 * x->ndim)
        DL_NO(why, "pads has %d values; input %s needs %d (the begin of each dimension, then each end)",
              cx->params->pads.n, s, 2 * x->ndim);
    if (a->mode < DL_PAD_CONSTANT || a->mode > DL_PAD_EDGE) DL_NO(why, "pad mode %d is unknown", a->mode);
    if (!isfinite(a->value)) DL_NO(why, "the pad value must be finite");
    dl_shape_of(x, y);
    for (int d = 0; d < x->ndim; d++) {
        int64_t b = a->pads_before[d], e = a->pads_after[d];
        if (b < 0 || e < 0 || b > INT32_MAX || e > INT32_MAX)
            DL_NO(why, "pads of dimension %d (%lld, %lld) must be in [0, 2^31)", d, (long long)b, (long long)e);
        if (a->mode == DL_PAD_REFLECT && (b >= x->shape[d] || e >= x->shape[d]))
            DL_NO(why, "reflect pads of dimension %d must be below its size %lld in input %s", d,
                  (long long)x->shape[d], s);
        y->d[d] = x->shape[d] + b + e;
    }
    for (int d = x->ndim; d < DL_MAX_DIMS; d++)
        if (a->pads_before[d] || a->pads_after[d]) DL_NO(why, "pads given past the input's %d dimensions", x->ndim);
    return 1;
}

const dl_op_def dl_op_row_pad = {
    .name = "pad",
    .abi_minor = 4,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){INTS_ATTR("pads", DL_ATTR_REQUIRED, pads, 0, 2 * DL_MAX_DIMS),
                              {"mode", DL_ATTR_ENUM, 0, DL_ATTR_AT(attrs.mode), 0, 0, DL_PAD_CONSTANT, 0, pad_modes},
                              {"value", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.value), -INFINITY, INFINITY, 0, 0},
                              {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"pad constant", "[[2, 3, 5, 7]]", "pads: [0, 0, 1, 2, 0, 0, 3, 1], value: 0.5", 1},
                                  {"pad reflect", "[[2, 3, 5, 7]]", "pads: [0, 1, 2, 3, 0, 0, 4, 1], mode: reflect", 1},
                                  {"pad edge", "[[3, 11]]", "pads: [1, 5, 2, 0], mode: edge", 1},
                                  {0}},
    .complete = pad_complete,
    .infer = pad_infer,
    .flops = dl_flops_none,
};

/* ---- resize ---- */

static const char *const resize_modes[] = {"nearest", "linear", NULL};
static const char *const resize_coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", NULL};
static const char *const resize_nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};

static int resize_validate(const dl_op_params *p, const char **key, char *msg, size_t len) {
    if (p->size.n == 2 && p->size.v[0] >= 1 && p->size.v[1] >= 1 && p->size.v[0] <= INT32_MAX &&
        p->size.v[1] <= INT32_MAX)
        return 1;
    *key = "size";
    snprintf(msg, len, "size must be [oh, ow], two positive sizes");
    return 0;
}

static int resize_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    const dl_op_attrs *a = op->attrs;
    char s[200];
    if (x->ndim != 4) DL_NO(why, "needs a 4-D input [N, C, H, W], got %s", dl_in_str(op, cx, 0, s, sizeof s));
    if (a->mode < DL_RESIZE_NEAREST || a->mode > DL_RESIZE_LINEAR) DL_NO(why, "resize mode %d is unknown", a->mode);
    if (a->coord < DL_COORD_HALF_PIXEL || a->coord > DL_COORD_ASYMMETRIC)
        DL_NO(why, "coordinate mode %d is unknown", a->coord);
    if (a->nearest < DL_NEAREST_ROUND_PREFER_FLOOR || a->nearest > DL_NEAREST_CEIL)
        DL_NO(why, "nearest mode %d is unknown", a->nearest);
    dl_shape_of(x, y);
    if (cx && cx->params) { /* the model gives the size; a backend sees it in the output */
        y->d[2] = cx->params->size.v[0], y->d[3] = cx->params->size.v[1];
        return 1;
    }
    const dl_tensor *o = &op->outputs[0];
    if (o->ndim == 4 && o->shape[2] >= 1 && o->shape[3] >= 1) y->d[2] = o->shape[2], y->d[3] = o->shape[3];
    return 1;
}

const dl_op_def dl_op_row_resize = {
    .name = "resize",
    .abi_minor = 4,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){
            INTS_ATTR("size", DL_ATTR_REQUIRED, size, 1, 2),
            {"mode", DL_ATTR_ENUM, 0, DL_ATTR_AT(attrs.mode), 0, 0, DL_RESIZE_NEAREST, 0, resize_modes},
            {"coordinate", DL_ATTR_ENUM, 0, DL_ATTR_AT(attrs.coord), 0, 0, DL_COORD_HALF_PIXEL, 0, resize_coords},
            {"nearest", DL_ATTR_ENUM, 0, DL_ATTR_AT(attrs.nearest), 0, 0, DL_NEAREST_ROUND_PREFER_FLOOR, 0,
             resize_nearest},
            {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases =
        (const dl_op_case[]){
            {"resize nearest x2", "[[2, 3, 5, 7]]", "size: [10, 14], coordinate: asymmetric, nearest: floor", 1},
            {"resize linear up", "[[2, 3, 5, 7]]", "size: [11, 9], mode: linear", 1},
            {"resize linear align corners", "[[1, 2, 6, 5]]", "size: [9, 13], mode: linear, coordinate: align_corners",
             1},
            {"resize linear down", "[[1, 3, 13, 11]]", "size: [5, 4], mode: linear, coordinate: pytorch_half_pixel", 1},
            {0}},
    .validate = resize_validate,
    .infer = resize_infer,
    .flops = dl_flops_numel,
};

/* ---- gather ---- */

static int gather_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0], *idx = &op->inputs[1];
    char s[200], is[200];
    int axis = dl_axis_norm(op->attrs->axis, x->ndim);
    if (axis < 0) DL_NO(why, "axis %d is out of range for data %s", op->attrs->axis, dl_in_str(op, cx, 0, s, sizeof s));
    if (!dl_dtype_eq(idx->dtype, DL_I64))
        DL_NO(why, "indices %s must be int64 (a model input of dtype int64)", dl_in_str(op, cx, 1, is, sizeof is));
    if (x->ndim - 1 + idx->ndim > DL_MAX_DIMS)
        DL_NO(why, "the output of data %s and indices %s would have more than %d dimensions",
              dl_in_str(op, cx, 0, s, sizeof s), dl_in_str(op, cx, 1, is, sizeof is), DL_MAX_DIMS);
    y->ndim = 0;
    for (int d = 0; d < axis; d++) y->d[y->ndim++] = x->shape[d];
    for (int d = 0; d < idx->ndim; d++) y->d[y->ndim++] = idx->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) y->d[y->ndim++] = x->shape[d];
    return 1;
}

const dl_op_def dl_op_row_gather = {
    .name = "gather",
    .abi_minor = 4,
    .flags = DL_OPF_AXIS,
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs =
        (const dl_attr_def[]){{"axis", DL_ATTR_INT, 0, DL_ATTR_AT(attrs.axis), -DL_MAX_DIMS, DL_MAX_DIMS - 1, 0, 0},
                              {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"gather embedding", "[[11, 7], [2, 5]]", "", 1},
                                  {"gather axis 1", "[[3, 9, 5], [4]]", "axis: 1", 1},
                                  {"gather last", "[[2, 3, 6], [3, 2]]", "axis: -1", 1},
                                  {0}},
    .infer = gather_infer,
    .flops = dl_flops_none,
    .int_inputs = 1u << 1,
};

/* ---- channel_shuffle ---- */

static int channel_shuffle_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    return dl_check_channel_groups(op, cx, why) && dl_infer_same(op, cx, y, why);
}

const dl_op_def dl_op_row_channel_shuffle = {
    .name = "channel_shuffle",
    .abi_minor = 11,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){{"groups", DL_ATTR_INT, DL_ATTR_REQUIRED, DL_ATTR_AT(attrs.groups), 1, 1 << 30, 1, 0},
                              {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"channel_shuffle 2 groups", "[[2, 6, 5, 7]]", "groups: 2", 1},
                                  {"channel_shuffle 3 of 7 odd", "[[3, 21, 3, 5]]", "groups: 3", 1},
                                  {"channel_shuffle 3-D", "[[2, 12, 11]]", "groups: 4", 1},
                                  {0}},
    .infer = channel_shuffle_infer,
    .flops = dl_flops_none,
};
