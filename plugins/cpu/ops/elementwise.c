/* elementwise.c — relu, leaky_relu, sigmoid, clip, add (numpy broadcasting), batchnorm (inference) and the copies
 * that flatten and dropout are at inference, on the CPU. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

void cpu_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < k->g.numel; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void cpu_leaky_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    const float alpha = k->g.a.alpha;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < k->g.numel; i++) y[i] = x[i] >= 0 ? x[i] : alpha * x[i];
}

void cpu_sigmoid(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < k->g.numel; i++) { /* never exp of a large positive number */
        float e = expf(-fabsf(x[i]));
        y[i] = x[i] >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
}

void cpu_clip(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    const float lo = k->g.a.clip_min, hi = k->g.a.clip_max;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < k->g.numel; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

void cpu_copy(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    if (y != x) memcpy(y, x, (size_t)k->g.numel * sizeof *y); /* in place: nothing to do */
}

void cpu_add(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *a = in[0].data, *b = in[1].data;
    (void)ws;
    const dl_op_geom *g = &k->g;
    const int relu = g->a.activation == DL_ACT_RELU;
    int64_t nb = 1;
    for (int d = 0; d < g->bnd; d++) nb *= g->bs[d];
    int64_t na = 1;
    for (int d = 0; d < g->xnd; d++) na *= g->xs[d];
    if (na == g->numel && nb == g->numel) { /* same shapes */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < g->numel; i++) {
            float v = a[i] + b[i];
            y[i] = relu && v < 0 ? 0.0f : v;
        }
        return;
    }
    /* numpy broadcasting: walk y row by row (its last dimension), each operand with its own
     * strides, 0 along the dimensions it repeats */
    const int nd = g->ynd;
    int64_t sa[8], sb[8];
    dl_bcast_strides(g->xnd, g->xs, nd, g->ys, sa);
    dl_bcast_strides(g->bnd, g->bs, nd, g->ys, sb);
    const int64_t len = g->ys[nd - 1], rows = g->numel / len, la = sa[nd - 1], lb = sb[nd - 1];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *pa = a + dl_bcast_offset(r, nd - 1, g->ys, sa), *pb = b + dl_bcast_offset(r, nd - 1, g->ys, sb);
        float *py = y + r * len;
        for (int64_t j = 0; j < len; j++) {
            float v = pa[j * la] + pb[j * lb];
            py[j] = relu && v < 0 ? 0.0f : v;
        }
    }
}

void cpu_batchnorm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data, *gamma = in[1].data, *beta = in[2].data, *mean = in[3].data, *var = in[4].data;
    (void)ws;
    const int64_t n = k->g.xs[0], c = k->g.xs[1];
    int64_t inner = 1;
    for (int d = 2; d < k->g.xnd; d++) inner *= k->g.xs[d];
    const int relu = k->g.a.activation == DL_ACT_RELU;
    const double eps = k->g.a.epsilon;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < n * c; p++) {
        int64_t ch = p % c;
        double scale = gamma[ch] / sqrt((double)var[ch] + eps);
        float s = (float)scale, t = (float)(beta[ch] - mean[ch] * scale);
        const float *src = x + p * inner;
        float *dst = y + p * inner;
        for (int64_t i = 0; i < inner; i++) {
            float v = src[i] * s + t;
            dst[i] = relu && v < 0 ? 0.0f : v;
        }
    }
}
