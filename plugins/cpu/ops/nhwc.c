/* nhwc.c — the CPU plugin's channels-last (NHWC) f32 kernels, and which layout it asks for.
 *
 * On large maps with few channels a conv in NCHW reads and writes one plane per channel and does
 * little arithmetic per line it touches (docs/performance.md, "Per-op medians, and the layout the
 * large maps ask for"). In NHWC each pixel's channels lie together, so these ops run on NHWC
 * tensors where they lie, with no conversion:
 *   - a 1x1 conv (stride 1, no padding, one group): a product of the pixels [P, C] with the
 *     weight, packed at prepare in panels of 16 filters; each block keeps 6 pixels x 16 filters in
 *     12 vector registers over all C channels, then adds the bias and a fused residual, applies
 *     the fused activation and stores 16 consecutive floats a pixel;
 *   - a depthwise conv (groups == channels, any window, stride, dilation and padding): each output
 *     pixel sums its window's taps over 32, then 8, channels at a time (the weight packed tap by
 *     tap at prepare);
 *   - global average pooling (sums in double, as in NCHW);
 *   - the elementwise ops of one input (same order in and out: their NCHW kernels as they are) and
 *     the binary ops with 4-D operands (their NCHW kernels on shapes permuted to [N, H, W, C]).
 * Everything else stays row-major: f16/bf16 or mixed layouts go through storage.c as before.
 *
 * The plugin asks (preferred_layout, ABI 1.9) for the input's layout where an op has a kernel
 * here, and for row-major everywhere else. With DLRUN_CPU_NHWC=1 it also asks for channels-last
 * where a depthwise conv reads a map of 28x28 or more at f32 (MobileNet's and EfficientNet's thin,
 * large layers): a network with no depthwise conv (ResNet, VGG) never leaves row-major, and one
 * with them stays in NHWC from its first large depthwise conv to the first op with no NHWC kernel.
 * That is off by default until these kernels beat the NCHW ones on the large maps in whole
 * models (docs/performance.md, "Channels-last kernels"). */
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "vec8.h"

#define PW_ROWS 6   /* pixels per block of the 1x1 conv */
#define PW_COLS 16  /* filters per block (two vectors) */
#define PW_CHUNK 48 /* pixels a task takes: 8 blocks */
#define DW_LANES 8  /* channels per vector of the depthwise conv */

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

/* op's kind (and, for a conv, its shape) has an NHWC kernel here */
static int has_kernel(const dl_op *op) {
    if (is_unary(op->kind) || op->kind == DL_OP_GLOBAL_AVGPOOL) return 1;
    if (is_binary(op->kind)) return op->n_inputs == 2 && op->inputs[0].ndim == 4 && op->inputs[1].ndim == 4;
    return is_pointwise(op) || is_depthwise(op);
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

static int asks_nhwc; /* DLRUN_CPU_NHWC=1, read at the plugin's init */

void cpu_nhwc_init(void) {
    const char *v = getenv("DLRUN_CPU_NHWC");
    asks_nhwc = v && strcmp(v, "1") == 0;
}

int cpu_preferred_layout(void *self, const dl_op *op) {
    (void)self;
    if (op->precision != DL_PRECISION_F32 || op->n_outputs < 1 || !has_kernel(op)) return DL_LAYOUT_ROW_MAJOR;
    if (asks_nhwc && is_depthwise(op) && op->inputs[0].shape[2] * op->inputs[0].shape[3] >= 28 * 28)
        return DL_LAYOUT_CHANNELS_LAST;
    return DL_LAYOUT_AS_INPUT;
}

/* ---- prepare ---- */

dl_status cpu_nhwc_prepare(dl_kernel *k, const dl_op *op) {
    dl_op_geom *g = &k->g;
    if (is_binary(g->kind)) { /* [N, C, H, W] -> [N, H, W, C]: the row-major shapes of what lies in memory */
        int64_t *s[3] = {g->xs, g->bs, g->ys};
        for (int i = 0; i < 3; i++) {
            const int64_t c = s[i][1];
            s[i][1] = s[i][2], s[i][2] = s[i][3], s[i][3] = c;
        }
        return DL_OK;
    }
    if (g->kind != DL_OP_CONV2D) return DL_OK;
    const float *w = op->inputs[1].data;
    const int64_t m = g->ys[1], c = g->xs[1];
    k->conv_mode = is_pointwise(op) ? CONV_GEMM_1X1 : CONV_DEPTHWISE;
    if (k->conv_mode ==
        CONV_GEMM_1X1) { /* panels of 16 filters: packed[(panel * c + ch) * 16 + j] = w[panel * 16 + j][ch] */
        const int64_t panels = (m + PW_COLS - 1) / PW_COLS;
        if (panels > INT64_MAX / PW_COLS / c) return DL_E_NOMEM;
        k->packed = calloc((size_t)(panels * PW_COLS * c), sizeof(float));
        if (!k->packed) return DL_E_NOMEM;
        for (int64_t o = 0; o < m; o++)
            for (int64_t ch = 0; ch < c; ch++)
                k->packed[(o / PW_COLS * c + ch) * PW_COLS + o % PW_COLS] = w[o * c + ch];
        return DL_OK;
    }
    /* depthwise: tap by tap, the channels padded to whole vectors: packed[tap * cp + ch] */
    const int64_t taps = g->a.kernel[0] * g->a.kernel[1], cp = (c + DW_LANES - 1) / DW_LANES * DW_LANES;
    if (cp > INT64_MAX / taps) return DL_E_NOMEM;
    k->packed = calloc((size_t)(taps * cp), sizeof(float));
    if (!k->packed) return DL_E_NOMEM;
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t t = 0; t < taps; t++) k->packed[t * cp + ch] = w[ch * taps + t];
    return DL_OK;
}

/* ---- 1x1 conv ---- */

/* The block of `rows` pixels (x: rows x c, ld c) times one panel of 16 filters (wp: c x 16) */
static inline __attribute__((always_inline)) void pw_block(const float *x, int64_t c, const float *wp, int rows,
                                                           v8 acc[PW_ROWS][2]) {
    for (int r = 0; r < PW_ROWS; r++) acc[r][0] = acc[r][1] = splat8(0);
    for (int64_t ch = 0; ch < c; ch++) {
        const v8 w0 = load8(wp + ch * PW_COLS), w1 = load8(wp + ch * PW_COLS + 8);
        for (int r = 0; r < rows; r++) {
            const v8 xv = splat8(x[r * c + ch]);
            acc[r][0] = fma8(xv, w0, acc[r][0]);
            acc[r][1] = fma8(xv, w1, acc[r][1]);
        }
    }
}

/* Bias, residual, activation and store of a block: y and res hold `rows` pixels of ld floats, of
 * which this panel's `cols` (16, or fewer in the last panel) are written. */
static void pw_store(v8 acc[PW_ROWS][2], int rows, int cols, const float *bias, const float *res, float *y, int64_t ld,
                     const dl_op_attrs *a) {
    float t[PW_ROWS * PW_COLS] __attribute__((aligned(32)));
    float bb[PW_COLS] = {0};
    if (bias) memcpy(bb, bias, (size_t)cols * sizeof(float));
    const v8 b0 = load8(bb), b1 = load8(bb + 8);
    for (int r = 0; r < rows; r++) {
        store8(t + r * PW_COLS, acc[r][0] + b0);
        store8(t + r * PW_COLS + 8, acc[r][1] + b1);
    }
    if (res)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++) t[r * PW_COLS + j] += res[r * ld + j];
    if (a->activation == DL_ACT_RELU || a->activation == DL_ACT_CLIP) {
        const v8 lo = splat8(a->activation == DL_ACT_RELU ? 0.0f : a->clip_min),
                 hi = splat8(a->activation == DL_ACT_RELU ? __builtin_inff() : a->clip_max);
        for (int i = 0; i < rows * PW_COLS; i += 8) store8(t + i, clamp8(load8(t + i), lo, hi));
    } else if (a->activation != DL_ACT_NONE) {
        cpu_activate_rows16(t, rows, a);
    }
    for (int r = 0; r < rows; r++) memcpy(y + r * ld, t + r * PW_COLS, (size_t)cols * sizeof(float));
}

static void pointwise(const dl_kernel *k, const dl_tensor *in, float *y) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data, *bias = g->has_bias ? in[2].data : NULL;
    const float *res = g->residual ? in[g->residual].data : NULL;
    const int64_t c = g->xs[1], m = g->ys[1], pixels = g->xs[0] * g->xs[2] * g->xs[3];
    const int64_t chunks = (pixels + PW_CHUNK - 1) / PW_CHUNK, panels = (m + PW_COLS - 1) / PW_COLS;
    /* few chunks (a small map, or the 1x1 maps of squeeze-and-excitation): share out the panels too */
    const int64_t split = chunks >= 8 ? 1 : panels, per = (panels + split - 1) / split;
    /* none, relu and clip are a clamp, applied in registers (NaN passes through clamp8) */
    const int act = g->a.activation, in_registers = act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP;
    const v8 lo = splat8(act == DL_ACT_RELU   ? 0.0f
                         : act == DL_ACT_CLIP ? g->a.clip_min
                                              : -__builtin_inff()),
             hi = splat8(act == DL_ACT_CLIP ? g->a.clip_max : __builtin_inff());
    CPU_FOR(pixels * m * c, t, chunks * split, {
        const int64_t p0 = t / split * PW_CHUNK, p1 = p0 + PW_CHUNK < pixels ? p0 + PW_CHUNK : pixels;
        const int64_t q0 = t % split * per, q1 = q0 + per < panels ? q0 + per : panels;
        for (int64_t q = q0; q < q1; q++) {
            const float *wp = k->packed + q * c * PW_COLS;
            const int cols = (int)(m - q * PW_COLS < PW_COLS ? m - q * PW_COLS : PW_COLS);
            for (int64_t p = p0; p < p1; p += PW_ROWS) {
                const int rows = (int)(p1 - p < PW_ROWS ? p1 - p : PW_ROWS);
                v8 acc[PW_ROWS][2];
                if (rows == PW_ROWS) pw_block(x + p * c, c, wp, PW_ROWS, acc);
                else pw_block(x + p * c, c, wp, rows, acc);
                const int64_t at = p * m + q * PW_COLS;
                if (cols == PW_COLS && in_registers) { /* the common case: from the registers to y */
                    const v8 b0 = bias ? load8(bias + q * PW_COLS) : splat8(0),
                             b1 = bias ? load8(bias + q * PW_COLS + 8) : splat8(0);
                    for (int r = 0; r < rows; r++) {
                        v8 v0 = acc[r][0] + b0, v1 = acc[r][1] + b1;
                        if (res) v0 += load8(res + at + r * m), v1 += load8(res + at + r * m + 8);
                        store8(y + at + r * m, clamp8(v0, lo, hi));
                        store8(y + at + r * m + 8, clamp8(v1, lo, hi));
                    }
                    continue;
                }
                pw_store(acc, rows, cols, bias ? bias + q * PW_COLS : NULL, res ? res + at : NULL, y + at, m, &g->a);
            }
        }
    });
}

/* ---- depthwise conv ---- */

/* The depthwise conv's geometry for one output row */
typedef struct dw_row {
    const float *x, *bias, *wt; /* image n, the bias (or NULL), the packed weight */
    int64_t c, cp, w, kw, sw, dw, pl, iy0, i0, i1, dh;
} dw_row;

/* One output pixel, its taps checked against the image's edges (bias included, no activation) */
static void dw_pixel(const dw_row *r, int64_t ox, float *yp) {
    const int64_t ix0 = ox * r->sw - r->pl, c = r->c;
    int64_t j0 = 0, j1 = r->kw;
    while (j0 < r->kw && ix0 + j0 * r->dw < 0) j0++;
    while (j1 > j0 && ix0 + (j1 - 1) * r->dw >= r->w) j1--;
    int64_t ch = 0;
    for (; ch + DW_LANES <= c; ch += DW_LANES) {
        v8 acc = r->bias ? load8(r->bias + ch) : splat8(0);
        for (int64_t i = r->i0; i < r->i1; i++)
            for (int64_t j = j0; j < j1; j++)
                acc = fma8(load8(r->x + ((r->iy0 + i * r->dh) * r->w + ix0 + j * r->dw) * c + ch),
                           load8(r->wt + (i * r->kw + j) * r->cp + ch), acc);
        store8(yp + ch, acc);
    }
    for (; ch < c; ch++) {
        float acc = r->bias ? r->bias[ch] : 0.0f;
        for (int64_t i = r->i0; i < r->i1; i++)
            for (int64_t j = j0; j < j1; j++)
                acc += r->x[((r->iy0 + i * r->dh) * r->w + ix0 + j * r->dw) * c + ch] *
                       r->wt[(i * r->kw + j) * r->cp + ch];
        yp[ch] = acc;
    }
}

/* Four neighbouring output pixels whose taps all lie inside the image's columns: each tap's 8
 * weights loaded once for the four, four independent sums in flight */
static void dw_four(const dw_row *r, int64_t ox, float *yp) {
    const int64_t c = r->c, step = r->sw * c;
    int64_t ch = 0;
    for (; ch + DW_LANES <= c; ch += DW_LANES) {
        const v8 b = r->bias ? load8(r->bias + ch) : splat8(0);
        v8 s0 = b, s1 = b, s2 = b, s3 = b;
        for (int64_t i = r->i0; i < r->i1; i++) {
            const float *xr = r->x + ((r->iy0 + i * r->dh) * r->w + ox * r->sw - r->pl) * c + ch;
            const float *wr = r->wt + i * r->kw * r->cp + ch;
            for (int64_t j = 0; j < r->kw; j++) {
                const v8 wv = load8(wr + j * r->cp);
                const float *xp = xr + j * r->dw * c;
                s0 = fma8(load8(xp), wv, s0);
                s1 = fma8(load8(xp + step), wv, s1);
                s2 = fma8(load8(xp + 2 * step), wv, s2);
                s3 = fma8(load8(xp + 3 * step), wv, s3);
            }
        }
        store8(yp + ch, s0), store8(yp + c + ch, s1), store8(yp + 2 * c + ch, s2), store8(yp + 3 * c + ch, s3);
    }
    if (ch < c) /* the last channels, fewer than 8: one pixel at a time */
        for (int q = 0; q < 4; q++) {
            const int64_t ix0 = (ox + q) * r->sw - r->pl;
            for (int64_t k = ch; k < c; k++) {
                float acc = r->bias ? r->bias[k] : 0.0f;
                for (int64_t i = r->i0; i < r->i1; i++)
                    for (int64_t j = 0; j < r->kw; j++)
                        acc += r->x[((r->iy0 + i * r->dh) * r->w + ix0 + j * r->dw) * c + k] *
                               r->wt[(i * r->kw + j) * r->cp + k];
                yp[q * c + k] = acc;
            }
        }
}

/* Output row oy of image n, then its residual and activation over the whole row at once */
static void depthwise_row(const dl_kernel *k, const dl_tensor *in, float *y, int64_t n, int64_t oy) {
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
                .i0 = 0,
                .i1 = a->kernel[0],
                .dh = a->dilation[0]};
    while (r.i0 < r.i1 && r.iy0 + r.i0 * r.dh < 0) r.i0++;
    while (r.i1 > r.i0 && r.iy0 + (r.i1 - 1) * r.dh >= h) r.i1--;
    /* the columns [lo, hi) whose every tap is inside the image */
    int64_t lo = (r.pl + r.sw - 1) / r.sw, hi = (w - 1 - (r.kw - 1) * r.dw + r.pl) / r.sw + 1;
    if (w - 1 - (r.kw - 1) * r.dw + r.pl < 0) hi = 0;
    if (hi > ow) hi = ow;
    if (lo > hi) lo = hi;
    const int64_t at = (n * g->ys[2] + oy) * ow * c;
    float *yr = y + at;
    int64_t ox = 0;
    for (; ox < lo; ox++) dw_pixel(&r, ox, yr + ox * c);
    for (; ox + 4 <= hi; ox += 4) dw_four(&r, ox, yr + ox * c);
    for (; ox < ow; ox++) dw_pixel(&r, ox, yr + ox * c);
    const float *res = g->residual ? (const float *)in[g->residual].data + at : NULL;
    if (res || a->activation != DL_ACT_NONE) cpu_bias_res_act(yr, res, ow * c, 0.0f, a);
}

void cpu_conv2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y) {
    const dl_op_geom *g = &k->g;
    if (k->conv_mode == CONV_GEMM_1X1) {
        pointwise(k, in, y);
        return;
    }
    const int64_t rows = g->ys[0] * g->ys[2];
    CPU_FOR(g->numel * g->a.kernel[0] * g->a.kernel[1], r, rows, depthwise_row(k, in, y, r / g->ys[2], r % g->ys[2]););
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
