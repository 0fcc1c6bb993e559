/* cudnn_plugin.h — private to the cudnn plugin: its state, its prepared kernel, the cuDNN and
 * cuBLASLt error macros, and the functions its files share (cudnn_backend.c dispatches to conv.c,
 * linear.c and ops.c). Every dn_prepare_* and dn_run_* function is called with the plugin's lock
 * held (it uses the shared cuDNN / cuBLASLt handle) and the device current. */
#ifndef DLRUN_CUDNN_PLUGIN_H
#define DLRUN_CUDNN_PLUGIN_H
#include <cublasLt.h>
#include <cudnn.h>

#include "gpu.h"
#include "op_check.h"

#define LT_WORKSPACE (32u << 20) /* cuBLASLt workspace offered to its heuristic */

typedef struct cudnn_state {
    dl_gpu gpu; /* first: the dl_gpu_be_* table members take the state as a dl_gpu */
    dl_backend table;
    cudnnHandle_t dnn;   /* under gpu.lock: one thread at a time */
    cublasLtHandle_t lt; /* under gpu.lock */
    char description[768];
} cudnn_state;

struct dl_kernel {
    dl_op_geom g;
    cudnnTensorDescriptor_t x, y, b; /* input, output, bias or batchnorm parameters */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act; /* relu / sigmoid / clipped relu, or identity */
    cudnnPoolingDescriptor_t pool;
    cudnnOpTensorDescriptor_t op;
    cudnnConvolutionFwdAlgo_t algo;
    int fused; /* conv + bias + relu in one call */
    size_t workspace;
    cublasLtMatmulDesc_t mm; /* the kernel's own: run sets its bias pointer */
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t lt_algo;
    int64_t outer, inner; /* softmax / concat views */
};

dl_status dnn_fail(cudnnStatus_t s, const char *call, dl_error *err);
#define DNN_TRY(call)                                                            \
    do {                                                                         \
        cudnnStatus_t dnn_s_ = (call);                                           \
        if (dnn_s_ != CUDNN_STATUS_SUCCESS) return dnn_fail(dnn_s_, #call, err); \
    } while (0)
#define LT_TRY(call)                                                                      \
    do {                                                                                  \
        cublasStatus_t lt_s_ = (call);                                                    \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS)                                               \
            return dl_fail(err, DL_E_RUNTIME, "%s: cuBLAS status %d", #call, (int)lt_s_); \
    } while (0)

/* descriptors (ops.c) */
dl_status dn_tensor4(cudnnTensorDescriptor_t *d, int64_t n, int64_t c, int64_t h, int64_t w, dl_error *err);
dl_status dn_activation(dl_kernel *k, cudnnActivationMode_t mode, double coef, dl_error *err);

/* conv2d (conv.c) */
dl_status dn_prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err);
dl_status dn_run_conv(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, void *ws, dl_error *err);
/* linear (linear.c) */
dl_status dn_prepare_linear(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err);
dl_status dn_run_linear(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, void *ws, dl_error *err);
/* every other op: pools, activations, add, softmax, batchnorm, concat and the view copies (ops.c) */
dl_status dn_prepare_op(dl_kernel *k, dl_error *err);
dl_status dn_run_op(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, dl_error *err);
#endif
