/* window8.c — depthwise 2-D convolution (groups == input channels: MobileNet's and EfficientNet's
 * 3x3 and 5x5 layers) and max pooling on the CPU, both computed 8 channels at a time in one layout.
 *
 * In NCHW a loop along a row wastes most of its vector on 7- and 14-wide maps and needs strided
 * loads at stride 2. So each task takes 8 channels (output channels, or planes for pooling) and a
 * band of output rows, and works in a channel-interleaved layout of its own:
 *   1. the input rows the band reads are interleaved into a padded [row][column][8] buffer (8 x 8
 *      transposes: 8 pixels of 8 planes in, 8 pixels of all 8 channels out), the padding 0 for the
 *      convolution and -inf for pooling (never the max; the extra window of ceil_mode reads it);
 *   2. each output pixel reduces its window with 8-wide vectors, 4 pixels at a time: a sum of
 *      products with the tap's 8 weights (bias, relu and clip in registers), or a max that lets
 *      NaN through as PyTorch does;
 *   3. the band's [pixel][8] result is transposed back into the 8 output planes.
 * Any kernel size, stride, dilation and padding, and a channel multiplier (output channel o reads
 * input channel o / multiplier). The vectors are GCC/Clang vector extensions: AVX2 where the build
 * targets it, narrower code elsewhere, the same arithmetic. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "vec8.h"

#define L 8                   /* channels per task, the lanes of a vector */
#define BAND_BYTES (48 << 10) /* the interleaved input of a band: about 48 KiB (L2 resident) */

/* dst[j][l] = src[l][off + j] for j < n: n pixels of 8 planes (len floats each), interleaved. The
 * last block overlaps the one before it; with fewer than 8 pixels it reads past them while that
 * stays inside the planes, else it goes one float at a time. */
static void interleave(const float *const src[L], int64_t off, int64_t n, int64_t len, float *dst) {
    if (n < L && off + L > len) {
        for (int64_t j = 0; j < n; j++)
            for (int l = 0; l < L; l++) dst[j * L + l] = src[l][off + j];
        return;
    }
    v8 r[L];
    for (int64_t j = 0;; j += L) {
        if (j + L > n) j = n >= L ? n - L : 0;
        for (int l = 0; l < L; l++) r[l] = load8(src[l] + off + j);
        transpose8(r);
        const int64_t m = n - j < L ? n - j : L;
        for (int i = 0; i < m; i++) store8(dst + (j + i) * L, r[i]);
        if (j + L >= n) return;
    }
}

/* dst[l][off + j] = src[j][l] for j < n and the first `lanes` planes: the inverse of interleave */
static void deinterleave(const float *src, int64_t n, float *const dst[L], int lanes, int64_t off) {
    if (n < L) {
        for (int64_t j = 0; j < n; j++)
            for (int l = 0; l < lanes; l++) dst[l][off + j] = src[j * L + l];
        return;
    }
    v8 r[L];
    for (int64_t j = 0;; j += L) {
        if (j + L > n) j = n - L;
        for (int i = 0; i < L; i++) r[i] = load8(src + (j + i) * L);
        transpose8(r);
        for (int l = 0; l < lanes; l++) store8(dst[l] + off + j, r[l]);
        if (j + L >= n) return;
    }
}

/* The window and the bands of an op, and where each part of a thread's workspace starts. */
typedef struct band_plan {
    int64_t kh, kw, sh, sw, dh, dw; /* window */
    int64_t pw;                     /* columns of the band buffer: every column a window reads */
    int64_t band, bands;            /* output rows per band; bands per plane */
    int64_t in_rows;                /* input rows a full band reads */
    size_t out_at, wt_at;           /* floats into a thread's workspace: the band's output, the weights */
    size_t per_thread;              /* floats of workspace per thread */
} band_plan;

static int plan(const dl_kernel *k, band_plan *p) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t oh = k->g.ys[2], ow = k->g.ys[3];
    p->kh = a->kernel[0], p->kw = a->kernel[1], p->sh = a->stride[0], p->sw = a->stride[1];
    p->dh = a->dilation[0], p->dw = a->dilation[1];
    p->pw = (ow - 1) * p->sw + (p->kw - 1) * p->dw + 1;
    const int64_t reach = (p->kh - 1) * p->dh + 1; /* input rows one output row reads */
    const int64_t budget = BAND_BYTES / (p->pw * L * (int64_t)sizeof(float));
    p->band = budget > reach ? (budget - reach) / p->sh + 1 : 1;
    if (p->band > oh) p->band = oh;
    p->bands = (oh + p->band - 1) / p->band;
    p->in_rows = (p->band - 1) * p->sh + reach;
    /* the band's input, its output and the taps' weights, each from a multiple of 64 bytes */
    uint64_t in, out, per;
    if (__builtin_mul_overflow((uint64_t)p->in_rows, (uint64_t)p->pw * L, &in) ||
        __builtin_mul_overflow((uint64_t)p->band, (uint64_t)ow * L, &out) ||
        __builtin_add_overflow(in, out + (uint64_t)(p->kh * p->kw + 1) * L + 48, &per) || per > SIZE_MAX / 64)
        return 0;
    p->out_at = (size_t)(in + 15) / 16 * 16;
    p->wt_at = p->out_at + (size_t)(out + 15) / 16 * 16;
    p->per_thread = (size_t)(per + 15) / 16 * 16;
    return 1;
}

int cpu_depthwise_suits(const dl_kernel *k) {
    const int64_t c = k->g.xs[1], oc = k->g.ys[1];
    return k->g.a.groups > 1 && k->g.a.groups == c && oc % c == 0;
}

size_t cpu_window8_workspace(const dl_kernel *k) {
    band_plan p;
    const size_t threads = (size_t)(k->threads > 0 ? k->threads : 1);
    if (!plan(k, &p) || p.per_thread > SIZE_MAX / sizeof(float) / threads) return SIZE_MAX;
    return threads * p.per_thread * sizeof(float);
}

/* The input rows that output rows [oy0, oy0 + rows) read, from the 8 planes src, interleaved into
 * buf with `fill` wherever a window reaches past the image. */
static void fill_band(const dl_kernel *k, const band_plan *p, const float *const src[L], int64_t oy0, int64_t rows,
                      float fill, float *buf) {
    const int64_t h = k->g.xs[2], wd = k->g.xs[3], pl = k->g.a.pad_begin[1];
    const int64_t iy0 = oy0 * p->sh - k->g.a.pad_begin[0], in_rows = (rows - 1) * p->sh + (p->kh - 1) * p->dh + 1;
    /* columns of the band buffer that hold input: [c0, c1) */
    const int64_t c0 = pl < p->pw ? pl : p->pw, c1 = pl + wd < p->pw ? pl + wd : p->pw;
    for (int64_t r = 0; r < in_rows; r++) {
        float *row = buf + r * p->pw * L;
        const int64_t iy = iy0 + r;
        if (iy < 0 || iy >= h || c1 <= c0) {
            for (int64_t i = 0; i < p->pw * L; i++) row[i] = fill;
            continue;
        }
        for (int64_t i = 0; i < c0 * L; i++) row[i] = fill;
        interleave(src, iy * wd, c1 - c0, h * wd, row + c0 * L);
        for (int64_t i = c1 * L; i < p->pw * L; i++) row[i] = fill;
    }
}

/* The band's outputs (rows x ow pixels of 8 channels) from its interleaved input buf (pitch pw
 * pixels): with max, the largest value of each window; else init (the bias) plus the sum over the
 * window of its values times the taps' 8-lane weights wt, clamped to [lo, hi]. Inlined with
 * constant window sizes for the common ones, so that the tap loops unroll and the weights stay in
 * registers, and with a constant max, so that each reduction is a loop of its own. */
static inline __attribute__((always_inline)) void band_window(const float *buf, int64_t pw, const float *wt, int64_t kh,
                                                              int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                                                              int64_t dw, int max, v8 init, v8 lo, v8 hi, int64_t rows,
                                                              int64_t ow, float *out) {
    const int64_t step = sw * L; /* floats between the windows of neighbouring pixels */
#define REDUCE(acc, at) acc = max ? max8(acc, load8(at)) : acc + w * load8(at)
    for (int64_t r = 0; r < rows; r++) {
        const float *in = buf + r * sh * pw * L;
        float *o = out + r * ow * L;
        int64_t x = 0;
        for (; x + 4 <= ow; x += 4) {
            v8 a0 = init, a1 = init, a2 = init, a3 = init;
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++) {
                    const float *s = in + (i * dh * pw + x * sw + j * dw) * L;
                    const v8 w = max ? init : load8(wt + (i * kw + j) * L);
                    REDUCE(a0, s);
                    REDUCE(a1, s + step);
                    REDUCE(a2, s + 2 * step);
                    REDUCE(a3, s + 3 * step);
                }
            store8(o + x * L, max ? a0 : clamp8(a0, lo, hi));
            store8(o + (x + 1) * L, max ? a1 : clamp8(a1, lo, hi));
            store8(o + (x + 2) * L, max ? a2 : clamp8(a2, lo, hi));
            store8(o + (x + 3) * L, max ? a3 : clamp8(a3, lo, hi));
        }
        for (; x < ow; x++) {
            v8 a0 = init;
            for (int64_t i = 0; i < kh; i++)
                for (int64_t j = 0; j < kw; j++) {
                    const v8 w = max ? init : load8(wt + (i * kw + j) * L);
                    REDUCE(a0, in + (i * dh * pw + x * sw + j * dw) * L);
                }
            store8(o + x * L, max ? a0 : clamp8(a0, lo, hi));
        }
    }
#undef REDUCE
}

/* band_window with the common windows (3x3 and 5x5, stride 1 or 2) as constants; inlined into
 * each task, where max is a constant too */
static inline __attribute__((always_inline)) void band_any(const band_plan *p, const float *buf, const float *wt,
                                                           int max, v8 init, v8 lo, v8 hi, int64_t rows, int64_t ow,
                                                           float *out) {
    const int64_t pw = p->pw, k = p->kh, s = p->sh;
    if (k == p->kw && (k == 3 || k == 5) && p->dh == 1 && p->dw == 1 && s == p->sw && s <= 2) {
        if (k == 3 && s == 1) band_window(buf, pw, wt, 3, 3, 1, 1, 1, 1, max, init, lo, hi, rows, ow, out);
        else if (k == 3) band_window(buf, pw, wt, 3, 3, 2, 2, 1, 1, max, init, lo, hi, rows, ow, out);
        else if (s == 1) band_window(buf, pw, wt, 5, 5, 1, 1, 1, 1, max, init, lo, hi, rows, ow, out);
        else band_window(buf, pw, wt, 5, 5, 2, 2, 1, 1, max, init, lo, hi, rows, ow, out);
    } else {
        band_window(buf, pw, wt, p->kh, p->kw, p->sh, p->sw, p->dh, p->dw, max, init, lo, hi, rows, ow, out);
    }
}

/* One task: 8 output channels of one image over one band of output rows. */
static void conv_task(const dl_kernel *k, const band_plan *p, const dl_tensor *in, float *y, void *ws, int64_t t) {
    const dl_op_attrs *a = &k->g.a;
    const float *x = in[0].data, *w = in[1].data, *bias = k->g.has_bias ? in[2].data : NULL;
    const int64_t c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3], mult = oc / c;
    const int64_t taps = (int64_t)a->kernel[0] * a->kernel[1];
    /* relu and clip are a clamp in registers; the other activations a pass over the band's sums;
     * with a fused residual, every activation comes after it, a pass over each output plane's band */
    const float *res = k->g.residual ? in[k->g.residual].data : NULL;
    const int act = res ? DL_ACT_NONE : a->activation;
    const int clamped = act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP;
    const v8 lo = splat8(act == DL_ACT_RELU ? 0.0f : act == DL_ACT_CLIP ? a->clip_min : -INFINITY);
    const v8 hi = splat8(act == DL_ACT_CLIP ? a->clip_max : INFINITY);
    const int64_t groups = (oc + L - 1) / L;
    const int64_t img = t / (groups * p->bands), o0 = t / p->bands % groups * L, band = t % p->bands;
    const int lanes = (int)(oc - o0 < L ? oc - o0 : L);
    float *buf = (float *)ws + (size_t)omp_get_thread_num() * p->per_thread;
    float *out = buf + p->out_at, *wt = buf + p->wt_at;
    const float *src[L];
    float *dst[L];
    float bv[L];
    for (int l = 0; l < L; l++) { /* lanes past the last channel repeat it and are not stored */
        const int64_t o = o0 + (l < lanes ? l : lanes - 1);
        src[l] = x + (img * c + o / mult) * h * wd;
        dst[l] = y + (img * oc + o) * oh * ow;
        bv[l] = bias ? bias[o] : 0.0f;
    }
    for (int64_t i = 0; i < taps; i++)
        for (int l = 0; l < L; l++) wt[i * L + l] = l < lanes ? w[(o0 + l) * taps + i] : 0.0f;
    /* 1. the band's input rows, interleaved and zero-padded */
    const int64_t oy0 = band * p->band, rows = oh - oy0 < p->band ? oh - oy0 : p->band;
    fill_band(k, p, src, oy0, rows, 0.0f, buf);
    /* 2. the products over the taps, 3. back to the output planes */
    band_any(p, buf, wt, 0, load8(bv), lo, hi, rows, ow, out);
    if (!clamped) cpu_bias_act(out, rows * ow * L, 0.0f, a); /* in L1, all 8 lanes in one run */
    deinterleave(out, rows * ow, dst, lanes, oy0 * ow);
    for (int l = 0; res && l < lanes; l++)
        cpu_bias_res_act(dst[l] + oy0 * ow, res + (dst[l] - y) + oy0 * ow, rows * ow, 0.0f, a);
}

void cpu_depthwise(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    band_plan p;
    if (!plan(k, &p)) return; /* prepare sized the workspace with the same plan: not reached */
    const int64_t n = k->g.xs[0], oc = k->g.ys[1], tasks = n * ((oc + L - 1) / L) * p.bands;
    const int64_t work = n * oc * k->g.ys[2] * k->g.ys[3] * p.kh * p.kw;
    CPU_FOR(work, t, tasks, conv_task(k, &p, in, y, ws, t););
}

/* ---- max pooling ---- */

/* One task: 8 planes (image x channel) over one band of output rows. */
static void pool_task(const dl_kernel *k, const band_plan *p, const float *x, float *y, void *ws, int64_t t) {
    const int64_t planes = k->g.xs[0] * k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oh = k->g.ys[2], ow = k->g.ys[3], p0 = t / p->bands * L, band = t % p->bands;
    const int lanes = (int)(planes - p0 < L ? planes - p0 : L);
    float *buf = (float *)ws + (size_t)omp_get_thread_num() * p->per_thread;
    float *out = buf + p->out_at;
    const float *src[L];
    float *dst[L];
    for (int l = 0; l < L; l++) { /* lanes past the last plane repeat it and are not stored */
        const int64_t q = p0 + (l < lanes ? l : lanes - 1);
        src[l] = x + q * h * wd;
        dst[l] = y + q * oh * ow;
    }
    const int64_t oy0 = band * p->band, rows = oh - oy0 < p->band ? oh - oy0 : p->band;
    fill_band(k, p, src, oy0, rows, -INFINITY, buf);
    const v8 none = splat8(-INFINITY);
    band_any(p, buf, NULL, 1, none, none, none, rows, ow, out);
    deinterleave(out, rows * ow, dst, lanes, oy0 * ow);
}

void cpu_maxpool8(const dl_kernel *k, const float *x, float *y, void *ws) {
    band_plan p;
    if (!plan(k, &p)) return; /* prepare sized the workspace with the same plan: not reached */
    const int64_t planes = k->g.xs[0] * k->g.xs[1], tasks = (planes + L - 1) / L * p.bands;
    CPU_FOR(planes * k->g.ys[2] * k->g.ys[3] * p.kh * p.kw, t, tasks, pool_task(k, &p, x, y, ws, t););
}
