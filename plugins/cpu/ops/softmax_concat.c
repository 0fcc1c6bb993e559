/* softmax_concat.c — softmax and log_softmax along any axis (max-subtracted, summed in double)
 * and concat along any axis, on the CPU. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

/* softmax or (log) its logarithm along the axis: the max subtracted, exp in float, the sum in
 * double. */
static void softmax_along(const dl_kernel *k, const float *x, float *y, int log_of) {
    int64_t outer = 1, inner = 1, len = k->g.xs[k->g.a.axis];
    for (int d = 0; d < k->g.a.axis; d++) outer *= k->g.xs[d];
    for (int d = k->g.a.axis + 1; d < k->g.xnd; d++) inner *= k->g.xs[d];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < outer * inner; r++) {
        const float *src = x + (r / inner) * len * inner + r % inner;
        float *dst = y + (r / inner) * len * inner + r % inner;
        float m = -INFINITY;
        for (int64_t i = 0; i < len; i++) m = src[i * inner] > m || isnan(src[i * inner]) ? src[i * inner] : m;
        double s = 0;
        if (log_of) {
            for (int64_t i = 0; i < len; i++) s += expf(src[i * inner] - m);
            const float ls = (float)log(s);
            for (int64_t i = 0; i < len; i++) dst[i * inner] = src[i * inner] - m - ls;
        } else { /* each exp once: kept in dst, then scaled (dst may be src: element i read first) */
            for (int64_t i = 0; i < len; i++) s += dst[i * inner] = expf(src[i * inner] - m);
            const float inv = (float)(1.0 / s);
            for (int64_t i = 0; i < len; i++) dst[i * inner] *= inv;
        }
    }
}

void cpu_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, softmax_along(k, in[0].data, y, 0);
}
void cpu_log_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, softmax_along(k, in[0].data, y, 1);
}

void cpu_concat(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_tensor *inputs = in;
    (void)ws;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < k->g.a.axis; d++) outer *= k->g.ys[d];
    for (int d = k->g.a.axis + 1; d < k->g.ynd; d++) inner *= k->g.ys[d];
    const int64_t row = k->g.ys[k->g.a.axis] * inner;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int i = 0; i < k->g.n_inputs; i++) {
            int64_t chunk = k->g.cat_len[i] * inner;
            memcpy(y + o * row + off, (const float *)inputs[i].data + o * chunk, (size_t)chunk * sizeof *y);
            off += chunk;
        }
    }
}
