/* conv2d.c — 2-D convolution on the CPU: a direct kernel for depthwise convs (window8.c), Winograd
 * F(4x4,3x3) for 3x3 stride-1 convs with enough channels; for the rest (1x1, strides, dilation,
 * groups, padding), where it measured faster than OpenBLAS (cpu_gemm_suits_conv), the packed GEMM
 * of gemm.c: the weight packed once at prepare, the input's windows packed straight from the
 * image (no im2col buffer). Otherwise, and for a weight known only at run time, OpenBLAS: a plain
 * GEMM for 1x1 stride-1 unpadded convs, im2col + GEMM for the others. Bias and the fused
 * activation are applied to each block of output as the GEMM produces it. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

/* 1x1, stride 1, no padding: the image's channels are the GEMM's operand as they lie */
static int plain_1x1(const dl_op_attrs *a) {
    return a->kernel[0] == 1 && a->kernel[1] == 1 && a->stride[0] == 1 && a->stride[1] == 1 && a->pad_begin[0] == 0 &&
           a->pad_begin[1] == 0 && a->pad_end[0] == 0 && a->pad_end[1] == 0;
}

dl_status cpu_conv2d_prepare(dl_kernel *k, const dl_op *op) {
    const dl_op_attrs *a = &k->g.a;
    const dl_tensor *w = &op->inputs[1];
    int64_t c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3], oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3];
    if (cpu_depthwise_suits(k)) {
        k->conv_mode = CONV_DEPTHWISE;
        k->workspace = cpu_window8_workspace(k);
        return k->workspace == SIZE_MAX ? DL_E_NOMEM : DL_OK;
    }
    if (w->data && cpu_winograd_suits(a->kernel[0], a->kernel[1], a->stride[0], a->stride[1], a->dilation[0],
                                      a->dilation[1], a->groups, (int)c, (int)oc, (int)oh, (int)ow)) {
        if (!cpu_winograd_init(&k->wg, (int)k->g.xs[0], (int)c, (int)h, (int)wd, (int)oc, a->pad_begin[0],
                               a->pad_begin[1], (int)oh, (int)ow, w->data))
            return DL_E_NOMEM;
        k->conv_mode = CONV_WINOGRAD;
        k->workspace = cpu_winograd_workspace(&k->wg);
        return DL_OK;
    }
    const int64_t g = a->groups, kdim = (c / g) * a->kernel[0] * a->kernel[1], ocg = oc / g, plane = oh * ow;
    if (w->data && cpu_gemm_suits_conv(ocg, plane, kdim) && !getenv("DLRUN_CPU_NO_PACKED")) {
        /* the weight packed once per group as cpu_gemm's A: y = W windows */
        const size_t per = cpu_gemm_packed_a_floats(ocg, kdim);
        const size_t scratch = cpu_gemm_scratch_floats(ocg, plane, kdim, 0, 1, k->threads);
        if (per == SIZE_MAX || scratch == SIZE_MAX || per > SIZE_MAX / sizeof(float) / (size_t)g) return DL_E_NOMEM;
        if (!(k->packed = malloc(per * (size_t)g * sizeof(float)))) return DL_E_NOMEM;
        for (int64_t gi = 0; gi < g; gi++) {
            const cpu_gemm_strided wg = {(const float *)w->data + gi * ocg * kdim, kdim, 1, ocg, kdim};
            cpu_gemm_pack_a(&wg, k->packed + (size_t)gi * per);
        }
        k->conv_mode = CONV_PACKED;
        k->workspace = scratch * sizeof(float);
        return DL_OK;
    }
    if (plain_1x1(a)) {
        k->conv_mode = CONV_GEMM_1X1;
        k->workspace = 0;
        return DL_OK;
    }
    k->conv_mode = CONV_IM2COL;
    int64_t rows = (c / a->groups) * a->kernel[0] * a->kernel[1];
    k->workspace = (size_t)(rows * oh * ow) * sizeof(float);
    return DL_OK;
}

/* col[(ci*kh + i)*kw + j][oy*ow + ox] = x[ci][oy*sh - pt + i*dh][ox*sw - pl + j*dw] (0 outside). */
static void im2col(const dl_kernel *k, const float *x, int cg, float *col) {
    const dl_op_attrs *a = &k->g.a;
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    const int kh = a->kernel[0], kw = a->kernel[1];
    const int rows = cg * kh * kw;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        int ci = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
        const float *plane = x + (size_t)ci * h * w;
        float *dst = col + (size_t)r * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int iy = oy * a->stride[0] - a->pad_begin[0] + i * a->dilation[0];
            float *drow = dst + (size_t)oy * ow;
            if (iy < 0 || iy >= h) {
                memset(drow, 0, (size_t)ow * sizeof *drow);
                continue;
            }
            const float *srow = plane + (size_t)iy * w;
            int ix = -a->pad_begin[1] + j * a->dilation[1];
            if (a->stride[1] == 1) {
                for (int ox = 0; ox < ow; ox++, ix++) drow[ox] = (ix >= 0 && ix < w) ? srow[ix] : 0.0f;
            } else {
                for (int ox = 0; ox < ow; ox++, ix += a->stride[1]) drow[ox] = (ix >= 0 && ix < w) ? srow[ix] : 0.0f;
            }
        }
    }
}

/* y[m x n] = act(w[m x kdim] * b[kdim x n] + bias) with single-threaded sgemm calls in parallel:
 * the output is split along its longer side, so that small spatial maps (late layers) split the
 * filters and each thread reads only its share of them. Each thread applies bias and the fused
 * activation to its own share (no second parallel region). bias may be NULL. */
static void gemm_bias_act(int m, int64_t n, int kdim, const float *w, const float *b, float *y, const float *bias,
                          const dl_op_attrs *a) {
    const int epilogue = bias || a->activation != DL_ACT_NONE;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (n >= m) {
            int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
            int64_t c0 = (int64_t)t * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
            if (c1 > c0) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (int)(c1 - c0), kdim, 1.0f, w, kdim, b + c0,
                            (int)n, 0.0f, y + c0, (int)n);
                if (epilogue)
                    for (int r = 0; r < m; r++) cpu_bias_act(y + (size_t)r * n + c0, c1 - c0, bias ? bias[r] : 0.0f, a);
            }
        } else {
            int chunk = ((m + nt - 1) / nt + 7) / 8 * 8;
            int r0 = t * chunk, r1 = r0 + chunk < m ? r0 + chunk : m;
            if (r1 > r0) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, (int)n, kdim, 1.0f,
                            w + (size_t)r0 * kdim, kdim, b, (int)n, 0.0f, y + (size_t)r0 * n, (int)n);
                if (epilogue)
                    for (int r = r0; r < r1; r++) cpu_bias_act(y + (size_t)r * n, n, bias ? bias[r] : 0.0f, a);
            }
        }
    }
}

/* One image's group of channels as cpu_gemm's B (kdim x oh*ow): column q is output pixel q, row
 * (ci * kh + i) * kw + j its window's tap (i, j) on channel ci, 0 in the padding. */
typedef struct conv_windows {
    const dl_kernel *k;
    const float *x; /* the group's first input channel */
    int64_t kdim, plane;
} conv_windows;

/* cpu_gemm_pack_fn of B: pixels panel * NR .. of the windows, taps p0 .. p0+kc-1, into dst (kc x NR).
 * The panel's pixels fall into runs along output rows; each tap reads a run's floats `sw` apart
 * from one input row, with a bounds test per pixel only where the run meets the padding. */
static void pack_windows(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    const conv_windows *cw = ctx;
    const dl_op_attrs *a = &cw->k->g.a;
    const int64_t h = cw->k->g.xs[2], w = cw->k->g.xs[3], ow = cw->k->g.ys[3];
    const int kh = a->kernel[0], kw = a->kernel[1], dh = a->dilation[0], dw = a->dilation[1];
    const int64_t sw = a->stride[1];
    const int64_t q0 = panel * CPU_GEMM_NR, cols = cw->plane - q0 < CPU_GEMM_NR ? cw->plane - q0 : CPU_GEMM_NR;
    /* runs: pixels [t0[s], t0[s + 1]) of the panel share output row; iy0, ix0 of their first */
    int t0[CPU_GEMM_NR + 1], runs = 0;
    int64_t iy0[CPU_GEMM_NR], ix0[CPU_GEMM_NR];
    for (int t = 0; t < cols;) {
        const int64_t q = q0 + t, oy = q / ow, ox = q % ow;
        const int len = (int)(ow - ox < cols - t ? ow - ox : cols - t);
        t0[runs] = t, iy0[runs] = oy * a->stride[0] - a->pad_begin[0], ix0[runs] = ox * sw - a->pad_begin[1];
        runs++, t += len;
    }
    t0[runs] = (int)cols;
    int64_t ci = p0 / (kh * kw); /* row p0 is tap (i, j) of channel ci */
    int i = (int)(p0 / kw % kh), j = (int)(p0 % kw);
    for (int64_t r = 0; r < kc; r++) {
        const float *src = cw->x + ci * h * w;
        float *d = dst + r * CPU_GEMM_NR;
        const int64_t di = (int64_t)i * dh, dj = (int64_t)j * dw;
        if (++j == kw && (j = 0, ++i == kh)) i = 0, ci++;
        for (int s = 0; s < runs; s++) {
            const int64_t iy = iy0[s] + di, ix = ix0[s] + dj, len = t0[s + 1] - t0[s];
            float *o = d + t0[s];
            if (iy < 0 || iy >= h) {
                memset(o, 0, (size_t)len * sizeof *o);
                continue;
            }
            const float *row = src + iy * w;
            if (ix >= 0 && ix + (len - 1) * sw < w) { /* inside the image */
                const float *restrict run = row + ix;
                if (sw == 1) memcpy(o, run, (size_t)len * sizeof *o);
                else if (sw == 2) /* a constant stride: the loop vectorises as loads and shuffles */
                    for (int64_t t = 0; t < len; t++) o[t] = run[2 * t];
                else
                    for (int64_t t = 0; t < len; t++) o[t] = run[t * sw];
                continue;
            }
            for (int64_t t = 0, x = ix; t < len; t++, x += sw) o[t] = x >= 0 && x < w ? row[x] : 0.0f;
        }
        for (int64_t t = cols; t < CPU_GEMM_NR; t++) d[t] = 0.0f;
    }
}

static void conv_packed(const dl_kernel *k, const float *x, const float *b, float *y, float *ws) {
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], plane = k->g.ys[2] * k->g.ys[3];
    const int64_t g = k->g.a.groups, cg = c / g, ocg = oc / g, kdim = cg * k->g.a.kernel[0] * k->g.a.kernel[1];
    const size_t per = cpu_gemm_packed_a_floats(ocg, kdim);
    const int plain = plain_1x1(&k->g.a);
    for (int64_t i = 0; i < n; i++)
        for (int64_t gi = 0; gi < g; gi++) {
            const float *xg = x + (i * c + gi * cg) * h * wd;
            /* the image as B: its channels' rows as they lie (a 1x1 conv), or the windows tap by tap */
            const cpu_gemm_strided rows = {xg, plane, 1, cg, plane};
            const conv_windows win = {k, xg, kdim, plane};
            const cpu_gemm_operand wt = {k->packed + (size_t)gi * per, NULL, NULL};
            const cpu_gemm_operand img = {NULL, plain ? cpu_gemm_pack_b_strided : pack_windows,
                                          plain ? (const void *)&rows : (const void *)&win};
            const cpu_gemm_epilogue e = {b ? b + gi * ocg : NULL, NULL, &k->g.a};
            cpu_gemm(ocg, plane, kdim, &wt, &img, y + (i * oc + gi * ocg) * plane, plane, &e, ws, k->threads);
        }
}

void cpu_conv2d(const dl_kernel *k, const dl_tensor *in, float *y, void *workspace) {
    const float *x = in[0].data, *w = in[1].data, *b = k->g.has_bias ? in[2].data : NULL;
    float *ws = workspace;
    if (k->conv_mode == CONV_DEPTHWISE) {
        cpu_depthwise(k, in, y, ws);
        return;
    }
    if (k->conv_mode == CONV_WINOGRAD) {
        cpu_winograd_run(&k->wg, x, b, &k->g.a, y, ws);
        return;
    }
    if (k->conv_mode == CONV_PACKED) {
        conv_packed(k, x, b, y, ws);
        return;
    }
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], plane = k->g.ys[2] * k->g.ys[3];
    const int g = k->g.a.groups;
    const int cg = (int)(c / g), ocg = (int)(oc / g);
    const int kdim = cg * k->g.a.kernel[0] * k->g.a.kernel[1];
    for (int64_t i = 0; i < n; i++) {
        for (int gi = 0; gi < g; gi++) {
            const float *xg = x + ((size_t)i * c + (size_t)gi * cg) * (size_t)(h * wd);
            const float *wg = w + (size_t)gi * ocg * kdim;
            float *yg = y + ((size_t)i * oc + (size_t)gi * ocg) * (size_t)plane;
            const float *bg = b ? b + (size_t)gi * ocg : NULL;
            if (k->conv_mode != CONV_GEMM_1X1) im2col(k, xg, cg, ws);
            gemm_bias_act(ocg, plane, kdim, wg, k->conv_mode == CONV_GEMM_1X1 ? xg : ws, yg, bg, &k->g.a);
        }
    }
}
