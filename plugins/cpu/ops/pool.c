/* pool.c — max, average and global average pooling on the CPU, with PyTorch's semantics for
 * padding (never the max; counted in the average only with count_include_pad), ceil_mode and
 * (max only) dilation. */
#include <float.h>

#include "cpu_ops.h"

/* max that lets NaN through, as PyTorch does */
static inline float nanmax(float m, float v) { return (v > m || v != v) ? v : m; }

void cpu_maxpool2d(const dl_kernel *k, const float *x, float *y) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    if (a->kernel[0] == 2 && a->kernel[1] == 2 && a->stride[0] == 2 && a->stride[1] == 2 && !a->pad_begin[0] && a->dilation[0] == 1 && a->dilation[1] == 1 &&
        !a->pad_begin[1] && 2 * oh <= h && 2 * ow <= w) { /* VGG's pools: every window inside */
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < planes; p++)
            for (int oy = 0; oy < oh; oy++) {
                const float *r0 = x + p * h * w + (int64_t)2 * oy * w, *r1 = r0 + w;
                float *dst = y + p * oh * ow + (int64_t)oy * ow;
                for (int ox = 0; ox < ow; ox++)
                    dst[ox] = nanmax(nanmax(r0[2 * ox], r0[2 * ox + 1]), nanmax(r1[2 * ox], r1[2 * ox + 1]));
            }
        return;
    }
    const int kh = a->kernel[0], kw = a->kernel[1], dh = a->dilation[0], dw = a->dilation[1];
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        const float *src = x + p * h * w;
        float *dst = y + p * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            const int y0 = oy * a->stride[0] - a->pad_begin[0];
            for (int ox = 0; ox < ow; ox++) {
                const int x0 = ox * a->stride[1] - a->pad_begin[1];
                float m = -FLT_MAX; /* taps y0 + i*dh, x0 + j*dw that fall inside the image */
                for (int i = 0; i < kh; i++) {
                    int iy = y0 + i * dh;
                    if (iy < 0 || iy >= h) continue;
                    for (int j = 0; j < kw; j++) {
                        int ix = x0 + j * dw;
                        if (ix >= 0 && ix < w) m = nanmax(m, src[iy * w + ix]);
                    }
                }
                dst[oy * ow + ox] = m;
            }
        }
    }
}

void cpu_avgpool2d(const dl_kernel *k, const float *x, float *y) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        const float *src = x + p * h * w;
        float *dst = y + p * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            int y0 = oy * a->stride[0] - a->pad_begin[0];
            int y1 = y0 + a->kernel[0] < h + a->pad_end[0] ? y0 + a->kernel[0] : h + a->pad_end[0];
            int ylen = y1 - y0;
            if (y0 < 0) y0 = 0;
            if (y1 > h) y1 = h;
            for (int ox = 0; ox < ow; ox++) {
                int x0 = ox * a->stride[1] - a->pad_begin[1];
                int x1 = x0 + a->kernel[1] < w + a->pad_end[1] ? x0 + a->kernel[1] : w + a->pad_end[1];
                int xlen = x1 - x0;
                if (x0 < 0) x0 = 0;
                if (x1 > w) x1 = w;
                double s = 0;
                for (int iy = y0; iy < y1; iy++)
                    for (int ix = x0; ix < x1; ix++) s += src[iy * w + ix];
                int count = a->count_include_pad ? ylen * xlen : (y1 - y0) * (x1 - x0);
                dst[oy * ow + ox] = count > 0 ? (float)(s / count) : 0.0f;
            }
        }
    }
}

void cpu_global_avgpool(const dl_kernel *k, const float *x, float *y) {
    const int64_t planes = k->g.xs[0] * k->g.xs[1], plane = k->g.xs[2] * k->g.xs[3];
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        double s = 0;
        for (int64_t i = 0; i < plane; i++) s += x[p * plane + i];
        y[p] = (float)(s / (double)plane);
    }
}
