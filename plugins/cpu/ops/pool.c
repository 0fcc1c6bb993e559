/* pool.c — max, average and global average pooling on the CPU, with PyTorch's semantics for
 * padding (never the max; counted in the average only with count_include_pad), ceil_mode and
 * (max only) dilation. Max pooling: VGG's 2x2 stride-2 windows have a loop of their own; every
 * other window goes 8 channels at a time through window8.c, padded with -inf. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

/* VGG's pools: 2x2 stride 2, every window inside */
static int vgg_pool(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    return a->kernel[0] == 2 && a->kernel[1] == 2 && a->stride[0] == 2 && a->stride[1] == 2 && !a->pad_begin[0] &&
           a->dilation[0] == 1 && a->dilation[1] == 1 && !a->pad_begin[1] && 2 * k->g.ys[2] <= k->g.xs[2] &&
           2 * k->g.ys[3] <= k->g.xs[3];
}

size_t cpu_maxpool2d_workspace(const dl_kernel *k) { return k->cl || vgg_pool(k) ? 0 : cpu_window8_workspace(k); }

void cpu_maxpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    if (k->cl) {
        cpu_maxpool2d_nhwc(k, in, y);
        return;
    }
    if (!vgg_pool(k)) {
        cpu_maxpool8(k, x, y, ws);
        return;
    }
    const int64_t planes = k->g.xs[0] * k->g.xs[1], h = k->g.xs[2], w = k->g.xs[3], oh = k->g.ys[2], ow = k->g.ys[3];
    CPU_FOR(
        planes * oh * ow * 4, p, planes, for (int64_t oy = 0; oy < oh; oy++) {
            const float *r0 = x + p * h * w + 2 * oy * w, *r1 = r0 + w;
            float *dst = y + p * oh * ow + oy * ow;
            for (int64_t ox = 0; ox < ow; ox++)
                dst[ox] = cpu_max_nan(cpu_max_nan(r0[2 * ox], r0[2 * ox + 1]), cpu_max_nan(r1[2 * ox], r1[2 * ox + 1]));
        });
}

void cpu_avgpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    if (k->cl) {
        cpu_avgpool2d_nhwc(k, in, y);
        return;
    }
    const dl_op_attrs *a = &k->g.a;
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t p = 0; p < planes; p++) {
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
        });
}

void cpu_global_avgpool(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    if (k->cl) {
        cpu_global_avgpool_nhwc(k, in, y);
        return;
    }
    const int64_t planes = k->g.xs[0] * k->g.xs[1], plane = k->g.xs[2] * k->g.xs[3];
    CPU_FOR(planes * plane, p, planes, y[p] = (float)(cpu_sum_f64(x + p * plane, plane) / (double)plane););
}
