/* wgmma_layout.h — where each element of the sm_90 warpgroup GEMM's tiles lives (ops/wgmma_gemm.cu,
 * issue 14): the shared-memory stage of a block in the "no swizzle" canonical layout that
 * wgmma.mma_async reads through a matrix descriptor, which thread copies which 16-byte chunk into
 * it, the descriptors the kernel builds for each instruction, and which element of the 64 x N
 * accumulator each register of each thread holds. Plain C with DL_GPU_HD functions, the same code
 * in the kernel and on the host: tests/test_cuda_mma.c replays a block through these maps, with
 * wgmma modelled from the PTX ISA's descriptor and fragment descriptions (written there
 * independently), against naive conv and linear.
 *
 * A stage holds, for each operand, ROWS rows (filters or output features for A, output pixels or
 * batch rows for B) of WG_KBYTES bytes of k (64 f16/bf16 or 32 f32 elements), k-contiguous ("K
 * major", wgmma's only layout for tf32). The no-swizzle layout cuts it into core matrices of 8 rows
 * x 16 bytes, each 128 contiguous bytes (row i of it at 16 i): the core matrices of one 8-row band
 * follow each other along k (WG_LBO = 128 bytes apart, the descriptor's "leading dimension byte
 * offset"), and the bands follow each other (WG_SBO = 1024 bytes apart, its "stride dimension byte
 * offset"). One wgmma reads 32 bytes of k (k16 for 16-bit types, k8 for tf32): two core matrices
 * of each band; the next 32 bytes of k start 2 WG_LBO further. */
#ifndef DLRUN_CUDA_WGMMA_LAYOUT_H
#define DLRUN_CUDA_WGMMA_LAYOUT_H

#include <stdint.h>

#include "gpu_storage.h"
#include "mma_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    WG_KBYTES = 128,               /* bytes of k per row and stage */
    WG_LBO = 128,                  /* bytes between core matrices along k */
    WG_SBO = WG_KBYTES / 16 * 128, /* bytes between 8-row bands */
    WG_BM = 128,                   /* rows of A (M) per block: two warpgroups of 64 */
    WG_BN_MAX = 256,               /* rows of B (N) per block, wgmma's n: 128 or 256 */
    WG_THREADS = 256,              /* two warpgroups */
    WG_STAGES = 4,                 /* stage slots; copies run 2 k-tiles ahead (ops/wgmma_gemm.cu) */
    WG_KSTEP_BYTES = 32,           /* k of one wgmma, in bytes */
    WG_PIX_BYTES = 24              /* a conv's pixel table, per row of B (mma_pix) */
};

/* f32 sums per thread of a 64 x bn wgmma over its warpgroup's 128 threads */
DL_GPU_HD int wg_acc(int bn) { return bn / 2; }

/* k-elements of a stage: 64 for 2-byte types, 32 for f32 */
DL_GPU_HD int wg_bk(int esize) { return WG_KBYTES / esize; }

/* Dynamic shared memory of a 128 x bn block: WG_STAGES stages of A and B (the kernel adds bn
 * WG_PIX_BYTES of static memory for a conv's pixel table). */
DL_GPU_HD int wg_smem_bytes(int bn) { return WG_STAGES * (WG_BM + bn) * WG_KBYTES; }

/* Byte offset, within one operand's stage, of byte kb (0 .. WG_KBYTES - 1) of row `row`'s k. */
DL_GPU_HD int wg_at(int row, int kb) { return row / 8 * WG_SBO + kb / 16 * WG_LBO + row % 8 * 16 + kb % 16; }

/* Which 16-byte chunk a thread copies, step j = 0 .. rows / 32 - 1 (WG_THREADS threads, 8 chunks
 * a row): warp w and lane l take chunk column 2 (w % 4) + (l / 8) % 2, the same for every j (so a
 * conv's gather looks its tap up once per stage), and row l % 8 + 8 (l / 16) + 16 (w / 4) + 32 j.
 * So lanes l and l + 8 copy the two halves of one 32-byte sector of a row, and each 8-lane phase
 * of the warp writes 8 rows of one core matrix, its 128 contiguous bytes: no bank conflict. */
DL_GPU_HD void wg_load_chunk(int tid, int j, int *row, int *chunk) {
    int w = tid >> 5, l = tid & 31;
    *chunk = 2 * (w & 3) + ((l >> 3) & 1);
    *row = (l & 7) + 8 * (l >> 4) + 16 * (w >> 2) + 32 * j;
}

/* The matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start
 * address >> 4 (shared-memory window, 16-byte aligned), 16-29 the leading dimension byte offset >>
 * 4, 32-45 the stride dimension byte offset >> 4, 49-51 the base offset (0), 62-63 the swizzle mode
 * (0: none). */
DL_GPU_HD uint64_t wg_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(WG_LBO >> 4) << 16 | (uint64_t)(WG_SBO >> 4) << 32;
}

/* Where instruction ks (0 .. WG_KBYTES / WG_KSTEP_BYTES - 1) of a stage starts reading an operand
 * whose stage begins at byte `stage` and whose first row is `row0` (a multiple of 8): warpgroup
 * wg's A from row 64 wg, B from row 0. */
DL_GPU_HD uint32_t wg_start(uint32_t stage, int row0, int ks) {
    return stage + (uint32_t)(row0 / 8 * WG_SBO + ks * (WG_KSTEP_BYTES / 16) * WG_LBO);
}

/* The accumulator of wgmma .m64nNk* with f32 sums: register r (0 .. wg_acc(N) - 1) of lane `lane` of
 * warp `warp` (0-3) of the warpgroup holds row 16 warp + lane / 4 + 8 ((r / 2) % 2) and column 8
 * (r / 4) + 2 (lane % 4) + r % 2 of the 64 x N result. */
DL_GPU_HD void wg_c(int warp, int lane, int r, int *row, int *col) {
    *row = 16 * warp + (lane >> 2) + 8 * ((r >> 1) & 1);
    *col = 8 * (r >> 2) + 2 * (lane & 3) + (r & 1);
}

/* 1 if a GEMM's operands go by 16-byte chunks as the warpgroup tile copies them: K (cg kh kw, or a
 * linear's in) a whole number of chunks (16 / esize elements), so that a chunk is all in k or all
 * past it, and group g's weights start a whole chunk on; for a conv also the input's channels c and
 * each group's cg, as the channels-last mma tiles' chunk gather needs (mma_cl_chunks: a chunk is one
 * tap's run of channels). */
DL_GPU_HD int wg_chunks_ok(int esize, int conv, int c, int cg, int K) {
    return K % (16 / esize) == 0 && (!conv || mma_cl_chunks(esize, c, cg));
}

/* n of warpgroup tile w (0: 128, 1: 256) */
DL_GPU_HD int wg_bn(int w) { return 128 * (w + 1); }

#ifdef __cplusplus
}
#endif
#endif
