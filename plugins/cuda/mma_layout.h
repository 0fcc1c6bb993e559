/* mma_layout.h — where each element of the tensor-core GEMM's tiles lives (ops/mma_gemm.cu): the
 * shared-memory stage of a block (rows of BK k-elements, padded), which thread loads which
 * element or 16-byte chunk into it, which shared-memory row each lane points ldmatrix at, and
 * which element of A, B and C each register of an mma.sync fragment holds (the PTX ISA's
 * fragment layouts for m16n8k8 .tf32 and m16n8k16 .f16/.bf16, f32 accumulators). Plain C with
 * DL_GPU_HD functions, the same code in the kernel and on the host: tests/test_cuda_mma.c replays
 * a block's tile through these maps (with ldmatrix and mma modelled as the ISA describes them)
 * against a naive product, which is how the index math is tested where there is no GPU.
 *
 * Both operands sit in shared memory k-contiguous: A as BM rows (one per filter or output
 * feature), B as BN rows (one per output pixel or batch row), so mma's "row.col" A and B read
 * them as they lie. */
#ifndef DLRUN_CUDA_MMA_LAYOUT_H
#define DLRUN_CUDA_MMA_LAYOUT_H

#include "gpu_storage.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    MMA_BK = 32,         /* k-elements per pipeline stage */
    MMA_STAGES = 3,      /* stages in flight (cp.async pipeline) */
    MMA_PIX_BYTES = 3072 /* static shared memory: a conv's table of its block's (at most 128) pixels */
};

/* Elements between two rows of a stage: BK plus a pad, chosen so that the fragment reads hit every
 * bank once: ldmatrix reads 8 rows of 16 bytes per phase, and a row of 36 floats (144 bytes) or
 * 40 halves (80 bytes) puts them in 8 different 16-byte bank groups. Rows stay 16-byte aligned
 * for cp.async and ldmatrix. */
DL_GPU_HD int mma_row_stride(int esize) { return esize == 4 ? MMA_BK + 4 : MMA_BK + 8; }

/* Dynamic shared memory of a bm x bn tile of esize-byte elements: MMA_STAGES stages of A and B
 * (the kernel adds MMA_PIX_BYTES of static memory). */
DL_GPU_HD int mma_smem_bytes(int bm, int bn, int esize) {
    return MMA_STAGES * (bm + bn) * mma_row_stride(esize) * esize;
}

/* k of one mma instruction: 8 for tf32 (4-byte elements), 16 for f16/bf16 */
DL_GPU_HD int mma_kstep(int esize) { return esize == 4 ? 8 : 16; }

/* ---- loading a stage: rows x BK elements, `threads` threads, j = 0, 1, ... per thread ---- */

/* One element per step (cp.async of 4 bytes, or a plain load for 16-bit types): element
 * tid + j * threads in row-major order, so a warp's 32 lanes take the 32 k of one row (k is the
 * lane, fixed per thread: a conv's gather looks its k up once per stage). */
DL_GPU_HD void mma_load_elem(int tid, int j, int threads, int *row, int *k) {
    int i = tid + j * threads;
    *row = i / MMA_BK;
    *k = i % MMA_BK;
}

/* One 16-byte chunk of 16 / esize elements per step (cp.async of 16 bytes): chunk tid + j *
 * threads in row-major order; *k is the chunk's first element. */
DL_GPU_HD void mma_load_chunk(int tid, int j, int threads, int esize, int *row, int *k) {
    int per_row = MMA_BK * esize / 16, i = tid + j * threads;
    *row = i / per_row;
    *k = i % per_row * (16 / esize);
}

/* ---- fragments: ldmatrix.x4 (b16, no .trans) fills them for both element sizes. Lane l points
 *      at row l % 8 of 8x(16-byte) matrix l / 8 and gets in register j row l / 4 of matrix j,
 *      bytes 4 (l % 4) to 4 (l % 4) + 3: two 16-bit elements, or one f32 (tf32) element. A 16-byte
 *      matrix row holds c = 16 / esize elements of k. ---- */

/* A (16 x 2c, the k of one mma): matrices (rows 0-7, k 0..c-1), (rows 8-15, k 0..c-1), (rows 0-7,
 * k c..2c-1), (rows 8-15, k c..2c-1): registers a0..a3 of the m16n8k8 .tf32 fragment, or a0a1,
 * a2a3, a4a5, a6a7 of the m16n8k16 .f16/.bf16 one. *row, *k: where lane's row starts. */
DL_GPU_HD void mma_ldsm_a(int lane, int esize, int *row, int *k) {
    int m = lane >> 3;
    *row = (lane & 7) + (m & 1) * 8;
    *k = (m >> 1) * (16 / esize);
}
/* B, two n8 tiles at once (rows are n): (n 0-7, k 0..c-1), (n 0-7, k c..2c-1), (n 8-15, k 0..c-1),
 * (n 8-15, k c..2c-1): registers b0 and b1 (tf32; b0b1 and b2b3 for 16-bit) of the first tile,
 * then of the second. */
DL_GPU_HD void mma_ldsm_b(int lane, int esize, int *n, int *k) {
    int m = lane >> 3;
    *n = (lane & 7) + (m >> 1) * 8;
    *k = (m & 1) * (16 / esize);
}
/* the f32 accumulator of both shapes (4 registers): rows g and g + 8, n 2t and 2t + 1 (g = lane /
 * 4, t = lane % 4) */
DL_GPU_HD void mma_c(int lane, int i, int *row, int *n) {
    *row = (lane >> 2) + (i >> 1) * 8;
    *n = (lane & 3) * 2 + (i & 1);
}

/* ---- a conv's gather: per k (channel within the group, ky, kx), the input's offset from the
 *      pixel's window corner and the corner's row and column steps ---- */

typedef struct mma_ktap {
    int off;    /* ci * h * w + ky * dh * w + kx * dw */
    int dy, dx; /* ky * dh, kx * dw */
    int unused; /* 16 bytes: one vector load */
} mma_ktap;

/* The k-table of a conv: K = (c / groups) * kh * kw entries, in the order of the weight's
 * columns. */
DL_GPU_HD mma_ktap mma_ktap_of(int k, int kh, int kw, int h, int w, int dh, int dw) {
    int taps = kh * kw, ci = k / taps, r = k % taps, ky = r / kw, kx = r % kw;
    mma_ktap t = {ci * h * w + ky * dh * w + kx * dw, ky * dh, kx * dw, 0};
    return t;
}

/* The k-table of a channels-last conv (x NHWC, the weights KRSC: [O, KH, KW, C / groups]): k =
 * (ky kw + kx) cg + ci, the weight's column order, so that the channels of one tap are
 * consecutive in k and in memory and a 16-byte chunk of k (cg a multiple of 16 / esize) is one
 * tap's run of channels. off = (ky dh w + kx dw) c + ci (c: all the input's channels, the pixel
 * stride). */
DL_GPU_HD mma_ktap mma_ktap_cl_of(int k, int kw, int cg, int c, int w, int dh, int dw) {
    int tap = k / cg, ci = k % cg, ky = tap / kw, kx = tap % kw;
    mma_ktap t = {(ky * dh * w + kx * dw) * c + ci, ky * dh, kx * dw, 0};
    return t;
}

/* ---- a conv's output pixels: one B row each ---- */

/* Where output pixel n (image n / (oh ow), then row-major in the image) of group g takes its
 * window and puts its result: the input offset of the window's corner (image, group; the corner
 * may lie outside the image: iy0, ix0 say where) and the output offset of its filter 0 of the
 * group; the output element of filter m of the group is yoff + m (oh ow) in NCHW, yoff + m in NHWC
 * (mma_y_at). A pixel past N (n >= N) gets iy0 so negative that no tap reaches the image. */
typedef struct mma_pix {
    long long xoff, yoff;
    int iy0, ix0;
} mma_pix;

typedef struct mma_conv_geom {
    int c, h, w, oc, oh, ow, cg, ocg, sh, sw, ph, pw, cl; /* cl: x and y channels-last */
} mma_conv_geom;

DL_GPU_HD mma_pix mma_pix_of(const mma_conv_geom *q, long long n, long long N, int g) {
    mma_pix p = {0, 0, -(1 << 30), 0};
    if (n >= N) return p;
    const long long opix = (long long)q->oh * q->ow, img = n / opix;
    const int r = (int)(n % opix), oy = r / q->ow, ox = r % q->ow;
    p.iy0 = oy * q->sh - q->ph;
    p.ix0 = ox * q->sw - q->pw;
    if (q->cl) {
        p.xoff = ((img * q->h + p.iy0) * q->w + p.ix0) * q->c + (long long)g * q->cg;
        p.yoff = (img * opix + r) * q->oc + (long long)g * q->ocg;
    } else {
        p.xoff = (img * q->c + (long long)g * q->cg) * q->h * q->w + (long long)p.iy0 * q->w + p.ix0;
        p.yoff = (img * q->oc + (long long)g * q->ocg) * opix + r;
    }
    return p;
}

/* The output offset of filter m of the pixel's group (m < ocg). */
DL_GPU_HD long long mma_y_at(const mma_conv_geom *q, const mma_pix *p, int m) {
    return p->yoff + (long long)m * (q->cl ? 1 : (long long)q->oh * q->ow);
}

/* 1 if a channels-last conv's gather goes by 16-byte chunks of one tap's channels (mma_load_chunk):
 * the input's c channels and each group's cg are whole chunks of 16 / esize elements (the input
 * must also be 16-byte aligned). Else it goes element by element (mma_load_elem), as NCHW does:
 * that loader reads through the k-table and the pixel table only, whatever the layout. */
DL_GPU_HD int mma_cl_chunks(int esize, int c, int cg) { return c % (16 / esize) == 0 && cg % (16 / esize) == 0; }

/* The output offset of filter o (of all oc, any group) at output pixel n: split-K's second step. */
DL_GPU_HD long long mma_conv_y_of(const mma_conv_geom *q, long long n, int o) {
    const long long opix = (long long)q->oh * q->ow;
    return q->cl ? n * q->oc + o : (n / opix * q->oc + o) * opix + n % opix;
}

#ifdef __cplusplus
}
#endif
#endif
