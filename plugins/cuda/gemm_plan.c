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

/* a 0-or-1 switch: *out = its value, or unchanged where unset; 0 with why for anything else */
static int parse_switch(const char *name, const char *value, int *out, char *why, size_t len) {
    int v;
    if (!value || !*value) return 1;
    if (!parse_int(value, &v) || (v != 0 && v != 1))
        return snprintf(why, len, "%s is \"%s\": it takes 0 or 1", name, value), 0;
    *out = v;
    return 1;
}

int cu_gemm_switch_parse(const char *mma, const char *forced, const char *nhwc, const char *wgmma, cu_gemm_switch *sw,
                         char *why, size_t len) {
    sw->mma = 1; /* on since the GPU round of 2026-11-30 (docs/gpu-report.md); DLRUN_CUDA_MMA=0 turns it off */
    sw->forced = -1;
    sw->forced_splits = 0;
    sw->nhwc = 0;  /* written 2026-12-01 without a GPU: on once a round has run it (docs/gpu.md) */
    sw->wgmma = 0; /* written 2026-12-02 without a GPU: the same */
    int v;
    if (!parse_switch("DLRUN_CUDA_MMA", mma, &sw->mma, why, len) ||
        !parse_switch("DLRUN_CUDA_NHWC", nhwc, &sw->nhwc, why, len) ||
        !parse_switch("DLRUN_CUDA_WGMMA", wgmma, &sw->wgmma, why, len))
        return 0;
    if (forced && *forced) {
        char head[32];
        const char *colon = strchr(forced, ':');
        size_t hl = colon ? (size_t)(colon - forced) : strlen(forced);
        int splits = 0;
        if (hl >= sizeof head) hl = sizeof head - 1; /* too long to be a number: refused below */
        memcpy(head, forced, hl);
        head[hl] = 0;
        if (!parse_int(head, &v) || v < 0 || v >= CU_GEMM_VARIANTS ||
            (colon && (!parse_int(colon + 1, &splits) || splits < 1 || splits > CU_SPLITK_MAX || !cu_gemm_is_tile(v))))
            return snprintf(why, len,
                            "DLRUN_CUDA_GEMM_VARIANT is \"%s\": it takes a variant from 0 to %d, or a tile (%d to %d, "
                            "%d or %d) and a split, as 2:4",
                            forced, CU_GEMM_VARIANTS - 1, CU_GEMM_MMA, CU_GEMM_GEMV - 1, CU_GEMM_WGMMA,
                            CU_GEMM_WGMMA + 1),
                   0;
        sw->forced = v;
        sw->forced_splits = splits;
        if (v >= CU_GEMM_MMA) sw->mma = 1;
        if (cu_gemm_is_wgmma(v)) sw->wgmma = 1;
    }
    return 1;
}

int cu_gemm_variant_ok(const cu_gemm_switch *sw, int v, dl_gpu_type type, int precision, int linear_rows) {
    if (v < 0 || v >= CU_GEMM_VARIANTS) return 0;
    if (v < CU_GEMM_MMA) return type == DL_GPU_F32;
    if (!sw->mma || (type != DL_GPU_F32 && type != DL_GPU_F16 && type != DL_GPU_BF16)) return 0;
    if (v == CU_GEMM_GEMV) return linear_rows >= 1 && linear_rows <= CU_GEMV_ROWS;
    if (cu_gemm_is_wgmma(v) && !sw->wgmma) return 0;
    return type != DL_GPU_F32 || precision != DL_PRECISION_F32;
}

int cu_gemm_is_wgmma(int v) { return v >= CU_GEMM_WGMMA && v < CU_GEMM_WGMMA + CU_GEMM_WGMMA_TILES; }
int cu_gemm_is_tile(int v) { return (v >= CU_GEMM_MMA && v < CU_GEMM_GEMV) || cu_gemm_is_wgmma(v); }

int cu_gemm_choice_code(int v, int splits) { return v + CU_GEMM_VARIANTS * splits; }

int cu_gemm_choice_of(int code, int *v, int *splits) {
    if (code < 0) return 0;
    int vv = code % CU_GEMM_VARIANTS, ss = code / CU_GEMM_VARIANTS;
    if (ss < 1 || ss > (cu_gemm_is_tile(vv) ? CU_SPLITK_MAX : 1)) return 0;
    *v = vv, *splits = ss;
    return 1;
}

int cu_gemm_choice_extra(const cu_gemm_switch *sw, int sms, int smem_optin, int sm90, char *out, size_t len) {
    int n = snprintf(out, len, "mma=%d;nhwc=%d;wgmma=%d;sms=%d;smem=%d;sm90=%d", sw->mma, sw->nhwc, sw->wgmma, sms,
                     smem_optin, sm90);
    return n >= 0 && (size_t)n < len;
}

int cu_wgmma_ok(int esize, int conv, int cl, int c, int cg, int64_t k) {
    if ((esize != 2 && esize != 4) || k < 1 || k > INT32_MAX || (conv && (!cl || c < 1 || cg < 1))) return 0;
    return wg_chunks_ok(esize, conv, c, cg, (int)k);
}

void cu_mma_tile_shape(int t, int *bm, int *bn) {
    static const int shapes[][2] = {{128, 128}, {128, 64}, {64, 64}};
    *bm = shapes[t][0];
    *bn = shapes[t][1];
}

void cu_tile_of(int v, int esize, int *bm, int *bn, int *bk) {
    if (cu_gemm_is_wgmma(v)) {
        *bm = WG_BM, *bn = wg_bn(v - CU_GEMM_WGMMA), *bk = wg_bk(esize);
        return;
    }
    cu_mma_tile_shape(v - CU_GEMM_MMA, bm, bn);
    *bk = MMA_BK;
}

int cu_splitk_tries(long long blocks, int ktiles, int sms, int *out) {
    int n = 0;
    out[n++] = 1;
    for (int s = 2; s <= 8 && n < CU_SPLITK_TRIES; s *= 2)
        if (blocks * s <= 2LL * sms && ktiles >= 4 * s) out[n++] = s;
    return n;
}

size_t cu_splitk_bytes(int splits, int groups, int m, int n) {
    if (splits <= 1) return 0;
    double b = 4.0 * splits * groups * (double)m * n;
    return b > (double)(1 << 30) ? (size_t)-1 : (size_t)b;
}

int cu_gemm_fits(int v, int esize, int64_t m, int64_t n, int64_t k, int64_t groups, int splits, int smem_optin) {
    if (m < 1 || n < 1 || k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || groups < 1 || splits < 1)
        return 0;
    if (v == CU_GEMM_GEMV) return 1;        /* a grid of ceil(M / 8) blocks in x */
    int bm = v == 0 ? 64 : 32, bn = bm, bk; /* the SIMT tiles (ops/gemm.cu) */
    if (cu_gemm_is_tile(v)) {
        cu_tile_of(v, esize, &bm, &bn, &bk);
        int smem =
            cu_gemm_is_wgmma(v) ? wg_smem_bytes(bn) + bn * WG_PIX_BYTES : mma_smem_bytes(bm, bn, esize) + MMA_PIX_BYTES;
        if (smem > smem_optin) return 0;
    }
    return (m + bm - 1) / bm <= 65535 && groups * splits <= 65535;
}

int cu_mma_conv_fits(int cg, int h, int w, int kh, int kw, int dh, int dw) {
    /* the largest entry: (cg - 1) h w + (kh - 1) dh w + (kw - 1) dw; the pixel's corner adds its
     * own 64-bit offset in the kernel */
    int64_t reach = (int64_t)cg * h * w + (int64_t)(kh - 1) * dh * w + (int64_t)(kw - 1) * dw;
    int64_t taps = (int64_t)(kh - 1) * dh + (int64_t)(kw - 1) * dw;
    return cg > 0 && reach < INT32_MAX && taps < (1 << 28);
}

int cu_mma_conv_cl_ok(int v, int c, int cg, int w, int kh, int kw, int dh, int dw) {
    if (!cu_gemm_is_tile(v) || c < 1 || cg < 1) return 0;
    int64_t reach = ((int64_t)(kh - 1) * dh * w + (int64_t)(kw - 1) * dw) * c + cg;
    int64_t taps = (int64_t)(kh - 1) * dh + (int64_t)(kw - 1) * dw;
    return reach < INT32_MAX && taps < (1 << 28);
}

void cu_mma_ktab(int cg, int kh, int kw, int h, int w, int dh, int dw, mma_ktap *t) {
    for (int k = 0; k < cg * kh * kw; k++) t[k] = mma_ktap_of(k, kh, kw, h, w, dh, dw);
}

void cu_mma_ktab_cl(int c, int cg, int kh, int kw, int w, int dh, int dw, mma_ktap *t) {
    for (int k = 0; k < cg * kh * kw; k++) t[k] = mma_ktap_cl_of(k, kw, cg, c, w, dh, dw);
}
