/* cudnn_formats.h — the cudnn plugin's decisions that need no GPU: what supports() accepts (kinds,
 * attributes, and from ABI 1.3 the storage dtypes and layouts of each kind), the layout it prefers,
 * the cuDNN / cuBLASLt enums chosen for a tensor and a precision, which searched convolution
 * algorithm and epilogue are kept, and the host halves of the convolution's trial at prepare
 * (scratch pattern, finiteness check, timing median). It includes cudnn.h and cublasLt.h for their
 * enums and structs only and calls nothing in them, so tests/test_gpu_formats.c checks it without
 * a GPU and without linking CUDA. */
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
 * the convolution descriptor's compute type is always FLOAT). The algorithm search runs with it. */
cudnnMathType_t dn_conv_math(int precision, dl_dtype d);
/* 1 if an algorithm found with math type m may be used: tensor-op algorithms only where
 * dn_conv_math allows them (f32 at f32 precision takes FMA and DEFAULT results only), and never
 * TENSOR_OP_MATH_ALLOW_CONVERSION (down-conversion, which the search is not asked for). */
int dn_conv_algo_ok(int precision, dl_dtype d, cudnnMathType_t m);
/* The math type to set on the convolution descriptor before running an algorithm the search
 * measured with math m: m itself, so the run uses the math it was timed with; except f32 data at
 * f32 precision, which always runs FMA_MATH (DEFAULT_MATH lets cuDNN use TF32 on Ampere and
 * later, which f32 precision forbids). */
cudnnMathType_t dn_conv_run_math(int precision, dl_dtype d, cudnnMathType_t m);
/* The first of the search's n results (cudnnFindConvolutionForwardAlgorithmEx sorts them fastest
 * first) that may be used: it ran (CUDNN_STATUS_SUCCESS), dn_conv_algo_ok takes its math, and its
 * algorithm is `algo` (any algorithm where algo < 0). -1 if none. */
int dn_conv_pick(const cudnnConvolutionFwdAlgoPerf_t *perf, int n, int precision, dl_dtype d, int algo);
/* A conv with a bias: which of n measured ways to keep, from their times in ms (< 0: that way
 * cannot be used) and whether each is cuDNN's fused call: the fastest, a tie going to a fused call
 * (one call, no second pass over y); -1 if none can be used. */
int dn_conv_fastest(const double *ms, const int *fused, int n);
/* The number a conv's kept plan (algorithm, the math it runs with, fused call or not) is kept as
 * in the host's timing cache (choice_store.h), and the plan read back: dn_conv_plan_of gives 1
 * where code is a plan prepare could have kept for a conv of dtype d at `precision`, with or
 * without a bias, relu or not: a known algorithm, a math dn_conv_algo_ok takes (as
 * dn_conv_run_math sets it), and the fused call only with a bias and, without relu, only on
 * IMPLICIT_PRECOMP_GEMM (all cuDNN takes it with there); else 0: the file is the user's. */
int dn_conv_plan_code(int algo, int math, int fused);
int dn_conv_plan_of(int code, int precision, dl_dtype d, int has_bias, int relu, int *algo, int *math, int *fused);
/* How prepare chooses a convolution's algorithm and epilogue, from DLRUN_CUDNN_SEARCH (read once
 * at load): DN_SEARCH_FIND (unset, empty or "find": cudnnFindConvolutionForwardAlgorithmEx times
 * every algorithm, then the epilogues are timed) or DN_SEARCH_HEURISTIC ("heuristic":
 * cudnnGetConvolutionForwardAlgorithm_v7's first usable answer that fits and runs, conv +
 * cudnnAddTensor, nothing timed; a handful of launches per conv instead of dozens, for runs
 * under compute-sanitizer racecheck, which replays every launch). 1, or 0 with the reason. */
enum { DN_SEARCH_FIND = 0, DN_SEARCH_HEURISTIC = 1 };
int dn_search_parse(const char *v, int *mode, char *why, size_t len);
/* The heuristic's answers whose workspace exceeds cap bytes marked unusable (their status set to
 * CUDNN_STATUS_NOT_SUPPORTED), so dn_conv_pick passes over them. */
void dn_conv_drop_oversized(cudnnConvolutionFwdAlgoPerf_t *perf, int n, size_t cap);
/* Names for the log line: "IMPLICIT_PRECOMP_GEMM", "TENSOR_OP", ...; "?" for an unknown value. */
const char *dn_conv_algo_name(int algo);
const char *dn_math_name(int math);

/* ---- the trial of a convolution at prepare on scratch buffers (conv.c) ---- */

/* Fills dst with n elements of storage type t (DL_GPU_F32, F16, BF16) of a fixed, deterministic
 * pattern: multiples of 1/256 in [-0.5, 0.5), exact in all three types, not all zero; so a
 * scratch input and filter give a convolution something to compute, and no sum of products
 * overflows f16 below 2^18 terms. */
void dn_fill_pattern(void *dst, int64_t n, dl_gpu_type t);
/* 1 if all n elements at p (a host copy, storage type t) are finite: no NaN, no infinity. */
int dn_all_finite(const void *p, int64_t n, dl_gpu_type t);
/* What of a scratch output of `bytes` bytes (elements of es bytes) is copied down to be checked:
 * all of it when it is at most DN_SAMPLE_SPANS * DN_SAMPLE_SPAN bytes (one span), else
 * DN_SAMPLE_SPANS spans of DN_SAMPLE_SPAN bytes spread evenly from its first byte to its last,
 * each starting on an element. Fills off[] and len[] (DN_SAMPLE_SPANS entries); returns how many. */
enum { DN_SAMPLE_SPANS = 16 };
#define DN_SAMPLE_SPAN ((size_t)1 << 20)
int dn_sample_spans(size_t bytes, size_t es, size_t *off, size_t *len);
/* The median of t[0..n), n >= 1 (t is sorted in place). */
float dn_median(float *t, int n);
/* cuBLASLt's matrix type of a storage dtype: CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF. */
cudaDataType_t dn_lt_type(dl_dtype d);
/* cuBLASLt's compute type: 32F for f32 data at f32 precision and for f16/bf16 data (f32
 * accumulation), 32F_FAST_TF32 for f32 data at any other precision. The scale type is 32F. */
cublasComputeType_t dn_lt_compute(int precision, dl_dtype d);
#endif
