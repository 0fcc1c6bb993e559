/* cudnn_formats.h — the cudnn plugin's decisions that need no GPU: what supports() accepts (kinds,
 * attributes, and from ABI 1.3 the storage dtypes and layouts of each kind), the layout it prefers,
 * and the cuDNN / cuBLASLt enums chosen for a tensor and a precision. It includes cudnn.h and
 * cublasLt.h for their enums only and calls nothing in them, so tests/test_gpu_formats.c checks it
 * without a GPU and without linking CUDA. */
#ifndef DLRUN_CUDNN_FORMATS_H
#define DLRUN_CUDNN_FORMATS_H
#include <cublasLt.h>
#include <cudnn.h>

#include "gpu_storage.h"
#include "op_check.h"

/* The plugin's exact supports(): dl_op_check_as with the formats each kind takes, one dtype for
 * all the op's tensors, one layout for its activations (weights row-major), then what cuDNN
 * itself needs (symmetric padding, floor-mode pools, clip as clipped relu, batchnorm's epsilon,
 * same-shape add). Storage formats per kind:
 *   conv2d                  f32, f16, bf16; NCHW or NHWC (NHWC reads a KRSC copy of the filter)
 *   linear                  f32, f16, bf16 (cuBLASLt, f32 accumulation); row-major
 *   max/avg/global pools, relu, sigmoid, clip, same-shape add, batchnorm, dropout
 *                           f32, f16, bf16; NCHW or NHWC
 *   softmax, concat, flatten, reshape
 *                           f32, f16, bf16; row-major
 * (Where cuDNN turns a stored format down at prepare, the op runs on f32 NCHW copies in its
 * workspace instead, so what is accepted here always runs; see ops.c.) */
int dn_op_check(const dl_op *op, dl_error *why);
/* 1 for the kinds that take channels-last tensors (above). */
int dn_takes_channels_last(int kind);
/* The plugin's preferred_layout: channels-last for conv2d and for the kinds above that take it
 * when the op is 4-D and the session asks for f16 or bf16 (cuDNN's tensor-core convolutions read
 * NHWC; the ops between them keep that order rather than convert); row-major otherwise. */
int dn_preferred_layout(const dl_op *op);

/* cuDNN's data type of a storage dtype: FLOAT, HALF or BFLOAT16; -1 for any other. */
cudnnDataType_t dn_data_type(dl_dtype d);
/* cuDNN's format of a 4-D tensor: NHWC when it is channels-last, else NCHW. */
cudnnTensorFormat_t dn_tensor_format(const dl_tensor *t);
/* Math of a convolution on data of dtype d at a precision: FMA (no tensor cores) for f32 data at
 * f32 precision, tensor-op math otherwise (TF32 for f32 data, f16/bf16 with f32 accumulation —
 * the convolution descriptor's compute type is always FLOAT). */
cudnnMathType_t dn_conv_math(int precision, dl_dtype d);
/* 1 if an algorithm found with math type m may be used: tensor-op algorithms only where
 * dn_conv_math allows them. */
int dn_conv_algo_ok(int precision, dl_dtype d, cudnnMathType_t m);
/* cuBLASLt's matrix type of a storage dtype: CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF. */
cudaDataType_t dn_lt_type(dl_dtype d);
/* cuBLASLt's compute type: 32F for f32 data at f32 precision and for f16/bf16 data (f32
 * accumulation), 32F_FAST_TF32 for f32 data at any other precision. The scale type is 32F. */
cublasComputeType_t dn_lt_compute(int precision, dl_dtype d);
#endif
