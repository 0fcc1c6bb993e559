/* ops.c — the cudnn plugin's ops other than conv2d and linear: pooling, relu/sigmoid/clipped relu
 * activations, same-shape add (cudnnOpTensor), softmax, inference batchnorm, and concat and the
 * view ops as device copies; plus the descriptor helpers conv.c shares. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "cudnn_plugin.h"

/* ---- descriptors ---- */

dl_status dn_tensor4(cudnnTensorDescriptor_t *d, int64_t n, int64_t c, int64_t h, int64_t w, dl_error *err) {
    DNN_TRY(cudnnCreateTensorDescriptor(d));
    if (n > 0x7fffffff || c > 0x7fffffff || h > 0x7fffffff || w > 0x7fffffff || n * c * h * w > 0x7fffffff)
        return dl_fail(err, DL_E_UNSUPPORTED, "tensor too large for a cuDNN descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)c, (int)h, (int)w));
    return DL_OK;
}

dl_status dn_activation(dl_kernel *k, cudnnActivationMode_t mode, double coef, dl_error *err) {
    DNN_TRY(cudnnCreateActivationDescriptor(&k->act));
    DNN_TRY(cudnnSetActivationDescriptor(k->act, mode, CUDNN_PROPAGATE_NAN, coef));
    return DL_OK;
}

/* ---- prepare ---- */

static dl_status prepare_pool(dl_kernel *k, dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    dl_status st;
    if ((st = dn_tensor4(&k->x, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
    if ((st = dn_tensor4(&k->y, ys[0], ys[1], ys[2], ys[3], err)) != DL_OK) return st;
    DNN_TRY(cudnnCreatePoolingDescriptor(&k->pool));
    cudnnPoolingMode_t mode = k->g.kind == DL_OP_MAXPOOL2D ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : a->count_include_pad       ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                           : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (k->g.kind == DL_OP_GLOBAL_AVGPOOL)
        DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN,
                                            (int)xs[2], (int)xs[3], 0, 0, 1, 1));
    else
        DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, mode, CUDNN_PROPAGATE_NAN, a->kernel[0], a->kernel[1],
                                            a->pad_begin[0], a->pad_begin[1], a->stride[0], a->stride[1]));
    return DL_OK;
}

dl_status dn_prepare_op(dl_kernel *k, dl_error *err) {
    const int64_t *xs = k->g.xs;
    int64_t n = k->g.numel;
    dl_status st;
    switch (k->g.kind) {
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL: return prepare_pool(k, err);
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
        if ((st = dn_tensor4(&k->x, 1, 1, 1, n, err)) != DL_OK) return st;
        if (k->g.kind == DL_OP_SIGMOID) return dn_activation(k, CUDNN_ACTIVATION_SIGMOID, 0, err);
        if (k->g.kind == DL_OP_CLIP && k->g.a.clip_max < INFINITY) /* clip(0, max): clipped relu */
            return dn_activation(k, CUDNN_ACTIVATION_CLIPPED_RELU, (double)k->g.a.clip_max, err);
        return dn_activation(k, CUDNN_ACTIVATION_RELU, 0, err);
    case DL_OP_ADD:
        if ((st = dn_tensor4(&k->x, 1, 1, 1, n, err)) != DL_OK) return st;
        DNN_TRY(cudnnCreateOpTensorDescriptor(&k->op));
        DNN_TRY(cudnnSetOpTensorDescriptor(k->op, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
        return k->g.a.activation == DL_ACT_RELU ? dn_activation(k, CUDNN_ACTIVATION_RELU, 0, err) : DL_OK;
    case DL_OP_SOFTMAX:
        k->outer = dl_gpu_prod(xs, 0, k->g.a.axis);
        k->inner = dl_gpu_prod(xs, k->g.a.axis + 1, k->g.xnd);
        return dn_tensor4(&k->x, k->outer, xs[k->g.a.axis], k->inner, 1, err);
    case DL_OP_BATCHNORM:
        if ((st = dn_tensor4(&k->x, xs[0], xs[1], dl_gpu_prod(xs, 2, k->g.xnd), 1, err)) != DL_OK) return st;
        if ((st = dn_tensor4(&k->b, 1, xs[1], 1, 1, err)) != DL_OK) return st;
        return k->g.a.activation == DL_ACT_RELU ? dn_activation(k, CUDNN_ACTIVATION_RELU, 0, err) : DL_OK;
    case DL_OP_CONCAT:
        k->outer = dl_gpu_prod(k->g.ys, 0, k->g.a.axis);
        k->inner = dl_gpu_prod(k->g.ys, k->g.a.axis + 1, k->g.ynd);
        return DL_OK;
    default: return DL_OK; /* flatten, dropout, reshape: copies */
    }
}

/* ---- run ---- */

dl_status dn_run_op(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, dl_error *err) {
    const float one = 1.0f, zero = 0.0f;
    const void *x = in[0].data;
    cudaStream_t st = s->gpu.stream;
    int relu = k->g.a.activation == DL_ACT_RELU;
    switch (k->g.kind) {
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL:
        DNN_TRY(cudnnPoolingForward(s->dnn, k->pool, &one, k->x, x, &zero, k->y, y));
        return DL_OK;
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP: DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, x, &zero, k->x, y)); return DL_OK;
    case DL_OP_ADD:
        DNN_TRY(cudnnOpTensor(s->dnn, k->op, &one, k->x, x, &one, k->x, in[1].data, &zero, k->x, y));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        return DL_OK;
    case DL_OP_SOFTMAX:
        DNN_TRY(cudnnSoftmaxForward(s->dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, k->x, x, &zero,
                                    k->x, y));
        return DL_OK;
    case DL_OP_BATCHNORM:
        DNN_TRY(cudnnBatchNormalizationForwardInference(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, k->x, x, k->x, y,
                                                        k->b, in[1].data, in[2].data, in[3].data, in[4].data,
                                                        k->g.a.epsilon));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        return DL_OK;
    case DL_OP_CONCAT: {
        int64_t off = 0, row = k->g.ys[k->g.a.axis] * k->inner * 4;
        for (int i = 0; i < k->g.n_inputs; i++) {
            int64_t part = k->g.cat_len[i] * k->inner * 4;
            DL_GPU_TRY(cudaMemcpy2DAsync((char *)y + off, (size_t)row, in[i].data, (size_t)part, (size_t)part,
                                         (size_t)k->outer, cudaMemcpyDeviceToDevice, st),
                       err);
            off += part;
        }
        return DL_OK;
    }
    default: /* flatten, dropout, reshape */
        if (x != y) DL_GPU_TRY(cudaMemcpyAsync(y, x, (size_t)k->g.numel * 4, cudaMemcpyDeviceToDevice, st), err);
        return DL_OK;
    }
}
