/* cudnn_formats.c — see cudnn_formats.h. */
#include "cudnn_formats.h"

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
    return dn_conv_math(precision, d) == CUDNN_TENSOR_OP_MATH || m != CUDNN_TENSOR_OP_MATH;
}

cudaDataType_t dn_lt_type(dl_dtype d) {
    dl_gpu_type t = dl_gpu_type_of(d);
    return t == DL_GPU_F16 ? CUDA_R_16F : t == DL_GPU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasComputeType_t dn_lt_compute(int precision, dl_dtype d) {
    if (!dl_dtype_is_f32(d)) return CUBLAS_COMPUTE_32F;
    return precision == DL_PRECISION_F32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
}
