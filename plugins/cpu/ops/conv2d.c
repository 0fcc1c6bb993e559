/* conv2d.c — 2-D convolution on the CPU: a direct kernel for depthwise convs (depthwise.c), Winograd
 * F(4x4,3x3) for 3x3 stride-1 convs with enough channels, a plain GEMM for 1x1 stride-1 unpadded
 * convs, im2col + GEMM for everything else (strides, dilation, groups, padding). Bias and the
 * fused activation are applied to each block of output as the GEMM produces it. */
#include <cblas.h>
#include <string.h>

#include "cpu_ops.h"

dl_status cpu_conv2d_prepare(dl_kernel *k, const dl_op *op) {
    const dl_op_attrs *a = &k->g.a;
    const dl_tensor *w = &op->inputs[1];
    int64_t c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3], oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3];
    if (cpu_depthwise_suits(k)) {
        k->conv_mode = CONV_DEPTHWISE;
        k->workspace = cpu_depthwise_workspace(k);
        return DL_OK;
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
    if (a->kernel[0] == 1 && a->kernel[1] == 1 && a->stride[0] == 1 && a->stride[1] == 1 && a->pad_begin[0] == 0 &&
        a->pad_begin[1] == 0 && a->pad_end[0] == 0 && a->pad_end[1] == 0) {
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
