/* conv3d.c — 3-D convolution on the CPU (PyTorch's Conv3d): for each image, group and output
 * depth, the input taps of that slice are gathered into columns (im2col over depth, height and
 * width, zeros where the window reaches into padding), and one GEMM of the group's weight by
 * them writes the slice of every output channel of the group; then bias and a fused activation.
 * Only one slice's columns exist at a time, so the workspace stays small for long clips. */
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"

/* One output depth slice's columns: [C/groups * KD * KH * KW, OH * OW] floats; SIZE_MAX when
 * that is past 2^50 bytes (counted in double: a hostile model's sizes overflow 64 bits). */
size_t cpu_conv3d_workspace(const dl_kernel *k) {
    const dl_op_geom *g = &k->g;
    const int32_t *kk = g->a.kernel3;
    const double n = (double)(g->xs[1] / g->a.groups) * kk[0] * kk[1] * kk[2] * (double)g->ys[3] * (double)g->ys[4];
    return n * sizeof(float) > 0x1p50 ? SIZE_MAX : (size_t)n * sizeof(float);
}

/* cols[(c, td, ty, tx)][(oy, ox)] = x[c][od * sd - pd + td * dd][oy * sh - ph + ty * dh][ox * sw - pw + tx * dw],
 * 0 outside the input; x is one group's channels of one image. */
static void im2col3d(const dl_op_geom *g, const float *x, int64_t cg, int64_t od, float *cols) {
    const dl_op_attrs *a = &g->a;
    const int kd = a->kernel3[0], kh = a->kernel3[1], kw = a->kernel3[2];
    const int64_t d = g->xs[2], h = g->xs[3], w = g->xs[4], oh = g->ys[3], ow = g->ys[4], plane = oh * ow;
    const int64_t rows = cg * kd * kh * kw;
    CPU_FOR(rows * plane, r, rows, {
        const int tx = (int)(r % kw), ty = (int)(r / kw % kh), td = (int)(r / ((int64_t)kw * kh) % kd);
        const int64_t c = r / ((int64_t)kw * kh * kd);
        const int64_t z = od * a->stride3[0] - a->pad_begin3[0] + (int64_t)td * a->dilation3[0];
        float *dst = cols + r * plane;
        if (z < 0 || z >= d) {
            memset(dst, 0, (size_t)plane * sizeof *dst);
        } else {
            const float *src = x + (c * d + z) * h * w;
            for (int64_t oy = 0; oy < oh; oy++) {
                const int64_t iy = oy * a->stride3[1] - a->pad_begin3[1] + (int64_t)ty * a->dilation3[1];
                float *row = dst + oy * ow;
                if (iy < 0 || iy >= h) {
                    memset(row, 0, (size_t)ow * sizeof *row);
                    continue;
                }
                const float *in = src + iy * w;
                const int64_t x0 = (int64_t)tx * a->dilation3[2] - a->pad_begin3[2], sw = a->stride3[2];
                for (int64_t ox = 0; ox < ow; ox++) {
                    const int64_t ix = ox * sw + x0;
                    row[ox] = ix >= 0 && ix < w ? in[ix] : 0.0f;
                }
            }
        }
    });
}

void cpu_conv3d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const float *x = in[0].data, *w = in[1].data, *b = g->has_bias ? in[2].data : NULL;
    const int64_t n = g->xs[0], c = g->xs[1], vol = g->xs[2] * g->xs[3] * g->xs[4];
    const int64_t oc = g->ys[1], od = g->ys[2], plane = g->ys[3] * g->ys[4], ovol = od * plane;
    const int groups = a->groups;
    const int64_t cg = c / groups, ocg = oc / groups;
    const int64_t kdim = cg * a->kernel3[0] * a->kernel3[1] * a->kernel3[2];
    for (int64_t i = 0; i < n; i++)
        for (int gi = 0; gi < groups; gi++) {
            const float *xg = x + (i * c + gi * cg) * vol, *wg = w + gi * ocg * kdim;
            for (int64_t z = 0; z < od; z++) {
                im2col3d(g, xg, cg, z, ws);
                /* the slice z of output channels gi * ocg ... : rows ovol apart */
                cpu_sgemm_columns(0, (int)ocg, plane, (int)kdim, wg, ws, y + (i * oc + gi * ocg) * ovol + z * plane,
                                  ovol);
            }
        }
    if (!b && a->activation == DL_ACT_NONE) return;
    CPU_FOR(n * oc * ovol, p, n * oc, cpu_bias_act(y + p * ovol, ovol, b ? b[p % oc] : 0.0f, a););
}
