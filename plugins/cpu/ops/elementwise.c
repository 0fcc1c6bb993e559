/* elementwise.c — relu, leaky_relu, sigmoid, clip, batchnorm (inference) and the copies that flatten
 * and dropout are at inference, on the CPU (add and the other arithmetic: math.c). */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

void cpu_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    /* the fused epilogue's relu (NaN stays NaN, as in PyTorch; `x > 0 ? x : 0` made it 0) */
    CPU_FOR(k->g.numel, i, k->g.numel, y[i] = cpu_activate(x[i], DL_ACT_RELU, NULL););
}

void cpu_leaky_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    CPU_FOR(k->g.numel, i, k->g.numel, y[i] = cpu_activate(x[i], DL_ACT_LEAKY_RELU, &k->g.a););
}

void cpu_sigmoid(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    CPU_FOR(k->g.numel, i, k->g.numel, y[i] = cpu_activate(x[i], DL_ACT_SIGMOID, NULL););
}

void cpu_clip(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    CPU_FOR(k->g.numel, i, k->g.numel, y[i] = cpu_activate(x[i], DL_ACT_CLIP, &k->g.a););
}

void cpu_copy(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data;
    (void)ws;
    if (y != x) memcpy(y, x, (size_t)k->g.numel * sizeof *y); /* in place: nothing to do */
}

void cpu_batchnorm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *x = in[0].data, *gamma = in[1].data, *beta = in[2].data, *mean = in[3].data, *var = in[4].data;
    (void)ws;
    const int64_t n = k->g.xs[0], c = k->g.xs[1];
    int64_t inner = 1;
    for (int d = 2; d < k->g.xnd; d++) inner *= k->g.xs[d];
    const int act = k->g.a.activation;
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
            dst[i] = cpu_activate(v, act, &k->g.a);
        }
    }
}
