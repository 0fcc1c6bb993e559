/* pool.c — max, average and global average pooling on the CPU, with PyTorch's semantics for
 * padding (never the max; counted in the average only with count_include_pad), ceil_mode and
 * (max only) dilation. Max pooling: VGG's 2x2 stride-2 windows have a loop of their own; equal
 * strides take a flat loop per plane over its phase planes padded with -inf (phase.c); other
 * windows without dilation are pooled separably, and the rest window by window. */
#include <float.h>
#include <math.h>
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

/* VGG's pools: 2x2 stride 2, every window inside */
static int vgg_pool(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    return a->kernel[0] == 2 && a->kernel[1] == 2 && a->stride[0] == 2 && a->stride[1] == 2 && !a->pad_begin[0] &&
           a->dilation[0] == 1 && a->dilation[1] == 1 && !a->pad_begin[1] && 2 * k->g.ys[2] <= k->g.xs[2] &&
           2 * k->g.ys[3] <= k->g.xs[3];
}

size_t cpu_maxpool2d_workspace(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    cpu_phase ph;
    if (vgg_pool(k)) return 0;
    if (cpu_phase_init(&ph, &k->g)) return (size_t)k->threads * (size_t)ph.per_thread * sizeof(float);
    if (a->dilation[0] != 1 || a->dilation[1] != 1) return 0;
    /* per output column its window [lo, hi), then one row-max buffer per thread */
    return (size_t)k->g.ys[3] * 2 * sizeof(int) + 64 +
           (size_t)k->threads * (size_t)k->g.xs[2] * (size_t)k->g.ys[3] * sizeof(float);
}

/* The flat loop over each plane's phase planes (padding and the windows ceil_mode adds past the
 * end read -inf, never the max); 3x3 windows unrolled. */
/* Plane p of flat_maxpool. */
static void maxpool_plane(const dl_kernel *k, const cpu_phase *ph, const float *x, float *y, void *ws, int64_t p) {
    const int64_t h = k->g.xs[2], w = k->g.xs[3], oh = k->g.ys[2], ow = k->g.ys[3];
    const int is3x3 = k->g.a.kernel[0] == 3 && k->g.a.kernel[1] == 3;
    const int64_t *off = ph->off, nq = ph->nq;
    float *pad = (float *)ws + (size_t)omp_get_thread_num() * (size_t)ph->per_thread;
    float *restrict tmp = pad + ph->planes_end + CPU_PHASE_SLACK;
    cpu_phase_fill(ph, x + p * h * w, h, w, k->g.a.pad_begin[0], k->g.a.pad_begin[1], -INFINITY, pad);
    const float *restrict p0 = pad + off[0];
    if (is3x3) {
        const float *restrict p1 = pad + off[1], *restrict p2 = pad + off[2], *restrict p3 = pad + off[3];
        const float *restrict p4 = pad + off[4], *restrict p5 = pad + off[5], *restrict p6 = pad + off[6];
        const float *restrict p7 = pad + off[7], *restrict p8 = pad + off[8];
        for (int64_t q = 0; q < nq; q++) {
            float m = nanmax(nanmax(p0[q], p1[q]), nanmax(p2[q], p3[q]));
            m = nanmax(m, nanmax(nanmax(p4[q], p5[q]), nanmax(p6[q], p7[q])));
            tmp[q] = nanmax(m, p8[q]);
        }
    } else {
        for (int64_t q = 0; q < nq; q++) tmp[q] = p0[q];
        for (int64_t t = 1; t < ph->taps; t++) {
            const float *restrict pt = pad + off[t];
            for (int64_t q = 0; q < nq; q++) tmp[q] = nanmax(tmp[q], pt[q]);
        }
    }
    cpu_phase_store(ph, tmp, y + p * oh * ow, oh, ow);
}

static void flat_maxpool(const dl_kernel *k, const cpu_phase *ph, const float *x, float *y, void *ws) {
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    CPU_FOR(planes * k->g.ys[2] * k->g.ys[3] * ph->taps, p, planes, maxpool_plane(k, ph, x, y, ws, p););
}

void cpu_maxpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    const dl_op_attrs *a = &k->g.a;
    const int64_t planes = k->g.xs[0] * k->g.xs[1];
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    if (vgg_pool(k)) {
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
    cpu_phase phase;
    if (ws && cpu_phase_init(&phase, &k->g)) {
        flat_maxpool(k, &phase, x, y, ws);
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
    CPU_FOR(planes * plane, p, planes, y[p] = (float)(cpu_sum_f64(x + p * plane, plane) / (double)plane););
}
