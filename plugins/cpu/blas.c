/* blas.c — the CPU plugin's one door to OpenBLAS's sgemm: cpu_sgemm (blas.h), which keeps a run
 * from allocating on cores where OpenBLAS's small-product kernels would. */
#include "blas.h"

#include <cblas.h>

void cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    const int64_t tail = n % 16;
    if (ta || tb || k < 32 || tail < 1 || tail > 8 || (double)m * (double)n * (double)k > 1e6) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
    const int64_t n16 = n - tail;
    if (n16)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n16, (int)k, alpha, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
    for (int64_t i = 0; i < m; i++) { /* the last 1 to 8 columns: at most 8 x 100^3 / 16 sums in all */
        float acc[8] = {0};
        for (int64_t p = 0; p < k; p++) {
            const float ai = a[i * lda + p], *bp = b + p * ldb + n16;
            for (int64_t j = 0; j < tail; j++) acc[j] += ai * bp[j];
        }
        float *ci = c + i * ldc + n16;
        for (int64_t j = 0; j < tail; j++) ci[j] = alpha * acc[j] + (beta != 0.0f ? beta * ci[j] : 0.0f);
    }
}
