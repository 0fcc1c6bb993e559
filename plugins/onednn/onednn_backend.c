/* onednn_backend.c — the oneDNN plugin's entry point and backend table: a second CPU backend on
 * Debian's oneDNN 2.6 (C API), sharing the CPU memory domain with the cpu plugin so that placement
 * mixes the two op by op with no copies. Exact supports() (the op table's check, what oneDNN would
 * compute differently refused by the builders, and oneDNN's own acceptance of the primitive),
 * kernel preparation, dispatch and OpenMP threads. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "onednn.h"

typedef dl_status (*odn_builder)(odn_build *b);

/* The builder of each kind this plugin runs; other kinds are refused. */
/* clang-format off */
static const odn_builder builders[DL_OP_COUNT] = {
    [DL_OP_CONV2D] = odn_conv2d,
    [DL_OP_CONV3D] = odn_conv3d,
    [DL_OP_MAXPOOL2D] = odn_pool,
    [DL_OP_AVGPOOL2D] = odn_pool,
    [DL_OP_GLOBAL_AVGPOOL] = odn_pool,
    [DL_OP_LINEAR] = odn_linear,
    [DL_OP_MATMUL] = odn_matmul,
    [DL_OP_SOFTMAX] = odn_softmax,
    [DL_OP_LOG_SOFTMAX] = odn_softmax,
    [DL_OP_CONCAT] = odn_concat,
    [DL_OP_ADD] = odn_add,
    [DL_OP_BATCHNORM] = odn_batchnorm,
    [DL_OP_FLATTEN] = odn_copy_op,
    [DL_OP_DROPOUT] = odn_copy_op,
    [DL_OP_RESHAPE] = odn_copy_op,
    [DL_OP_RELU] = odn_eltwise,
    [DL_OP_LEAKY_RELU] = odn_eltwise,
    [DL_OP_SIGMOID] = odn_eltwise,
    [DL_OP_CLIP] = odn_eltwise,
    [DL_OP_SQRT] = odn_eltwise,
    [DL_OP_EXP] = odn_eltwise,
    [DL_OP_LOG] = odn_eltwise,
    [DL_OP_TANH] = odn_eltwise,
    [DL_OP_NEG] = odn_eltwise,
    [DL_OP_ABS] = odn_eltwise,
    [DL_OP_RECIPROCAL] = odn_eltwise,
    [DL_OP_HARD_SWISH] = odn_eltwise,
    [DL_OP_SILU] = odn_eltwise,
    [DL_OP_GELU] = odn_eltwise,
};
/* clang-format on */

static void odn_destroy(void *self) {
    odn_state *s = self;
    if (s->engine) dnnl_engine_destroy(s->engine);
    odn_algo_free(s);
    free(s);
}

static dl_status odn_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    *ptr = NULL;
    if (posix_memalign(ptr, 64, bytes ? bytes : 64) != 0)
        return dl_fail(err, DL_E_NOMEM, "cannot allocate %zu bytes", bytes);
    return DL_OK;
}

static void odn_free(void *self, void *ptr) { free(ptr); }

static dl_status odn_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    memcpy(dst, src, bytes);
    return DL_OK;
}

/* The kinds that take channels-last (NHWC) activations: their primitives read each tensor's
 * layout from its strides (docs/onednn.md, "Channels-last"). Not linear, matmul, softmax or the
 * copies (flatten, reshape), whose meaning is the row-major order. */
static int takes_channels_last(int kind) {
    switch (kind) {
    case DL_OP_CONV2D:
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL:
    case DL_OP_ADD:
    case DL_OP_CONCAT:
    case DL_OP_BATCHNORM: return 1;
    default: return odn_is_eltwise(kind);
    }
}

/* 1 if the op's activations (every input but a conv's weight and bias and batchnorm's statistics,
 * and the output) are all channels-last or all not, one layout in and the same out; and those
 * others row-major, as their builders read them. */
static int one_layout(const dl_op *op) {
    const int cl = dl_tensor_layout(&op->outputs[0]) == DL_LAYOUT_CHANNELS_LAST, res = dl_op_residual(op);
    for (int i = 0; i < op->n_inputs; i++) {
        int param =
            (op->kind == DL_OP_CONV2D && (i == 1 || (i == 2 && i != res))) || (op->kind == DL_OP_BATCHNORM && i > 0);
        if (param ? op->inputs[i].strides != NULL : (dl_tensor_layout(&op->inputs[i]) == DL_LAYOUT_CHANNELS_LAST) != cl)
            return 0;
    }
    return 1;
}

/* The checks of supports() and prepare(), then the builder: with k NULL it stops at the primitive
 * descriptors (oneDNN's own yes or no), with a kernel it creates the primitives (a conv as its
 * `variant`: odn_variant). */
static dl_status build(odn_state *s, const dl_op *op, dl_kernel *k, int variant, dl_error *err) {
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", op->name ? op->name : "op", dl_op_kind_name(op->kind));
    if (op->kind < 0 || op->kind >= DL_OP_COUNT || !builders[op->kind])
        return dl_fail(err, DL_E_UNSUPPORTED, "%s: no kernel in the onednn plugin", dl_op_kind_name(op->kind));
    /* f32 only (no f16/bf16: refused by the check); channels-last where takes_channels_last */
    const unsigned residual = op->kind == DL_OP_CONV2D || op->kind == DL_OP_LINEAR ? DL_ACCEPT_RESIDUAL : 0;
    const unsigned cl = takes_channels_last(op->kind) ? DL_ACCEPT_CHANNELS_LAST : 0;
    if (!dl_op_check_as(op, DL_ACCEPT_ACTIVATIONS | residual | cl, err)) return DL_E_UNSUPPORTED;
    if (cl && !one_layout(op))
        return dl_fail(err, DL_E_UNSUPPORTED,
                       "%s: channels-last and row-major activations mixed in one op, or a strided weight", what);
    for (int i = 0; i < op->n_inputs; i++)
        if (dl_tensor_numel(&op->inputs[i]) == 0)
            return dl_fail(err, DL_E_UNSUPPORTED, "%s: an empty input (oneDNN primitives want elements)", what);
    if (dl_tensor_numel(&op->outputs[0]) == 0)
        return dl_fail(err, DL_E_UNSUPPORTED, "%s: an empty output (oneDNN primitives want elements)", what);
    odn_build b = {s, op, k, what, err, variant};
    if (k) snprintf(k->name, sizeof k->name, "%s", what);
    /* oneDNN sizes its blocking by the threads it will have: the same count as at run */
    omp_set_num_threads(s->threads);
    return builders[op->kind](&b);
}

static int odn_supports(void *self, const dl_op *op, dl_error *why) { return build(self, op, NULL, 0, why) == DL_OK; }

/* A kernel for op, a conv as its `variant` (odn_variant). */
static dl_status new_kernel(odn_state *s, const dl_op *op, int variant, dl_kernel **out, dl_error *err) {
    dl_kernel *k = calloc(1, sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    k->threads = s->threads;
    k->in_place = -1;
    dnnl_status_t r = dnnl_stream_create(&k->stream, s->engine, dnnl_stream_default_flags);
    if (r != dnnl_success) {
        free(k);
        return dl_fail(err, DL_E_RUNTIME, "%s: oneDNN stream: %s", op->name ? op->name : "op", dnnl_status2str(r));
    }
    dl_status st = build(s, op, k, variant, err);
    if (st != DL_OK) {
        odn_kernel_free(k);
        return st;
    }
    *out = k;
    return DL_OK;
}

/* A conv Winograd may run is built both ways where oneDNN has a Winograd kernel for it (AVX-512;
 * relu or no activation), a conv with a residual sum also by oneDNN's further implementations, and
 * algo.c keeps the fastest (once per shape: then only that one is built), unless DLRUN_ONEDNN_CONV
 * forces one (direct: oneDNN's first choice; winograd: Winograd wherever oneDNN builds it; other:
 * a residual sum conv by oneDNN's second jit implementation where it has one), else direct. */
static dl_status odn_prepare(void *self, const dl_op *op, dl_kernel **out, size_t *workspace, dl_error *err) {
    odn_state *s = self;
    dl_kernel *cand[1 + 1 + ODN_MAX_IMPLS] = {0};
    int var[1 + 1 + ODN_MAX_IMPLS], n = 0;
    dl_error why;
    const int auto_ = s->conv_algo == ODN_CONV_AUTO;
    const int wino = odn_winograd_may(op) && (auto_ || s->conv_algo == ODN_CONV_WINOGRAD),
              impls = auto_ && odn_impls_may(s, op);
    const int known = auto_ && (wino || impls) ? odn_variant_known(s, op) : -1;
    dl_kernel *k = NULL;
    if (known > ODN_DIRECT && new_kernel(s, op, known, &k, &why) == DL_OK) goto done;
    if (s->conv_algo == ODN_CONV_OTHER && odn_impls_may(s, op) && new_kernel(s, op, ODN_IMPL(1), &k, &why) == DL_OK)
        goto done;
    if (wino && known < 0 && new_kernel(s, op, ODN_WINOGRAD, &k, &why) == DL_OK) {
        if (!auto_) goto done; /* forced */
        cand[1] = k, var[1] = ODN_WINOGRAD, n = 1;
    }
    dl_status st = new_kernel(s, op, ODN_DIRECT, &cand[0], err);
    if (st != DL_OK) {
        odn_kernel_free(cand[1]);
        return st;
    }
    var[0] = ODN_DIRECT, n++;
    for (int j = 1; impls && known < 0 && j <= ODN_MAX_IMPLS; j++, n++)
        if (new_kernel(s, op, ODN_IMPL(j), &cand[n], &why) != DL_OK) break;
        else var[n] = ODN_IMPL(j);
    const int keep = n > 1 ? odn_fastest(s, op, cand, var, n) : 0;
    k = cand[keep];
    for (int j = 0; j < n; j++)
        if (j != keep) odn_kernel_free(cand[j]);
done:
    *workspace = k->workspace;
    *out = k;
    return DL_OK;
}

static dl_status odn_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    omp_set_num_threads(k->threads); /* the OpenMP pool the cpu plugin uses too, at the same size */
    return odn_kernel_run(k, in, out, ws, err);
}

static void odn_release(void *self, dl_kernel *k) { odn_kernel_free(k); }

/* oneDNN's eltwise primitives may write over their source. */
static int odn_in_place(void *self, const dl_op *op) { return odn_is_eltwise(op->kind); }

/* A conv whose residual is a sum post-op reads each output element (the residual, copied there or
 * already there) only before writing it: it may run over the residual. A binary add's operand
 * may not be the output: oneDNN's jit kernels keep partial sums over input channels in dst. */
static int odn_kernel_in_place(void *self, const dl_kernel *k, const dl_op *op) { return k->in_place; }

static dl_status odn_synchronize(void *self, dl_error *err) { return DL_OK; }

/* The instruction set oneDNN dispatches to, for the description (and so the timing cache key). */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "SSE4.1";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx512_mic: return "AVX-512 MIC";
    case dnnl_cpu_isa_avx512_core: return "AVX-512";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX-512 VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX-512 BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AMX";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2 VNNI";
    default: return "generic";
    }
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL;
    odn_state *s = calloc(1, sizeof *s);
    if (!s) {
        dl_fail(err, DL_E_NOMEM, "out of memory");
        return NULL;
    }
    dnnl_status_t r = dnnl_engine_create(&s->engine, dnnl_cpu, 0);
    if (r != dnnl_success) {
        dl_fail(err, DL_E_NODEVICE, "oneDNN CPU engine: %s", dnnl_status2str(r));
        free(s);
        return NULL;
    }
    /* Below AVX oneDNN runs SSE4.1 kernels, whose memory operands must be 16-byte aligned; the op
     * ABI does not promise that of a tensor (a weight in a mapped file, a slice of a concat), so
     * this plugin leaves such a CPU (or DNNL_MAX_CPU_ISA=SSE41) to the cpu plugin. */
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx) != dnnl_cpu_isa_avx) {
        dl_fail(err, DL_E_NODEVICE,
                "oneDNN's kernels on this CPU (%s) need 16-byte aligned tensors; the cpu plugin runs every op",
                isa_name(isa));
        dnnl_engine_destroy(s->engine);
        free(s);
        return NULL;
    }
    s->threads = host->n_threads > 0 ? host->n_threads : 1;
    s->host = host;
    const char *layout = getenv("DLRUN_ONEDNN_LAYOUT");
    s->blocked = !(layout && !strcmp(layout, "plain"));
    const char *residual = getenv("DLRUN_ONEDNN_RESIDUAL"); /* for tests and measuring */
    s->binary_residual = residual && !strcmp(residual, "binary");
    const char *algo = getenv("DLRUN_ONEDNN_CONV"); /* auto (measured), direct, winograd or other */
    s->conv_algo = !algo || !strcmp(algo, "auto") ? ODN_CONV_AUTO
                   : !strcmp(algo, "direct")      ? ODN_CONV_DIRECT
                   : !strcmp(algo, "winograd")    ? ODN_CONV_WINOGRAD
                   : !strcmp(algo, "other")       ? ODN_CONV_OTHER
                                                  : -1;
    if (s->conv_algo < 0) {
        dl_fail(err, DL_E_INVALID, "DLRUN_ONEDNN_CONV=%s: want auto, direct, winograd or other", algo);
        dnnl_engine_destroy(s->engine);
        free(s);
        return NULL;
    }
    if (!odn_algo_init(s)) {
        dl_fail(err, DL_E_NOMEM, "out of memory");
        dnnl_engine_destroy(s->engine);
        free(s);
        return NULL;
    }
    omp_set_num_threads(s->threads);
    const dnnl_version_t *v = dnnl_version();
    static const char *const algos[] = {"conv kernels measured", "direct convs", "Winograd forced",
                                        "other residual convs"};
    snprintf(s->description, sizeof s->description, "oneDNN %d.%d.%d (%s, %s layout, %s): %d thread%s (OpenMP)",
             v->major, v->minor, v->patch, isa_name(dnnl_get_effective_cpu_isa()), s->blocked ? "blocked" : "plain",
             algos[s->conv_algo], s->threads, s->threads == 1 ? "" : "s");
    s->table = (dl_backend){
        .abi_version = DL_ABI_VERSION,
        .struct_size = sizeof(dl_backend),
        .name = "onednn",
        .description = s->description,
        .device = {DL_DEVICE_CPU, 0},
        .self = s,
        .destroy = odn_destroy,
        .alloc = odn_alloc,
        .free = odn_free,
        .copy = odn_copy,
        .supports = odn_supports,
        .prepare = odn_prepare,
        .run = odn_run,
        .release = odn_release,
        .synchronize = odn_synchronize,
        .supports_in_place = odn_in_place,
        .memory_info = NULL, /* host memory: the core checks it */
        .kernel_in_place = odn_kernel_in_place,
    };
    return &s->table;
}
