/* vecw.h — the widest float vector of the build for the CPU plugin's channels-last kernels
 * (nhwc.c): `vw`, VW lanes, 16 where the build has AVX-512 (a machine whose FMA units are 512 bits
 * wide does twice the work per instruction of AVX2's 8 lanes), else vec8.h's 8. The same
 * arithmetic either way. Partial vectors (the last channels of a row) load and store their first n
 * lanes only: masked with AVX-512, through a stack copy elsewhere. Include it from .c files only. */
#ifndef DLRUN_CPU_VECW_H
#define DLRUN_CPU_VECW_H
#include "vec8.h"

#ifdef __AVX512F__
#include <immintrin.h>
#define VW 16
typedef float vw __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t vwi __attribute__((vector_size(VW * sizeof(float))));
static inline vw loadw(const float *p) { return (vw)_mm512_loadu_ps(p); }
static inline void storew(float *p, vw v) { _mm512_storeu_ps(p, (__m512)v); }
static inline vw splatw(float f) { return (vw)_mm512_set1_ps(f); }
static inline vw fmaw(vw a, vw b, vw c) { return (vw)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
/* the first n lanes (0 < n < 16) of p, the others 0; nothing past p + n is read */
static inline vw loadw_n(const float *p, int n) { return (vw)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
static inline void storew_n(float *p, vw v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v); }
CPU_VEC_MAX_CLAMP(w, vw, vwi) /* vec8.h: maxw, NaN winning; clampw, NaN staying */
static inline vw max_plainw(vw m, vw v) { return (vw)_mm512_max_ps((__m512)m, (__m512)v); }
/* The vector whose lanes 0-7 are lo's and 8-15 hi's */
static inline vw joinw(v8 lo, v8 hi) {
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#else
#define VW 8
typedef v8 vw;
typedef v8i vwi;
static inline vw loadw(const float *p) { return load8(p); }
static inline void storew(float *p, vw v) { store8(p, v); }
static inline vw splatw(float f) { return splat8(f); }
static inline vw fmaw(vw a, vw b, vw c) { return fma8(a, b, c); }
/* always_inline: GCC would otherwise split these into a part of their own that returns a vector,
 * which a build without AVX flags (-Wpsabi: the ABI of such a return changed) */
static inline __attribute__((always_inline)) vw loadw_n(const float *p, int n) {
    float t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof(float));
    return load8(t);
}
static inline __attribute__((always_inline)) void storew_n(float *p, vw v, int n) {
    float t[VW];
    store8(t, v);
    memcpy(p, t, (size_t)n * sizeof(float));
}
static inline vw maxw(vw m, vw v) { return max8(m, v); }
static inline vw max_plainw(vw m, vw v) { return max8_plain(m, v); }
static inline vw clampw(vw v, vw lo, vw hi) { return clamp8(v, lo, hi); }
#endif
/* n lanes (VW, or fewer for the last channels of a pixel) at p: a whole vector, or its first n */
static inline __attribute__((always_inline)) vw load_lanes(const float *p, int n) {
    return n == VW ? loadw(p) : loadw_n(p, n);
}
static inline __attribute__((always_inline)) void store_lanes(float *p, vw v, int n) {
    if (n == VW) storew(p, v);
    else storew_n(p, v, n);
}
/* cpu_exp_neg (activate.h, for x <= 0) on VW lanes, step for step the same arithmetic, so the same
 * floats (tests/test_cpu_activate.c checks it bit for bit): the softmax's row */
static inline vw expw_neg(vw x) {
    const vw c = maxw(x, splatw(-87.3f)), magic = splatw(12582912.0f); /* NaN stays NaN */
    const vw t = fmaw(c, splatw(1.44269504f), magic), n = t - magic;
    const vw r = fmaw(n, splatw(2.12194440e-4f), fmaw(n, splatw(-0.693359375f), c));
    vw p = splatw(1.9875691500e-4f);
    p = fmaw(p, r, splatw(1.3981999507e-3f));
    p = fmaw(p, r, splatw(8.3334519073e-3f));
    p = fmaw(p, r, splatw(4.1665795894e-2f));
    p = fmaw(p, r, splatw(1.6666665459e-1f));
    p = fmaw(p, r, splatw(5.0000001201e-1f));
    p = fmaw(p * r, r, r) + splatw(1.0f);
    const vwi bits = ((vwi)t - 0x4B400000 + 127) << 23; /* 2^n: n + 127 in the exponent field */
    const vwi below = (vwi)(x < splatw(-87.3f));
    return (vw)((vwi)(p * (vw)bits) & ~below);
}
#endif
