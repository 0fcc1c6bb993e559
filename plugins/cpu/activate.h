/* activate.h — the fused activations (dl_activation) the CPU kernels apply in their epilogues
 * (conv2d, winograd, linear, add, batchnorm), computed as the activation ops compute them. */
#ifndef DLRUN_CPU_ACTIVATE_H
#define DLRUN_CPU_ACTIVATE_H
#include <math.h>

#include "dlrun/plugin.h"

/* A fused activation (dl_activation) of v, as the activation ops compute it; NaN stays NaN. */
static inline float cpu_activate(float v, int act) {
    switch (act) {
    case DL_ACT_RELU: return v < 0 ? 0.0f : v;
    case DL_ACT_SILU: {
        float e = expf(-fabsf(v));
        return v * (v >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e));
    }
    case DL_ACT_HARD_SWISH: {
        float t = v + 3.0f;
        return v * (t < 0 ? 0.0f : t > 6.0f ? 6.0f : t) / 6.0f;
    }
    case DL_ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case DL_ACT_GELU_TANH: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    default: return v;
    }
}
#endif
