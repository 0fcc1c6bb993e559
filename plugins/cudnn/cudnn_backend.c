/* cudnn_backend.c — the cudnn plugin's state, supports(), backend table, entry point and the
 * dispatch of prepare and run to conv.c (cuDNN convolutions), linear.c (cuBLASLt) and ops.c (the
 * other cuDNN ops and the copies). Device, stream, memory, lock and error handling come from
 * plugins/cuda_common, as in the cuda plugin.
 *
 * Precision: f32 (default) is exact: cuDNN's FMA math, cuBLASLt's 32F compute. tf32 allows tensor
 * cores (cuDNN tensor-op math, cuBLASLt FAST_TF32). f16/bf16 (ABI 1.3): the host stores the op's
 * tensors in that dtype where supports() accepts them, and convolutions then run on tensor cores
 * with f32 accumulation (NHWC preferred, see preferred_layout), linear through cuBLASLt with 16-bit
 * A/B/C/D and 32F compute, the other ops in cuDNN on the stored type or on f32 copies (ops.c);
 * f32 tensors at f16/bf16 precision compute like tf32, which is at least as accurate as asked.
 * Convolution algorithms are chosen by measurement on the real shapes at prepare
 * (cudnnFindConvolutionForwardAlgorithmEx, then conv.c's trials of the fused epilogue) and the
 * kept plan's workspace is the kernel's (DLRUN_CUDNN_SEARCH=heuristic: cuDNN's heuristic instead,
 * nothing timed, for compute-sanitizer runs); DLRUN_CUDNN_LOG=1 prints each choice on stderr.
 *
 * Threads (see gpu.h): the cuDNN and cuBLASLt handles are the plugin's one pair and may serve one
 * thread at a time, so prepare and run hold the plugin's lock around everything they do with them
 * (after making the device current on the calling thread); supports and release touch neither.
 * prepare waits on the stream with the lock held (the algorithm search, the convolution's trials
 * and timings, and the one trial of a stored format on scratch buffers): that happens while a
 * session is created, never in a run. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_plugin.h"

dl_status dnn_fail(cudnnStatus_t s, const char *call, dl_error *err) {
    return dl_fail(err, s == CUDNN_STATUS_ALLOC_FAILED ? DL_E_NOMEM : DL_E_RUNTIME, "%s: %s", call,
                   cudnnGetErrorString(s));
}

/* ---- what this plugin runs: cudnn_formats.c (exact, and checked without a GPU) ---- */

static int dn_supports(void *self, const dl_op *op, dl_error *why) { return dn_op_check(op, why); }

static int dn_preferred(void *self, const dl_op *op) { return dn_preferred_layout(op); }

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
    default: return dn_prepare_op(s, k, op, err);
    }
}

static void destroy_kernel(cudnn_state *s, dl_kernel *k) {
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
    dl_gpu_free(&s->gpu, k->wbuf);
    dl_op_geom_free(&k->g);
    free(k);
}

static dl_status dn_prepare(void *self, const dl_op *op, dl_kernel **out, size_t *ws, dl_error *err) {
    cudnn_state *s = self;
    if (!dn_supports(self, op, err)) return DL_E_UNSUPPORTED;
    dl_kernel *k = calloc(1, sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_status st = dl_op_geom_init(&k->g, op) ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    k->type = dl_gpu_type_of(op->outputs[0].dtype);
    k->layout = dl_tensor_layout(&op->outputs[0]);
    if (st == DL_OK) st = dl_gpu_use(&s->gpu, err);
    if (st == DL_OK) {
        dl_gpu_lock(&s->gpu); /* the handles (algorithm search, heuristic) */
        st = prepare_kernel(s, k, op, err);
        dl_gpu_unlock(&s->gpu);
    }
    if (st != DL_OK) {
        destroy_kernel(s, k);
        return st;
    }
    *ws = k->workspace;
    *out = k;
    return DL_OK;
}

static dl_status run_kernel(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err) {
    switch (k->g.kind) {
    case DL_OP_CONV2D: return dn_run_conv(s, k, in, y, ws, err);
    case DL_OP_LINEAR: return dn_run_linear(s, k, in, y, ws, err);
    default: return dn_run_op(s, k, in, y, ws, err);
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
    if (k) destroy_kernel(self, k);
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
    int search; /* a bad value: said with or without a device */
    char why[120];
    if (!dn_search_parse(getenv("DLRUN_CUDNN_SEARCH"), &search, why, sizeof why)) {
        dl_fail(err, DL_E_INVALID, "%s", why);
        return NULL;
    }
    cudnn_state *s = dl_gpu_plugin_new(host, sizeof *s, err);
    if (!s) return NULL;
    s->search = search;
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
    const char *log = getenv("DLRUN_CUDNN_LOG"); /* read once: getenv is not safe beside setenv */
    s->log_convs = log && *log && strcmp(log, "0") != 0;
    snprintf(s->description, sizeof s->description, "%s; cuDNN %zu.%zu.%zu, cuBLASLt %zu", s->gpu.description,
             v / 10000, v / 100 % 100, v % 100, cublasLtGetVersion());
    s->table = dl_gpu_table(&s->gpu, "cudnn", s->description);
    s->table.destroy = dn_destroy;
    s->table.supports = dn_supports;
    s->table.prepare = dn_prepare;
    s->table.run = dn_run;
    s->table.release = dn_release;
    s->table.supports_in_place = dn_in_place;
    s->table.preferred_layout = dn_preferred;
    return &s->table;
}
