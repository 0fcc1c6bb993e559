/* cudnn_formats.c — see cudnn_formats.h. */
#include "cudnn_formats.h"

#include <stdio.h>
#include <string.h>

#include "tensor_convert.h"

int dn_takes_channels_last(int kind) {
    switch (kind) {
    case DL_OP_CONV2D:
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL:
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
    case DL_OP_ADD:
    case DL_OP_BATCHNORM:
    case DL_OP_DROPOUT: return 1;
    default: return 0;
    }
}

static int pool_fits_cudnn(const dl_op *op) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *y = &op->outputs[0];
    for (int i = 0; i < 2; i++) { /* cuDNN pools with symmetric padding and floor-mode sizes */
        if (a->pad_begin[i] != a->pad_end[i] || a->dilation[i] != 1) return 0;
        if (dl_window_out(x->shape[2 + i], a->kernel[i], a->stride[i], a->pad_begin[i], a->pad_end[i], 1, 0) !=
            y->shape[2 + i])
            return 0;
    }
    return 1;
}

/* what cuDNN needs of each kind beyond the shared check */
static int kind_ok(const dl_op *op, dl_error *why) {
    const dl_op_attrs *a = op->attrs;
    switch (op->kind) {
    case DL_OP_CONV2D:
        if (a->pad_begin[0] != a->pad_end[0] || a->pad_begin[1] != a->pad_end[1])
            return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN convolutions pad symmetrically"), 0;
        return 1;
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
        if (!pool_fits_cudnn(op))
            return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN pools: symmetric padding, no dilation, floor mode"), 0;
        return 1;
    case DL_OP_CLIP:
        if (a->clip_min != 0.0f) return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN clips only as clipped relu (min 0)"), 0;
        return 1;
    case DL_OP_LEAKY_RELU: return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN has no leaky relu activation"), 0;
    case DL_OP_BATCHNORM:
        if (a->epsilon < CUDNN_BN_MIN_EPSILON)
            return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN batchnorm needs epsilon >= %g", CUDNN_BN_MIN_EPSILON), 0;
        return 1;
    case DL_OP_ADD:
        /* equal sizes: the same elements in the same order (channels-last operands are 4-D, so
         * broadcasting without growing means one shape) */
        if (dl_tensor_numel(&op->inputs[0]) != dl_tensor_numel(&op->outputs[0]) ||
            dl_tensor_numel(&op->inputs[1]) != dl_tensor_numel(&op->outputs[0]))
            return dl_fail(why, DL_E_UNSUPPORTED, "broadcasting add: not in the cudnn plugin"), 0;
        return 1;
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_GLOBAL_AVGPOOL:
    case DL_OP_LINEAR:
    case DL_OP_SOFTMAX:
    case DL_OP_CONCAT:
    case DL_OP_FLATTEN:
    case DL_OP_DROPOUT:
    case DL_OP_RESHAPE: return 1;
    default: /* matmul, and any kind the op table gains before this plugin runs it */
        return dl_fail(why, DL_E_UNSUPPORTED, "%s: not in the cudnn plugin yet", dl_op_kind_name(op->kind)), 0;
    }
}

int dn_op_check(const dl_op *op, dl_error *why) {
    unsigned formats = DL_ACCEPT_F16 | DL_ACCEPT_BF16;
    if (dn_takes_channels_last(op->kind)) formats |= DL_ACCEPT_CHANNELS_LAST;
    /* a fused residual add (ABI 1.8): cuDNN's z input of the fused convolution (or conv then
     * cudnnAddTensor), cuBLASLt's C with beta = 1 */
    if (op->kind == DL_OP_CONV2D || op->kind == DL_OP_LINEAR) formats |= DL_ACCEPT_RESIDUAL;
    if (!dl_op_check_as(op, formats, why)) return 0;
    int n_act = op->kind == DL_OP_ADD ? 2 : op->kind == DL_OP_CONCAT ? op->n_inputs : 1;
    if (!dl_gpu_one_type(op, NULL, why) || !dl_gpu_one_layout(op, n_act, NULL, why)) return 0;
    return kind_ok(op, why);
}

int dn_preferred_layout(const dl_op *op) {
    int half = op->precision == DL_PRECISION_F16 || op->precision == DL_PRECISION_BF16;
    if (!half || !dn_takes_channels_last(op->kind) || op->n_inputs < 1 || op->inputs[0].ndim != 4 ||
        op->n_outputs < 1 || op->outputs[0].ndim != 4)
        return DL_LAYOUT_ROW_MAJOR;
    return DL_LAYOUT_CHANNELS_LAST;
}

cudnnDataType_t dn_data_type(dl_dtype d) {
    switch (dl_gpu_type_of(d)) {
    case DL_GPU_F32: return CUDNN_DATA_FLOAT;
    case DL_GPU_F16: return CUDNN_DATA_HALF;
    case DL_GPU_BF16: return CUDNN_DATA_BFLOAT16;
    default: return (cudnnDataType_t)-1;
    }
}

cudnnTensorFormat_t dn_tensor_format(const dl_tensor *t) {
    return dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

cudnnMathType_t dn_conv_math(int precision, dl_dtype d) {
    return precision == DL_PRECISION_F32 && dl_dtype_is_f32(d) ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

int dn_conv_algo_ok(int precision, dl_dtype d, cudnnMathType_t m) {
    if (m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH) return 1;
    return m == CUDNN_TENSOR_OP_MATH && dn_conv_math(precision, d) == CUDNN_TENSOR_OP_MATH;
}

cudnnMathType_t dn_conv_run_math(int precision, dl_dtype d, cudnnMathType_t m) {
    return dn_conv_math(precision, d) == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : m;
}

int dn_conv_pick(const cudnnConvolutionFwdAlgoPerf_t *perf, int n, int precision, dl_dtype d, int algo) {
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && dn_conv_algo_ok(precision, d, perf[i].mathType) &&
            (algo < 0 || (int)perf[i].algo == algo))
            return i;
    return -1;
}

int dn_conv_fastest(const double *ms, const int *fused, int n) {
    int b = -1;
    for (int i = 0; i < n; i++)
        if (ms[i] >= 0 && (b < 0 || ms[i] < ms[b] || (ms[i] == ms[b] && fused[i] && !fused[b]))) b = i;
    return b;
}

enum { PLAN_ALGOS = 16, PLAN_MATHS = 8 }; /* room for CUDNN_CONVOLUTION_FWD_ALGO_COUNT algorithms, 4 maths */
_Static_assert((int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= (int)PLAN_ALGOS, "a plan's code keeps every algorithm apart");

int dn_conv_plan_code(int algo, int math, int fused) { return algo + PLAN_ALGOS * (math + PLAN_MATHS * !!fused); }

int dn_conv_plan_of(int code, int precision, dl_dtype d, int has_bias, int relu, int *algo, int *math, int *fused) {
    if (code < 0 || code >= PLAN_ALGOS * PLAN_MATHS * 2) return 0;
    int a = code % PLAN_ALGOS, m = code / PLAN_ALGOS % PLAN_MATHS, f = code / (PLAN_ALGOS * PLAN_MATHS);
    int maths[] = {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH}, known = 0;
    for (size_t i = 0; i < sizeof maths / sizeof *maths; i++) known |= m == maths[i];
    if (a >= (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT || !known || !dn_conv_algo_ok(precision, d, (cudnnMathType_t)m) ||
        (int)dn_conv_run_math(precision, d, (cudnnMathType_t)m) != m)
        return 0;
    if (f && (!has_bias || (!relu && a != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM))) return 0;
    *algo = a, *math = m, *fused = f;
    return 1;
}

int dn_search_parse(const char *v, int *mode, char *why, size_t len) {
    *mode = DN_SEARCH_FIND;
    if (!v || !*v || !strcmp(v, "find")) return 1;
    if (!strcmp(v, "heuristic")) return *mode = DN_SEARCH_HEURISTIC, 1;
    return snprintf(why, len, "DLRUN_CUDNN_SEARCH is \"%s\": it takes find or heuristic", v), 0;
}

void dn_conv_drop_oversized(cudnnConvolutionFwdAlgoPerf_t *perf, int n, size_t cap) {
    for (int i = 0; i < n; i++)
        if (perf[i].memory > cap) perf[i].status = CUDNN_STATUS_NOT_SUPPORTED;
}

const char *dn_conv_algo_name(int algo) {
    static const char *const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    return algo >= 0 && algo < (int)(sizeof names / sizeof *names) ? names[algo] : "?";
}

const char *dn_math_name(int math) {
    switch (math) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA";
    default: return "?";
    }
}

void dn_fill_pattern(void *dst, int64_t n, dl_gpu_type t) {
    for (int64_t i = 0; i < n; i++) {
        /* a multiplicative hash's top byte: values spread over [-128, 127], never periodic in the
         * small strides of a tensor's dimensions */
        uint32_t h = (uint32_t)i * 2654435761u;
        float v = (float)((int)(h >> 24) - 128) / 256.0f;
        if (t == DL_GPU_F32) ((float *)dst)[i] = v;
        else ((uint16_t *)dst)[i] = t == DL_GPU_F16 ? dl_f32_to_f16(v) : dl_f32_to_bf16(v);
    }
}

int dn_all_finite(const void *p, int64_t n, dl_gpu_type t) {
    for (int64_t i = 0; i < n; i++) {
        if (t == DL_GPU_F32) {
            uint32_t u;
            memcpy(&u, (const char *)p + 4 * i, sizeof u);
            if ((u & 0x7f800000u) == 0x7f800000u) return 0; /* exponent all ones: infinity or NaN */
        } else {
            uint16_t h, e = t == DL_GPU_F16 ? 0x7c00u : 0x7f80u;
            memcpy(&h, (const char *)p + 2 * i, sizeof h);
            if ((h & e) == e) return 0;
        }
    }
    return 1;
}

int dn_sample_spans(size_t bytes, size_t es, size_t *off, size_t *len) {
    if (bytes <= DN_SAMPLE_SPANS * DN_SAMPLE_SPAN) {
        off[0] = 0;
        len[0] = bytes;
        return 1;
    }
    size_t step = (bytes - DN_SAMPLE_SPAN) / (DN_SAMPLE_SPANS - 1);
    for (int i = 0; i < DN_SAMPLE_SPANS; i++) {
        off[i] = i == DN_SAMPLE_SPANS - 1 ? bytes - DN_SAMPLE_SPAN : step * (size_t)i / es * es;
        len[i] = DN_SAMPLE_SPAN;
    }
    return DN_SAMPLE_SPANS;
}

float dn_median(float *t, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: n is a handful of timed runs */
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            float v = t[j];
            t[j] = t[j - 1];
            t[j - 1] = v;
        }
    return t[n / 2];
}

cudaDataType_t dn_lt_type(dl_dtype d) {
    dl_gpu_type t = dl_gpu_type_of(d);
    return t == DL_GPU_F16 ? CUDA_R_16F : t == DL_GPU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasComputeType_t dn_lt_compute(int precision, dl_dtype d) {
    if (!dl_dtype_is_f32(d)) return CUBLAS_COMPUTE_32F;
    return precision == DL_PRECISION_F32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
}
