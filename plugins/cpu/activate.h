/* activate.h — the fused activations (dl_activation) the CPU kernels apply in their epilogues
 * (conv2d, depthwise, winograd, linear, add, batchnorm, conv_transpose2d), and the activation ops
 * themselves: one formula for both. */
#ifndef DLRUN_CPU_ACTIVATE_H
#define DLRUN_CPU_ACTIVATE_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dlrun/plugin.h"

/* a * b + c in one rounding where the machine has FMA (-march=native), else as written. The ISO C
 * mode we build in (-std=c11) turns GCC's contraction off, so the polynomials below say so
 * themselves: half the instructions, and exp's and erf's polynomials are the cost of sigmoid,
 * SiLU and GELU. The portable build keeps a * b + c (fmaf there would be a call per element). */
#ifdef __FMA__
#define CPU_FMA(a, b, c) fmaf(a, b, c)
#else
#define CPU_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* erf(x) as x P(x^2) / Q(x^2), P and Q of degree 5: a rational fit on [0, 3.92] in double
 * (largest error 1.8e-8, P(0) = erf'(0); tools/fit_erf.py), |x| clamped to 3.92, where erf is 1
 * in float. Branch-free and without a table, so that loops over it vectorise: GELU calls it once
 * per element of a transformer's widest tensors. Within 4e-7 of erf, most of it float rounding
 * near the clamp, and within 2e-7 relatively below 1e-3 (tests/test_cpu_activate.c). NaN stays
 * NaN: every compare below is false for it. */
static inline float cpu_erf_fast(float x) {
    const float a = fabsf(x), c = a > 3.92f ? 3.92f : a, s = c * c;
    float p = 2.04266144e-06f, q = 3.80575111e-05f;
    p = CPU_FMA(p, s, 2.85698014e-04f), q = CPU_FMA(q, s, 1.17169553e-03f);
    p = CPU_FMA(p, s, 3.80370184e-03f), q = CPU_FMA(q, s, 1.50455013e-02f);
    p = CPU_FMA(p, s, 5.28659970e-02f), q = CPU_FMA(q, s, 1.14476793e-01f);
    p = CPU_FMA(p, s, 1.91297323e-01f), q = CPU_FMA(q, s, 5.02865493e-01f);
    p = CPU_FMA(p, s, 1.12837923e+00f), q = CPU_FMA(q, s, 1.0f);
    const float r = c * p / q;
    return copysignf(r > 1.0f ? 1.0f : r, x);
}

/* exp(x) for x <= 0, branch-free so that loops over it vectorise (expf is a call per element):
 * x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by a degree-6 polynomial (Cephes' expf
 * coefficients), 2^n put in the exponent's bits. Within 2 ulp of exp (tests/test_cpu_activate.c);
 * 0 below -87.3, where exp is 1e-38 or less (the denormals are not made). NaN stays NaN. */
static inline float cpu_exp_neg(float x) {
    const float c = x < -87.3f ? -87.3f : x; /* the bits below hold 2^n for n >= -126 only */
    const float magic = 12582912.0f;         /* 1.5 * 2^23: the sum rounds n to an integer, kept in t's low bits */
    const float t = CPU_FMA(c, 1.44269504f, magic), n = t - magic;
    const float r = CPU_FMA(n, 2.12194440e-4f, CPU_FMA(n, -0.693359375f, c)); /* ln 2 in two parts (Cody and Waite) */
    float p = 1.9875691500e-4f;
    p = CPU_FMA(p, r, 1.3981999507e-3f);
    p = CPU_FMA(p, r, 8.3334519073e-3f);
    p = CPU_FMA(p, r, 4.1665795894e-2f);
    p = CPU_FMA(p, r, 1.6666665459e-1f);
    p = CPU_FMA(p, r, 5.0000001201e-1f);
    p = CPU_FMA(p * r, r, r) + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23; /* n + 127 in the exponent field: 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : p * scale;
}

/* 1 / (1 + exp(-x)), never taking exp of a large positive number. One division after a select,
 * not one in each branch: a loop over it vectorises only so. */
static inline float cpu_sigmoid_of(float x) {
    const float e = cpu_exp_neg(-fabsf(x));
    return (x >= 0 ? 1.0f : e) / (1.0f + e);
}

/* v clamped to [lo, hi], NaN kept: clip, and relu as [0, inf) where a loop wants one formula */
static inline float cpu_clamp(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A fused activation (dl_activation) of v, as the activation ops compute it, its parameters (clip's
 * bounds, leaky relu's slope) from a; NaN stays NaN. */
static inline float cpu_activate(float v, int act, const dl_op_attrs *a) {
    switch (act) {
    case DL_ACT_RELU: return v < 0 ? 0.0f : v;
    case DL_ACT_CLIP: return cpu_clamp(v, a->clip_min, a->clip_max);
    case DL_ACT_LEAKY_RELU: return v >= 0 ? v : a->alpha * v;
    case DL_ACT_SIGMOID: return cpu_sigmoid_of(v);
    case DL_ACT_SILU: return v * cpu_sigmoid_of(v);
    case DL_ACT_HARD_SWISH: {
        float t = v + 3.0f;
        return v * (t < 0 ? 0.0f : t > 6.0f ? 6.0f : t) / 6.0f;
    }
    case DL_ACT_GELU: return 0.5f * v * (1.0f + cpu_erf_fast(v * 0.70710678118654752f));
    case DL_ACT_GELU_TANH: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    default: return v;
    }
}
/* row[i] = activation(row[i] + b) for i < n: the epilogue of conv2d (each path), depthwise and
 * conv_transpose2d over one output plane or row. The common activations get loops of their own,
 * where the constant activation inlines to a compare or two and the loop vectorises. */
static inline void cpu_bias_act(float *row, int64_t n, float b, const dl_op_attrs *a) {
    switch (a->activation) {
    case DL_ACT_NONE:
        for (int64_t i = 0; i < n; i++) row[i] += b;
        break;
    case DL_ACT_RELU:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_RELU, a);
        break;
    case DL_ACT_CLIP: {
        const dl_op_attrs c = *a; /* a local copy: the bounds stay in registers */
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_CLIP, &c);
        break;
    }
    case DL_ACT_LEAKY_RELU: {
        const dl_op_attrs c = *a;
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_LEAKY_RELU, &c);
        break;
    }
    case DL_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_SIGMOID, a);
        break;
    case DL_ACT_SILU:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_SILU, a);
        break;
    case DL_ACT_GELU:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_GELU, a);
        break;
    case DL_ACT_HARD_SWISH:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, DL_ACT_HARD_SWISH, a);
        break;
    default:
        for (int64_t i = 0; i < n; i++) row[i] = cpu_activate(row[i] + b, a->activation, a);
    }
}
/* row[i] = activation(row[i] + b + res[i]): cpu_bias_act with a fused residual (res NULL: none),
 * added in a pass of its own over the row (in cache: the callers' rows are one thread's share). */
static inline void cpu_bias_res_act(float *row, const float *res, int64_t n, float b, const dl_op_attrs *a) {
    if (res)
        for (int64_t i = 0; i < n; i++) row[i] += res[i];
    cpu_bias_act(row, n, b, a);
}
/* The activation over `rows` rows of 16 floats: a matrix product's finished 6 x 16 block while it
 * is in L1. Each row is two 8-lane steps with no loop set-up; cpu_bias_act called on 16 floats at a
 * time cost twice the arithmetic. */
#define CPU_ROWS16(ACT)            \
    for (int r = 0; r < rows; r++) \
        for (int i = 0; i < 16; i++) x[r * 16 + i] = cpu_activate(x[r * 16 + i], ACT, a)
static inline void cpu_activate_rows16(float *x, int rows, const dl_op_attrs *a) {
    switch (a->activation) {
    case DL_ACT_SIGMOID: CPU_ROWS16(DL_ACT_SIGMOID); break;
    case DL_ACT_SILU: CPU_ROWS16(DL_ACT_SILU); break;
    case DL_ACT_GELU: CPU_ROWS16(DL_ACT_GELU); break;
    case DL_ACT_HARD_SWISH: CPU_ROWS16(DL_ACT_HARD_SWISH); break;
    default: CPU_ROWS16(a->activation);
    }
}
#undef CPU_ROWS16
#endif
