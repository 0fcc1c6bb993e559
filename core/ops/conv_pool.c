/* conv_pool.c — rows of the window ops: conv2d, conv_transpose2d, conv3d, maxpool2d, avgpool2d,
 * global_avgpool. Output sizes follow PyTorch's formulas (dl_window_out). */
#include <limits.h>
#include <stdint.h>

#include "op_rows.h"

/* [N, C, OH, OW] of a window over x; conv2d has no ceil_mode, and its padding may exceed the
 * window (a pool's may not: every window must see an input element, as ONNX requires). */
static int infer_window(const dl_op *op, int conv, dl_shape *y, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0];
    char xs[128];
    dl_shape_txt(x, xs, sizeof xs);
    if (x->ndim != 4) DL_NO(why, "needs a 4-D input [N, C, H, W], got %s", xs);
    for (int i = 0; i < 2; i++) {
        int k = a->kernel[i], d = a->dilation[i];
        int64_t ext = (int64_t)d * (k - 1) + 1; /* the window's extent: no int overflow for any attributes */
        if (k < 1 || a->stride[i] < 1 || d < 1 || a->pad_begin[i] < 0 || a->pad_end[i] < 0)
            DL_NO(why, "kernel, stride and dilation must be at least 1 and padding at least 0");
        if (op->kind == DL_OP_AVGPOOL2D && d != 1) DL_NO(why, "avgpool2d has no dilation");
        if (!conv && (a->pad_begin[i] >= ext || a->pad_end[i] >= ext))
            DL_NO(why, "padding %d is not less than the window extent %lld",
                  a->pad_begin[i] >= ext ? a->pad_begin[i] : a->pad_end[i], (long long)ext);
        y->d[2 + i] =
            dl_window_out(x->shape[2 + i], k, a->stride[i], a->pad_begin[i], a->pad_end[i], d, conv ? 0 : a->ceil_mode);
        if (y->d[2 + i] < 1)
            DL_NO(why, "kernel %dx%d (dilation %d) does not fit the padded input %s", a->kernel[0], a->kernel[1], d,
                  xs);
    }
    y->ndim = 4;
    y->d[0] = x->shape[0];
    y->d[1] = x->shape[1];
    return 1;
}

/* ---- conv2d ---- */

/* The YAML keys of conv2d, which conv_transpose2d shares (with output_padding between them). */
#define CONV_KEYS                                                                         \
    {"filters", DL_ATTR_INT, DL_ATTR_REQUIRED, DL_ATTR_AT(units), 1, INT_MAX, 0, 0},      \
        {"kernel", DL_ATTR_PAIR, DL_ATTR_REQUIRED, DL_ATTR_AT(attrs.kernel), 1, 0, 0, 0}, \
        {"stride", DL_ATTR_PAIR, 0, DL_ATTR_AT(attrs.stride), 1, 0, 1, 0}, {              \
        "padding", DL_ATTR_PADDING, 0, DL_ATTR_AT(attrs.pad_begin), 0, 0, 0, 0            \
    }
#define CONV_KEYS_AFTER                                                           \
    {"dilation", DL_ATTR_PAIR, 0, DL_ATTR_AT(attrs.dilation), 1, 0, 1, 0},        \
        {"groups", DL_ATTR_INT, 0, DL_ATTR_AT(attrs.groups), 1, INT_MAX, 1, 0}, { \
        "bias", DL_ATTR_BOOL, 0, DL_ATTR_AT(has_bias), 0, 1, 1, 0                 \
    }

static void conv2d_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    int64_t per_group = p->attrs.groups > 0 ? x->d[1] / p->attrs.groups : x->d[1];
    w[0] = (dl_shape){4, {p->units, per_group, p->attrs.kernel[0], p->attrs.kernel[1]}};
    if (p->has_bias) w[1] = (dl_shape){1, {p->units}};
}

/* "3x3" or "3x7x7": n sizes joined by 'x'. */
static const char *dims_txt(char *buf, size_t len, int n, const int64_t *v) {
    size_t u = 0;
    buf[0] = 0;
    for (int i = 0; i < n && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? "x" : "", (long long)v[i]);
    return buf;
}

/* What conv2d and conv3d check alike, over nsp spatial dimensions with the kernel attribute k:
 * the ranks, groups dividing the channels and the filters, the weight's channels and kernel, the
 * bias's length. */
static int conv_operands_ok(const dl_op *op, int nsp, const int32_t *k, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1];
    char s[128], got[64], want[64];
    const int three = nsp == 3;
    if (x->ndim != nsp + 2)
        DL_NO(why, "needs a %d-D input %s, got %s", nsp + 2, three ? "[N, C, D, H, W]" : "[N, C, H, W]",
              dl_shape_txt(x, s, sizeof s));
    if (w->ndim != nsp + 2)
        DL_NO(why, "needs a %d-D weight %s, got %s", nsp + 2,
              three ? "[OC, C/groups, KD, KH, KW]" : "[OC, C/groups, KH, KW]", dl_shape_txt(w, s, sizeof s));
    long long c = (long long)x->shape[1], oc = (long long)w->shape[0];
    if (a->groups < 1) DL_NO(why, "groups must be at least 1, not %d", a->groups);
    if (c % a->groups) DL_NO(why, "input channels %lld are not divisible by groups %d", c, a->groups);
    if (oc % a->groups) DL_NO(why, "filters %lld are not divisible by groups %d", oc, a->groups);
    if (w->shape[1] * a->groups != c)
        DL_NO(why, "weight has %lld input channels per group, the input has %lld channels in %d groups",
              (long long)w->shape[1], c, a->groups);
    int64_t kk[3] = {0};
    for (int i = 0; i < nsp; i++) kk[i] = k[i];
    for (int i = 0; i < nsp; i++)
        if (w->shape[2 + i] != k[i])
            DL_NO(why, "weight kernel %s differs from the kernel attribute %s",
                  dims_txt(got, sizeof got, nsp, w->shape + 2), dims_txt(want, sizeof want, nsp, kk));
    if (op->n_inputs == 3 && !dl_is_vec(&op->inputs[2], oc))
        DL_NO(why, "bias must be [%lld], got %s", oc, dl_shape_txt(&op->inputs[2], s, sizeof s));
    return 1;
}

static int conv2d_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    if (!conv_operands_ok(op, 2, op->attrs->kernel, why)) return 0;
    const int64_t oc = op->inputs[1].shape[0];
    if (!infer_window(op, 1, y, why)) return 0;
    y->d[1] = oc;
    return 1;
}

static double conv2d_flops(const dl_op *op) {
    const int64_t *w = op->inputs[1].shape; /* [OC, C/groups, KH, KW] */
    return 2.0 * (double)dl_tensor_numel(&op->outputs[0]) * (double)(w[1] * w[2] * w[3]);
}

const dl_op_def dl_op_row_conv2d = {
    .name = "conv2d",
    .abi_minor = 0,
    .flags = DL_OPF_FUSES_RELU | DL_OPF_RESIDUAL,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights =
        (const dl_weight_def[]){{"weight", DL_INIT_KAIMING_UNIFORM, 0}, {"bias", DL_INIT_FAN_IN_UNIFORM, 1}, {0}},
    .attrs = (const dl_attr_def[]){CONV_KEYS, CONV_KEYS_AFTER, {0}},
    .nmse = DL_NMSE_GEMM,
    .cases =
        (const dl_op_case[]){
            {"conv 3x3 pad 1", "[[1, 3, 11, 13]]", "filters: 5, kernel: 3, padding: 1", 1},
            {"conv stride 2 batch 2", "[[2, 4, 9, 7]]", "filters: 6, kernel: 3, stride: 2, padding: 1", 1},
            {"conv asymmetric pad", "[[1, 5, 13, 11]]",
             "filters: 7, kernel: [3, 5], stride: [1, 2], padding: [2, 0, 1, 3]", 1},
            {"conv dilation 2", "[[1, 3, 15, 15]]", "filters: 4, kernel: 3, padding: 2, dilation: 2", 1},
            {"conv groups 3 batch 3", "[[3, 6, 8, 9]]", "filters: 9, kernel: 3, padding: 1, groups: 3", 1},
            {"conv depthwise", "[[2, 8, 7, 7]]", "filters: 8, kernel: 3, stride: [2, 1], padding: 1, groups: 8", 1},
            {"conv 7x7 stride 2 no bias", "[[1, 3, 17, 19]]",
             "filters: 8, kernel: 7, stride: 2, padding: 3, bias: false", 1},
            {"conv 1x1", "[[2, 9, 5, 6]]", "filters: 11, kernel: 1", 1},
            {"conv 3x3 64 channels", "[[1, 64, 57, 61]]", "filters: 33, kernel: 3, padding: 1", 1},
            {"conv 3x3 batch 3 deep", "[[3, 32, 10, 10]]", "filters: 24, kernel: 3", 1},
            {"conv 1x1 136 filters", "[[2, 32, 9, 11]]", "filters: 136, kernel: 1", 1},
            {"conv 3x3 + residual + relu", "[[2, 24, 9, 11]]", "filters: 24, kernel: 3, padding: 1", 1, 0, 1},
            {"conv 1x1/2 + residual", "[[1, 16, 13, 11]]", "filters: 40, kernel: 1, stride: 2, bias: false", 1, 0, 1},
            /* groups of 8 channels: whole 16-byte chunks for the cuda plugin's channels-last gather */
            {"conv groups 2 dilation 2", "[[2, 16, 11, 9]]",
             "filters: 12, kernel: 3, stride: 2, padding: 2, dilation: 2, groups: 2", 1},
            {0}},
    .weight_shapes = conv2d_weights,
    .infer = conv2d_infer,
    .flops = conv2d_flops,
};

/* ---- conv_transpose2d ---- */

static void conv_transpose2d_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    int64_t per_group = p->attrs.groups > 0 ? p->units / p->attrs.groups : p->units;
    w[0] = (dl_shape){4, {x->d[1], per_group, p->attrs.kernel[0], p->attrs.kernel[1]}};
    if (p->has_bias) w[1] = (dl_shape){1, {p->units}};
}

static int conv_transpose2d_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1];
    char s[200];
    if (x->ndim != 4) DL_NO(why, "needs a 4-D input [N, C, H, W], got %s", dl_shape_txt(x, s, sizeof s));
    if (w->ndim != 4) DL_NO(why, "needs a 4-D weight [C, OC/groups, KH, KW], got %s", dl_shape_txt(w, s, sizeof s));
    if (a->groups < 1 || x->shape[1] % a->groups)
        DL_NO(why, "input channels %lld are not divisible by groups %d", (long long)x->shape[1], a->groups);
    if (cx && cx->params && cx->params->units % a->groups)
        DL_NO(why, "filters %d are not divisible by groups %d", cx->params->units, a->groups);
    if (w->shape[0] != x->shape[1])
        DL_NO(why, "weight %s must have the input's %lld channels first", dl_shape_txt(w, s, sizeof s),
              (long long)x->shape[1]);
    if (w->shape[2] != a->kernel[0] || w->shape[3] != a->kernel[1])
        DL_NO(why, "weight kernel %lldx%lld differs from the kernel attribute %dx%d", (long long)w->shape[2],
              (long long)w->shape[3], a->kernel[0], a->kernel[1]);
    const int64_t oc = w->shape[1] * a->groups;
    if (op->n_inputs == 3 && !dl_is_vec(&op->inputs[2], oc))
        DL_NO(why, "bias must be [%lld], got %s", (long long)oc, dl_shape_txt(&op->inputs[2], s, sizeof s));
    *y = (dl_shape){4, {x->shape[0], oc, 0, 0}};
    for (int i = 0; i < 2; i++) {
        const int k = a->kernel[i], st = a->stride[i], d = a->dilation[i], extra = a->output_padding[i];
        if (k < 1 || st < 1 || d < 1 || a->pad_begin[i] < 0 || a->pad_end[i] < 0)
            DL_NO(why, "kernel, stride and dilation must be at least 1 and padding at least 0");
        if (extra < 0 || (extra >= st && extra >= d))
            DL_NO(why, "output_padding %d must be below the stride %d or the dilation %d", extra, st, d);
        if (x->shape[2 + i] > (INT64_MAX / 4) / st) /* a host's shape: (H - 1) * stride must not overflow */
            DL_NO(why, "input %s is too large for stride %d", dl_in_str(op, cx, 0, s, sizeof s), st);
        /* in int64, (H - 1) * stride stays far inside the range for any H and stride a model has */
        y->d[2 + i] = (x->shape[2 + i] - 1) * st - a->pad_begin[i] - a->pad_end[i] + (int64_t)d * (k - 1) + extra + 1;
        if (y->d[2 + i] < 1) DL_NO(why, "the padding leaves no output of input %s", dl_in_str(op, cx, 0, s, sizeof s));
    }
    return 1;
}

static double conv_transpose2d_flops(const dl_op *op) {
    const int64_t *w = op->inputs[1].shape; /* [C, OC/groups, KH, KW] */
    return 2.0 * (double)dl_tensor_numel(&op->inputs[0]) * (double)(w[1] * w[2] * w[3]);
}

const dl_op_def dl_op_row_conv_transpose2d = {
    .name = "conv_transpose2d",
    .abi_minor = 4,
    .flags = DL_OPF_FUSES_RELU,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights =
        (const dl_weight_def[]){{"weight", DL_INIT_KAIMING_UNIFORM, 0}, {"bias", DL_INIT_FAN_IN_UNIFORM, 1}, {0}},
    .attrs = (const dl_attr_def[]){CONV_KEYS,
                                   {"output_padding", DL_ATTR_PAIR, 0, DL_ATTR_AT(attrs.output_padding), 0, 0, 0, 0},
                                   CONV_KEYS_AFTER,
                                   {0}},
    .nmse = DL_NMSE_GEMM,
    .cases = (const dl_op_case[]){{"deconv 2x2 stride 2", "[[1, 6, 7, 5]]", "filters: 4, kernel: 2, stride: 2", 1},
                                  {"deconv 3x3 stride 2 pad 1 out-pad 1", "[[2, 5, 6, 7]]",
                                   "filters: 3, kernel: 3, stride: 2, padding: 1, output_padding: 1", 1},
                                  {"deconv groups dilation", "[[1, 6, 5, 5]]",
                                   "filters: 9, kernel: [3, 2], dilation: [2, 1], groups: 3", 1},
                                  {"deconv asymmetric pads no bias", "[[1, 4, 9, 8]]",
                                   "filters: 5, kernel: 4, stride: [2, 3], padding: [1, 2, 0, 1], bias: false", 1},
                                  {0}},
    .weight_shapes = conv_transpose2d_weights,
    .infer = conv_transpose2d_infer,
    .flops = conv_transpose2d_flops,
};

/* ---- conv3d ---- */

static void conv3d_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    const int32_t *k = p->attrs.kernel3;
    int64_t per_group = p->attrs.groups > 0 ? x->d[1] / p->attrs.groups : x->d[1];
    w[0] = (dl_shape){5, {p->units, per_group, k[0], k[1], k[2]}};
    if (p->has_bias) w[1] = (dl_shape){1, {p->units}};
}

static int conv3d_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    const int32_t *k = a->kernel3;
    if (!conv_operands_ok(op, 3, k, why)) return 0;
    const dl_tensor *x = &op->inputs[0];
    const int64_t oc = op->inputs[1].shape[0];
    char s[128];
    *y = (dl_shape){5, {x->shape[0], oc, 0, 0, 0}};
    for (int i = 0; i < 3; i++) {
        if (k[i] < 1 || a->stride3[i] < 1 || a->dilation3[i] < 1 || a->pad_begin3[i] < 0 || a->pad_end3[i] < 0)
            DL_NO(why, "kernel, stride and dilation must be at least 1 and padding at least 0");
        y->d[2 + i] =
            dl_window_out(x->shape[2 + i], k[i], a->stride3[i], a->pad_begin3[i], a->pad_end3[i], a->dilation3[i], 0);
        if (y->d[2 + i] < 1)
            DL_NO(why, "kernel %dx%dx%d (dilation %dx%dx%d) does not fit the padded input %s", k[0], k[1], k[2],
                  a->dilation3[0], a->dilation3[1], a->dilation3[2], dl_shape_txt(x, s, sizeof s));
    }
    return 1;
}

static double conv3d_flops(const dl_op *op) {
    const int64_t *w = op->inputs[1].shape; /* [OC, C/groups, KD, KH, KW] */
    return 2.0 * (double)dl_tensor_numel(&op->outputs[0]) * (double)(w[1] * w[2] * w[3] * w[4]);
}

const dl_op_def dl_op_row_conv3d = {
    .name = "conv3d",
    .abi_minor = 7,
    .flags = DL_OPF_FUSES_RELU,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights =
        (const dl_weight_def[]){{"weight", DL_INIT_KAIMING_UNIFORM, 0}, {"bias", DL_INIT_FAN_IN_UNIFORM, 1}, {0}},
    .attrs = (const dl_attr_def[]){{"filters", DL_ATTR_INT, DL_ATTR_REQUIRED, DL_ATTR_AT(units), 1, INT_MAX, 0, 0},
                                   {"kernel", DL_ATTR_TRIPLE, DL_ATTR_REQUIRED, DL_ATTR_AT(attrs.kernel3), 1, 0, 0, 0},
                                   {"stride", DL_ATTR_TRIPLE, 0, DL_ATTR_AT(attrs.stride3), 1, 0, 1, 0},
                                   {"padding", DL_ATTR_PADDING3, 0, DL_ATTR_AT(attrs.pad_begin3), 0, 0, 0, 0},
                                   {"dilation", DL_ATTR_TRIPLE, 0, DL_ATTR_AT(attrs.dilation3), 1, 0, 1, 0},
                                   {"groups", DL_ATTR_INT, 0, DL_ATTR_AT(attrs.groups), 1, INT_MAX, 1, 0},
                                   {"bias", DL_ATTR_BOOL, 0, DL_ATTR_AT(has_bias), 0, 1, 1, 0},
                                   {0}},
    .nmse = DL_NMSE_GEMM,
    .cases =
        (const dl_op_case[]){
            {"conv3d 3x3x3 pad 1", "[[1, 3, 5, 9, 7]]", "filters: 5, kernel: 3, padding: 1", 1},
            {"conv3d stem 3x7x7 stride 1,2,2", "[[2, 3, 6, 13, 11]]",
             "filters: 4, kernel: [3, 7, 7], stride: [1, 2, 2], padding: [1, 3, 3]", 1},
            {"conv3d 1x3x3 no bias", "[[1, 6, 4, 7, 9]]",
             "filters: 7, kernel: [1, 3, 3], padding: [0, 1, 1], bias: false", 1},
            {"conv3d 3x1x1 stride 2", "[[1, 5, 9, 5, 6]]", "filters: 3, kernel: [3, 1, 1], stride: [2, 1, 1]", 1},
            {"conv3d groups dilation asymmetric pads", "[[1, 6, 7, 8, 7]]",
             "filters: 9, kernel: [2, 3, 2], dilation: [2, 1, 2], padding: [1, 0, 2, 0, 1, 1], groups: 3", 1},
            {0}},
    .weight_shapes = conv3d_weights,
    .infer = conv3d_infer,
    .flops = conv3d_flops,
};

/* ---- pools ---- */

/* The keys both pools start with; `stride` is the second (POOL_STRIDE). */
/* clang-format off */
#define POOL_WINDOW_ATTRS                                                             \
    {"kernel", DL_ATTR_PAIR, DL_ATTR_REQUIRED, DL_ATTR_AT(attrs.kernel), 1, 0, 0, 0}, \
    {"stride", DL_ATTR_PAIR, 0, DL_ATTR_AT(attrs.stride), 1, 0, 1, 0},                \
    {"padding", DL_ATTR_PADDING, 0, DL_ATTR_AT(attrs.pad_begin), 0, 0, 0, 0}
/* clang-format on */
enum { POOL_STRIDE = 1 };

/* A pool's stride defaults to its kernel (PyTorch's rule). */
static void pool_complete(dl_op_params *p, uint32_t given) {
    if (given & (1u << POOL_STRIDE)) return;
    p->attrs.stride[0] = p->attrs.kernel[0];
    p->attrs.stride[1] = p->attrs.kernel[1];
}

static int pool_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    (void)cx;
    return infer_window(op, 0, y, why);
}

static double pool_flops(const dl_op *op) {
    return (double)dl_tensor_numel(&op->outputs[0]) * op->attrs->kernel[0] * op->attrs->kernel[1];
}

/* ABI 1.2 gave maxpool2d its dilation: a 1.1 plugin would ignore it. */
static uint32_t maxpool_minor(const dl_op *op) {
    return op->attrs->dilation[0] != 1 || op->attrs->dilation[1] != 1 ? 2 : 0;
}

const dl_op_def dl_op_row_maxpool2d = {
    .name = "maxpool2d",
    .abi_minor = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs = (const dl_attr_def[]){POOL_WINDOW_ATTRS,
                                   {"dilation", DL_ATTR_PAIR, 0, DL_ATTR_AT(attrs.dilation), 1, 0, 1, 0},
                                   {"ceil_mode", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.ceil_mode), 0, 1, 0, 0},
                                   {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"maxpool 2", "[[2, 3, 11, 13]]", "kernel: 2", 1},
                                  {"maxpool 3 s2 p1", "[[1, 5, 9, 9]]", "kernel: 3, stride: 2, padding: 1", 1},
                                  {"maxpool ceil", "[[1, 4, 10, 7]]",
                                   "kernel: 3, stride: 2, padding: 1, ceil_mode: true", 1},
                                  {"maxpool dilation 2", "[[1, 3, 13, 11]]", "kernel: 3, stride: 1, dilation: 2", 1},
                                  {"maxpool dilated ceil pad", "[[2, 2, 12, 9]]",
                                   "kernel: 2, stride: 2, padding: 1, dilation: 3, ceil_mode: true", 1},
                                  {0}},
    .complete = pool_complete,
    .infer = pool_infer,
    .flops = pool_flops,
    .abi_minor_of = maxpool_minor,
};

const dl_op_def dl_op_row_avgpool2d = {
    .name = "avgpool2d",
    .abi_minor = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){POOL_WINDOW_ATTRS,
                              {"ceil_mode", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.ceil_mode), 0, 1, 0, 0},
                              {"count_include_pad", DL_ATTR_BOOL, 0, DL_ATTR_AT(attrs.count_include_pad), 0, 1, 1, 0},
                              {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases =
        (const dl_op_case[]){
            {"avgpool ceil pad", "[[1, 4, 10, 7]]", "kernel: 3, stride: 2, padding: 1, ceil_mode: true", 1},
            {"avgpool exclude pad", "[[2, 2, 8, 11]]", "kernel: 3, stride: 2, padding: 1, count_include_pad: false", 1},
            {"avgpool pad over half", "[[1, 2, 9, 8]]", "kernel: 3, stride: 2, padding: 2", 1},
            {0}},
    .complete = pool_complete,
    .infer = pool_infer,
    .flops = pool_flops,
};

/* ---- global_avgpool ---- */

static int global_avgpool_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    (void)cx;
    const dl_tensor *x = &op->inputs[0];
    char s[128];
    if (x->ndim != 4) DL_NO(why, "needs a 4-D input [N, C, H, W], got %s", dl_shape_txt(x, s, sizeof s));
    *y = (dl_shape){4, {x->shape[0], x->shape[1], 1, 1}};
    return 1;
}

static double global_avgpool_flops(const dl_op *op) { return (double)dl_tensor_numel(&op->inputs[0]); }

const dl_op_def dl_op_row_global_avgpool = {
    .name = "global_avgpool",
    .abi_minor = 0,
    .min_inputs = 1,
    .max_inputs = 1,
    /* a sum over H*W, as long as a conv's dot products: an f32 one of 784 values that nearly cancel
     * (maxvit_t's squeeze-excitation on oneDNN) is 1.1e-10 from the cpu plugin's f64 sum */
    .nmse = DL_NMSE_GEMM,
    .cases = (const dl_op_case[]){{"global avgpool", "[[3, 5, 7, 9]]", "", 1}, {0}},
    .infer = global_avgpool_infer,
    .flops = global_avgpool_flops,
};
