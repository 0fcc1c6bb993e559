/* depthwise.c — depthwise 2-D convolution on the CPU (groups == input channels, each output channel
 * reading one input plane: MobileNet's 3x3 layers), computed directly instead of as one tiny GEMM
 * per group. Any stride, dilation and padding; a channel multiplier (out channels = k x in
 * channels) too.
 *
 * The common case, equal strides s (and no dilation when s > 1), is one flat loop per plane. Each
 * thread splits the zero-padded input plane into s x s phase planes, phase (a, b) holding the
 * padded plane's rows a, a + s, ... and columns b, b + s, ..., all of pitch P. Output (oy, ox) then
 * reads tap (i, j) at row oy + i / s, column ox + j / s of phase (i % s, j % s): at a fixed offset
 * from q = oy * P + ox. So the whole plane is one unit-stride loop over q (the P - ow extra columns
 * per row computed and dropped), long enough to vectorise even on a 7x7 map, where a loop per
 * 7-wide row would run scalar, and with no strided loads at stride 2. The 3x3 taps stay in
 * registers; bias and the fused activation are applied as the rows are stored.
 *
 * Anything else (unequal strides, dilation with stride) pads the plane as it is and loops per
 * output row, tap by tap. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

/* windows with more taps than this take the row loop (the flat loop's offsets live on the stack) */
#define DW_MAX_FLAT_TAPS 64
/* The flat loop runs to a multiple of 8 outputs (no scalar remainder), reading and writing up to 7
 * floats past the phase planes and its output: zeros, dropped. */
#define DW_SLACK 8

/* The shapes of one prepared depthwise conv: the flat loop's phase planes, or the row loop's
 * padded plane. */
typedef struct dw_geom {
    int flat;           /* the flat loop (else the row loop) */
    int64_t s;          /* stride (flat) */
    int64_t ph, pw;     /* flat: rows and pitch of each phase plane; rows: the padded plane */
    int64_t per_thread; /* floats of workspace per thread */
} dw_geom;

static dw_geom geom_of(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t oh = k->g.ys[2], ow = k->g.ys[3], kh = a->kernel[0], kw = a->kernel[1];
    const int64_t sh = a->stride[0], sw = a->stride[1], dh = a->dilation[0], dw = a->dilation[1];
    dw_geom d = {0};
    d.flat = sh == sw && (sh == 1 || (dh == 1 && dw == 1)) && kh * kw <= DW_MAX_FLAT_TAPS;
    if (d.flat) {
        d.s = sh;
        /* the last output row reads phase rows up to oh - 1 + (kh - 1) dh / s; the dropped
         * columns of the last row read one row past that */
        d.ph = oh + (kh - 1) * dh / sh + 1;
        d.pw = ow + (kw - 1) * dw / sh;
        d.per_thread = sh * sh * d.ph * d.pw + DW_SLACK + oh * d.pw + DW_SLACK;
    } else {
        d.ph = (oh - 1) * sh + (kh - 1) * dh + 1;
        d.pw = (ow - 1) * sw + (kw - 1) * dw + 1;
        d.per_thread = d.ph * d.pw;
    }
    return d;
}

size_t cpu_depthwise_workspace(const dl_kernel *k) {
    return (size_t)(k->threads > 0 ? k->threads : 1) * (size_t)geom_of(k).per_thread * sizeof(float);
}

/* Phase planes of the zero-padded input plane x (h x w, padding pt, pl): phase (a, b) at
 * ph_[(a * s + b) * ph * pw], its element (r, c) the padded plane's (r s + a, c s + b). */
static void phase_planes(const float *restrict x, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t s, int64_t ph,
                         int64_t pw, float *restrict out) {
    for (int64_t a = 0; a < s; a++)
        for (int64_t b = 0; b < s; b++) {
            float *plane = out + (a * s + b) * ph * pw;
            /* columns c with 0 <= c s + b - pl < w: [c0, c1) */
            int64_t c0 = pl > b ? (pl - b + s - 1) / s : 0, c1 = (w + pl - b + s - 1) / s;
            if (c0 > pw) c0 = pw;
            if (c1 > pw) c1 = pw;
            if (c1 < c0) c1 = c0;
            for (int64_t r = 0; r < ph; r++) {
                float *dst = plane + r * pw;
                const int64_t iy = r * s + a - pt;
                if (iy < 0 || iy >= h) {
                    for (int64_t c = 0; c < pw; c++) dst[c] = 0.0f;
                    continue;
                }
                const float *src = x + iy * w + (c0 * s + b - pl);
                for (int64_t c = 0; c < c0; c++) dst[c] = 0.0f;
                if (s == 1)
                    for (int64_t c = c0; c < c1; c++) dst[c] = src[c - c0];
                else
                    for (int64_t c = c0; c < c1; c++) dst[c] = src[(c - c0) * s];
                for (int64_t c = c1; c < pw; c++) dst[c] = 0.0f;
            }
        }
}

/* v clamped to [lo, hi], NaN kept (as relu and clip compute it) */
static inline float clamp(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The flat loop: out[q] = clamp(b + sum over taps t of w[t] * p[off[t] + q]), q < n (3x3 unrolled).
 * The clamp is the fused relu or clip, else [-inf, inf]. */
static void flat_3x3(const float *restrict p, const int64_t *off, const float *w, float b, float lo, float hi,
                     float *restrict out, int64_t n) {
    const float *restrict p0 = p + off[0], *restrict p1 = p + off[1], *restrict p2 = p + off[2];
    const float *restrict p3 = p + off[3], *restrict p4 = p + off[4], *restrict p5 = p + off[5];
    const float *restrict p6 = p + off[6], *restrict p7 = p + off[7], *restrict p8 = p + off[8];
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    for (int64_t q = 0; q < n; q++)
        out[q] = clamp(b + w0 * p0[q] + w1 * p1[q] + w2 * p2[q] + w3 * p3[q] + w4 * p4[q] + w5 * p5[q] + w6 * p6[q] +
                           w7 * p7[q] + w8 * p8[q],
                       lo, hi);
}

static void flat_any(const float *restrict p, const int64_t *off, int64_t taps, const float *w, float b, float lo,
                     float hi, float *restrict out, int64_t n) {
    for (int64_t q = 0; q < n; q++) out[q] = b;
    for (int64_t t = 0; t < taps; t++) {
        const float wt = w[t], *restrict src = p + off[t];
        for (int64_t q = 0; q < n; q++) out[q] += wt * src[q];
    }
    for (int64_t q = 0; q < n; q++) out[q] = clamp(out[q], lo, hi);
}

int cpu_depthwise_suits(const dl_kernel *k) {
    const int64_t c = k->g.xs[1], oc = k->g.ys[1];
    return k->g.a.groups > 1 && k->g.a.groups == c && oc % c == 0;
}

/* pad[r][c] = x[r - pt][c - pl] inside the plane, else 0 (pt, pl >= 0; the padded plane may end
 * before the input does, where the last windows do not reach its last rows or columns) */
static void pad_plane(const float *x, int64_t h, int64_t w, int64_t pt, int64_t pl, float *pad, int64_t ph,
                      int64_t pw) {
    const int64_t c0 = pl < pw ? pl : pw;         /* the plane's first column in pad */
    const int64_t c1 = pl + w < pw ? pl + w : pw; /* one past its last */
    for (int64_t r = 0; r < ph; r++) {
        float *dst = pad + r * pw;
        const int64_t iy = r - pt;
        if (iy < 0 || iy >= h) {
            memset(dst, 0, (size_t)pw * sizeof *dst);
            continue;
        }
        memset(dst, 0, (size_t)c0 * sizeof *dst);
        if (c1 > c0) memcpy(dst + c0, x + iy * w, (size_t)(c1 - c0) * sizeof *dst);
        const int64_t e = c1 > c0 ? c1 : c0;
        memset(dst + e, 0, (size_t)(pw - e) * sizeof *dst);
    }
}

/* One output row of any window: the row is zeroed, then each tap is added across it. */
static void row_any(const float *p, int64_t pw, const dl_op_attrs *a, const float *w, float *out, int64_t ow) {
    const int kh = a->kernel[0], kw = a->kernel[1], sw = a->stride[1], dh = a->dilation[0], dw = a->dilation[1];
    memset(out, 0, (size_t)ow * sizeof *out);
    for (int i = 0; i < kh; i++) {
        const float *r = p + (int64_t)i * dh * pw;
        for (int j = 0; j < kw; j++) {
            const float t = w[i * kw + j], *src = r + (int64_t)j * dw;
            if (sw == 1)
                for (int64_t x = 0; x < ow; x++) out[x] += t * src[x];
            else
                for (int64_t x = 0; x < ow; x++) out[x] += t * src[x * sw];
        }
    }
}

void cpu_depthwise(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_attrs *a = &k->g.a;
    const float *x = in[0].data, *w = in[1].data, *bias = k->g.has_bias ? in[2].data : NULL;
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3], mult = oc / c;
    const int64_t kw = a->kernel[1], taps = (int64_t)a->kernel[0] * kw;
    const int is3x3 = a->kernel[0] == 3 && kw == 3;
    const dw_geom d = geom_of(k);
    int64_t off[DW_MAX_FLAT_TAPS];
    if (d.flat) /* tap (i, j): phase (i dh % s, j dw % s), then (i dh / s) rows and (j dw / s) columns in */
        for (int64_t t = 0; t < taps; t++) {
            const int64_t i = t / kw * a->dilation[0], j = t % kw * a->dilation[1];
            off[t] = ((i % d.s) * d.s + j % d.s) * d.ph * d.pw + i / d.s * d.pw + j / d.s;
        }
    /* relu and clip are a clamp in the flat loop; the other activations a pass after it */
    const int act = a->activation, clamped = act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP;
    const float lo = act == DL_ACT_RELU ? 0.0f : act == DL_ACT_CLIP ? a->clip_min : -INFINITY;
    const float hi = act == DL_ACT_CLIP ? a->clip_max : INFINITY;
    const int64_t planes = n * oc;
#pragma omp parallel for schedule(static) if (planes * oh * ow * taps >= CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float *pad = (float *)ws + (size_t)omp_get_thread_num() * (size_t)d.per_thread;
        const int64_t img = p / oc, o = p % oc;
        const float *xp = x + (img * c + o / mult) * h * wd, *wo = w + o * taps;
        const float b = bias ? bias[o] : 0.0f;
        float *yp = y + p * oh * ow;
        if (d.flat) {
            const int64_t planes_end = d.s * d.s * d.ph * d.pw, nq = (oh * d.pw + 7) / 8 * 8;
            float *tmp = pad + planes_end + DW_SLACK;
            phase_planes(xp, h, wd, a->pad_begin[0], a->pad_begin[1], d.s, d.ph, d.pw, pad);
            for (int i = 0; i < DW_SLACK; i++) pad[planes_end + i] = 0.0f;
            if (is3x3) flat_3x3(pad, off, wo, b, lo, hi, tmp, nq);
            else flat_any(pad, off, taps, wo, b, lo, hi, tmp, nq);
            if (!clamped) cpu_bias_act(tmp, nq, 0.0f, a);
            if (d.pw == ow) {
                memcpy(yp, tmp, (size_t)(oh * ow) * sizeof *yp);
            } else {
                for (int64_t oy = 0; oy < oh; oy++) {
                    const float *src = tmp + oy * d.pw;
                    float *dst = yp + oy * ow;
                    for (int64_t ox = 0; ox < ow; ox++) dst[ox] = src[ox];
                }
            }
            continue;
        }
        pad_plane(xp, h, wd, a->pad_begin[0], a->pad_begin[1], pad, d.ph, d.pw);
        for (int64_t oy = 0; oy < oh; oy++) {
            float *out = yp + oy * ow;
            row_any(pad + oy * a->stride[0] * d.pw, d.pw, a, wo, out, ow);
            cpu_bias_act(out, ow, b, a);
        }
    }
}
