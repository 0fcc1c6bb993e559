/* conv.c — conv2d in the cudnn plugin: the cuDNN descriptors, the algorithm measured on the real
 * shapes and weights at prepare (cudnnFindConvolutionForwardAlgorithmEx, whose workspace becomes
 * the kernel's), and the run: conv + bias (+ relu) in one fused call where there is a bias. */
#define _POSIX_C_SOURCE 200809L
#include "cudnn_plugin.h"

static cudnnMathType_t math_of(int precision) {
    return precision == DL_PRECISION_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* conv2d: descriptors, then the fastest algorithm measured on the real shapes and weights */
dl_status dn_prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    const dl_tensor *w = &op->inputs[1];
    dl_status st;
    if ((st = dn_tensor4(&k->x, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
    if ((st = dn_tensor4(&k->y, ys[0], ys[1], ys[2], ys[3], err)) != DL_OK) return st;
    if ((st = dn_tensor4(&k->b, 1, ys[1], 1, 1, err)) != DL_OK) return st;
    DNN_TRY(cudnnCreateFilterDescriptor(&k->w));
    DNN_TRY(cudnnSetFilter4dDescriptor(k->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)w->shape[0], (int)w->shape[1],
                                       (int)w->shape[2], (int)w->shape[3]));
    DNN_TRY(cudnnCreateConvolutionDescriptor(&k->conv));
    DNN_TRY(cudnnSetConvolution2dDescriptor(k->conv, a->pad_begin[0], a->pad_begin[1], a->stride[0], a->stride[1],
                                            a->dilation[0], a->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionGroupCount(k->conv, a->groups));
    DNN_TRY(cudnnSetConvolutionMathType(k->conv, math_of(op->precision)));
    int relu = a->activation == DL_ACT_RELU;
    if ((st = dn_activation(k, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, 0, err)) != DL_OK) return st;
    k->fused = k->g.has_bias; /* bias (+ relu) in the convolution call */
    /* measure the algorithms on scratch input/output and the real weights */
    size_t xb = (size_t)dl_gpu_prod(xs, 0, 4) * 4, yb = (size_t)k->g.numel * 4, ws_cap = 256u << 20;
    void *x = NULL, *y = NULL, *ws = NULL;
    st = dl_gpu_alloc(&s->gpu, xb, &x, err);
    if (st == DL_OK) st = dl_gpu_alloc(&s->gpu, yb, &y, err);
    size_t free_b = 0, total_b = 0;
    if (st == DL_OK && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && ws_cap > free_b / 4) ws_cap = free_b / 4;
    if (st == DL_OK) st = dl_gpu_alloc(&s->gpu, ws_cap, &ws, err);
    if (st == DL_OK && cudaMemsetAsync(x, 0x3c, xb, s->gpu.stream) != cudaSuccess)
        st = dl_fail(err, DL_E_RUNTIME, "cudaMemsetAsync failed");
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    if (st == DL_OK) {
        cudnnStatus_t r =
            cudnnFindConvolutionForwardAlgorithmEx(s->dnn, k->x, x, k->w, w->data, k->conv, k->y, y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, ws, ws_cap);
        if (r != CUDNN_STATUS_SUCCESS) st = dnn_fail(r, "cudnnFindConvolutionForwardAlgorithmEx", err);
    }
    dl_gpu_free(&s->gpu, x);
    dl_gpu_free(&s->gpu, y);
    dl_gpu_free(&s->gpu, ws);
    if (st != DL_OK) return st;
    int pick = -1;
    for (int i = 0; i < found && pick < 0; i++) /* sorted fastest first */
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            (op->precision != DL_PRECISION_F32 || perf[i].mathType != CUDNN_TENSOR_OP_MATH))
            pick = i;
    if (pick < 0) return dl_fail(err, DL_E_UNSUPPORTED, "cuDNN found no convolution algorithm for this shape");
    k->algo = perf[pick].algo;
    /* the fused call supports identity activation only with IMPLICIT_PRECOMP_GEMM */
    if (k->fused && !relu) k->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(s->dnn, k->x, k->w, k->conv, k->y, k->algo, &k->workspace));
    return DL_OK;
}

dl_status dn_run_conv(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, void *ws, dl_error *err) {
    const float one = 1.0f, zero = 0.0f;
    const void *x = in[0].data;
    int relu = k->g.a.activation == DL_ACT_RELU;
    if (k->fused)
        DNN_TRY(cudnnConvolutionBiasActivationForward(s->dnn, &one, k->x, x, k->w, in[1].data, k->conv, k->algo, ws,
                                                      k->workspace, &zero, k->y, y, k->b, in[2].data, k->act, k->y, y));
    else {
        DNN_TRY(cudnnConvolutionForward(s->dnn, &one, k->x, x, k->w, in[1].data, k->conv, k->algo, ws, k->workspace,
                                        &zero, k->y, y));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->y, y, &zero, k->y, y));
    }
    return DL_OK;
}
