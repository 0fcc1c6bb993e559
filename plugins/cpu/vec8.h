/* vec8.h — 8-lane float vectors for the CPU plugin's direct kernels (window8.c, nhwc.c): GCC/Clang
 * vector extensions, AVX2 where the build targets it and narrower code elsewhere, the same
 * arithmetic. Include it from .c files only: the 32-byte vectors are passed between static
 * functions, so a build without AVX changes no ABI anyone else sees. */
#ifndef DLRUN_CPU_VEC8_H
#define DLRUN_CPU_VEC8_H
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t v8i __attribute__((vector_size(8 * sizeof(float))));

static inline v8 load8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void store8(float *p, v8 v) { memcpy(p, &v, sizeof v); }
static inline v8 splat8(float f) { return (v8){f, f, f, f, f, f, f, f}; }

/* a * b + c: one rounding where the machine has FMA (our ISO C build does not contract a * b + c
 * by itself), a multiply and an add elsewhere */
static inline v8 fma8(v8 a, v8 b, v8 c) {
#if defined(__AVX2__) && defined(__FMA__)
    return (v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* max##S(m, v): the max of m and v lane by lane, NaN winning (a NaN v is taken, v != v; a NaN m
 * kept, v > m false); clamp##S(v, lo, hi): v clamped to [lo, hi] lane by lane, a NaN staying NaN
 * (both compares are false). For a vector type T whose lanes read as integers are TI. */
#define CPU_VEC_MAX_CLAMP(S, T, TI)                   \
    static inline T max##S(T m, T v) {                \
        const TI take = (v > m) | (v != v);           \
        return (T)((take & (TI)v) | (~take & (TI)m)); \
    }                                                 \
    static inline T clamp##S(T v, T lo, T hi) {       \
        TI m = v < lo;                                \
        v = (T)((m & (TI)lo) | (~m & (TI)v));         \
        m = v > hi;                                   \
        return (T)((m & (TI)hi) | (~m & (TI)v));      \
    }
CPU_VEC_MAX_CLAMP(8, v8, v8i)
/* max##S_plain(m, v): the machine's max, one instruction where it has one: (m > v) ? m : v lane by
 * lane, so v where either is NaN (a NaN m is lost: callers that let NaN win track it apart) */
static inline v8 max8_plain(v8 m, v8 v) {
#if defined(__AVX2__) && defined(__FMA__)
    return (v8)_mm256_max_ps((__m256)m, (__m256)v);
#else
    const v8i take = m > v;
    return (v8)((take & (v8i)m) | (~take & (v8i)v));
#endif
}

/* r[i][j] -> r[j][i] for an 8 x 8 block held as 8 vectors (unpack, shuffle, swap of halves) */
static inline void transpose8(v8 r[8]) {
    v8 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int i = 0; i < 4; i++) {
        r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}
#endif
