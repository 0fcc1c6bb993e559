/* gemm_plan.h — which of the cuda plugin's GEMM variants may run a conv2d or linear (the SIMT
 * tiles of ops/gemm.cu, the tensor-core tiles of ops/mma_gemm.cu, the GEMV of ops/gemv.cu, the
 * sm_90 warpgroup tile of ops/wgmma_gemm.cu), the
 * switches that turn issue 14's variants (tensor-core tiles, GEMV) on or force one variant (docs/gpu.md, "The cuda
 * plugin's GEMM variants"), and a conv's k-table for the tensor-core gather. Plain C without CUDA headers:
 * tests/test_cuda_mma.c checks it on the host. */
#ifndef DLRUN_CUDA_GEMM_PLAN_H
#define DLRUN_CUDA_GEMM_PLAN_H
#include <stdint.h>

#include "gpu_storage.h"
#include "mma_layout.h"
#include "wgmma_layout.h"

/* Variants: 0 and 1 the SIMT tiles (64x64, 32x32; f32 storage, f32 math), then one per
 * tensor-core tile shape (128x128, 128x64, 64x64): variant CU_GEMM_MMA + t is mma tile t; then the
 * GEMV (linear of at most DLK_GEMV_ROWS batch rows, f32 math on any storage type); then the sm_90
 * warpgroup tiles, 128x128 and 128x256 (wgmma; compute capability 9.0 only, off unless
 * DLRUN_CUDA_WGMMA=1): variant CU_GEMM_WGMMA + w has n = 128 (w + 1). */
enum { CU_GEMM_MMA = 2, CU_GEMM_GEMV = 5, CU_GEMM_WGMMA = 6, CU_GEMM_WGMMA_TILES = 2, CU_GEMM_VARIANTS = 8 };
enum { CU_GEMV_ROWS = 8 }; /* the most batch rows the GEMV takes (kernels.h: DLK_GEMV_ROWS) */

/* What the environment asks of the GEMM variants, read once when the plugin loads. */
typedef struct cu_gemm_switch {
    int mma;           /* the tensor-core tiles and the GEMV join the timing: by default, or with
                        * DLRUN_CUDA_MMA=1 or a forced variant of issue 14; not with DLRUN_CUDA_MMA=0 */
    int forced;        /* DLRUN_CUDA_GEMM_VARIANT=v: only v, where it may run the op; -1 when unset */
    int forced_splits; /* DLRUN_CUDA_GEMM_VARIANT=v:s (a tensor-core tile): split-K in s slices;
                        * 0: chosen by timing */
    int nhwc;          /* DLRUN_CUDA_NHWC=1: conv2d on the tensor-core tiles and the pools take
                        * channels-last tensors, and the plugin asks for them at tf32, f16 and bf16
                        * (docs/gpu.md); off by default until a GPU round has run them */
    int wgmma;         /* DLRUN_CUDA_WGMMA=1 (or the variant forced): the warpgroup tile joins the
                        * timing on compute capability 9.0; off by default until a GPU round has run it */
} cu_gemm_switch;

/* The switches from the four variables' values (NULL: unset). DLRUN_CUDA_MMA, DLRUN_CUDA_NHWC and
 * DLRUN_CUDA_WGMMA take 0 or 1; DLRUN_CUDA_GEMM_VARIANT is "v" or "v:s" (v a tensor-core or
 * warpgroup tile, s from 1 to CU_SPLITK_MAX). A value that is not one is an error: 0 with the
 * reason in why (one line), so that a typo does not silently test the default. */
int cu_gemm_switch_parse(const char *mma, const char *forced, const char *nhwc, const char *wgmma, cu_gemm_switch *sw,
                         char *why, size_t len);

/* 1 if variant v may run a GEMM whose tensors are stored as `type` at `precision` (dl_precision);
 * linear_rows: a linear's batch rows, 0 for a conv. The SIMT tiles take f32 only (any precision:
 * f32 math is at least as accurate as asked); issue 14's need sw->mma: the tensor-core tiles take
 * f16 and bf16, and f32 at a precision that allows tf32 (not F32); the GEMV a linear of 1 to
 * CU_GEMV_ROWS rows, any storage type, any precision. */
int cu_gemm_variant_ok(const cu_gemm_switch *sw, int v, dl_gpu_type type, int precision, int linear_rows);

/* 1 if v is a tile that takes split-K: a tensor-core tile or a warpgroup tile; cu_gemm_is_wgmma:
 * a warpgroup tile. */
int cu_gemm_is_tile(int v);
int cu_gemm_is_wgmma(int v);

/* 1 if the warpgroup tiles may run a GEMM of esize-byte elements with K columns: every operand goes
 * by 16-byte chunks (wg_chunks_ok), so a conv must be channels-last (cl), its input's c channels
 * and each group's cg whole chunks; linear (conv 0): K whole chunks. (The device's compute
 * capability, 9.0, is the plugin's to check.) */
int cu_wgmma_ok(int esize, int conv, int cl, int c, int cg, int64_t k);

/* ---- a GEMM's timed choice, kept in the host's timing cache (choice_store.h) ---- */

/* The number a choice is kept as: variant v in `splits` k-slices; cu_gemm_choice_of reads one
 * back: 1 with *v and *splits where code is a variant (0 to CU_GEMM_VARIANTS - 1) in 1 slice, or a
 * tile (cu_gemm_is_tile) in 1 to CU_SPLITK_MAX, else 0. (Whether the op may run it is the
 * plugin's to check, as at timing.) */
int cu_gemm_choice_code(int v, int splits);
int cu_gemm_choice_of(int code, int *v, int *splits);
/* The plugin's part of the choice's key: what the candidates and their speeds depend on beyond the
 * op (the switches, the multiprocessors, the shared memory a block may take, compute capability
 * 9.0); 1, or 0 where it does not fit len. */
int cu_gemm_choice_extra(const cu_gemm_switch *sw, int sms, int smem_optin, int sm90, char *out, size_t len);

/* ---- split-K for the tensor-core and warpgroup tiles ---- */

enum { CU_SPLITK_MAX = 16, CU_SPLITK_TRIES = 4 };

/* The block tile (rows of M, columns of N) of tensor-core tile t (ops/mma_gemm.cu's launch). */
void cu_mma_tile_shape(int t, int *bm, int *bn);
/* The block tile of variant v (cu_gemm_is_tile) and its k-elements per stage for esize-byte
 * elements: MMA_BK on the tensor-core tiles, wg_bk on the warpgroup tiles. */
void cu_tile_of(int v, int esize, int *bm, int *bn, int *bk);
/* The split counts worth timing for a GEMM of `blocks` blocks (all groups) and `ktiles` k-tiles of
 * the tile's depth (cu_tile_of) on `sms` multiprocessors: 1, then 2, 4, 8 while the grid stays within two waves and
 * each slice keeps at least 4 k-tiles. Fills out[CU_SPLITK_TRIES], returns how many. */
int cu_splitk_tries(long long blocks, int ktiles, int sms, int *out);
/* Bytes of f32 partial sums split-K needs: splits x groups x M x N floats (0 for splits 1), or
 * (size_t)-1 past 1 GiB (too much: not tried). */
size_t cu_splitk_bytes(int splits, int groups, int m, int n);

/* What a GEMM of variant v launches must fit: M, N and K below 2^31 (the kernels' int indices), a
 * grid of at most 65535 blocks in y (ceil(M / tile rows)) and in z (groups x splits); a tile's
 * shared memory within smem_optin, the device's opt-in limit per block (a 128x128 f32 tile takes
 * 111 KiB: more than sm_86/89/120 give; the warpgroup tiles 131 and 198 KiB). 1 if it does. */
int cu_gemm_fits(int v, int esize, int64_t m, int64_t n, int64_t k, int64_t groups, int splits, int smem_optin);

/* 1 if a conv's gather offsets fit the tensor-core kernel's 32-bit table: (c / groups) * h * w
 * elements of one image's group, with the taps' reach, below 2^31. */
int cu_mma_conv_fits(int cg, int h, int w, int kh, int kw, int dh, int dw);

/* 1 if a channels-last conv may run on tile variant v: v is a tensor-core or warpgroup tile (the
 * SIMT tiles and the GEMV read NCHW only) and the channels-last k-table's offsets, ((kh - 1) dh w + (kw - 1) dw)
 * c + cg, fit its 32-bit entries. (Whether its gather goes by 16-byte chunks or element by element
 * is mma_cl_chunks'.) */
int cu_mma_conv_cl_ok(int v, int c, int cg, int w, int kh, int kw, int dh, int dw);

/* The k-table of a conv (K = cg * kh * kw entries, mma_ktap_of; cl: channels-last, mma_ktap_cl_of,
 * c the input's channels), on the host: t[K]. */
void cu_mma_ktab(int cg, int kh, int kw, int h, int w, int dh, int dw, mma_ktap *t);
void cu_mma_ktab_cl(int c, int cg, int kh, int kw, int w, int dh, int dw, mma_ktap *t);
#endif
