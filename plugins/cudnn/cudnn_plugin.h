/* cudnn_plugin.h — private to the cudnn plugin: its state, its prepared kernel, the cuDNN and
 * cuBLASLt error macros, and the functions its files share (cudnn_backend.c dispatches to conv.c,
 * linear.c and ops.c; cudnn_formats.c holds the decisions that need no GPU). Every dn_prepare_*
 * and dn_run_* function is called with the plugin's lock held (it uses the shared cuDNN /
 * cuBLASLt handle) and the device current. */
#ifndef DLRUN_CUDNN_PLUGIN_H
#define DLRUN_CUDNN_PLUGIN_H
#include <cublasLt.h>
#include <cudnn.h>

#include "cudnn_formats.h"
#include "gpu.h"

#define LT_WORKSPACE (32u << 20) /* cuBLASLt workspace offered to its heuristic */

typedef struct cudnn_state {
    dl_gpu gpu; /* first: the dl_gpu_be_* table members take the state as a dl_gpu */
    dl_backend table;
    cudnnHandle_t dnn;   /* under gpu.lock: one thread at a time */
    cublasLtHandle_t lt; /* under gpu.lock */
    int log_convs;       /* DLRUN_CUDNN_LOG set: one stderr line per convolution prepared (conv.c) */
    int search;          /* DLRUN_CUDNN_SEARCH: DN_SEARCH_FIND or DN_SEARCH_HEURISTIC (conv.c) */
    char description[768];
} cudnn_state;

/* A workspace region holding an f32 copy of a tensor (staging, see ops.c). */
typedef struct dn_stage {
    size_t off;     /* bytes into the workspace */
    dl_gpu_xform x; /* the cast into it (inputs) or out of it (the output) */
} dn_stage;

struct dl_kernel {
    dl_op_geom g;
    dl_gpu_type type;    /* storage type of all the op's tensors */
    dl_layout layout;    /* of its activations and output */
    int staged;          /* the cuDNN call runs on f32 NCHW copies in the workspace: cuDNN turned the
                            stored format down when tried at prepare (ops.c) */
    dn_stage in[2], out; /* staging: activations in (a conv's fused residual in in[1]), the output
                            back (when staged) */
    size_t params_off;   /* batchnorm on f16/bf16: its parameters cast to f32 in the workspace */
    void *wbuf;          /* conv2d: its own filter (KRSC for NHWC; f32 when staged, then the f32
                            bias at bias_off), kernel-owned device memory; NULL: the op's own */
    size_t bias_off;
    dl_gpu_xform wx, bx;             /* conv2d: the casts filling wbuf from the op's filter and bias */
    int w_at_run;                    /* conv2d: the weights had no data at prepare, so each run fills wbuf */
    cudnnTensorDescriptor_t x, y, b; /* input, output, bias or batchnorm parameters */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act; /* relu / sigmoid / clipped relu, or identity */
    cudnnPoolingDescriptor_t pool;
    cudnnOpTensorDescriptor_t op;
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;    /* conv2d: the math type set on `conv` for algo */
    int fused;               /* conv + bias (+ residual) (+ relu) in one call */
    size_t workspace;        /* in all: cuDNN's or cuBLASLt's (at offset 0), then the staging regions */
    size_t lib_ws;           /* cuDNN's or cuBLASLt's part */
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

/* descriptors (ops.c): a 4-D tensor [n,c,h,w] of a cuDNN data type in a format (NCHW, NHWC) */
dl_status dn_tensor4(cudnnTensorDescriptor_t *d, cudnnDataType_t t, cudnnTensorFormat_t f, int64_t n, int64_t c,
                     int64_t h, int64_t w, dl_error *err);
dl_status dn_activation(dl_kernel *k, cudnnActivationMode_t mode, double coef, dl_error *err);
/* device scratch for trying calls at prepare: n zeroed buffers of the sizes given (0: none); the
 * caller frees them with dn_scratch_free */
dl_status dn_scratch(cudnn_state *s, int n, const size_t *bytes, void **bufs, dl_error *err);
void dn_scratch_free(cudnn_state *s, int n, void **bufs);
/* Staging (ops.c): dn_plan_stages lays out, after `off` bytes of the workspace, f32 row-major
 * copies of op's first n_act inputs, then of its fused residual where it has one (k->g.residual),
 * and of its output (k->in, k->out) and returns the end;
 * dn_stage_in casts activation x (input i) into its region and points *staged at it;
 * dn_stage_out casts the staged output back into y. */
size_t dn_plan_stages(dl_kernel *k, const dl_op *op, int n_act, size_t off);
dl_status dn_stage_in(cudnn_state *s, const dl_kernel *k, int i, const void *x, void *ws, const void **staged,
                      dl_error *err);
dl_status dn_stage_out(cudnn_state *s, const dl_kernel *k, const void *ws, void *y, dl_error *err);
/* rounds a workspace offset up to 256 bytes */
static inline size_t dn_align(size_t off) { return (off + 255) & ~(size_t)255; }

/* conv2d (conv.c) */
dl_status dn_prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err);
dl_status dn_run_conv(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err);
/* linear (linear.c) */
dl_status dn_prepare_linear(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err);
dl_status dn_run_linear(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err);
/* every other op: pools, activations, add, softmax, batchnorm, concat and the view copies (ops.c) */
dl_status dn_prepare_op(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err);
dl_status dn_run_op(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err);
#endif
