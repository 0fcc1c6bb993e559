/* depthwise.c — depthwise 2-D convolution on the CPU (groups == input channels, each output channel
 * reading one input plane: MobileNet's 3x3 layers), computed directly instead of as one tiny GEMM
 * per group. Any stride, dilation and padding; a channel multiplier (out channels = k x in
 * channels) too.
 *
 * The common case, equal strides (and no dilation with a stride), is one flat loop per plane over
 * its zero-padded phase planes (phase.c): the 3x3 taps in registers, bias, relu and clip applied in
 * the same loop. Anything else (unequal strides, dilation with a stride) pads the plane as it is
 * and loops per output row, tap by tap. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

/* The row loop's zero-padded plane: every input element a window reads. */
static void padded_dims(const dl_kernel *k, int64_t *ph, int64_t *pw) {
    const dl_op_attrs *a = &k->g.a;
    *ph = (k->g.ys[2] - 1) * a->stride[0] + (int64_t)(a->kernel[0] - 1) * a->dilation[0] + 1;
    *pw = (k->g.ys[3] - 1) * a->stride[1] + (int64_t)(a->kernel[1] - 1) * a->dilation[1] + 1;
}

size_t cpu_depthwise_workspace(const dl_kernel *k) {
    cpu_phase p;
    int64_t ph, pw, per = cpu_phase_init(&p, &k->g) ? p.per_thread : (padded_dims(k, &ph, &pw), ph * pw);
    return (size_t)(k->threads > 0 ? k->threads : 1) * (size_t)per * sizeof(float);
}

/* The flat loop: out[q] = clamp(b + sum over taps t of w[t] * p[off[t] + q]), q < n (3x3 unrolled).
 * The clamp is the fused relu or clip, else [-inf, inf]. */
static void flat_3x3(const float *restrict p, const int64_t *off, const float *w, float b, float lo, float hi,
                     float *restrict out, int64_t n) {
    const float *restrict p0 = p + off[0], *restrict p1 = p + off[1], *restrict p2 = p + off[2];
    const float *restrict p3 = p + off[3], *restrict p4 = p + off[4], *restrict p5 = p + off[5];
    const float *restrict p6 = p + off[6], *restrict p7 = p + off[7], *restrict p8 = p + off[8];
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    for (int64_t q = 0; q < n; q++)
        out[q] = cpu_clamp(b + w0 * p0[q] + w1 * p1[q] + w2 * p2[q] + w3 * p3[q] + w4 * p4[q] + w5 * p5[q] +
                               w6 * p6[q] + w7 * p7[q] + w8 * p8[q],
                           lo, hi);
}

static void flat_any(const float *restrict p, const int64_t *off, int64_t taps, const float *w, float b, float lo,
                     float hi, float *restrict out, int64_t n) {
    for (int64_t q = 0; q < n; q++) out[q] = b;
    for (int64_t t = 0; t < taps; t++) {
        const float wt = w[t], *restrict src = p + off[t];
        for (int64_t q = 0; q < n; q++) out[q] += wt * src[q];
    }
    for (int64_t q = 0; q < n; q++) out[q] = cpu_clamp(out[q], lo, hi);
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
    const int64_t taps = (int64_t)a->kernel[0] * a->kernel[1];
    const int is3x3 = a->kernel[0] == 3 && a->kernel[1] == 3;
    cpu_phase ph;
    const int flat = cpu_phase_init(&ph, &k->g);
    int64_t rh, rw; /* the row loop's padded plane */
    padded_dims(k, &rh, &rw);
    const int64_t per = flat ? ph.per_thread : rh * rw;
    /* relu and clip are a clamp in the flat loop; the other activations a pass after it */
    const int act = a->activation, clamped = act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP;
    const float lo = act == DL_ACT_RELU ? 0.0f : act == DL_ACT_CLIP ? a->clip_min : -INFINITY;
    const float hi = act == DL_ACT_CLIP ? a->clip_max : INFINITY;
    const int64_t planes = n * oc;
#pragma omp parallel for schedule(static) if (planes * oh * ow * taps >= CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float *pad = (float *)ws + (size_t)omp_get_thread_num() * (size_t)per;
        const int64_t img = p / oc, o = p % oc;
        const float *xp = x + (img * c + o / mult) * h * wd, *wo = w + o * taps;
        const float b = bias ? bias[o] : 0.0f;
        float *yp = y + p * oh * ow;
        if (flat) {
            float *tmp = pad + ph.planes_end + CPU_PHASE_SLACK;
            cpu_phase_fill(&ph, xp, h, wd, a->pad_begin[0], a->pad_begin[1], 0.0f, pad);
            if (is3x3) flat_3x3(pad, ph.off, wo, b, lo, hi, tmp, ph.nq);
            else flat_any(pad, ph.off, taps, wo, b, lo, hi, tmp, ph.nq);
            if (!clamped) cpu_bias_act(tmp, ph.nq, 0.0f, a);
            cpu_phase_store(&ph, tmp, yp, oh, ow);
            continue;
        }
        pad_plane(xp, h, wd, a->pad_begin[0], a->pad_begin[1], pad, rh, rw);
        for (int64_t oy = 0; oy < oh; oy++) {
            float *out = yp + oy * ow;
            row_any(pad + oy * a->stride[0] * rw, rw, a, wo, out, ow);
            cpu_bias_act(out, ow, b, a);
        }
    }
}
