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

void cpu_batchnorm_coeffs(const dl_tensor *in, int64_t ch, double eps, float *s, float *t) {
    const float *gamma = in[1].data, *beta = in[2].data, *mean = in[3].data, *var = in[4].data;
    const double scale = gamma[ch] / sqrt((double)var[ch] + eps);
    *s = (float)scale, *t = (float)(beta[ch] - mean[ch] * scale);
}

void cpu_batchnorm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    if (k->cl) {
        cpu_batchnorm_nhwc(k, in, y, ws);
        return;
    }
    const float *x = in[0].data;
    const int64_t n = k->g.xs[0], c = k->g.xs[1];
    int64_t inner = 1;
    for (int d = 2; d < k->g.xnd; d++) inner *= k->g.xs[d];
    const dl_op_attrs at = k->g.a; /* a local copy: clip's bounds stay in registers */
    /* the common activations each a loop of its own, which vectorises (a switch inside did not) */
#define BN_PLANE(ACT) \
    for (int64_t i = 0; i < inner; i++) dst[i] = cpu_activate(src[i] * s + t, ACT, &at)
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t p = 0; p < n * c; p++) {
            float s, t;
            cpu_batchnorm_coeffs(in, p % c, at.epsilon, &s, &t);
            const float *src = x + p * inner;
            float *dst = y + p * inner;
            switch (at.activation) {
            case DL_ACT_NONE: BN_PLANE(DL_ACT_NONE); break;
            case DL_ACT_RELU: BN_PLANE(DL_ACT_RELU); break;
            case DL_ACT_CLIP: BN_PLANE(DL_ACT_CLIP); break;
            default: BN_PLANE(at.activation);
            }
        });
#undef BN_PLANE
}
