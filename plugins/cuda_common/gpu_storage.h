/* gpu_storage.h — storage dtypes and layouts in the CUDA plugins (ABI 1.3), as plain C that needs no
 * CUDA header, so that tests/test_gpu_formats.c checks it without a GPU:
 *   - the storage types the kernels are instantiated for (f32, f16, bf16) and which one a tensor is;
 *   - the index math between row-major (NCHW) and channels-last (NHWC) orders of one [N,C,H,W]
 *     tensor, the same functions on the host and in the cast kernel (DL_GPU_HD); a conv filter
 *     [O,I,KH,KW] reordered to KRSC ([O,KH,KW,I], cuDNN's NHWC filter) is the same reorder with
 *     N = O, C = I, H x W = KH x KW;
 *   - the plan of a converting copy (what supports_convert accepts), and the host halves of the
 *     staged uploads and downloads: converting one chunk into or out of the pinned staging buffer.
 * The device half (the cast kernel) is in cast.cu, the copies that use both in gpu.c. */
#ifndef DLRUN_GPU_STORAGE_H
#define DLRUN_GPU_STORAGE_H
#include <stdint.h>

#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define DL_GPU_HD __host__ __device__ inline
#else
#define DL_GPU_HD static inline
#endif

/* Storage types the CUDA kernels are built for. */
typedef enum dl_gpu_type { DL_GPU_NOTYPE = -1, DL_GPU_F32 = 0, DL_GPU_F16 = 1, DL_GPU_BF16 = 2 } dl_gpu_type;

/* The storage type of a dtype, or DL_GPU_NOTYPE. */
dl_gpu_type dl_gpu_type_of(dl_dtype d);
/* Bytes of one element of t (4 or 2; 0 for DL_GPU_NOTYPE). */
int dl_gpu_type_size(dl_gpu_type t);

/* How element order changes between two tensors of one logical shape [N,C,H,W]. */
enum { DL_GPU_SAME_ORDER = 0, DL_GPU_TO_CHANNELS_LAST = 1, DL_GPU_TO_ROW_MAJOR = 2 };
typedef struct dl_gpu_xform {
    int64_t n;     /* elements */
    int64_t c, hw; /* channels and H x W (1 and n when the order is the same) */
    int relayout;  /* DL_GPU_SAME_ORDER, DL_GPU_TO_CHANNELS_LAST (src row-major, dst channels-last)
                      or DL_GPU_TO_ROW_MAJOR */
} dl_gpu_xform;

/* Index i of an [N,C,HW] tensor in row-major order -> the same element's channels-last index. */
DL_GPU_HD int64_t dl_gpu_rm_to_cl(int64_t i, int64_t c, int64_t hw) {
    int64_t img = c * hw, b = i / img, r = i % img;
    return b * img + (r % hw) * c + r / hw;
}
/* Index i in channels-last order -> row-major. */
DL_GPU_HD int64_t dl_gpu_cl_to_rm(int64_t i, int64_t c, int64_t hw) {
    int64_t img = c * hw, b = i / img, r = i % img;
    return b * img + (r % c) * hw + r / c;
}
/* The source index of destination element j (a gather). */
DL_GPU_HD int64_t dl_gpu_src_of(const dl_gpu_xform *x, int64_t j) {
    return x->relayout == DL_GPU_TO_CHANNELS_LAST ? dl_gpu_cl_to_rm(j, x->c, x->hw)
           : x->relayout == DL_GPU_TO_ROW_MAJOR   ? dl_gpu_rm_to_cl(j, x->c, x->hw)
                                                  : j;
}
/* The destination index of source element i (a scatter). */
DL_GPU_HD int64_t dl_gpu_dst_of(const dl_gpu_xform *x, int64_t i) {
    return x->relayout == DL_GPU_TO_CHANNELS_LAST ? dl_gpu_rm_to_cl(i, x->c, x->hw)
           : x->relayout == DL_GPU_TO_ROW_MAJOR   ? dl_gpu_cl_to_rm(i, x->c, x->hw)
                                                  : i;
}

/* The reorder between tensors of logical shape `shape` (ndim dims) from layout `from` to layout
 * `to` (dl_layout; channels-last only for 4-D). 0 if a layout is neither row-major nor
 * channels-last, or channels-last is asked of a tensor that is not 4-D. */
int dl_gpu_xform_init(dl_gpu_xform *x, const int64_t *shape, int ndim, int to, int from);
/* The reorder of a conv filter [O,I,KH,KW] from row-major to KRSC ([O,KH,KW,I], NHWC filter). */
void dl_gpu_filter_krsc(dl_gpu_xform *x, const int64_t *wshape);

/* What the plugins' supports() add to dl_op_check_as for ops on stored formats:
 * dl_gpu_one_type: every tensor of op has one storage type (the kernels are instantiated per type,
 * not per mix); fills *t (may be NULL). Else 0 with the reason.
 * dl_gpu_one_layout: inputs [0, n_act) (the activations) and the output are in one layout; the
 * other inputs (weights) are row-major, but a fused residual (dl_op_residual), which
 * dl_op_check_as holds to the output's layout. Fills *l (may be NULL). Else 0 with the reason.
 * dl_gpu_same_shape: 1 if a and b have one shape. */
int dl_gpu_one_type(const dl_op *op, dl_gpu_type *t, dl_error *why);
int dl_gpu_one_layout(const dl_op *op, int n_act, dl_layout *l, dl_error *why);
int dl_gpu_same_shape(const dl_tensor *a, const dl_tensor *b);

/* A converting copy: the two storage types and the reorder. */
typedef struct dl_gpu_convert_plan {
    dl_gpu_type dt, st;
    dl_gpu_xform x;
} dl_gpu_convert_plan;

/* 1 if a copy from src to dst (same shape) can convert between their dtypes (f32, f16, bf16) and
 * layouts (row-major, channels-last) in direction `kind`; fills p (may be NULL). Else 0 with the
 * reason in why (may be NULL). This is the GPU plugins' supports_convert. */
int dl_gpu_convert_plan_of(const dl_tensor *dst, const dl_tensor *src, int kind, dl_gpu_convert_plan *p, dl_error *why);

/* The host halves of a staged converting copy, for count elements starting at element lo:
 * gather: chunk[j] = src[dl_gpu_src_of(lo + j)] (lo counts in dst's order: an upload fills the
 * staging buffer with dst's elements lo.., then copies it to dst + lo);
 * scatter: dst[dl_gpu_dst_of(lo + j)] = chunk[j] (lo counts in src's order: a download brings
 * src's elements lo.. into the staging buffer, then spreads them into host dst).
 * Both convert between p->st and p->dt, rounding to nearest even. */
void dl_gpu_gather_host(void *chunk, const void *src, const dl_gpu_convert_plan *p, int64_t lo, int64_t count);
void dl_gpu_scatter_host(void *dst, const void *chunk, const dl_gpu_convert_plan *p, int64_t lo, int64_t count);

#ifdef __cplusplus
}
#endif
#endif
