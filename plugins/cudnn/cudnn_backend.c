/* cudnn_backend.c — the cudnn plugin: conv2d, pooling, softmax, activations, batchnorm and add
 * through cuDNN 9 (its v7-style API, still shipped in 9.x), linear through cuBLASLt with its
 * bias/ReLU epilogue, copies for the view ops. Device, stream, memory and error handling come
 * from plugins/cuda_common, as in the cuda plugin.
 *
 * Precision: f32 (default) is exact: cuDNN's FMA math, cuBLASLt's 32F compute. tf32 allows tensor
 * cores (cuDNN tensor-op math, cuBLASLt FAST_TF32); f16/bf16 requests compute like tf32 here
 * (tensors cross the ABI as f32), which is at least as accurate as asked.
 * Convolution algorithms are chosen by measurement on the real shapes at prepare
 * (cudnnFindConvolutionForwardAlgorithmEx) and the fastest one's workspace is the kernel's. */
#define _POSIX_C_SOURCE 200809L
#include <cublasLt.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "op_check.h"

#define LT_WORKSPACE (32u << 20) /* cuBLASLt workspace offered to its heuristic */

typedef struct cudnn_state {
    dl_gpu gpu; /* first: the dl_gpu_be_* table members take the state as a dl_gpu */
    dl_backend table;
    cudnnHandle_t dnn;
    cublasLtHandle_t lt;
    char description[768];
} cudnn_state;

struct dl_kernel {
    dl_op_geom g;
    cudnnTensorDescriptor_t x, y, b;     /* input, output, bias or batchnorm parameters */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act;     /* relu / sigmoid / clipped relu, or identity */
    cudnnPoolingDescriptor_t pool;
    cudnnOpTensorDescriptor_t op;
    cudnnConvolutionFwdAlgo_t algo;
    int fused;                           /* conv + bias + relu in one call */
    size_t workspace;
    cublasLtMatmulDesc_t mm;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t lt_algo;
    int64_t outer, inner;                /* softmax / concat views */
};

static dl_status dnn_fail(cudnnStatus_t s, const char *call, dl_error *err) {
    return dl_fail(err, s == CUDNN_STATUS_ALLOC_FAILED ? DL_E_NOMEM : DL_E_RUNTIME, "%s: %s", call, cudnnGetErrorString(s));
}
#define DNN_TRY(call)                                                  \
    do {                                                               \
        cudnnStatus_t dnn_s_ = (call);                                 \
        if (dnn_s_ != CUDNN_STATUS_SUCCESS) return dnn_fail(dnn_s_, #call, err); \
    } while (0)
#define LT_TRY(call)                                                                                          \
    do {                                                                                                      \
        cublasStatus_t lt_s_ = (call);                                                                        \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) return dl_fail(err, DL_E_RUNTIME, "%s: cuBLAS status %d", #call, (int)lt_s_); \
    } while (0)

/* ---- what this plugin runs (after the shared exact checks) ---- */

static int pool_fits_cudnn(const dl_op *op) {
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *y = &op->outputs[0];
    for (int i = 0; i < 2; i++) { /* cuDNN pools with symmetric padding and floor-mode sizes */
        if (a->pad_begin[i] != a->pad_end[i] || a->dilation[i] != 1) return 0;
        if (dl_window_out(x->shape[2 + i], a->kernel[i], a->stride[i], a->pad_begin[i], a->pad_end[i], 1, 0) != y->shape[2 + i]) return 0;
    }
    return 1;
}

static int dn_supports(void *self, const dl_op *op, dl_error *why) {
    if (!dl_op_check(op, why)) return 0;
    const dl_op_attrs *a = op->attrs;
    switch (op->kind) {
    case DL_OP_CONV2D:
        if (a->pad_begin[0] != a->pad_end[0] || a->pad_begin[1] != a->pad_end[1])
            return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN convolutions pad symmetrically"), 0;
        return 1;
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
        if (!pool_fits_cudnn(op)) return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN pools: symmetric padding, no dilation, floor mode"), 0;
        return 1;
    case DL_OP_CLIP:
        if (a->clip_min != 0.0f) return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN clips only as clipped relu (min 0)"), 0;
        return 1;
    case DL_OP_LEAKY_RELU: return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN has no leaky relu activation"), 0;
    case DL_OP_BATCHNORM:
        if (a->epsilon < CUDNN_BN_MIN_EPSILON) return dl_fail(why, DL_E_UNSUPPORTED, "cuDNN batchnorm needs epsilon >= %g", CUDNN_BN_MIN_EPSILON), 0;
        return 1;
    case DL_OP_MATMUL: return dl_fail(why, DL_E_UNSUPPORTED, "matmul: not in the cudnn plugin yet"), 0;
    case DL_OP_ADD:
        if (dl_tensor_numel(&op->inputs[0]) != dl_tensor_numel(&op->outputs[0]) ||
            dl_tensor_numel(&op->inputs[1]) != dl_tensor_numel(&op->outputs[0]))
            return dl_fail(why, DL_E_UNSUPPORTED, "broadcasting add: not in the cudnn plugin"), 0;
        return 1;
    default: return 1;
    }
}

/* cudnnActivationForward documents x == y as allowed; the copies skip themselves in place. The
 * other cuDNN calls do not promise it, so they get their own output. */
static int dn_in_place(void *self, const dl_op *op) {
    int k = op->kind;
    return k == DL_OP_RELU || k == DL_OP_SIGMOID || k == DL_OP_CLIP || k == DL_OP_FLATTEN || k == DL_OP_DROPOUT ||
           k == DL_OP_RESHAPE;
}

/* ---- descriptors ---- */

static dl_status tensor4(cudnnTensorDescriptor_t *d, int64_t n, int64_t c, int64_t h, int64_t w, dl_error *err) {
    DNN_TRY(cudnnCreateTensorDescriptor(d));
    if (n > 0x7fffffff || c > 0x7fffffff || h > 0x7fffffff || w > 0x7fffffff || n * c * h * w > 0x7fffffff)
        return dl_fail(err, DL_E_UNSUPPORTED, "tensor too large for a cuDNN descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)c, (int)h, (int)w));
    return DL_OK;
}

static int64_t prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

static dl_status activation(dl_kernel *k, cudnnActivationMode_t mode, double coef, dl_error *err) {
    DNN_TRY(cudnnCreateActivationDescriptor(&k->act));
    DNN_TRY(cudnnSetActivationDescriptor(k->act, mode, CUDNN_PROPAGATE_NAN, coef));
    return DL_OK;
}

static cudnnMathType_t math_of(int precision) { return precision == DL_PRECISION_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

/* conv2d: descriptors, then the fastest algorithm measured on the real shapes and weights */
static dl_status prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    const dl_tensor *w = &op->inputs[1];
    dl_status st;
    if ((st = tensor4(&k->x, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
    if ((st = tensor4(&k->y, ys[0], ys[1], ys[2], ys[3], err)) != DL_OK) return st;
    if ((st = tensor4(&k->b, 1, ys[1], 1, 1, err)) != DL_OK) return st;
    DNN_TRY(cudnnCreateFilterDescriptor(&k->w));
    DNN_TRY(cudnnSetFilter4dDescriptor(k->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)w->shape[0], (int)w->shape[1],
                                       (int)w->shape[2], (int)w->shape[3]));
    DNN_TRY(cudnnCreateConvolutionDescriptor(&k->conv));
    DNN_TRY(cudnnSetConvolution2dDescriptor(k->conv, a->pad_begin[0], a->pad_begin[1], a->stride[0], a->stride[1],
                                            a->dilation[0], a->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionGroupCount(k->conv, a->groups));
    DNN_TRY(cudnnSetConvolutionMathType(k->conv, math_of(op->precision)));
    int relu = a->activation == DL_ACT_RELU;
    if ((st = activation(k, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, 0, err)) != DL_OK) return st;
    k->fused = k->g.has_bias; /* bias (+ relu) in the convolution call */
    /* measure the algorithms on scratch input/output and the real weights */
    size_t xb = (size_t)prod(xs, 0, 4) * 4, yb = (size_t)k->g.numel * 4, ws_cap = 256u << 20;
    void *x = NULL, *y = NULL, *ws = NULL;
    st = dl_gpu_alloc(&s->gpu, xb, &x, err);
    if (st == DL_OK) st = dl_gpu_alloc(&s->gpu, yb, &y, err);
    size_t free_b = 0, total_b = 0;
    if (st == DL_OK && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && ws_cap > free_b / 4) ws_cap = free_b / 4;
    if (st == DL_OK) st = dl_gpu_alloc(&s->gpu, ws_cap, &ws, err);
    if (st == DL_OK && cudaMemsetAsync(x, 0x3c, xb, s->gpu.stream) != cudaSuccess) st = dl_fail(err, DL_E_RUNTIME, "cudaMemsetAsync failed");
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    if (st == DL_OK) {
        cudnnStatus_t r = cudnnFindConvolutionForwardAlgorithmEx(s->dnn, k->x, x, k->w, w->data, k->conv, k->y, y,
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

/* linear: y[N,OUT] = x[N,IN] W^T + b. Column-major view: y^T[OUT,N] = W[OUT,IN] x^T, with W seen
 * as the column-major [IN,OUT] matrix transposed; the bias epilogue adds b to every column. */
static dl_status prepare_linear(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const uint64_t n = (uint64_t)k->g.xs[0], in = (uint64_t)k->g.xs[1], out = (uint64_t)k->g.ys[1];
    cublasComputeType_t compute = op->precision == DL_PRECISION_F32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    LT_TRY(cublasLtMatmulDescCreate(&k->mm, compute, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T;
    LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    int relu = k->g.a.activation == DL_ACT_RELU;
    cublasLtEpilogue_t epi = k->g.has_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->la, CUDA_R_32F, in, out, in));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->lb, CUDA_R_32F, in, n, in));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->lc, CUDA_R_32F, out, n, out));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t cap = LT_WORKSPACE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t r = cublasLtMatmulAlgoGetHeuristic(s->lt, k->mm, k->la, k->lb, k->lc, k->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (r != CUBLAS_STATUS_SUCCESS || found < 1) return dl_fail(err, DL_E_UNSUPPORTED, "cuBLASLt has no algorithm for this linear layer");
    k->lt_algo = res.algo;
    k->workspace = res.workspaceSize;
    return DL_OK;
}

static dl_status prepare_pool(dl_kernel *k, dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    dl_status st;
    if ((st = tensor4(&k->x, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
    if ((st = tensor4(&k->y, ys[0], ys[1], ys[2], ys[3], err)) != DL_OK) return st;
    DNN_TRY(cudnnCreatePoolingDescriptor(&k->pool));
    cudnnPoolingMode_t mode = k->g.kind == DL_OP_MAXPOOL2D ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : a->count_include_pad    ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (k->g.kind == DL_OP_GLOBAL_AVGPOOL)
        DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN, (int)xs[2],
                                            (int)xs[3], 0, 0, 1, 1));
    else
        DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, mode, CUDNN_PROPAGATE_NAN, a->kernel[0], a->kernel[1], a->pad_begin[0],
                                            a->pad_begin[1], a->stride[0], a->stride[1]));
    return DL_OK;
}

static dl_status prepare_kernel(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const int64_t *xs = k->g.xs;
    int64_t n = k->g.numel;
    dl_status st;
    switch (k->g.kind) {
    case DL_OP_CONV2D: return prepare_conv(s, k, op, err);
    case DL_OP_LINEAR: return prepare_linear(s, k, op, err);
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL: return prepare_pool(k, err);
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
        if ((st = tensor4(&k->x, 1, 1, 1, n, err)) != DL_OK) return st;
        if (k->g.kind == DL_OP_SIGMOID) return activation(k, CUDNN_ACTIVATION_SIGMOID, 0, err);
        if (k->g.kind == DL_OP_CLIP && k->g.a.clip_max < INFINITY) /* clip(0, max): clipped relu */
            return activation(k, CUDNN_ACTIVATION_CLIPPED_RELU, (double)k->g.a.clip_max, err);
        return activation(k, CUDNN_ACTIVATION_RELU, 0, err);
    case DL_OP_ADD:
        if ((st = tensor4(&k->x, 1, 1, 1, n, err)) != DL_OK) return st;
        DNN_TRY(cudnnCreateOpTensorDescriptor(&k->op));
        DNN_TRY(cudnnSetOpTensorDescriptor(k->op, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
        return k->g.a.activation == DL_ACT_RELU ? activation(k, CUDNN_ACTIVATION_RELU, 0, err) : DL_OK;
    case DL_OP_SOFTMAX:
        k->outer = prod(xs, 0, k->g.a.axis);
        k->inner = prod(xs, k->g.a.axis + 1, k->g.xnd);
        return tensor4(&k->x, k->outer, xs[k->g.a.axis], k->inner, 1, err);
    case DL_OP_BATCHNORM:
        if ((st = tensor4(&k->x, xs[0], xs[1], prod(xs, 2, k->g.xnd), 1, err)) != DL_OK) return st;
        if ((st = tensor4(&k->b, 1, xs[1], 1, 1, err)) != DL_OK) return st;
        return k->g.a.activation == DL_ACT_RELU ? activation(k, CUDNN_ACTIVATION_RELU, 0, err) : DL_OK;
    case DL_OP_CONCAT:
        k->outer = prod(k->g.ys, 0, k->g.a.axis);
        k->inner = prod(k->g.ys, k->g.a.axis + 1, k->g.ynd);
        return DL_OK;
    default: return DL_OK; /* flatten, dropout, reshape: copies */
    }
}

static void destroy_kernel(dl_kernel *k) {
    if (k->x) cudnnDestroyTensorDescriptor(k->x);
    if (k->y) cudnnDestroyTensorDescriptor(k->y);
    if (k->b) cudnnDestroyTensorDescriptor(k->b);
    if (k->w) cudnnDestroyFilterDescriptor(k->w);
    if (k->conv) cudnnDestroyConvolutionDescriptor(k->conv);
    if (k->act) cudnnDestroyActivationDescriptor(k->act);
    if (k->pool) cudnnDestroyPoolingDescriptor(k->pool);
    if (k->op) cudnnDestroyOpTensorDescriptor(k->op);
    if (k->mm) cublasLtMatmulDescDestroy(k->mm);
    if (k->la) cublasLtMatrixLayoutDestroy(k->la);
    if (k->lb) cublasLtMatrixLayoutDestroy(k->lb);
    if (k->lc) cublasLtMatrixLayoutDestroy(k->lc);
    dl_op_geom_free(&k->g);
    free(k);
}

static dl_status dn_prepare(void *self, const dl_op *op, dl_kernel **out, size_t *ws, dl_error *err) {
    cudnn_state *s = self;
    if (!dn_supports(self, op, err)) return DL_E_UNSUPPORTED;
    dl_kernel *k = calloc(1, sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_status st = dl_op_geom_init(&k->g, op) ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) st = prepare_kernel(s, k, op, err);
    if (st != DL_OK) {
        destroy_kernel(k);
        return st;
    }
    *ws = k->workspace;
    *out = k;
    return DL_OK;
}

static dl_status run_kernel(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, void *ws, dl_error *err) {
    const float one = 1.0f, zero = 0.0f;
    const void *x = in[0].data;
    cudaStream_t st = s->gpu.stream;
    int relu = k->g.a.activation == DL_ACT_RELU;
    switch (k->g.kind) {
    case DL_OP_CONV2D:
        if (k->fused)
            DNN_TRY(cudnnConvolutionBiasActivationForward(s->dnn, &one, k->x, x, k->w, in[1].data, k->conv, k->algo, ws, k->workspace,
                                                          &zero, k->y, y, k->b, in[2].data, k->act, k->y, y));
        else {
            DNN_TRY(cudnnConvolutionForward(s->dnn, &one, k->x, x, k->w, in[1].data, k->conv, k->algo, ws, k->workspace, &zero, k->y, y));
            if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->y, y, &zero, k->y, y));
        }
        return DL_OK;
    case DL_OP_LINEAR: {
        if (k->g.has_bias) {
            const void *bias = in[2].data;
            LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        LT_TRY(cublasLtMatmul(s->lt, k->mm, &one, in[1].data, k->la, x, k->lb, &zero, y, k->lc, y, k->lc, &k->lt_algo, ws,
                              k->workspace, st));
        return DL_OK;
    }
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL: DNN_TRY(cudnnPoolingForward(s->dnn, k->pool, &one, k->x, x, &zero, k->y, y)); return DL_OK;
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP: DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, x, &zero, k->x, y)); return DL_OK;
    case DL_OP_ADD:
        DNN_TRY(cudnnOpTensor(s->dnn, k->op, &one, k->x, x, &one, k->x, in[1].data, &zero, k->x, y));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        return DL_OK;
    case DL_OP_SOFTMAX:
        DNN_TRY(cudnnSoftmaxForward(s->dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, k->x, x, &zero, k->x, y));
        return DL_OK;
    case DL_OP_BATCHNORM:
        DNN_TRY(cudnnBatchNormalizationForwardInference(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, k->x, x, k->x, y, k->b,
                                                        in[1].data, in[2].data, in[3].data, in[4].data, k->g.a.epsilon));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        return DL_OK;
    case DL_OP_CONCAT: {
        int64_t off = 0, row = k->g.ys[k->g.a.axis] * k->inner * 4;
        for (int i = 0; i < k->g.n_inputs; i++) {
            int64_t part = k->g.cat_len[i] * k->inner * 4;
            DL_GPU_TRY(cudaMemcpy2DAsync((char *)y + off, (size_t)row, in[i].data, (size_t)part, (size_t)part, (size_t)k->outer,
                                         cudaMemcpyDeviceToDevice, st),
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

static dl_status dn_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    return run_kernel(self, k, in, out[0].data, ws, err);
}

static void dn_release(void *self, dl_kernel *k) {
    if (k) destroy_kernel(k);
}

static void dn_destroy(void *self) {
    cudnn_state *s = self;
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->dnn) cudnnDestroy(s->dnn);
    dl_gpu_close(&s->gpu);
    free(s);
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!host || DL_ABI_MAJOR_OF(host->abi_version) != DL_ABI_MAJOR) {
        dl_fail(err, DL_E_UNSUPPORTED, "host speaks another plugin ABI");
        return NULL;
    }
    /* cuDNN itself first: a library of the wrong major version is named before any device work */
    size_t v = cudnnGetVersion();
    if (v / 10000 != CUDNN_MAJOR) {
        dl_fail(err, DL_E_UNSUPPORTED, "cuDNN %zu.%zu found, this plugin needs cuDNN %d", v / 10000, v / 100 % 100, CUDNN_MAJOR);
        return NULL;
    }
    cudnn_state *s = calloc(1, sizeof *s);
    if (!s) {
        dl_fail(err, DL_E_NOMEM, "out of memory");
        return NULL;
    }
    if (dl_gpu_open(&s->gpu, host->device_index, err) != DL_OK) {
        dn_destroy(s);
        return NULL;
    }
    cudnnStatus_t ds = cudnnCreate(&s->dnn);
    if (ds == CUDNN_STATUS_SUCCESS) ds = cudnnSetStream(s->dnn, s->gpu.stream);
    if (ds != CUDNN_STATUS_SUCCESS) {
        dnn_fail(ds, "cudnnCreate", err);
        dn_destroy(s);
        return NULL;
    }
    if (cublasLtCreate(&s->lt) != CUBLAS_STATUS_SUCCESS) {
        dl_fail(err, DL_E_RUNTIME, "cublasLtCreate failed");
        dn_destroy(s);
        return NULL;
    }
    snprintf(s->description, sizeof s->description, "%s; cuDNN %zu.%zu.%zu, cuBLASLt %zu", s->gpu.description, v / 10000,
             v / 100 % 100, v % 100, cublasLtGetVersion());
    s->table = (dl_backend){
        .abi_version = DL_ABI_VERSION,
        .struct_size = sizeof(dl_backend),
        .name = "cudnn",
        .description = s->description,
        .device = {DL_DEVICE_CUDA, s->gpu.device},
        .self = s,
        .destroy = dn_destroy,
        .alloc = dl_gpu_be_alloc,
        .free = dl_gpu_be_free,
        .copy = dl_gpu_be_copy,
        .supports = dn_supports,
        .prepare = dn_prepare,
        .run = dn_run,
        .release = dn_release,
        .synchronize = dl_gpu_be_synchronize,
        .supports_in_place = dn_in_place,
        .memory_info = dl_gpu_be_memory_info,
    };
    return &s->table;
}
