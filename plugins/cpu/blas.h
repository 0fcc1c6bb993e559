/* blas.h — the CPU plugin's one door to OpenBLAS's sgemm (blas.c). */
#ifndef DLRUN_CPU_BLAS_H
#define DLRUN_CPU_BLAS_H
#include <stdint.h>

/* OpenBLAS's cblas_sgemm, row-major: c = alpha op(a) op(b) + beta c (ta, tb: 1 transposes), c
 * m x n; c is not read when beta is 0. Every sgemm call of the plugin goes through here, because
 * OpenBLAS (0.3.16 and later, on AVX-512 cores) multiplies small products (m n k up to 100^3) with
 * kernels of its own, one of which mallocs and frees a buffer at every call: a plain product whose
 * n leaves 1 to 8 columns past a multiple of 16, with k >= 32. Those columns are summed here
 * instead, so that a run allocates nothing on any core (tests/test_noalloc.c). */
void cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
#endif
