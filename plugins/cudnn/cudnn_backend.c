/* cudnn_backend.c — the cudnn plugin's state, supports(), backend table, entry point and the
 * dispatch of prepare and run to conv.c (cuDNN convolutions), linear.c (cuBLASLt) and ops.c (the
 * other cuDNN ops and the copies). Device, stream, memory, lock and error handling come from
 * plugins/cuda_common, as in the cuda plugin.
 *
 * Precision: f32 (default) is exact: cuDNN's FMA math, cuBLASLt's 32F compute. tf32 allows tensor
 * cores (cuDNN tensor-op math, cuBLASLt FAST_TF32); f16/bf16 requests compute like tf32 here
 * (tensors cross the ABI as f32), which is at least as accurate as asked.
 * Convolution algorithms are chosen by measurement on the real shapes at prepare
 * (cudnnFindConvolutionForwardAlgorithmEx) and the fastest one's workspace is the kernel's.
 *
 * Threads (see gpu.h): the cuDNN and cuBLASLt handles are the plugin's one pair and may serve one
 * thread at a time, so prepare and run hold the plugin's lock around everything they do with them
 * (after making the device current on the calling thread); supports and release touch neither. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_plugin.h"

dl_status dnn_fail(cudnnStatus_t s, const char *call, dl_error *err) {
    return dl_fail(err, s == CUDNN_STATUS_ALLOC_FAILED ? DL_E_NOMEM : DL_E_RUNTIME, "%s: %s", call,
                   cudnnGetErrorString(s));
}

/* ---- what this plugin runs (after the shared exact checks) ---- */

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

/* cudnnActivationForward documents x == y as allowed; the copies skip themselves in place. The
 * other cuDNN calls do not promise it, so they get their own output. */
static int dn_in_place(void *self, const dl_op *op) {
    int k = op->kind;
    return k == DL_OP_RELU || k == DL_OP_SIGMOID || k == DL_OP_CLIP || k == DL_OP_FLATTEN || k == DL_OP_DROPOUT ||
           k == DL_OP_RESHAPE;
}

/* ---- prepare, run, release ---- */

static dl_status prepare_kernel(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    switch (k->g.kind) {
    case DL_OP_CONV2D: return dn_prepare_conv(s, k, op, err);
    case DL_OP_LINEAR: return dn_prepare_linear(s, k, op, err);
    default: return dn_prepare_op(k, err);
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
    if (st == DL_OK) st = dl_gpu_use(&s->gpu, err);
    if (st == DL_OK) {
        dl_gpu_lock(&s->gpu); /* the handles (algorithm search, heuristic) */
        st = prepare_kernel(s, k, op, err);
        dl_gpu_unlock(&s->gpu);
    }
    if (st != DL_OK) {
        destroy_kernel(k);
        return st;
    }
    *ws = k->workspace;
    *out = k;
    return DL_OK;
}

static dl_status run_kernel(cudnn_state *s, dl_kernel *k, const dl_tensor *in, float *y, void *ws, dl_error *err) {
    switch (k->g.kind) {
    case DL_OP_CONV2D: return dn_run_conv(s, k, in, y, ws, err);
    case DL_OP_LINEAR: return dn_run_linear(s, k, in, y, ws, err);
    default: return dn_run_op(s, k, in, y, err);
    }
}

static dl_status dn_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    cudnn_state *s = self;
    dl_status st = dl_gpu_use(&s->gpu, err);
    if (st != DL_OK) return st;
    dl_gpu_lock(&s->gpu); /* the handles */
    st = run_kernel(s, k, in, out[0].data, ws, err);
    dl_gpu_unlock(&s->gpu);
    return st;
}

static void dn_release(void *self, dl_kernel *k) {
    if (k) destroy_kernel(k);
}

static void dn_destroy(void *self) {
    cudnn_state *s = self;
    if (s->gpu.stream) cudaSetDevice(s->gpu.device); /* destroy may come from any thread */
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->dnn) cudnnDestroy(s->dnn);
    dl_gpu_close(&s->gpu);
    free(s);
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL;
    /* cuDNN itself first: a library of the wrong major version is named before any device work */
    size_t v = cudnnGetVersion();
    if (v / 10000 != CUDNN_MAJOR) {
        dl_fail(err, DL_E_UNSUPPORTED, "cuDNN %zu.%zu found, this plugin needs cuDNN %d", v / 10000, v / 100 % 100,
                CUDNN_MAJOR);
        return NULL;
    }
    cudnn_state *s = dl_gpu_plugin_new(host, sizeof *s, err);
    if (!s) return NULL;
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
    snprintf(s->description, sizeof s->description, "%s; cuDNN %zu.%zu.%zu, cuBLASLt %zu", s->gpu.description,
             v / 10000, v / 100 % 100, v % 100, cublasLtGetVersion());
    s->table = dl_gpu_table(&s->gpu, "cudnn", s->description);
    s->table.destroy = dn_destroy;
    s->table.supports = dn_supports;
    s->table.prepare = dn_prepare;
    s->table.run = dn_run;
    s->table.release = dn_release;
    s->table.supports_in_place = dn_in_place;
    return &s->table;
}
