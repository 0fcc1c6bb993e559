/* cpu_backend.c — the CPU plugin's entry point and backend table: host memory, exact supports(),
 * kernel preparation and dispatch to the ops in ops/ (through storage.c for f16/bf16 and
 * channels-last tensors). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

/* OpenBLAS (pthread build) controls: see cpu_ops.h for why BLAS runs single-threaded. */
extern void openblas_set_num_threads(int n);
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);

#ifdef _OPENMP
#define THREADING "OpenMP"
#else
#define THREADING "no OpenMP: one thread per call"
#endif

typedef struct cpu_state {
    dl_backend table;
    int threads;
    char description[256];
} cpu_state;

static void cpu_destroy(void *self) { free(self); }

static dl_status cpu_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    *ptr = NULL;
    if (posix_memalign(ptr, 64, bytes ? bytes : 64) != 0)
        return dl_fail(err, DL_E_NOMEM, "cannot allocate %zu bytes", bytes);
    return DL_OK;
}

static void cpu_free(void *self, void *ptr) { free(ptr); }

static dl_status cpu_copy_mem(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    memcpy(dst, src, bytes);
    return DL_OK;
}

/* The kernel of each kind: a kind the op table knows but this plugin has no kernel for is refused. */
static const cpu_op_fn kernels[DL_OP_COUNT] = {
    [DL_OP_CONV2D] = cpu_conv2d,
    [DL_OP_RELU] = cpu_relu,
    [DL_OP_MAXPOOL2D] = cpu_maxpool2d,
    [DL_OP_AVGPOOL2D] = cpu_avgpool2d,
    [DL_OP_GLOBAL_AVGPOOL] = cpu_global_avgpool,
    [DL_OP_LINEAR] = cpu_linear,
    [DL_OP_FLATTEN] = cpu_copy,
    [DL_OP_DROPOUT] = cpu_copy,
    [DL_OP_SOFTMAX] = cpu_softmax,
    [DL_OP_ADD] = cpu_add,
    [DL_OP_CONCAT] = cpu_concat,
    [DL_OP_BATCHNORM] = cpu_batchnorm,
    [DL_OP_LEAKY_RELU] = cpu_leaky_relu,
    [DL_OP_SIGMOID] = cpu_sigmoid,
    [DL_OP_CLIP] = cpu_clip,
    [DL_OP_MATMUL] = cpu_matmul,
    [DL_OP_RESHAPE] = cpu_copy,
    [DL_OP_MUL] = cpu_mul,
    [DL_OP_SUB] = cpu_sub,
    [DL_OP_DIV] = cpu_div,
    [DL_OP_POW] = cpu_pow,
    [DL_OP_MIN] = cpu_min,
    [DL_OP_MAX] = cpu_max,
    [DL_OP_SQRT] = cpu_sqrt,
    [DL_OP_EXP] = cpu_exp,
    [DL_OP_LOG] = cpu_log,
    [DL_OP_TANH] = cpu_tanh,
    [DL_OP_ERF] = cpu_erf,
    [DL_OP_NEG] = cpu_neg,
    [DL_OP_ABS] = cpu_abs,
    [DL_OP_RECIPROCAL] = cpu_reciprocal,
    [DL_OP_HARD_SIGMOID] = cpu_hard_sigmoid,
    [DL_OP_HARD_SWISH] = cpu_hard_swish,
    [DL_OP_SILU] = cpu_silu,
    [DL_OP_GELU] = cpu_gelu,
    [DL_OP_SOFTPLUS] = cpu_softplus,
    [DL_OP_TRANSPOSE] = cpu_transpose,
    [DL_OP_SLICE] = cpu_slice,
    [DL_OP_PAD] = cpu_pad,
    [DL_OP_REDUCE_MEAN] = cpu_reduce_mean,
    [DL_OP_REDUCE_SUM] = cpu_reduce_sum,
    [DL_OP_REDUCE_MAX] = cpu_reduce_max,
    [DL_OP_REDUCE_MIN] = cpu_reduce_min,
    [DL_OP_LAYER_NORM] = cpu_layer_norm,
    [DL_OP_RESIZE] = cpu_resize,
    [DL_OP_LOG_SOFTMAX] = cpu_log_softmax,
    [DL_OP_GROUP_NORM] = cpu_group_norm,
    [DL_OP_GATHER] = cpu_gather,
    [DL_OP_CONV_TRANSPOSE2D] = cpu_conv_transpose2d,
    [DL_OP_CONV3D] = cpu_conv3d,
    [DL_OP_CHANNEL_SHUFFLE] = cpu_channel_shuffle,
};

static int cpu_supports(void *self, const dl_op *op, dl_error *why) {
    if (op->kind >= 0 && op->kind < DL_OP_COUNT && !kernels[op->kind])
        return dl_fail(why, DL_E_UNSUPPORTED, "%s: no kernel in the cpu plugin", dl_op_kind_name(op->kind)), 0;
    /* f16, bf16 and channels-last tensors are converted around the f32 kernels (storage.c); every
     * fused activation, and a fused residual, is applied in the kernels' epilogues (cpu_activate) */
    return dl_op_check_as(
        op, DL_ACCEPT_F16 | DL_ACCEPT_BF16 | DL_ACCEPT_CHANNELS_LAST | DL_ACCEPT_ACTIVATIONS | DL_ACCEPT_RESIDUAL, why);
}

static dl_status cpu_prepare(void *self, const dl_op *op, dl_kernel **out, size_t *workspace, dl_error *err) {
    cpu_state *s = self;
    if (!cpu_supports(self, op, err)) return DL_E_UNSUPPORTED;
    dl_kernel *k = calloc(1, sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    k->threads = s->threads;
    dl_op op32; /* op itself, or its f32 row-major view when it has other storage formats */
    k->cl = cpu_nhwc_runs(op);
    dl_status st = cpu_storage_prepare(&k->st, op, &op32, k->cl, err);
    if (st != DL_OK) {
        free(k);
        return st;
    }
    st = dl_op_geom_init(&k->g, &op32) ? DL_OK : DL_E_NOMEM;
    if (st == DL_OK && k->cl) st = cpu_nhwc_prepare(k, &op32);
    else if (st == DL_OK && k->g.kind == DL_OP_CONV2D) st = cpu_conv2d_prepare(k, &op32);
    if (st == DL_OK && k->g.kind == DL_OP_LINEAR) st = cpu_linear_prepare(k, &op32);
    if (st == DL_OK && k->g.kind == DL_OP_MAXPOOL2D && (k->workspace = cpu_maxpool2d_workspace(k)) == SIZE_MAX)
        st = DL_E_NOMEM;
    if (st == DL_OK && k->g.kind == DL_OP_CONV_TRANSPOSE2D &&
        (k->workspace = cpu_conv_transpose2d_workspace(k)) == SIZE_MAX)
        st = DL_E_NOMEM;
    if (st == DL_OK && k->g.kind == DL_OP_CONV3D) st = cpu_conv3d_prepare(k, &op32);
    if (st != DL_OK) {
        free(k->packed);
        free(k->dc.row_at);
        cpu_storage_free(&k->st);
        dl_op_geom_free(&k->g);
        free(k);
        return dl_fail(err, st, "out of memory preparing %s", op->name ? op->name : "op");
    }
    *workspace = cpu_storage_workspace(&k->st, k->workspace);
    *out = k;
    return DL_OK;
}

static dl_status cpu_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    omp_set_num_threads(k->threads);
    if (k->g.kind == DL_OP_GATHER) {
        dl_status st = cpu_gather_check(k, in, err);
        if (st != DL_OK) return st;
    }
    if (k->st.active) return cpu_storage_run(&k->st, k, kernels[k->g.kind], in, out, ws, err);
    kernels[k->g.kind](k, in, out[0].data, ws);
    return DL_OK;
}

static void cpu_release(void *self, dl_kernel *k) {
    if (!k) return;
    cpu_winograd_free(&k->wg);
    free(k->packed);
    free(k->dc.row_at);
    cpu_storage_free(&k->st);
    dl_op_geom_free(&k->g);
    free(k);
}

/* Elementwise kernels read element i before writing element i, so they may overwrite input 0. */
static int cpu_in_place(void *self, const dl_op *op) { return dl_op_is_elementwise(op->kind); }

static dl_status cpu_synchronize(void *self, dl_error *err) { return DL_OK; }

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) {
        dl_fail(err, DL_E_NOMEM, "out of memory");
        return NULL;
    }
    s->threads = host->n_threads > 0 ? host->n_threads : 1;
    openblas_set_num_threads(1);
    omp_set_num_threads(s->threads);
    snprintf(s->description, sizeof s->description, "CPU reference: %d thread%s (%s), own GEMM %s, %s (%s kernels)",
             s->threads, s->threads == 1 ? "" : "s", THREADING, cpu_gemm_isa(), openblas_get_config(),
             openblas_get_corename());
    s->table = (dl_backend){
        .abi_version = DL_ABI_VERSION,
        .struct_size = sizeof(dl_backend),
        .name = "cpu",
        .description = s->description,
        .device = {DL_DEVICE_CPU, 0},
        .self = s,
        .destroy = cpu_destroy,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .copy = cpu_copy_mem,
        .supports = cpu_supports,
        .prepare = cpu_prepare,
        .run = cpu_run,
        .release = cpu_release,
        .synchronize = cpu_synchronize,
        .supports_in_place = cpu_in_place,
        .preferred_layout = cpu_preferred_layout,
        .memory_info = NULL, /* host memory: the core checks it */
    };
    return &s->table;
}
