/* cuda_formats.h — which storage dtypes and layouts the cuda plugin's kernels take (ABI 1.3), as
 * plain C without CUDA headers, so that tests/test_gpu_formats.c checks it without a GPU. */
#ifndef DLRUN_CUDA_FORMATS_H
#define DLRUN_CUDA_FORMATS_H
#include "gpu_storage.h"
#include "op_check.h"

/* The exact check of op for the cuda plugin's kernels (its kind must have one; cuda_backend.c
 * checks that first): dl_op_check_as with the formats the kind takes, then
 *   - conv2d, linear (the GEMMs): f32 row-major tensors only (f16/bf16 too where the tensor-core
 *     GEMM is on: cu_op_check_sw); a residual add fused into them (ABI 1.8) is taken, as the
 *     output's own storage (every GEMM's epilogue adds it: kernels.h, dlk_epilogue);
 *   - every other kind: f32, f16 or bf16, one dtype for all the op's tensors (but gather's int64
 *     indices);
 *   - the functions of one element (relu, leaky relu, sigmoid, clip and those of ABI 1.4: sqrt
 *     ... softplus), dropout, the binary ops (add, mul, sub, div, pow, min, max) on operands of the
 *     output's shape, and batchnorm: row-major or channels-last, the activations and the output
 *     in one layout (order does not matter to them, or batchnorm finds the channel either way);
 *     weights row-major;
 *   - with CU_CHECK_NHWC (DLRUN_CUDA_NHWC, gemm_plan.h): conv2d (its tensor-core tiles: which
 *     shapes, cuda_backend.c asks gemm_plan.c), max, average and global average pooling take
 *     channels-last too;
 *   - the rest (pools, softmax, concat, broadcasting binary ops, flatten, reshape, and transpose,
 *     slice, pad, resize, the reductions, layer_norm, group_norm, gather, conv_transpose2d and
 *     conv3d, whose kernels index the logical shape row-major): row-major.
 * 1, or 0 with the reason. Fills *type (may be NULL) with the storage type, *layout (may be NULL)
 * with the activations' layout. */
int cu_op_check(const dl_op *op, dl_gpu_type *type, dl_layout *layout, dl_error *why);
/* The same with the plugin's switches (gemm_plan.h): CU_CHECK_GEMM16 where the tensor-core GEMM is
 * on (conv2d and linear then take f16 and bf16 too, one dtype for all their tensors, which only its
 * tiles run), CU_CHECK_NHWC where DLRUN_CUDA_NHWC is (see above). */
enum { CU_CHECK_GEMM16 = 1, CU_CHECK_NHWC = 2 };
int cu_op_check_sw(const dl_op *op, unsigned flags, dl_gpu_type *type, dl_layout *layout, dl_error *why);
/* 1 for the kinds whose kernels take channels-last tensors (see above; nhwc: with CU_CHECK_NHWC). */
int cu_takes_channels_last(int kind, int nhwc);
/* 1 for the binary elementwise kinds (add, mul, sub, div, pow, min, max): two activations. */
int cu_is_binary(int kind);
#endif
