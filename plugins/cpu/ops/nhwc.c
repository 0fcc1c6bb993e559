/* nhwc.c — the CPU plugin's channels-last (NHWC) f32 kernels, and which layout it asks for.
 *
 * On large maps with few channels a conv in NCHW reads and writes one plane per channel and does
 * little arithmetic per line it touches (docs/performance.md, "Per-op medians, and the layout the
 * large maps ask for"). In NHWC each pixel's channels lie together, so these ops run on NHWC
 * tensors where they lie, with no conversion. Their vectors are the widest the build has (vecw.h:
 * VW = 16 lanes with AVX-512, else 8), so a panel is 2 x VW filters (32 or 16):
 *   - a 1x1 conv (stride 1, no padding, one group): a product of the pixels [P, C] with the
 *     weight, packed at prepare in panels of 2 x VW filters; each block keeps PW_ROWS pixels
 *     (7 with AVX-512, 6 with AVX2) x 2 x VW filters in vector registers over all C channels (a
 *     last panel of VW filters or fewer: half as many), then adds the bias and a fused residual,
 *     applies the fused activation and stores the panel's consecutive floats a pixel;
 *   - a 3x3 stride-1 conv of one group with 64 channels or more and enough 4x4 output tiles
 *     (cpu_winograd_suits): Winograd F(4x4, 3x3) on the channels-last tensors (winograd.c; 1.2-2x
 *     the kernel below on ResNet's 56x56, 28x28 and 14x14 maps, on AVX2);
 *   - any other conv of one group (any window, stride, dilation and padding): the same blocks,
 *     summed over the window's taps; where a block's windows lie inside the image's columns, a
 *     row of the window is kw x C consecutive floats, one run of the product (the weight packed
 *     tap by tap to match), and elsewhere each tap on its own, reading a row of zeros outside;
 *     where the map is small for the threads (under 16 columns, or under 16 rows a thread) a
 *     task is one panel of filters times one block of pixels, the blocks running on across
 *     rows and images, so that the work shares out evenly; elsewhere a task is a run of blocks
 *     (1x1) or an output row (the others), for all panels;
 *   - a depthwise conv (groups == channels, any window, stride, dilation and padding): each output
 *     pixel sums its window's taps over VW channels at a time (the last ones a partial vector), the
 *     weight packed tap by tap at prepare. With AVX-512, windows 3, 5 or 7 wide at stride 1 or 2
 *     (MobileNet's, EfficientNet's, ConvNeXt's) go in register blocks of 7 pixels, two output rows
 *     at a time where the stride down is 1 (dw_block); the others 4 neighbouring pixels at once
 *     where their windows lie inside the image's columns (dw_four);
 *   - a grouped conv of 2 or 4 channels a group in and out (ResNeXt's first stage): as the
 *     depthwise conv, each output channel summing its group's input channels, each spread over
 *     the group's lanes by a permutation;
 *   - max pooling (any window, stride, dilation and padding; NaN wins, as in NCHW), average and global
 *     average pooling (sums in double, as in NCHW), batchnorm (each pixel's channels scaled and
 *     shifted, the fused activation applied), concat of 4-D tensors (the NCHW kernel on
 *     the shapes as they lie, [N, H, W, C], along the matching axis), slice (the same, its axes
 *     mapped) and channel_shuffle (each pixel's channels dealt out);
 *   - the elementwise ops of one input (same order in and out: their NCHW kernels as they are) and
 *     the binary ops with 4-D operands (their NCHW kernels on shapes permuted to [N, H, W, C]).
 * Everything else stays row-major: f16/bf16 or mixed layouts go through storage.c as before.
 *
 * The plugin asks (preferred_layout, ABI 1.9) for the input's layout where an op has a kernel
 * here, and for row-major everywhere else; it never asks for channels-last itself. The host does,
 * seeing the whole model (`--layout`, dl_session_options.layout; docs/layout.md): by default at
 * every conv of a model with depthwise convs (MobileNet, EfficientNet), where NHWC from the stem
 * to the classifier is the fastest plan measured, and nowhere on the others (the ResNets,
 * GoogLeNet, SqueezeNet), where it is not (docs/performance.md, "oneDNN in NHWC chains"). */
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "vecw.h"

/* Pixels per block of the 1x1 and dense convs: 7 with AVX-512 (14 of its 32 registers hold the
 * sums), where ResNet's, GoogLeNet's and MobileNet's maps (7, 14, 28, 56, 112 a side) split into
 * whole blocks: 6 left a block of 1 pixel in 6 at 7x7 and of 4 at 14x14, computed in full. 6 with
 * AVX2's 16 registers. */
#define PW_ROWS (VW == 16 ? 7 : 6)
#define PW_COLS (2 * VW)  /* filters per block: two vectors (32 with AVX-512, else 16) */
#define PW_CHUNK_BLOCKS 8 /* blocks a task of the 1x1 conv takes on large maps */
/* Pixels a thread below which the 1x1 conv's tasks are one panel by one block (small maps, where
 * the weights are largest): under 16 blocks of 6 a thread, pixels + 5 < 96 threads, as when it was
 * measured with blocks of 6. Counted in blocks of 7, MobileNetV2's 14x14 expansions (196 pixels)
 * changed path and ran 10 % slower. */
#define PW_FEW_PIXELS 96
#define DW_LANES VW /* channels per vector of the depthwise conv and max pooling */

static int is_unary(int kind) {
    switch (kind) {
    case DL_OP_RELU:
    case DL_OP_LEAKY_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
    case DL_OP_DROPOUT:
    case DL_OP_SQRT:
    case DL_OP_EXP:
    case DL_OP_LOG:
    case DL_OP_TANH:
    case DL_OP_ERF:
    case DL_OP_NEG:
    case DL_OP_ABS:
    case DL_OP_RECIPROCAL:
    case DL_OP_HARD_SIGMOID:
    case DL_OP_HARD_SWISH:
    case DL_OP_SILU:
    case DL_OP_GELU:
    case DL_OP_SOFTPLUS: return 1;
    default: return 0;
    }
}

static int is_binary(int kind) {
    switch (kind) {
    case DL_OP_ADD:
    case DL_OP_MUL:
    case DL_OP_SUB:
    case DL_OP_DIV:
    case DL_OP_POW:
    case DL_OP_MIN:
    case DL_OP_MAX: return 1;
    default: return 0;
    }
}

static int is_pointwise(const dl_op *op) {
    return op->kind == DL_OP_CONV2D && op->attrs->groups == 1 && cpu_conv_plain_1x1(op->attrs);
}

static int is_depthwise(const dl_op *op) {
    return op->kind == DL_OP_CONV2D && op->inputs[0].ndim == 4 && op->attrs->groups == op->inputs[0].shape[1] &&
           op->outputs[0].shape[1] == op->inputs[0].shape[1];
}

/* any other conv of one group: window, stride, dilation and padding of any size */
static int is_dense(const dl_op *op) { return op->kind == DL_OP_CONV2D && op->attrs->groups == 1; }

/* The channels a group has, in and out alike, for a grouped conv the grouped kernel below runs
 * (ResNeXt-50's first stage: 32 groups of 4): 2 or 4; else 0. Measured on 2 threads, 3x3 convs:
 * 32 x 2 on 56 x 56 0.075 ms (the row-major path through conversions 0.376, oneDNN 0.223), 32 x 4
 * 0.21 (0.75, oneDNN 0.33); 32 x 8 on 28 x 28 took 0.64 here against 0.43 row-major, so 8 is not
 * taken (each output sums 8 channels, each a permutation of the pixel's vector). */
static int group_width(const dl_op *op) {
    if (op->kind != DL_OP_CONV2D || op->inputs[0].ndim != 4 || op->attrs->groups < 2) return 0;
    const int64_t c = op->inputs[0].shape[1], g = op->attrs->groups, gw = c / g;
    if (c % g || op->outputs[0].shape[1] != c || (gw != 2 && gw != 4)) return 0;
    return (int)gw;
}

/* A binary op's operand as the NHWC kernel takes it: 4-D (channels-last), or of fewer dims that
 * read the same in memory whether [1, C, H, W] or [1, H, W, C] once ones are put before them:
 * nothing but ones in C or in H x W (ConvNeXt's layer scale [C, 1, 1], a bias [C, 1, 1], a scalar). */
static int nhwc_operand(const dl_tensor *t) {
    if (t->ndim == 4) return 1;
    if (t->ndim > 4) return 0;
    int64_t d[4] = {1, 1, 1, 1};
    for (int i = 0; i < t->ndim; i++) d[4 - t->ndim + i] = t->shape[i];
    return d[1] == 1 || (d[2] == 1 && d[3] == 1);
}

/* op's kind (and, for a conv, its shape) has an NHWC kernel here */
static int has_kernel(const dl_op *op) {
    if (is_unary(op->kind) || op->kind == DL_OP_GLOBAL_AVGPOOL || op->kind == DL_OP_MAXPOOL2D ||
        op->kind == DL_OP_AVGPOOL2D)
        return 1;
    if (op->kind == DL_OP_BATCHNORM) return op->n_inputs == 5 && op->outputs[0].ndim == 4;
    if (op->kind == DL_OP_CONCAT || op->kind == DL_OP_CHANNEL_SHUFFLE || op->kind == DL_OP_SLICE)
        return op->outputs[0].ndim == 4;
    if (is_binary(op->kind))
        return op->n_inputs == 2 && op->outputs[0].ndim == 4 && nhwc_operand(&op->inputs[0]) &&
               nhwc_operand(&op->inputs[1]);
    return is_dense(op) || is_depthwise(op) || group_width(op);
}

int cpu_nhwc_runs(const dl_op *op) {
    if (!has_kernel(op) || op->outputs[0].ndim != 4) return 0;
    const dl_tensor *y = &op->outputs[0];
    if (!dl_dtype_is_f32(y->dtype) || dl_tensor_layout(y) != DL_LAYOUT_CHANNELS_LAST) return 0;
    for (int i = 0; i < op->n_inputs; i++) {
        const dl_tensor *t = &op->inputs[i];
        if (op->kind == DL_OP_CONV2D && i == 1) { /* the weight: repacked at prepare, so it needs data */
            if (!t->data) return 0;
            continue;
        }
        int want = t->ndim == 4 ? DL_LAYOUT_CHANNELS_LAST : DL_LAYOUT_ROW_MAJOR;
        if (!dl_dtype_is_f32(t->dtype) || dl_tensor_layout(t) != want) return 0;
    }
    return 1;
}

/* Where an op has a kernel here, the plugin takes its input's layout (AS_INPUT): it never asks
 * for channels-last itself, which pays on some models and not on others, and it sees only the op.
 * The host decides, seeing the model (dl_session_options.layout, docs/layout.md). */
int cpu_preferred_layout(void *self, const dl_op *op) {
    (void)self;
    if (op->precision != DL_PRECISION_F32 || op->n_outputs < 1 || !has_kernel(op)) return DL_LAYOUT_ROW_MAJOR;
    return DL_LAYOUT_AS_INPUT;
}

/* ---- prepare ---- */

/* The dense conv's input as its blocks read it: the tensor, or its copy with the padding written
 * out (dense_pads), whose every window's rows then lie inside as runs of kw * c floats */
typedef struct dense_in {
    const float *x;
    int64_t h, w, pt, pl; /* its rows and columns, and the padding left at the top and left */
} dense_in;

/* A stem's conv (4 channels or fewer, RGB, padded): the windows of the blocks at a row's edges
 * cross the padding and take the tap-by-tap path, a tap of c floats at a time, at a fraction of
 * the runs' speed (GoogLeNet's and the ResNets' 7x7 stride-2 conv on 224x224: 82 GFLOP/s); on a
 * copy of the image with its padding written out every block runs. The copy is small beside the
 * conv: c floats a pixel against kh kw c m multiply-adds. */
static int dense_pads(const dl_op_geom *g) {
    const dl_op_attrs *a = &g->a;
    return g->xs[1] <= 4 && (a->pad_begin[0] || a->pad_begin[1] || a->pad_end[0] || a->pad_end[1]) &&
           (a->dilation[1] == 1 || a->kernel[1] == 1);
}

/* The dense conv's input at x: the tensor's geometry, or with dense_pads its padded copy's */
static dense_in dense_input(const dl_op_geom *g, const float *x) {
    const dl_op_attrs *a = &g->a;
    if (!dense_pads(g)) return (dense_in){x, g->xs[2], g->xs[3], a->pad_begin[0], a->pad_begin[1]};
    return (dense_in){x, g->xs[2] + a->pad_begin[0] + a->pad_end[0], g->xs[3] + a->pad_begin[1] + a->pad_end[1], 0, 0};
}

dl_status cpu_nhwc_prepare(dl_kernel *k, const dl_op *op) {
    dl_op_geom *g = &k->g;
    if (is_binary(g->kind)) { /* [N, C, H, W] -> [N, H, W, C]: the row-major shapes of what lies in memory */
        int *nd[2] = {&g->xnd, &g->bnd};
        int64_t *s[3] = {g->xs, g->bs, g->ys};
        for (int i = 0; i < 2; i++) { /* an operand of fewer dims: ones before them (nhwc_operand) */
            const int m = *nd[i];
            memmove(s[i] + 4 - m, s[i], (size_t)m * sizeof *s[i]);
            for (int d = 0; d < 4 - m; d++) s[i][d] = 1;
            *nd[i] = 4;
        }
        for (int i = 0; i < 3; i++) {
            const int64_t c = s[i][1];
            s[i][1] = s[i][2], s[i][2] = s[i][3], s[i][3] = c;
        }
        return DL_OK;
    }
    if (g->kind == DL_OP_CHANNEL_SHUFFLE || g->kind == DL_OP_SLICE) { /* as they lie: [N, H, W, C] */
        int64_t *sh[2] = {g->xs, g->ys};
        for (int i = 0; i < 2; i++) {
            const int64_t c = sh[i][1];
            sh[i][1] = sh[i][2], sh[i][2] = sh[i][3], sh[i][3] = c;
        }
        for (int i = 0; i < g->a.n_axes && g->kind == DL_OP_SLICE; i++) { /* N, C, H, W -> 0, 3, 1, 2 */
            const int d = dl_axis_norm(g->a.axes[i], 4);
            g->a.axes[i] = d == 0 ? 0 : d == 1 ? 3 : d - 1;
        }
        return DL_OK;
    }
    if (g->kind == DL_OP_CONCAT) { /* along N, H, W or C of what lies in memory as [N, H, W, C] */
        const int64_t c = g->ys[1];
        g->ys[1] = g->ys[2], g->ys[2] = g->ys[3], g->ys[3] = c;
        g->a.axis = g->a.axis == 0 ? 0 : g->a.axis == 1 ? 3 : g->a.axis - 1;
        return DL_OK;
    }
    if (g->kind == DL_OP_BATCHNORM) { /* each channel's scale and shift, worked out once a run */
        if ((uint64_t)g->xs[1] > SIZE_MAX / 2 / sizeof(float)) return DL_E_NOMEM;
        k->workspace = 2 * (size_t)g->xs[1] * sizeof(float);
        return DL_OK;
    }
    if (g->kind != DL_OP_CONV2D) return DL_OK;
    const float *w = op->inputs[1].data;
    const int64_t m = g->ys[1], c = g->xs[1];
    const int64_t taps = (int64_t)g->a.kernel[0] * g->a.kernel[1];
    const int gw = group_width(op);
    if (gw && !is_depthwise(op)) {
        /* grouped: tap by tap, a group's input channel ci for every output channel, the channels
         * padded to whole vectors: packed[(tap * gw + ci) * cp + o] = w[o][ci][tap] */
        k->conv_mode = CONV_NHWC_GROUPED;
        const int64_t cp = (m + DW_LANES - 1) / DW_LANES * DW_LANES;
        if (cp > INT64_MAX / taps / gw) return DL_E_NOMEM;
        k->packed = calloc((size_t)(taps * gw * cp), sizeof(float));
        if (!k->packed) return DL_E_NOMEM;
        for (int64_t o = 0; o < m; o++)
            for (int64_t ci = 0; ci < gw; ci++)
                for (int64_t t = 0; t < taps; t++) k->packed[(t * gw + ci) * cp + o] = w[(o * gw + ci) * taps + t];
        return DL_OK;
    }
    const dl_op_attrs *a = &g->a;
    if (w && cpu_winograd_suits(a->kernel[0], a->kernel[1], a->stride[0], a->stride[1], a->dilation[0], a->dilation[1],
                                a->groups, (int)g->xs[0], (int)c, (int)m, (int)g->ys[2], (int)g->ys[3])) {
        if (!cpu_winograd_init(&k->wg, (int)g->xs[0], (int)c, (int)g->xs[2], (int)g->xs[3], (int)m, a->pad_begin[0],
                               a->pad_begin[1], (int)g->ys[2], (int)g->ys[3], w, 1))
            return DL_E_NOMEM;
        k->conv_mode = CONV_WINOGRAD;
        k->workspace = cpu_winograd_workspace(&k->wg);
        return DL_OK;
    }
    if (!is_depthwise(op) || g->a.groups == 1) {
        /* panels of PW_COLS filters, tap by tap: packed[((panel * taps + t) * c + ch) * PW_COLS + j] =
         * w[panel * PW_COLS + j][ch][t], then c zeros that the dense conv reads for taps outside the image */
        k->conv_mode = is_pointwise(op) ? CONV_GEMM_1X1 : CONV_NHWC_DENSE;
        if (k->conv_mode == CONV_NHWC_DENSE && dense_pads(g)) { /* the padded copy */
            const dense_in d = dense_input(g, NULL);
            if (d.h > INT64_MAX / d.w || d.h * d.w > INT64_MAX / c / g->xs[0] ||
                (uint64_t)(d.h * d.w * c * g->xs[0]) > SIZE_MAX / sizeof(float))
                return DL_E_NOMEM;
            k->workspace = (size_t)(d.h * d.w * c * g->xs[0]) * sizeof(float);
        }
        const int64_t panels = (m + PW_COLS - 1) / PW_COLS;
        if (panels > INT64_MAX / PW_COLS / taps / c - 1) return DL_E_NOMEM;
        k->packed = calloc((size_t)((panels * PW_COLS * taps + 1) * c), sizeof(float));
        if (!k->packed) return DL_E_NOMEM;
        for (int64_t o = 0; o < m; o++)
            for (int64_t ch = 0; ch < c; ch++)
                for (int64_t t = 0; t < taps; t++)
                    k->packed[((o / PW_COLS * taps + t) * c + ch) * PW_COLS + o % PW_COLS] = w[(o * c + ch) * taps + t];
        return DL_OK;
    }
    /* depthwise: tap by tap, the channels padded to whole vectors: packed[tap * cp + ch] */
    k->conv_mode = CONV_DEPTHWISE;
    const int64_t cp = (c + DW_LANES - 1) / DW_LANES * DW_LANES;
    if (cp > INT64_MAX / taps) return DL_E_NOMEM;
    k->packed = calloc((size_t)(taps * cp), sizeof(float));
    if (!k->packed) return DL_E_NOMEM;
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t t = 0; t < taps; t++) k->packed[t * cp + ch] = w[ch * taps + t];
    return DL_OK;
}

/* ---- 1x1 and dense convs: blocks of PW_ROWS pixels x PW_COLS filters ---- */

/* One tap added to a block (a 1x1 conv has one): pixel r's c channels at xr[r] (a row of zeros
 * where the tap falls outside the image, or past a partial last block) times the tap's c x
 * PW_COLS weights; `halves` 1: only the first VW filters (a last panel with no more), else all */
static inline __attribute__((always_inline)) void tap_block(const float *const xr[PW_ROWS], int64_t c, const float *wp,
                                                            int halves, vw acc[PW_ROWS][2]) {
    if (halves == 1) {
        for (int64_t ch = 0; ch < c; ch++) {
            const vw w0 = loadw(wp + ch * PW_COLS);
            for (int r = 0; r < PW_ROWS; r++) acc[r][0] = fmaw(splatw(xr[r][ch]), w0, acc[r][0]);
        }
        return;
    }
    for (int64_t ch = 0; ch < c; ch++) {
        const vw w0 = loadw(wp + ch * PW_COLS), w1 = loadw(wp + ch * PW_COLS + VW);
        for (int r = 0; r < PW_ROWS; r++) {
            const vw xv = splatw(xr[r][ch]);
            acc[r][0] = fmaw(xv, w0, acc[r][0]);
            acc[r][1] = fmaw(xv, w1, acc[r][1]);
        }
    }
}

/* Where a conv's blocks go: bias, fused residual, activation, the output (m channels a pixel) */
typedef struct pw_out {
    const float *bias, *res;
    float *y;
    int64_t m;
    int in_registers; /* none, relu and clip: a clamp to [lo, hi] applied in registers */
    vw lo, hi;
    const dl_op_attrs *a;
} pw_out;

static pw_out pw_out_init(const dl_kernel *k, const dl_tensor *in, float *y) {
    const dl_op_geom *g = &k->g;
    const int act = g->a.activation;
    return (pw_out){.bias = g->has_bias ? in[2].data : NULL,
                    .res = g->residual ? in[g->residual].data : NULL,
                    .y = y,
                    .m = g->ys[1],
                    .in_registers = act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP,
                    .lo = splatw(act == DL_ACT_RELU   ? 0.0f
                                 : act == DL_ACT_CLIP ? g->a.clip_min
                                                      : -__builtin_inff()),
                    .hi = splatw(act == DL_ACT_CLIP ? g->a.clip_max : __builtin_inff()),
                    .a = &g->a};
}

/* The filters of panel q: PW_COLS, or fewer in the last panel */
static inline int panel_cols(int64_t m, int64_t q) {
    return (int)(m - q * PW_COLS < PW_COLS ? m - q * PW_COLS : PW_COLS);
}

/* Bias, residual, activation and store of the block of `rows` pixels from output pixel p, filters
 * of panel q */
static inline __attribute__((always_inline)) void pw_finish(const pw_out *o, vw acc[PW_ROWS][2], int rows, int64_t p,
                                                            int64_t q) {
    const int64_t m = o->m, at = p * m + q * PW_COLS;
    const int cols = panel_cols(m, q);
    const float *bias = o->bias ? o->bias + q * PW_COLS : NULL, *res = o->res ? o->res + at : NULL;
    float *y = o->y + at;
    if (cols == PW_COLS && o->in_registers) { /* the common case: from the registers to y */
        const vw b0 = bias ? loadw(bias) : splatw(0), b1 = bias ? loadw(bias + VW) : splatw(0);
        for (int r = 0; r < rows; r++) {
            vw v0 = acc[r][0] + b0, v1 = acc[r][1] + b1;
            if (res) v0 += loadw(res + r * m), v1 += loadw(res + r * m + VW);
            storew(y + r * m, clampw(v0, o->lo, o->hi));
            storew(y + r * m + VW, clampw(v1, o->lo, o->hi));
        }
        return;
    }
    float t[PW_ROWS * PW_COLS] __attribute__((aligned(64)));
    float bb[PW_COLS] = {0};
    if (bias) memcpy(bb, bias, (size_t)cols * sizeof(float));
    const vw b0 = loadw(bb), b1 = loadw(bb + VW);
    for (int r = 0; r < rows; r++) {
        storew(t + r * PW_COLS, acc[r][0] + b0);
        storew(t + r * PW_COLS + VW, acc[r][1] + b1);
    }
    if (res)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++) t[r * PW_COLS + j] += res[r * m + j];
    if (o->in_registers)
        for (int i = 0; i < rows * PW_COLS; i += VW) storew(t + i, clampw(loadw(t + i), o->lo, o->hi));
    else cpu_activate_rows16(t, rows * PW_COLS / 16, o->a);
    for (int r = 0; r < rows; r++) memcpy(y + r * m, t + r * PW_COLS, (size_t)cols * sizeof(float));
}

/* The lines of the next block (pixels p ..) at panel q's filters: its residual's, to read, and its
 * output's, to write (addresses only: a last panel's may run past its row). Only for a conv with a
 * residual: ResNet-50 batch 8's layer3 residual convs 1.09-1.16x; on the convs without one, the
 * output's alone made some 6 % slower. */
static inline __attribute__((always_inline)) void pw_prefetch_next(const pw_out *o, int64_t pixels, int64_t p,
                                                                   int64_t q) {
    for (int r = 0; r < PW_ROWS && p + r < pixels; r++) {
        const int64_t at = (p + r) * o->m + q * PW_COLS;
        __builtin_prefetch(o->res + at, 0, 3);
        __builtin_prefetch(o->res + at + PW_COLS - 1, 0, 3);
        __builtin_prefetch(o->y + at, 1, 3);
        __builtin_prefetch(o->y + at + PW_COLS - 1, 1, 3);
    }
}

/* One block of PW_ROWS pixels from pixel p (fewer at the end of the map) times panel q */
static inline __attribute__((always_inline)) void pw_block(const dl_kernel *k, const pw_out *o, const float *x,
                                                           int64_t pixels, int64_t p, int64_t q) {
    const int64_t c = k->g.xs[1], panels = (o->m + PW_COLS - 1) / PW_COLS;
    const int rows = (int)(pixels - p < PW_ROWS ? pixels - p : PW_ROWS);
    const float *xr[PW_ROWS], *zero = k->packed + panels * PW_COLS * c; /* the row of zeros after the weight */
    for (int r = 0; r < PW_ROWS; r++) xr[r] = r < rows ? x + (p + r) * c : zero;
    vw acc[PW_ROWS][2];
    for (int r = 0; r < PW_ROWS; r++) acc[r][0] = acc[r][1] = splatw(0);
    if (panel_cols(o->m, q) > VW) tap_block(xr, c, k->packed + q * c * PW_COLS, 2, acc);
    else tap_block(xr, c, k->packed + q * c * PW_COLS, 1, acc);
    pw_finish(o, acc, rows, p, q);
}

/* The 1x1 conv: a product of the pixels (rows of c channels, in place) and the packed weight,
 * shared out so that no thread waits on another's extra blocks (7x7 maps: 49 pixels, 9 blocks;
 * tasks of 8 blocks gave one thread 8 and the other 1). Many blocks (16 a thread or more): a
 * whole number of tasks a thread, each of about 8 blocks, running every panel on each block (its
 * pixels read once, from L1, for all panels). Fewer: tasks of one panel and one block, panel by
 * panel, so that the threads' shares differ by one task at most and each thread keeps its
 * panels' weights in cache across the blocks (small maps, where the weights are largest). */
static void pointwise(const dl_kernel *k, const dl_tensor *in, float *y) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int64_t c = g->xs[1], m = g->ys[1], pixels = g->xs[0] * g->xs[2] * g->xs[3];
    const int64_t blocks = (pixels + PW_ROWS - 1) / PW_ROWS, panels = (m + PW_COLS - 1) / PW_COLS;
    const int64_t threads = k->threads > 1 ? k->threads : 1;
    const pw_out o = pw_out_init(k, in, y);
    if (pixels + 5 < PW_FEW_PIXELS * threads) {
        CPU_FOR(pixels * m * c, t, panels * blocks, pw_block(k, &o, x, pixels, t % blocks * PW_ROWS, t / blocks););
        return;
    }
    int64_t tasks = (blocks + PW_CHUNK_BLOCKS - 1) / PW_CHUNK_BLOCKS;
    tasks = (tasks + threads - 1) / threads * threads;
    CPU_FOR(pixels * m * c, t, tasks, {
        for (int64_t b = t * blocks / tasks; b < (t + 1) * blocks / tasks; b++) /* a block read once for all panels */
            for (int64_t q = 0; q < panels; q++) {
                pw_block(k, &o, x, pixels, b * PW_ROWS, q);
                if (o.res) pw_prefetch_next(&o, pixels, (b + 1) * PW_ROWS, q);
            }
    });
}

/* Output pixels p .. p + rows - 1 of a dense conv (counted over images, rows and columns) times
 * panel q. Where the block lies in one output row, its windows share their rows of taps: rows of
 * taps above or below the image are skipped, and where all its windows lie inside the image's
 * columns (and no dilation across them), a row of a window is kw * c consecutive floats, one run
 * of the product. Elsewhere each tap of each pixel on its own, a row of zeros standing in for taps
 * outside the image and for the missing pixels of a partial block. */
static inline __attribute__((always_inline)) void dense_block_halves(const dl_kernel *k, const dense_in *in,
                                                                     const pw_out *o, int64_t p, int rows, int64_t q,
                                                                     int halves) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const float *x = in->x;
    const int64_t c = g->xs[1], h = in->h, w = in->w, oh = g->ys[2], ow = g->ys[3];
    const int64_t kh = a->kernel[0], kw = a->kernel[1], taps = kh * kw, panels = (o->m + PW_COLS - 1) / PW_COLS;
    const int64_t sh = a->stride[0], sw = a->stride[1], pt = in->pt, pl = in->pl;
    const int64_t dh = a->dilation[0], dw = a->dilation[1], ox = p % ow;
    const float *zero = k->packed + panels * PW_COLS * taps * c, *wq = k->packed + q * taps * c * PW_COLS;
    const float *xr[PW_ROWS];
    vw acc[PW_ROWS][2];
    for (int r = 0; r < PW_ROWS; r++) acc[r][0] = acc[r][1] = splatw(0);
    if (ox + rows <= ow) { /* one output row */
        const float *xn = x + p / (ow * oh) * h * w * c;
        const int64_t iy0 = p / ow % oh * sh - pt;
        const int runs = (dw == 1 || kw == 1) && ox * sw - pl >= 0 && (ox + rows - 1) * sw - pl + (kw - 1) * dw < w;
        for (int64_t i = 0; i < kh; i++) {
            const int64_t iy = iy0 + i * dh;
            if (iy < 0 || iy >= h) continue;
            const float *wp = wq + i * kw * c * PW_COLS;
            if (runs) { /* a partial block's missing pixels read its last one's run again (not stored) */
                for (int r = 0; r < PW_ROWS; r++)
                    xr[r] = xn + (iy * w + (ox + (r < rows ? r : rows - 1)) * sw - pl) * c;
                tap_block(xr, kw * c, wp, halves, acc);
                continue;
            }
            for (int64_t j = 0; j < kw; j++) {
                for (int r = 0; r < PW_ROWS; r++) {
                    const int64_t ix = (ox + r) * sw - pl + j * dw;
                    xr[r] = r < rows && ix >= 0 && ix < w ? xn + (iy * w + ix) * c : zero;
                }
                tap_block(xr, c, wp + j * c * PW_COLS, halves, acc);
            }
        }
    } else { /* across output rows (small maps): each pixel's window on its own */
        const float *xn[PW_ROWS];
        int64_t iy0[PW_ROWS], ix0[PW_ROWS];
        for (int r = 0; r < rows; r++) {
            const int64_t pr = p + r;
            xn[r] = x + pr / (ow * oh) * h * w * c, iy0[r] = pr / ow % oh * sh - pt, ix0[r] = pr % ow * sw - pl;
        }
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) {
                for (int r = 0; r < PW_ROWS; r++) {
                    const int64_t iy = r < rows ? iy0[r] + i * dh : -1, ix = r < rows ? ix0[r] + j * dw : -1;
                    xr[r] = iy >= 0 && iy < h && ix >= 0 && ix < w ? xn[r] + (iy * w + ix) * c : zero;
                }
                tap_block(xr, c, wq + (i * kw + j) * c * PW_COLS, halves, acc);
            }
    }
    pw_finish(o, acc, rows, p, q);
}

/* dense_block_halves with the halves its panel has: a last panel of VW filters or fewer sums one
 * vector a pixel */
static void dense_block(const dl_kernel *k, const dense_in *x, const pw_out *o, int64_t p, int rows, int64_t q) {
    if (panel_cols(o->m, q) > VW) dense_block_halves(k, x, o, p, rows, q, 2);
    else dense_block_halves(k, x, o, p, rows, q, 1);
}

/* x with its padding written out as zeros, into ws: [N][H + pads][W + pads][C] */
static void pad_copy(const dl_kernel *k, const float *x, float *ws) {
    const dl_op_geom *g = &k->g;
    const dense_in d = dense_input(g, ws);
    const int64_t c = g->xs[1], h = g->xs[2], w = g->xs[3], pt = g->a.pad_begin[0], pl = g->a.pad_begin[1];
    const int64_t ph = d.h, pw = d.w, rows = g->xs[0] * ph;
    CPU_FOR(rows * pw * c, r, rows, {
        const int64_t n = r / ph, iy = r % ph - pt;
        float *dst = ws + r * pw * c;
        if (iy < 0 || iy >= h) {
            memset(dst, 0, (size_t)(pw * c) * sizeof(float));
        } else {
            memset(dst, 0, (size_t)(pl * c) * sizeof(float));
            memcpy(dst + pl * c, x + (n * h + iy) * w * c, (size_t)(w * c) * sizeof(float));
            memset(dst + (pl + w) * c, 0, (size_t)((pw - pl - w) * c) * sizeof(float));
        }
    });
}

/* A dense conv. Maps of 16 columns or more and 16 rows a thread or more: a task per output row,
 * panel by panel (a panel's weights stay in L1 along the row), blocks of PW_ROWS pixels within
 * the row. Otherwise: blocks running on across rows and images (7 pixels a row at 7x7 in blocks
 * of 6 made two blocks, one of them with 1 pixel in 6), a task per panel and block, panel by panel, so
 * that the threads' shares differ by one task at most and each keeps its panels' weights in
 * cache. */
static void dense(const dl_kernel *k, const dl_tensor *in, float *y, float *ws) {
    const dl_op_geom *g = &k->g;
    const int padded = dense_pads(g);
    if (padded) pad_copy(k, in[0].data, ws);
    const dense_in xin = dense_input(g, padded ? ws : in[0].data), *x = &xin;
    const pw_out o = pw_out_init(k, in, y);
    const int64_t ow = g->ys[3], rows = g->ys[0] * g->ys[2], pixels = rows * ow;
    const int64_t panels = (g->ys[1] + PW_COLS - 1) / PW_COLS, blocks = (pixels + PW_ROWS - 1) / PW_ROWS;
    const int64_t work = g->numel * g->a.kernel[0] * g->a.kernel[1] * g->xs[1];
    const int64_t threads = k->threads > 1 ? k->threads : 1;
    if (ow < 16 || rows < 16 * threads) {
        CPU_FOR(work, t, panels * blocks, {
            const int64_t p = t % blocks * PW_ROWS;
            dense_block(k, x, &o, p, (int)(pixels - p < PW_ROWS ? pixels - p : PW_ROWS), t / blocks);
        });
        return;
    }
    CPU_FOR(work, r, rows, {
        for (int64_t q = 0; q < panels; q++)
            for (int64_t ox = 0; ox < ow; ox += PW_ROWS)
                dense_block(k, x, &o, r * ow + ox, (int)(ow - ox < PW_ROWS ? ow - ox : PW_ROWS), q);
    });
}

/* ---- depthwise conv ---- */

/* The depthwise conv's geometry for one output row */
typedef struct dw_row {
    const float *x, *bias, *wt; /* image n, the bias (or NULL), the packed weight */
    int64_t c, cp, w, kw, sw, dw, pl, iy0, i0, i1, dh, kh;
} dw_row;

/* The taps [*t0, *t1) of a window of n taps, d apart from position at, that fall inside [0, len) */
static void taps_inside(int64_t at, int64_t n, int64_t d, int64_t len, int64_t *t0, int64_t *t1) {
    int64_t lo = 0, hi = n;
    while (lo < hi && at + lo * d < 0) lo++;
    while (hi > lo && at + (hi - 1) * d >= len) hi--;
    *t0 = lo, *t1 = hi;
}

/* Channels ch .. ch + n - 1 of one output pixel, its taps checked against the image's edges (bias
 * included, no activation). The packed weight's rows are whole vectors (cp), so they load whole. */
static inline __attribute__((always_inline)) void dw_pixel_lanes(const dw_row *r, int64_t ix0, int64_t j0, int64_t j1,
                                                                 int64_t ch, int n, float *yp) {
    const int64_t c = r->c;
    vw acc = r->bias ? load_lanes(r->bias + ch, n) : splatw(0);
    for (int64_t i = r->i0; i < r->i1; i++)
        for (int64_t j = j0; j < j1; j++)
            acc = fmaw(load_lanes(r->x + ((r->iy0 + i * r->dh) * r->w + ix0 + j * r->dw) * c + ch, n),
                       loadw(r->wt + (i * r->kw + j) * r->cp + ch), acc);
    store_lanes(yp + ch, acc, n);
}

/* One output pixel, its taps checked against the image's edges */
static void dw_pixel(const dw_row *r, int64_t ox, float *yp) {
    const int64_t ix0 = ox * r->sw - r->pl, c = r->c;
    int64_t j0, j1, ch = 0;
    taps_inside(ix0, r->kw, r->dw, r->w, &j0, &j1);
    for (; ch + DW_LANES <= c; ch += DW_LANES) dw_pixel_lanes(r, ix0, j0, j1, ch, DW_LANES, yp);
    if (ch < c) dw_pixel_lanes(r, ix0, j0, j1, ch, (int)(c - ch), yp);
}

/* Channels ch .. ch + n - 1 of four neighbouring output pixels whose taps all lie inside the
 * image's columns: each tap's weights loaded once for the four, four independent sums in flight */
static inline __attribute__((always_inline)) void dw_four_lanes(const dw_row *r, int64_t ox, int64_t ch, int n,
                                                                float *yp) {
    const int64_t c = r->c, step = r->sw * c;
    const vw b = r->bias ? load_lanes(r->bias + ch, n) : splatw(0);
    vw s0 = b, s1 = b, s2 = b, s3 = b;
    for (int64_t i = r->i0; i < r->i1; i++) {
        const float *xr = r->x + ((r->iy0 + i * r->dh) * r->w + ox * r->sw - r->pl) * c + ch;
        const float *wr = r->wt + i * r->kw * r->cp + ch;
        for (int64_t j = 0; j < r->kw; j++) {
            const vw wv = loadw(wr + j * r->cp);
            const float *xp = xr + j * r->dw * c;
            s0 = fmaw(load_lanes(xp, n), wv, s0);
            s1 = fmaw(load_lanes(xp + step, n), wv, s1);
            s2 = fmaw(load_lanes(xp + 2 * step, n), wv, s2);
            s3 = fmaw(load_lanes(xp + 3 * step, n), wv, s3);
        }
    }
    store_lanes(yp + ch, s0, n), store_lanes(yp + c + ch, s1, n);
    store_lanes(yp + 2 * c + ch, s2, n), store_lanes(yp + 3 * c + ch, s3, n);
}

static void dw_four(const dw_row *r, int64_t ox, float *yp) {
    const int64_t c = r->c;
    int64_t ch = 0;
    for (; ch + DW_LANES <= c; ch += DW_LANES) dw_four_lanes(r, ox, ch, DW_LANES, yp);
    if (ch < c) dw_four_lanes(r, ox, ch, (int)(c - ch), yp);
}

/* The depthwise conv's pixels of an output row: those with taps past the image's left or right
 * edge one at a time, the others four at a time */
static void dw_pixels(const dw_row *r, int64_t lo, int64_t hi, int64_t ow, float *yr) {
    const int64_t c = r->c;
    int64_t ox = 0;
    for (; ox < lo; ox++) dw_pixel(r, ox, yr + ox * c);
    for (; ox + 4 <= hi; ox += 4) dw_four(r, ox, yr + ox * c);
    for (; ox < ow; ox++) dw_pixel(r, ox, yr + ox * c);
}

/* ---- depthwise conv in register blocks (AVX-512 builds) ----
 * For the windows MobileNet, EfficientNet and ConvNeXt take (kw 3, 5 or 7 taps a row, stride 1
 * or 2, no dilation along the row): a block of DW_PIX neighbouring output pixels x VW channels of
 * one output row, or of two (rows oy and oy + 1 where the stride and dilation down are 1: the
 * rows they share are read once for both), its sums in registers over the window. 7 independent
 * sums a row (14 for two; 7 pixels: MobileNet's maps of 7 x 2^k split into whole blocks) keep both
 * FMA pipes busy, where dw_four's 4 waited on each other. Bias, residual and relu/clip are applied in registers, the
 * other activations over the rows after them. Blocks reaching past the image's columns (or the
 * row's end) read zeros there and store their pixels inside the row only. With AVX2's 16
 * registers the sums spill, so those builds keep dw_four. docs/performance.md has the figures. */
#define DW_BLOCKED (VW == 16)
#define DW_PIX 7 /* output pixels a block */
/* input vectors a block's window row spans at most: 6 x 2 + 7 (stride 2, 7 taps) */
#define DW_MAX_COLS ((DW_PIX - 1) * 2 + 7)

/* Whether a depthwise conv runs in register blocks */
static int dw_blocked(const dl_op_attrs *a) {
    return DW_BLOCKED && a->dilation[1] == 1 && (a->kernel[1] == 3 || a->kernel[1] == 5 || a->kernel[1] == 7) &&
           (a->stride[1] == 1 || a->stride[1] == 2);
}

/* The block's sums, one variable each (GCC kept an array of them in memory across the window's
 * rows): s for row oy, u for row oy + 1 */
#define DW_EACH(X) X(0, s0, u0) X(1, s1, u1) X(2, s2, u2) X(3, s3, u3) X(4, s4, u4) X(5, s5, u5) X(6, s6, u6)

/* The block of output pixels ox .. ox + DW_PIX - 1, channels ch .. ch + n - 1, of row oy (and of
 * row oy + 1 where TWO); KW, SW, TWO and edge constants. The window rows read are r->iy0 + t x
 * r->dh for t in [r->i0, r->i1): row oy takes the weights' row t, row oy + 1 their row t - 1.
 * edge: columns outside the image read as zeros, and only the first `keep` pixels are stored.
 * res: the residual at row oy's start, or NULL; `next` floats on, row oy + 1's (of y as of res). */
static inline __attribute__((always_inline)) void dw_block(const dw_row *r, int64_t ox, int64_t ch, int n, const int KW,
                                                           const int SW, const int TWO, const int edge, int keep,
                                                           const float *res, int64_t next, const pw_out *o, float *yr) {
    const int P = DW_PIX, NX = (P - 1) * SW + KW;
    const int64_t c = r->c, cp = r->cp, w = r->w, ix0 = ox * SW - r->pl, kh = r->kh, t1 = r->i1;
    const float *const wt = r->wt + ch, *xr = r->x + (r->iy0 + r->i0 * r->dh) * w * c + ix0 * c + ch;
    const int64_t down = r->dh * w * c;
    const vw b = r->bias ? load_lanes(r->bias + ch, n) : splatw(0);
    vw s0 = b, s1 = b, s2 = b, s3 = b, s4 = b, s5 = b, s6 = b;
    vw u0 = b, u1 = b, u2 = b, u3 = b, u4 = b, u5 = b, u6 = b;
    for (int64_t t = r->i0; t < t1; t++, xr += down) {
        vw xv[DW_MAX_COLS];
        for (int q = 0; q < NX; q++)
            xv[q] = !edge || (ix0 + q >= 0 && ix0 + q < w) ? load_lanes(xr + q * c, n) : splatw(0);
        if (!TWO || t < kh)
            for (int j = 0; j < KW; j++) {
                const vw wv = loadw(wt + (t * KW + j) * cp);
#define DW_FMA(p, s, u) s = fmaw(xv[p * SW + j], wv, s);
                DW_EACH(DW_FMA)
#undef DW_FMA
            }
        if (TWO && t >= 1)
            for (int j = 0; j < KW; j++) {
                const vw wv = loadw(wt + ((t - 1) * KW + j) * cp);
#define DW_FMA(p, s, u) u = fmaw(xv[p * SW + j], wv, u);
                DW_EACH(DW_FMA)
#undef DW_FMA
            }
    }
#define DW_STORE(p, s, u)                                                                  \
    if (!edge || p < keep) {                                                               \
        const int64_t at = (ox + p) * c + ch;                                              \
        if (res) s += load_lanes(res + at, n);                                             \
        store_lanes(yr + at, o->in_registers ? clampw(s, o->lo, o->hi) : s, n);            \
        if (TWO) {                                                                         \
            if (res) u += load_lanes(res + next + at, n);                                  \
            store_lanes(yr + next + at, o->in_registers ? clampw(u, o->lo, o->hi) : u, n); \
        }                                                                                  \
    }
    DW_EACH(DW_STORE)
#undef DW_STORE
}
#undef DW_EACH

/* A row's (or two rows') blocks, for all their channels */
static inline __attribute__((always_inline)) void dw_blocks_of(const dw_row *r, int64_t ow, const float *res,
                                                               const pw_out *o, float *yr, const int KW, const int SW,
                                                               const int TWO) {
    const int P = DW_PIX, NX = (P - 1) * SW + KW;
    const int64_t c = r->c, next = ow * c;
    for (int64_t ox = 0; ox < ow; ox += P) {
        const int64_t ix0 = ox * SW - r->pl;
        const int keep = (int)(ow - ox < P ? ow - ox : P), inside = ix0 >= 0 && ix0 + NX <= r->w && keep == P;
        int64_t ch = 0;
        if (inside) {
            for (; ch + VW <= c; ch += VW) dw_block(r, ox, ch, VW, KW, SW, TWO, 0, P, res, next, o, yr);
            if (ch < c) dw_block(r, ox, ch, (int)(c - ch), KW, SW, TWO, 0, P, res, next, o, yr);
        } else {
            for (; ch + VW <= c; ch += VW) dw_block(r, ox, ch, VW, KW, SW, TWO, 1, keep, res, next, o, yr);
            if (ch < c) dw_block(r, ox, ch, (int)(c - ch), KW, SW, TWO, 1, keep, res, next, o, yr);
        }
    }
}

/* Output row oy (two: and oy + 1) in register blocks (dw_blocked), one copy of the loops for
 * each window */
static void dw_blocks(const dw_row *r, int two, int64_t ow, const float *res, const pw_out *o, float *yr) {
#define DW_WINDOWS(TWO)                                         \
    switch (r->kw * 2 + r->sw) {                                \
    case 7: dw_blocks_of(r, ow, res, o, yr, 3, 1, TWO); break;  \
    case 8: dw_blocks_of(r, ow, res, o, yr, 3, 2, TWO); break;  \
    case 11: dw_blocks_of(r, ow, res, o, yr, 5, 1, TWO); break; \
    case 12: dw_blocks_of(r, ow, res, o, yr, 5, 2, TWO); break; \
    case 15: dw_blocks_of(r, ow, res, o, yr, 7, 1, TWO); break; \
    default: dw_blocks_of(r, ow, res, o, yr, 7, 2, TWO);        \
    }
    if (two) DW_WINDOWS(1)
    else DW_WINDOWS(0)
#undef DW_WINDOWS
}

/* ---- grouped conv of 2 or 4 channels a group ----
 * As the depthwise conv, VW output channels at a time (whole groups: the width divides VW), but
 * each output channel sums its group's gw input channels: per tap, the pixel's VW input channels
 * are loaded once and input channel ci of each group is spread over its group's lanes (a
 * permutation), times the packed weights of ci; gw sums in flight, added at the end. */

/* Channel ci of each group of gw lanes spread over that group's lanes (gw 2 or 4), as constant
 * shuffles (GCC and clang alike); the callers' constant gw and unrolled ci pick one */
#if VW == 16
#define SPREAD4(ci) \
    ci, ci, ci, ci, 4 + ci, 4 + ci, 4 + ci, 4 + ci, 8 + ci, 8 + ci, 8 + ci, 8 + ci, 12 + ci, 12 + ci, 12 + ci, 12 + ci
#define SPREAD2(ci)                                                                                             \
    ci, ci, 2 + ci, 2 + ci, 4 + ci, 4 + ci, 6 + ci, 6 + ci, 8 + ci, 8 + ci, 10 + ci, 10 + ci, 12 + ci, 12 + ci, \
        14 + ci, 14 + ci
#else
#define SPREAD4(ci) ci, ci, ci, ci, 4 + ci, 4 + ci, 4 + ci, 4 + ci
#define SPREAD2(ci) ci, ci, 2 + ci, 2 + ci, 4 + ci, 4 + ci, 6 + ci, 6 + ci
#endif
static inline __attribute__((always_inline)) vw spread(vw x, int gw, int ci) {
    if (gw == 2) return ci == 0 ? __builtin_shufflevector(x, x, SPREAD2(0)) : __builtin_shufflevector(x, x, SPREAD2(1));
    switch (ci) {
    case 0: return __builtin_shufflevector(x, x, SPREAD4(0));
    case 1: return __builtin_shufflevector(x, x, SPREAD4(1));
    case 2: return __builtin_shufflevector(x, x, SPREAD4(2));
    default: return __builtin_shufflevector(x, x, SPREAD4(3));
    }
}
#undef SPREAD4
#undef SPREAD2

static inline __attribute__((always_inline)) void gr_pixel_lanes(const dw_row *r, int gw, int64_t ix0, int64_t j0,
                                                                 int64_t j1, int64_t ch, int n, float *yp) {
    const int64_t c = r->c;
    vw acc[4];
    for (int ci = 0; ci < gw; ci++) acc[ci] = splatw(0);
    for (int64_t i = r->i0; i < r->i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            const vw xv = load_lanes(r->x + ((r->iy0 + i * r->dh) * r->w + ix0 + j * r->dw) * c + ch, n);
            const float *wt = r->wt + (i * r->kw + j) * gw * r->cp + ch;
            for (int ci = 0; ci < gw; ci++) acc[ci] = fmaw(spread(xv, gw, ci), loadw(wt + ci * r->cp), acc[ci]);
        }
    vw sum = r->bias ? load_lanes(r->bias + ch, n) : splatw(0);
    for (int ci = 0; ci < gw; ci++) sum += acc[ci];
    store_lanes(yp + ch, sum, n);
}

static inline __attribute__((always_inline)) void gr_pixel(const dw_row *r, int gw, int64_t ox, float *yp) {
    const int64_t ix0 = ox * r->sw - r->pl, c = r->c;
    int64_t j0, j1, ch = 0;
    taps_inside(ix0, r->kw, r->dw, r->w, &j0, &j1);
    for (; ch + DW_LANES <= c; ch += DW_LANES) gr_pixel_lanes(r, gw, ix0, j0, j1, ch, DW_LANES, yp);
    if (ch < c) gr_pixel_lanes(r, gw, ix0, j0, j1, ch, (int)(c - ch), yp);
}

/* Channels ch .. ch + n - 1 of four neighbouring output pixels whose taps all lie inside the
 * image's columns: each weight vector loaded once for the four, eight sums in flight (two a
 * pixel: even and odd input channels of the group) */
static inline __attribute__((always_inline)) void gr_four_lanes(const dw_row *r, int gw, int64_t ox, int64_t ch, int n,
                                                                float *yp) {
    const int64_t c = r->c, step = r->sw * c;
    vw s[4][2];
    for (int p = 0; p < 4; p++) s[p][0] = s[p][1] = splatw(0);
    for (int64_t i = r->i0; i < r->i1; i++) {
        const float *xr = r->x + ((r->iy0 + i * r->dh) * r->w + ox * r->sw - r->pl) * c + ch;
        for (int64_t j = 0; j < r->kw; j++) {
            const float *wt = r->wt + (i * r->kw + j) * gw * r->cp + ch, *xp = xr + j * r->dw * c;
            const vw x0 = load_lanes(xp, n), x1 = load_lanes(xp + step, n), x2 = load_lanes(xp + 2 * step, n),
                     x3 = load_lanes(xp + 3 * step, n);
            for (int ci = 0; ci < gw; ci++) {
                const vw wv = loadw(wt + ci * r->cp);
                s[0][ci & 1] = fmaw(spread(x0, gw, ci), wv, s[0][ci & 1]);
                s[1][ci & 1] = fmaw(spread(x1, gw, ci), wv, s[1][ci & 1]);
                s[2][ci & 1] = fmaw(spread(x2, gw, ci), wv, s[2][ci & 1]);
                s[3][ci & 1] = fmaw(spread(x3, gw, ci), wv, s[3][ci & 1]);
            }
        }
    }
    const vw b = r->bias ? load_lanes(r->bias + ch, n) : splatw(0);
    for (int p = 0; p < 4; p++) store_lanes(yp + p * c + ch, s[p][0] + s[p][1] + b, n);
}

static inline __attribute__((always_inline)) void gr_four(const dw_row *r, int gw, int64_t ox, float *yp) {
    const int64_t c = r->c;
    int64_t ch = 0;
    for (; ch + DW_LANES <= c; ch += DW_LANES) gr_four_lanes(r, gw, ox, ch, DW_LANES, yp);
    if (ch < c) gr_four_lanes(r, gw, ox, ch, (int)(c - ch), yp);
}

/* The row's pixels: those with taps past the image's left or right edge one at a time, the others
 * four at a time */
static inline __attribute__((always_inline)) void gr_pixels(const dw_row *r, int gw, int64_t lo, int64_t hi, int64_t ow,
                                                            float *yr) {
    const int64_t c = r->c;
    int64_t ox = 0;
    for (; ox < lo; ox++) gr_pixel(r, gw, ox, yr + ox * c);
    for (; ox + 4 <= hi; ox += 4) gr_four(r, gw, ox, yr + ox * c);
    for (; ox < ow; ox++) gr_pixel(r, gw, ox, yr + ox * c);
}

/* Whether a depthwise conv's output rows go two at a time (dw_blocks) */
static int dw_pairs(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    return k->conv_mode == CONV_DEPTHWISE && dw_blocked(a) && a->stride[0] == 1 && a->dilation[0] == 1;
}

/* Output row oy of image n of a depthwise or grouped conv (one copy of the grouped loops for each
 * group width), then its residual and activation over the whole row at once; `rows` 2: rows oy
 * and oy + 1 (dw_pairs) */
static void window_row(const dl_kernel *k, const dl_tensor *in, float *y, int64_t n, int64_t oy, int rows) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const int64_t c = g->xs[1], h = g->xs[2], w = g->xs[3], ow = g->ys[3];
    dw_row r = {.x = (const float *)in[0].data + n * h * w * c,
                .bias = g->has_bias ? in[2].data : NULL,
                .wt = k->packed,
                .c = c,
                .cp = (c + DW_LANES - 1) / DW_LANES * DW_LANES,
                .w = w,
                .kw = a->kernel[1],
                .sw = a->stride[1],
                .dw = a->dilation[1],
                .pl = a->pad_begin[1],
                .iy0 = oy * a->stride[0] - a->pad_begin[0],
                .dh = a->dilation[0],
                .kh = a->kernel[0]};
    /* the window rows inside the image: row oy's taps, or two rows' kh + 1 (dilation 1) */
    taps_inside(r.iy0, a->kernel[0] + rows - 1, r.dh, h, &r.i0, &r.i1);
    const int64_t at = (n * g->ys[2] + oy) * ow * c;
    float *yr = y + at;
    const float *res = g->residual ? (const float *)in[g->residual].data + at : NULL;
    if (k->conv_mode == CONV_DEPTHWISE && dw_blocked(a)) {
        const pw_out o = pw_out_init(k, in, y);
        dw_blocks(&r, rows == 2, ow, res, &o, yr);
        if (!o.in_registers) cpu_bias_act(yr, rows * ow * c, 0.0f, a);
        return;
    }
    /* the columns [lo, hi) whose every tap is inside the image */
    int64_t lo = (r.pl + r.sw - 1) / r.sw, hi = (w - 1 - (r.kw - 1) * r.dw + r.pl) / r.sw + 1;
    if (w - 1 - (r.kw - 1) * r.dw + r.pl < 0) hi = 0;
    if (hi > ow) hi = ow;
    if (lo > hi) lo = hi;
    if (k->conv_mode == CONV_DEPTHWISE) dw_pixels(&r, lo, hi, ow, yr);
    else if (c / a->groups == 2) gr_pixels(&r, 2, lo, hi, ow, yr);
    else gr_pixels(&r, 4, lo, hi, ow, yr);
    if (res || a->activation != DL_ACT_NONE) cpu_bias_res_act(yr, res, ow * c, 0.0f, a);
}

void cpu_conv2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y, void *workspace) {
    const dl_op_geom *g = &k->g;
    if (k->conv_mode == CONV_GEMM_1X1) {
        pointwise(k, in, y);
        return;
    }
    if (k->conv_mode == CONV_NHWC_DENSE) {
        dense(k, in, y, workspace);
        return;
    }
    /* a task's work: the taps a channel sums, times its group's channels for a grouped conv */
    const int64_t per = k->conv_mode == CONV_NHWC_GROUPED ? g->xs[1] / g->a.groups : 1,
                  work = g->numel * (int64_t)g->a.kernel[0] * g->a.kernel[1] * per;
    if (dw_pairs(k)) { /* a task: two output rows of an image (its last one alone where they are odd) */
        const int64_t oh = g->ys[2], pairs = (oh + 1) / 2;
        CPU_FOR(work, t, g->ys[0] * pairs, {
            const int64_t oy = t % pairs * 2;
            window_row(k, in, y, t / pairs, oy, oy + 1 < oh ? 2 : 1);
        });
        return;
    }
    CPU_FOR(work, r, g->ys[0] * g->ys[2], window_row(k, in, y, r / g->ys[2], r % g->ys[2], 1););
}

/* ---- max pooling: each output pixel's window, VW channels at a time, NaN winning as in NCHW ---- */

/* Channels ch .. ch + n - 1 of one output pixel: the max over its window's taps inside the image */
static inline __attribute__((always_inline)) void maxpool_lanes(const float *x, float *yr, int64_t w, int64_t c,
                                                                int64_t iy0, int64_t ix0, int64_t dh, int64_t dw,
                                                                int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                                                int64_t ch, int n) {
    vw m = splatw(-__builtin_inff());
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) m = maxw(m, load_lanes(x + ((iy0 + i * dh) * w + ix0 + j * dw) * c + ch, n));
    store_lanes(yr + ch, m, n);
}

/* Channels [ch, ch + B VW) of one output pixel whose window's columns all lie inside the image
 * (its rows too, or off lists only those inside): the max over the taps at p + off[t], B vectors
 * at a time. The maxes are the machine's plain max (the longest chain a tap adds is one
 * instruction), the NaN kept apart: a lane that saw one is all ones at the end, a NaN, so NaN
 * wins as in maxw. The last vector of a pixel may be partial (n lanes). */
#define MAXPOOL_BLOCK 4 /* vectors of channels at once (plus as many NaN masks) */
static inline __attribute__((always_inline)) void maxpool_inside(const float *p, const int64_t *off, int taps,
                                                                 float *yp, int nb, int n) {
    vw m[MAXPOOL_BLOCK];
    vwi nan[MAXPOOL_BLOCK];
    for (int b = 0; b < nb; b++) {
        m[b] = load_lanes(p + off[0] + b * VW, b == nb - 1 ? n : VW);
        nan[b] = (vwi)(m[b] != m[b]);
    }
    for (int t = 1; t < taps; t++)
        for (int b = 0; b < nb; b++) {
            const vw v = load_lanes(p + off[t] + b * VW, b == nb - 1 ? n : VW);
            m[b] = max_plainw(m[b], v);
            nan[b] |= (vwi)(v != v);
        }
    for (int b = 0; b < nb; b++) store_lanes(yp + b * VW, (vw)((vwi)m[b] | nan[b]), b == nb - 1 ? n : VW);
}

#define MAXPOOL_TAPS 64 /* windows of up to 64 taps take the path above */

static void maxpool_row(const dl_kernel *k, const float *x, float *y, int64_t n, int64_t oy) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const int64_t c = g->xs[1], h = g->xs[2], w = g->xs[3], ow = g->ys[3];
    const int64_t iy0 = oy * a->stride[0] - a->pad_begin[0], dh = a->dilation[0], dw = a->dilation[1];
    int64_t i0, i1;
    taps_inside(iy0, a->kernel[0], dh, h, &i0, &i1);
    x += n * h * w * c;
    float *yr = y + (n * g->ys[2] + oy) * ow * c;
    /* each tap's offset from a window's first column, for the row's taps inside the image */
    int64_t off[MAXPOOL_TAPS];
    int taps = 0;
    const int fast = (i1 - i0) * a->kernel[1] <= MAXPOOL_TAPS && i1 > i0;
    for (int64_t i = i0; fast && i < i1; i++)
        for (int64_t j = 0; j < a->kernel[1]; j++) off[taps++] = ((iy0 + i * dh) * w + j * dw) * c;
    for (int64_t ox = 0; ox < ow; ox++, yr += c) {
        const int64_t ix0 = ox * a->stride[1] - a->pad_begin[1];
        int64_t j0, j1;
        taps_inside(ix0, a->kernel[1], dw, w, &j0, &j1);
        int64_t ch = 0;
        if (fast && j0 == 0 && j1 == a->kernel[1]) {
            const float *p = x + ix0 * c;
            for (; ch + MAXPOOL_BLOCK * VW <= c; ch += MAXPOOL_BLOCK * VW)
                maxpool_inside(p + ch, off, taps, yr + ch, MAXPOOL_BLOCK, VW);
            for (; ch + VW <= c; ch += VW) maxpool_inside(p + ch, off, taps, yr + ch, 1, VW);
            if (ch < c) maxpool_inside(p + ch, off, taps, yr + ch, 1, (int)(c - ch));
            continue;
        }
        for (; ch + DW_LANES <= c; ch += DW_LANES)
            maxpool_lanes(x, yr, w, c, iy0, ix0, dh, dw, i0, i1, j0, j1, ch, DW_LANES);
        if (ch < c) maxpool_lanes(x, yr, w, c, iy0, ix0, dh, dw, i0, i1, j0, j1, ch, (int)(c - ch));
    }
}

void cpu_maxpool2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y) {
    const dl_op_geom *g = &k->g;
    CPU_FOR(g->numel * (int64_t)g->a.kernel[0] * g->a.kernel[1], r, g->ys[0] * g->ys[2],
            maxpool_row(k, in[0].data, y, r / g->ys[2], r % g->ys[2]););
}

/* ---- average pooling: each window's mean, summed in double in the NCHW kernel's order (rows, then
 * columns), so both layouts give the same floats; padding counted only with count_include_pad.
 * DenseNet's transitions (2x2 stride 2) keep its dense blocks channels-last. ---- */

void cpu_avgpool2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y) {
    enum { CB = 64 }; /* channels summed at a time */
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const float *x = in[0].data;
    const int64_t c = g->xs[1], h = g->xs[2], w = g->xs[3], oh = g->ys[2], ow = g->ys[3];
    CPU_FOR(g->numel * a->kernel[0] * a->kernel[1], r, g->ys[0] * oh, {
        const int64_t n = r / oh, oy = r % oh;
        int64_t y0 = oy * a->stride[0] - a->pad_begin[0];
        int64_t y1 = y0 + a->kernel[0] < h + a->pad_end[0] ? y0 + a->kernel[0] : h + a->pad_end[0];
        const int64_t ylen = y1 - y0;
        y0 = y0 < 0 ? 0 : y0, y1 = y1 > h ? h : y1;
        for (int64_t ox = 0; ox < ow; ox++) {
            int64_t x0 = ox * a->stride[1] - a->pad_begin[1];
            int64_t x1 = x0 + a->kernel[1] < w + a->pad_end[1] ? x0 + a->kernel[1] : w + a->pad_end[1];
            const int64_t xlen = x1 - x0;
            x0 = x0 < 0 ? 0 : x0, x1 = x1 > w ? w : x1;
            const int64_t count = a->count_include_pad ? ylen * xlen : (y1 - y0) * (x1 - x0);
            float *yp = y + ((n * oh + oy) * ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t len = c - c0 < CB ? c - c0 : CB;
                double s[CB] = {0};
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        const float *xp = x + ((n * h + iy) * w + ix) * c + c0;
                        for (int64_t j = 0; j < len; j++) s[j] += xp[j];
                    }
                for (int64_t j = 0; j < len; j++) yp[c0 + j] = count > 0 ? (float)(s[j] / (double)count) : 0.0f;
            }
        }
    });
}

/* ---- global average pooling: y[n, c] = mean of x[n, :, :, c], summed in double ---- */

void cpu_global_avgpool_nhwc(const dl_kernel *k, const dl_tensor *in, float *y) {
    enum { CB = 64 }; /* channels a task sums */
    const float *x = in[0].data;
    const int64_t n = k->g.xs[0], c = k->g.xs[1], plane = k->g.xs[2] * k->g.xs[3], blocks = (c + CB - 1) / CB;
    CPU_FOR(n * c * plane, t, n * blocks, {
        const int64_t b = t / blocks, c0 = t % blocks * CB, len = c - c0 < CB ? c - c0 : CB;
        double s[CB] = {0};
        const float *xb = x + b * plane * c + c0;
        for (int64_t p = 0; p < plane; p++)
            for (int64_t j = 0; j < len; j++) s[j] += xb[p * c + j];
        for (int64_t j = 0; j < len; j++) y[b * c + c0 + j] = (float)(s[j] / (double)plane);
    });
}

/* ---- batchnorm (inference): y = activation(x * s + t), s and t each channel's ----
 * The channels of a pixel lie together, so a pixel is one pass over the C scales and shifts (in
 * L1: worked out once a run into ws, not once a plane as in NCHW). DenseNet's batchnorm + relu
 * over each concat runs channels-last between its convs. A task is about 4096 floats of pixels. */
#define BN_PIXELS(ACT)                                                                       \
    for (int64_t p = p0; p < p1; p++) {                                                      \
        const float *xp = x + p * c;                                                         \
        float *yp = y + p * c;                                                               \
        for (int64_t j = 0; j < c; j++) yp[j] = cpu_activate(xp[j] * s[j] + t[j], ACT, &at); \
    }

void cpu_batchnorm_nhwc(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int64_t c = g->xs[1], pixels = g->xs[0] * g->xs[2] * g->xs[3];
    float *s = ws, *t = s + c;
    for (int64_t ch = 0; ch < c; ch++) cpu_batchnorm_coeffs(in, ch, g->a.epsilon, &s[ch], &t[ch]);
    const int64_t per = c >= 4096 ? 1 : 4096 / c, tasks = (pixels + per - 1) / per;
    const dl_op_attrs at = g->a; /* a local copy: clip's bounds stay in registers */
    CPU_FOR(pixels * c, q, tasks, {
        const int64_t p0 = q * per, p1 = p0 + per < pixels ? p0 + per : pixels;
        switch (at.activation) {
        case DL_ACT_NONE: BN_PIXELS(DL_ACT_NONE); break;
        case DL_ACT_RELU: BN_PIXELS(DL_ACT_RELU); break;
        case DL_ACT_CLIP: BN_PIXELS(DL_ACT_CLIP); break;
        default: BN_PIXELS(at.activation);
        }
    });
}
#undef BN_PIXELS
