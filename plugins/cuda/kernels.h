/* kernels.h — launchers of the cuda plugin's own kernels (one family per .cu file in ops/),
 * callable from C, and the launch parameters they take (built once per op at prepare, in
 * cuda_backend.c; those of the elementwise, movement, reduction, conv_transpose2d and conv3d
 * kernels are in cuda_params.h, plain C, with their builders). Each launcher returns 0, or the
 * cudaError_t of the launch. Tensors are dense, on the device. The SIMT GEMMs take f32 row-major
 * (NCHW) tensors, the tensor-core ones f32, f16 or bf16, NCHW or NHWC; every other launcher takes the storage type of
 * its tensors (`type`, a dl_gpu_type: f32, f16 or bf16, one for all of an op's floating-point tensors; gather's indices
 * are int64; kernels load as float, compute in float and store rounded) and row-major order, except where a parameter
 * says channels-last (the tensor-core conv, batchnorm, the pools) or order does not matter (unary, same-shape
 * binary). */
#ifndef DLRUN_CUDA_KERNELS_H
#define DLRUN_CUDA_KERNELS_H
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cuda_params.h"
#include "gpu_storage.h"
#include "mma_layout.h"
#include "wgmma_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GEMM problems (ops/gemm.cu) ---- */

typedef struct dlk_conv {
    int n, c, h, w; /* input */
    int oc, oh, ow; /* output */
    int kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int cl; /* x and y channels-last, the weights KRSC ([O, KH, KW, C / groups]): the tensor-core
             * tiles only (dlk_mma_conv2d); 0: NCHW and OIHW */
} dlk_conv;

typedef struct dlk_linear_p {
    int n, in, out; /* y[n, out] = x[n, in] w[out, in]^T + b */
} dlk_linear_p;

/* What every GEMM does with the sum v of output element y[at] (filter or output feature o) before
 * storing it: v + bias[o] (NULL: no bias) + residual[at] (NULL: none; a residual add fused into the
 * op, ABI 1.8), then relu where relu. bias and residual have y's storage type; the residual has y's
 * shape and layout, so its element at y's own offset is the one added. It may be y itself (each
 * element is read before it is written, by the thread that writes it). */
typedef struct dlk_epilogue {
    const void *bias, *residual;
    int relu;
} dlk_epilogue;

enum { DLK_VARIANTS = 2 }; /* GEMM tile shapes: 0 = 64x64 (4x4 per thread), 1 = 32x32 (2x2) */

int dlk_conv2d(const dlk_conv *p, const float *x, const float *w, const dlk_epilogue *e, float *y, int variant,
               cudaStream_t s);
int dlk_linear(const dlk_linear_p *p, const float *x, const float *w, const dlk_epilogue *e, float *y, int variant,
               cudaStream_t s);

/* ---- the same problems on the tensor cores (ops/mma_gemm.cu, mma_layout.h) ---- */

/* Tile shapes of the mma GEMM: 0 = 128x128 (8 warps), 1 = 128x64, 2 = 64x64 (4 warps). */
enum { DLK_MMA_TILES = 3 };

/* Storage `type` for x, w, y and the epilogue's tensors: f32 computes as tf32 (m16n8k8), f16 and
 * bf16 as themselves (m16n8k16), all with f32 sums. conv2d's ktab: the device table of its
 * K = (c / groups) * kh * kw columns (mma_ktap_of; mma_ktap_cl_of where p->cl: the gather then
 * copies 16-byte chunks of a pixel's channels where mma_cl_chunks allows and x is 16-byte aligned,
 * else goes element by element). splits > 1: split-K, k cut in that many slices whose f32 sums go to
 * `part` (dlk_mma_part_bytes), then added up with the epilogue by a second kernel; 1: none (part
 * unused). */
int dlk_mma_conv2d(const dlk_conv *p, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                   const mma_ktap *ktab, int tile, int splits, float *part, cudaStream_t s);
int dlk_mma_linear(const dlk_linear_p *p, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                   int tile, int splits, float *part, cudaStream_t s);

/* Split-K's second step for the tensor-core GEMMs: y = the epilogue of the sum of the `splits`
 * slices in part (slice sp of group g at part[(g * splits + sp) m n ...]); q: a conv's geometry
 * (where each output goes), NULL for a linear (y[n, m]). */
int dlk_mma_splitk_sum(int type, const float *part, int splits, int groups, int m, int n, const dlk_epilogue *e,
                       void *y, const mma_conv_geom *q, cudaStream_t s);

/* ---- the same problems on sm_90's warpgroup MMA (ops/wgmma_gemm.cu, wgmma_layout.h) ---- */

/* Tiles of 128 x bn, bn 128 or 256 (two warpgroups, wgmma.mma_async m64n128 or m64n256, operands
 * from shared memory by descriptor), f32 (as tf32, k8), f16 or bf16 (k16) storage, f32 sums;
 * every operand copied by
 * 16-byte chunks: a conv channels-last only (p->cl, the weights KRSC, its ktab mma_ktap_cl_of), and
 * wg_chunks_ok's sizes. x and w 16-byte aligned (dlk_wgmma_aligned). splits as dlk_mma_conv2d's.
 * Built for sm_90a alone: on any other device the launch fails. */
int dlk_wgmma_conv2d(const dlk_conv *p, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                     const mma_ktap *ktab, int bn, int splits, float *part, cudaStream_t s);
int dlk_wgmma_linear(const dlk_linear_p *p, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                     int bn, int splits, float *part, cudaStream_t s);
/* 1 if x and w start 16-byte aligned, as the warpgroup tile's copies need */
int dlk_wgmma_aligned(const void *x, const void *w);

/* linear of p->n <= DLK_GEMV_ROWS batch rows, bandwidth-bound (ops/gemv.cu): storage `type`, sums
 * in f32 */
enum { DLK_GEMV_ROWS = 8 };
int dlk_gemv(const dlk_linear_p *p, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
             cudaStream_t s);

/* ---- elementwise (ops/elementwise.cu) ---- */

int dlk_unary(const dlk_unary_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s);
/* y = a OP b over n elements (add: relu fused when relu); with p->bcast numpy broadcasting */
int dlk_binary(const dlk_binary_p *p, int type, const void *a, const void *b, void *y, int64_t n, int relu,
               cudaStream_t s);

typedef struct dlk_batchnorm_p {
    int64_t planes; /* n * c */
    int c;          /* channels */
    int64_t inner;  /* elements per channel plane */
    float eps;
    int relu; /* relu fused after */
    int cl;   /* x and y are channels-last (4-D): the channel is the fastest index */
} dlk_batchnorm_p;

/* the parameters gamma, beta, mean, var have x's storage type too */
int dlk_batchnorm(const dlk_batchnorm_p *p, int type, const void *x, const void *gamma, const void *beta,
                  const void *mean, const void *var, void *y, cudaStream_t s);

/* ---- pooling (ops/pool.cu) ---- */

typedef struct dlk_pool {
    int64_t planes;        /* n * c */
    int h, w, oh, ow;      /* input and output plane */
    int kh, kw, sh, sw;    /* window and stride */
    int pt, pl, pb, pr;    /* padding top, left, bottom, right */
    int dh, dw;            /* dilation (max pooling) */
    int count_include_pad; /* average pooling: pads count in the divisor */
    int c;                 /* channels (planes = n * c) */
    int cl;                /* x and y channels-last: the channel is the fastest index */
} dlk_pool;

/* NCHW, or NHWC where p->cl */
int dlk_maxpool(const dlk_pool *p, int type, const void *x, void *y, cudaStream_t s);
int dlk_avgpool(const dlk_pool *p, int type, const void *x, void *y, cudaStream_t s);
/* x [planes / c, c, plane] (row-major) or, cl, [planes / c, plane, c]; y [planes] either way */
int dlk_global_avgpool(int type, const void *x, void *y, int64_t planes, int64_t plane, int c, int cl, cudaStream_t s);

/* ---- softmax and concat (ops/softmax_concat.cu) ---- */

typedef struct dlk_softmax_p {
    int64_t outer, len, inner; /* dims before the axis, along it, after it */
    int log;                   /* 1: log_softmax, x - max - log(sum exp(x - max)) */
} dlk_softmax_p;

int dlk_softmax(const dlk_softmax_p *p, int type, const void *x, void *y, cudaStream_t s);
/* y[o * row + offset + i] = x[o * chunk + i] for o < outer, i < chunk: one input of a concat
 * (elements of x's storage type, copied as they are). */
int dlk_concat_part(int type, const void *x, void *y, int64_t outer, int64_t chunk, int64_t row, int64_t offset,
                    cudaStream_t s);

/* ---- movement (ops/movement.cu) ---- */

/* transpose, slice: n elements gathered (copied as they are) */
int dlk_gather(const dlk_gather_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s);
int dlk_pad(const dlk_pad_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s);
int dlk_resize(const dlk_resize_p *p, int type, const void *x, void *y, cudaStream_t s);

/* Where the gather kernel notes an index out of range (device memory, one per plugin, zeroed): the
 * first one met sets `bad` and the rest (a later one finds bad already set and leaves them). The
 * plugin reads it at synchronize. */
typedef struct dlk_index_error {
    unsigned int bad;
    unsigned int unused;
    int64_t index, at, size; /* the index, its position among the indices, the dimension's size */
} dlk_index_error;

/* gather: y[(o * m + j) * inner + t] = x[(o * n + idx[j]) * inner + t] (elements copied as they
 * are); an index outside [-n, n) reads nothing, writes zeros and is noted in *err. */
int dlk_take(const dlk_take_p *p, int type, const void *x, const int64_t *idx, void *y, dlk_index_error *err,
             cudaStream_t s);

/* ---- conv_transpose2d (ops/conv_transpose.cu) ---- */

/* x, w and b (NULL: no bias) in storage type `type`, row-major; sums in float */
int dlk_conv_transpose2d(const dlk_deconv_p *p, int type, const void *x, const void *w, const void *b, void *y,
                         cudaStream_t s);

/* ---- conv3d (ops/conv3d.cu) ---- */

/* x, w and b (NULL: no bias) in storage type `type`, row-major; sums in float */
int dlk_conv3d(const dlk_conv3d_p *p, int type, const void *x, const void *w, const void *b, void *y, cudaStream_t s);

/* ---- reductions and layer_norm (ops/reduce_norm.cu) ---- */

int dlk_reduce(const dlk_reduce_p *p, int type, const void *x, void *y, cudaStream_t s);
/* weight and bias (`inner` elements each) have x's storage type too */
/* group_norm: rows = N * groups of `inner` = (C / groups) * spatial contiguous elements each; the
 * weight and bias per channel: row r's element i is channel (r % groups) * (C / groups) + i / spatial. */
int dlk_group_norm(const dlk_group_norm_p *p, int type, const void *x, const void *w, const void *b, void *y,
                   cudaStream_t s);
int dlk_layer_norm(const dlk_layer_norm_p *p, int type, const void *x, const void *w, const void *b, void *y,
                   cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
