/* gemm_plan.c — see gemm_plan.h. */
#include "gemm_plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"

static int parse_int(const char *s, int *v) {
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || *end || x < INT32_MIN || x > INT32_MAX) return 0;
    *v = (int)x;
    return 1;
}

int cu_gemm_switch_parse(const char *mma, const char *forced, cu_gemm_switch *sw, char *why, size_t len) {
    sw->mma = 0;
    sw->forced = -1;
    int v;
    if (mma && *mma) {
        if (!parse_int(mma, &v) || (v != 0 && v != 1))
            return snprintf(why, len, "DLRUN_CUDA_MMA is \"%s\": it takes 0 or 1", mma), 0;
        sw->mma = v;
    }
    if (forced && *forced) {
        if (!parse_int(forced, &v) || v < 0 || v >= CU_GEMM_VARIANTS)
            return snprintf(why, len, "DLRUN_CUDA_GEMM_VARIANT is \"%s\": it takes a variant from 0 to %d", forced,
                            CU_GEMM_VARIANTS - 1),
                   0;
        sw->forced = v;
        if (v >= CU_GEMM_MMA) sw->mma = 1;
    }
    return 1;
}

int cu_gemm_variant_ok(const cu_gemm_switch *sw, int v, dl_gpu_type type, int precision, int linear_rows) {
    if (v < 0 || v >= CU_GEMM_VARIANTS) return 0;
    if (v < CU_GEMM_MMA) return type == DL_GPU_F32;
    if (!sw->mma || (type != DL_GPU_F32 && type != DL_GPU_F16 && type != DL_GPU_BF16)) return 0;
    if (v == CU_GEMM_GEMV) return linear_rows >= 1 && linear_rows <= CU_GEMV_ROWS;
    return type != DL_GPU_F32 || precision != DL_PRECISION_F32;
}

int cu_mma_conv_fits(int cg, int h, int w, int kh, int kw, int dh, int dw) {
    /* the largest entry: (cg - 1) h w + (kh - 1) dh w + (kw - 1) dw; the pixel's corner adds its
     * own 64-bit offset in the kernel */
    int64_t reach = (int64_t)cg * h * w + (int64_t)(kh - 1) * dh * w + (int64_t)(kw - 1) * dw;
    int64_t taps = (int64_t)(kh - 1) * dh + (int64_t)(kw - 1) * dw;
    return cg > 0 && reach < INT32_MAX && taps < (1 << 28);
}

void cu_mma_ktab(int cg, int kh, int kw, int h, int w, int dh, int dw, mma_ktap *t) {
    for (int k = 0; k < cg * kh * kw; k++) t[k] = mma_ktap_of(k, kh, kw, h, w, dh, dw);
}
