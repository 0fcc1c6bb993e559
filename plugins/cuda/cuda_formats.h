/* cuda_formats.h — which storage dtypes and layouts the cuda plugin's kernels take (ABI 1.3), as
 * plain C without CUDA headers, so that tests/test_gpu_formats.c checks it without a GPU. */
#ifndef DLRUN_CUDA_FORMATS_H
#define DLRUN_CUDA_FORMATS_H
#include "gpu_storage.h"
#include "op_check.h"

/* The exact check of op for the cuda plugin's kernels (its kind must have one; cuda_backend.c
 * checks that first): dl_op_check_as with the formats the kind takes, then
 *   - conv2d, linear (the GEMMs): f32 row-major tensors only (f16/bf16 too where the tensor-core
 *     GEMM is on: cu_op_check_gemm16); a residual add fused into them (ABI 1.8) is taken, as the
 *     output's own storage (every GEMM's epilogue adds it: kernels.h, dlk_epilogue);
 *   - every other kind: f32, f16 or bf16, one dtype for all the op's tensors (but gather's int64
 *     indices);
 *   - the functions of one element (relu, leaky relu, sigmoid, clip and those of ABI 1.4: sqrt
 *     ... softplus), dropout, the binary ops (add, mul, sub, div, pow, min, max) on operands of the
 *     output's shape, and batchnorm: row-major or channels-last, the activations and the output
 *     in one layout (order does not matter to them, or batchnorm finds the channel either way);
 *     weights row-major;
 *   - the rest (pools, softmax, concat, broadcasting binary ops, flatten, reshape, and transpose,
 *     slice, pad, resize, the reductions, layer_norm, group_norm, gather, conv_transpose2d and
 *     conv3d, whose kernels index the logical shape row-major): row-major.
 * 1, or 0 with the reason. Fills *type (may be NULL) with the storage type, *layout (may be NULL)
 * with the activations' layout. */
int cu_op_check(const dl_op *op, dl_gpu_type *type, dl_layout *layout, dl_error *why);
/* The same, where gemm16 says the tensor-core GEMM is on (gemm_plan.h): conv2d and linear then
 * take f16 and bf16 too (one dtype for all their tensors, row-major), which only its tiles run. */
int cu_op_check_gemm16(const dl_op *op, int gemm16, dl_gpu_type *type, dl_layout *layout, dl_error *why);
/* 1 for the kinds whose kernels take channels-last tensors (see above). */
int cu_takes_channels_last(int kind);
/* 1 for the binary elementwise kinds (add, mul, sub, div, pow, min, max): two activations. */
int cu_is_binary(int kind);
#endif
