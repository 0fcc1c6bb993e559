/* softmax_concat.c — softmax and log_softmax along any axis (max-subtracted, summed in double)
 * and concat along any axis, on the CPU. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "vecw.h"

/* The largest of x[0..n) (step apart), NaN if any is NaN. Contiguous floats: a vector of running
 * maxima (vecw.h's, NaN winning), the last vector overlapping the one before (a float seen twice
 * changes no maximum), then the lanes' maximum. */
static float max_of(const float *x, int64_t n, int64_t step) {
    float m = -INFINITY;
    int64_t i = 0;
    if (step == 1 && n >= VW) {
        vw mv = loadw(x);
        for (i = VW; i + VW <= n; i += VW) mv = maxw(mv, loadw(x + i));
        if (i < n) mv = maxw(mv, loadw(x + n - VW));
            /* the lanes' maximum by halves: each step the maximum of a lane and its partner's */
#if VW == 16
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#else
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 4, 5, 6, 7, 0, 1, 2, 3));
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 2, 3, 0, 1, 6, 7, 4, 5));
        mv = maxw(mv, __builtin_shufflevector(mv, mv, 1, 0, 3, 2, 5, 4, 7, 6));
#endif
        return mv[0];
    }
    for (; i < n; i++) m = cpu_max_nan(m, x[i * step]);
    return m;
}

/* Softmax or (log_of) its logarithm along one row: len floats `inner` apart from src into dst (dst
 * may be src: element i is read first). The max is subtracted, so exp's argument is never above 0
 * (cpu_exp_neg); the sum is in double. */
static void softmax_row(const float *src, float *dst, int64_t len, int64_t inner, int log_of) {
    const float m = max_of(src, len, inner);
    if (inner == 1 && !log_of) { /* a row of contiguous floats: whole vectors, the last one masked */
        const vw mv = splatw(m);
        const int tail = (int)(len % VW);
        int64_t i = 0;
        for (; i + VW <= len; i += VW) storew(dst + i, expw_neg(loadw(src + i) - mv));
        if (tail) storew_n(dst + i, expw_neg(loadw_n(src + i, tail) - mv), tail);
        const vw inv = splatw((float)(1.0 / cpu_sum_f64(dst, len)));
        for (i = 0; i + VW <= len; i += VW) storew(dst + i, loadw(dst + i) * inv);
        if (tail) storew_n(dst + i, loadw_n(dst + i, tail) * inv, tail);
        return;
    }
    double s = 0;
    if (log_of) {
        for (int64_t i = 0; i < len; i++) s += cpu_exp_neg(src[i * inner] - m);
        const float ls = (float)log(s);
        for (int64_t i = 0; i < len; i++) dst[i * inner] = src[i * inner] - m - ls;
        return;
    }
    for (int64_t i = 0; i < len; i++) dst[i * inner] = cpu_exp_neg(src[i * inner] - m); /* vectorises at inner 1 */
    if (inner == 1) s = cpu_sum_f64(dst, len);
    else
        for (int64_t i = 0; i < len; i++) s += dst[i * inner];
    const float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < len; i++) dst[i * inner] *= inv;
}

static void softmax_along(const dl_kernel *k, const float *x, float *y, int log_of) {
    int64_t outer = 1, inner = 1, len = k->g.xs[k->g.a.axis];
    for (int d = 0; d < k->g.a.axis; d++) outer *= k->g.xs[d];
    for (int d = k->g.a.axis + 1; d < k->g.xnd; d++) inner *= k->g.xs[d];
    const int64_t off_per_outer = len * inner;
    CPU_FOR(k->g.numel, r, outer * inner, const int64_t at = (r / inner) * off_per_outer + r % inner;
            softmax_row(x + at, y + at, len, inner, log_of););
}

void cpu_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, softmax_along(k, in[0].data, y, 0);
}
void cpu_log_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, softmax_along(k, in[0].data, y, 1);
}

/* n floats from src to dst: a vector at a time up to 256 floats, memcpy beyond. A concat along
 * channels in channels-last storage copies each pixel's run of each input (64 floats in SqueezeNet's
 * fire modules), and a call to memcpy a run cost more than the copy: SqueezeNet's first join (1.5
 * MB out) took 0.024 ms on 2 threads, 6050 calls of 256 bytes. */
static inline void copy_run(float *dst, const float *src, int64_t n) {
    if (n > 256) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
    int64_t j = 0;
    for (; j + VW <= n; j += VW) storew(dst + j, loadw(src + j));
    if (j < n) storew_n(dst + j, loadw_n(src + j, (int)(n - j)), (int)(n - j));
}

/* Rows of the output (the dims before the axis) shared out in tasks of about 16384 floats, each
 * row the inputs' runs one after the other. */
void cpu_concat(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < k->g.a.axis; d++) outer *= k->g.ys[d];
    for (int d = k->g.a.axis + 1; d < k->g.ynd; d++) inner *= k->g.ys[d];
    if (outer == 0 || inner == 0 || k->g.ys[k->g.a.axis] == 0) return; /* an empty output */
    const int64_t row = k->g.ys[k->g.a.axis] * inner, per = row >= 16384 ? 1 : 16384 / row;
    const int64_t tasks = (outer + per - 1) / per;
    CPU_FOR(outer * row, q, tasks, {
        const int64_t o1 = (q + 1) * per < outer ? (q + 1) * per : outer;
        for (int64_t o = q * per; o < o1; o++) {
            int64_t off = 0;
            for (int i = 0; i < k->g.n_inputs; i++) {
                const int64_t chunk = k->g.cat_len[i] * inner;
                copy_run(y + o * row + off, (const float *)in[i].data + o * chunk, chunk);
                off += chunk;
            }
        }
    });
}
