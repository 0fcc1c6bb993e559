/* pool.c — max, average and global average pooling on the CPU, with PyTorch's semantics for
 * padding (never the max; counted in the average only with count_include_pad), ceil_mode and
 * (max only) dilation. */
#include <float.h>
#include <string.h>

#include "cpu_ops.h"

/* max that lets NaN through, as PyTorch does: a NaN in v wins the compare (it is false), a NaN
 * already in m stays. Written as two selects so it compiles without branches (random data made
 * the short-circuit form mispredict on every other element). */
static inline float nanmax(float m, float v) {
    float r = m > v ? m : v;
    return m != m ? m : r;
}

/* The taps start + t*d (t in [0, k)) that land in [0, n): t in [*t0, *t1). */
static inline void tap_range(int start, int k, int d, int n, int *t0, int *t1) {
    *t0 = start < 0 ? (-start + d - 1) / d : 0;
    int last = (n - 1 - start) / d + 1; /* first t past the end (start <= n-1 always: pads < extent) */
    *t1 = start > n - 1 ? 0 : last < k ? last : k;
}

size_t cpu_maxpool2d_workspace(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    if (a->dilation[0] != 1 || a->dilation[1] != 1) return 0;
    /* per output column its window [lo, hi), then one row-max buffer per thread */
    return (size_t)k->g.ys[3] * 2 * sizeof(int) + 64 +
           (size_t)k->threads * (size_t)k->g.xs[2] * (size_t)k->g.ys[3] * sizeof(float);
}

void cpu_maxpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    const dl_op_attrs *a = &k->g.a;
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    if (a->kernel[0] == 2 && a->kernel[1] == 2 && a->stride[0] == 2 && a->stride[1] == 2 && !a->pad_begin[0] &&
        a->dilation[0] == 1 && a->dilation[1] == 1 && !a->pad_begin[1] && 2 * oh <= h &&
        2 * ow <= w) { /* VGG's pools: every window inside */
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
    const int sh = a->stride[0], sw = a->stride[1], ph = a->pad_begin[0], pw = a->pad_begin[1];
    if (dh == 1 && dw == 1) {
        /* separable: the max over each row's window first (hmax[iy][ox]), then over the rows of
         * each output's window, a contiguous loop over ox that vectorizes */
        int *lo = ws, *hi = lo ? lo + ow : NULL; /* ws: cpu_maxpool2d_workspace() bytes */
        float *rows = lo ? (float *)((char *)ws + (((size_t)ow * 2 * sizeof(int) + 63) & ~(size_t)63)) : NULL;
        if (lo) {
            for (int ox = 0; ox < ow; ox++) {
                int x0 = ox * sw - pw, x1 = x0 + kw;
                lo[ox] = x0 < 0 ? 0 : x0;
                hi[ox] = x1 > w ? w : x1;
            }
#pragma omp parallel num_threads(k->threads)
            {
                float *hmax = rows + (size_t)omp_get_thread_num() * (size_t)h * (size_t)ow;
#pragma omp for schedule(static)
                for (int64_t p = 0; p < planes; p++) {
                    const float *src = x + p * h * w;
                    float *dst = y + p * oh * ow;
                    for (int iy = 0; iy < h; iy++) {
                        const float *row = src + (int64_t)iy * w;
                        float *hm = hmax + (int64_t)iy * ow;
                        for (int ox = 0; ox < ow; ox++) {
                            float m = row[lo[ox]];
                            for (int ix = lo[ox] + 1; ix < hi[ox]; ix++) m = nanmax(m, row[ix]);
                            hm[ox] = m;
                        }
                    }
                    for (int oy = 0; oy < oh; oy++) {
                        int y0 = oy * sh - ph, y1 = y0 + kh;
                        if (y0 < 0) y0 = 0;
                        if (y1 > h) y1 = h;
                        float *out = dst + (int64_t)oy * ow;
                        memcpy(out, hmax + (int64_t)y0 * ow, (size_t)ow * sizeof *out);
                        for (int iy = y0 + 1; iy < y1; iy++) {
                            const float *hm = hmax + (int64_t)iy * ow;
                            for (int ox = 0; ox < ow; ox++) out[ox] = nanmax(out[ox], hm[ox]);
                        }
                    }
                }
            }
            return;
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        const float *src = x + p * h * w;
        float *dst = y + p * oh * ow;
        for (int oy = 0; oy < oh; oy++) {
            const int y0 = oy * sh - ph;
            int i0, i1; /* taps y0 + i*dh inside the image: i in [i0, i1) */
            tap_range(y0, kh, dh, h, &i0, &i1);
            for (int ox = 0; ox < ow; ox++) {
                const int x0 = ox * sw - pw;
                int j0, j1;
                tap_range(x0, kw, dw, w, &j0, &j1);
                float m = -FLT_MAX;
                for (int i = i0; i < i1; i++) {
                    const float *row = src + (int64_t)(y0 + i * dh) * w + x0;
                    for (int j = j0; j < j1; j++) m = nanmax(m, row[j * dw]);
                }
                dst[oy * ow + ox] = m;
            }
        }
    }
}

void cpu_avgpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
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

void cpu_global_avgpool(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    const int64_t planes = k->g.xs[0] * k->g.xs[1], plane = k->g.xs[2] * k->g.xs[3];
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        double s = 0;
        for (int64_t i = 0; i < plane; i++) s += x[p * plane + i];
        y[p] = (float)(s / (double)plane);
    }
}
