/* conv_transpose.c — transposed 2-D convolution on the CPU (PyTorch's ConvTranspose2d): per image
 * and group, one GEMM gives every input pixel's contribution to each (output channel, tap), and
 * col2im adds those into the output at stride, padding and dilation; then bias and a fused
 * activation. */
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"

/* The GEMM's result: [OC/groups * KH * KW, H * W] floats; SIZE_MAX when that is past 2^50 bytes
 * (counted in double: the product of sizes a model declares can overflow 64 bits). */
size_t cpu_conv_transpose2d_workspace(const dl_kernel *k) {
    const double n = (double)(k->g.ys[1] / k->g.a.groups) * k->g.a.kernel[0] * k->g.a.kernel[1] * (double)k->g.xs[2] *
                     (double)k->g.xs[3];
    return n * sizeof(float) > 0x1p50 ? SIZE_MAX : (size_t)n * sizeof(float);
}

void cpu_sgemm_columns(int trans_w, int m, int64_t n, int kdim, const float *w, const float *x, float *y, int64_t ldy) {
    CPU_PAR("omp parallel", {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
        int64_t c0 = (int64_t)t * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
        if (c1 > c0) cpu_sgemm(trans_w, 0, m, c1 - c0, kdim, 1.0f, w, trans_w ? m : kdim, x + c0, n, 0.0f, y + c0, ldy);
    });
}

void cpu_conv_transpose2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const float *x = in[0].data, *w = in[1].data, *b = g->has_bias ? in[2].data : NULL;
    float *cols = ws;
    const int64_t n = g->xs[0], c = g->xs[1], h = g->xs[2], wd = g->xs[3], oc = g->ys[1], oh = g->ys[2], ow = g->ys[3];
    const int groups = a->groups, kh = a->kernel[0], kw = a->kernel[1];
    const int64_t cg = c / groups, ocg = oc / groups, plane = oh * ow;
    memset(y, 0, (size_t)(n * oc * plane) * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        for (int gi = 0; gi < groups; gi++) {
            const float *xg = x + (i * c + gi * cg) * h * wd, *wg = w + gi * cg * ocg * kh * kw;
            cpu_sgemm_columns(1, (int)(ocg * kh * kw), h * wd, (int)cg, wg, xg, cols, h * wd);
            /* col2im: each output channel's taps land in its own plane, so channels run in parallel */
            CPU_PAR(
                "omp parallel for schedule(static)", for (int64_t o = 0; o < ocg; o++) {
                    float *dst = y + (i * oc + gi * ocg + o) * plane;
                    for (int ty = 0; ty < kh; ty++)
                        for (int tx = 0; tx < kw; tx++) {
                            const float *src = cols + ((o * kh + ty) * kw + tx) * h * wd;
                            for (int64_t iy = 0; iy < h; iy++) {
                                int64_t oy = iy * a->stride[0] - a->pad_begin[0] + (int64_t)ty * a->dilation[0];
                                if (oy < 0 || oy >= oh) continue;
                                for (int64_t ix = 0; ix < wd; ix++) {
                                    int64_t ox = ix * a->stride[1] - a->pad_begin[1] + (int64_t)tx * a->dilation[1];
                                    if (ox >= 0 && ox < ow) dst[oy * ow + ox] += src[iy * wd + ix];
                                }
                            }
                        }
                });
        }
    if (!b && a->activation == DL_ACT_NONE) return;
    CPU_PAR("omp parallel for schedule(static)",
            for (int64_t p = 0; p < n * oc; p++) cpu_bias_act(y + p * plane, plane, b ? b[p % oc] : 0.0f, a););
}
