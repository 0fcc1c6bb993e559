/* example_plugin.c — the smallest complete dlrun backend: runs `relu` on f32 tensors in host
 * memory. docs/plugins.md walks through it; the tests build it and load it like any plugin.
 * Build: cc -shared -fPIC -fvisibility=hidden -I<dlrun>/include example_plugin.c -o libdlrun-example.so */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"

typedef struct example_state {
    dl_backend table; /* the table we hand to the host; self points back at this struct */
} example_state;

struct dl_kernel {
    int64_t numel; /* relu needs nothing but the element count */
};

static void ex_destroy(void *self) { free(self); }

static dl_status ex_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    (void)self;
    *ptr = NULL;
    if (posix_memalign(ptr, 64, bytes ? bytes : 64) != 0)
        return dl_fail(err, DL_E_NOMEM, "cannot allocate %zu bytes", bytes);
    return DL_OK;
}

static void ex_free(void *self, void *ptr) {
    (void)self;
    free(ptr);
}

static dl_status ex_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    (void)self, (void)kind, (void)err;
    memcpy(dst, src, bytes); /* host memory on both sides */
    return DL_OK;
}

/* Exact: say no, with a reason, to anything we cannot run. */
static int ex_supports(void *self, const dl_op *op, dl_error *why) {
    (void)self;
    if (op->kind != DL_OP_RELU) return dl_fail(why, DL_E_UNSUPPORTED, "only relu"), 0;
    if (op->n_inputs != 1 || op->n_outputs != 1) return dl_fail(why, DL_E_UNSUPPORTED, "relu takes one input"), 0;
    if (!dl_dtype_is_f32(op->inputs[0].dtype) || !dl_dtype_is_f32(op->outputs[0].dtype))
        return dl_fail(why, DL_E_UNSUPPORTED, "only f32"), 0;
    if (dl_tensor_numel(&op->inputs[0]) != dl_tensor_numel(&op->outputs[0]))
        return dl_fail(why, DL_E_UNSUPPORTED, "output size differs from input size"), 0;
    return 1;
}

static dl_status ex_prepare(void *self, const dl_op *op, dl_kernel **kernel, size_t *workspace, dl_error *err) {
    (void)self;
    dl_kernel *k = malloc(sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    k->numel = dl_tensor_numel(&op->inputs[0]);
    *kernel = k;
    *workspace = 0;
    return DL_OK;
}

static dl_status ex_run(void *self, dl_kernel *k, const dl_tensor *inputs, const dl_tensor *outputs, void *workspace,
                        dl_error *err) {
    (void)self, (void)workspace, (void)err;
    const float *x = inputs[0].data;
    float *y = outputs[0].data;
    for (int64_t i = 0; i < k->numel; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return DL_OK;
}

static void ex_release(void *self, dl_kernel *k) {
    (void)self;
    free(k);
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL; /* another major ABI: say why, never run */
    example_state *s = calloc(1, sizeof *s);
    if (!s) {
        dl_fail(err, DL_E_NOMEM, "out of memory");
        return NULL;
    }
    s->table = (dl_backend){
#ifdef EXAMPLE_AS_ABI_1_0 /* the tests build this variant to check that a 1.0 plugin still loads */
        .abi_version = (uint32_t)DL_ABI_MAJOR << 16,
        .struct_size = offsetof(dl_backend, supports_in_place),
        .name = "example10",
#else
        .abi_version = DL_ABI_VERSION,
        .struct_size = sizeof(dl_backend),
        .name = "example",
#endif
        .description = "example plugin: relu on the CPU, one loop",
        .device = {DL_DEVICE_CPU, 0},
        .self = s,
        .destroy = ex_destroy,
        .alloc = ex_alloc,
        .free = ex_free,
        .copy = ex_copy,
        .supports = ex_supports,
        .prepare = ex_prepare,
        .run = ex_run,
        .release = ex_release,
        .synchronize = NULL, /* optional: we are synchronous */
    };
    return &s->table;
}
