/* storage_backend.c — a test backend that takes only bf16 tensors, with every 4-D activation in
 * channels-last order (NHWC), in its own memory domain (host memory behind a device type of its
 * own). It computes through the CPU plugin, which it loads (STORAGE_CPU_PLUGIN) and forwards to,
 * so results are real. It prefers channels-last for every op with a 4-D tensor and converts in
 * its copies (ABI 1.3 convert) unless DLFAKE_BF16NHWC_CONVERT=0, which makes the host convert in
 * host memory instead. The session tests count the casts and transposes it causes.
 * DLFAKE_BF16NHWC_MEMORY=BYTES makes its memory_info report that much free memory, and
 * DLFAKE_BF16NHWC_PREPARE_FAILS=1 makes every prepare fail (to see what the session does before).
 *
 * Built with STORAGE_TIMED it is "timedcpu" instead: f32 in host memory, any layout the cpu plugin
 * takes, its input's layout preferred (AS_INPUT), and each run of an op whose first input is 4-D
 * waits DLFAKE_TIMEDCPU_NHWC_US or DLFAKE_TIMEDCPU_NCHW_US microseconds (default 0) by that
 * input's layout: the tests of --layout auto choose which layout is faster. DLFAKE_TIMEDCPU_RUN_NHWC_US
 * and DLFAKE_TIMEDCPU_RUN_NCHW_US add a wait only where that input lies outside the memory this
 * backend allocated (a session's host arena, not an op timed alone on buffers of its own, as the
 * host times an op whose tensors are under 16 MiB: oprun.c): the
 * test of auto's runs of both plans makes the model's runs disagree with its ops timed alone.
 * DLFAKE_TIMEDCPU_RUN_IMAGE2_US waits that many microseconds times the square of the first input's
 * first dimension, in a session's runs only (the tests of --micro-batch auto).
 * DLFAKE_TIMEDCPU_RUN_FOUR_US waits that many microseconds more where that first dimension is 4,
 * in a session's runs only (parts of 4 slower than the batch at once, parts of 2 and 1 faster).
 * DLFAKE_TIMEDCPU_COLD_ONE_US waits that many microseconds more in a session's run of an op on 1
 * image straight after a run on another number of images (a plan whose data the other plan's run
 * evicted from the caches: the test that auto's trials time a plan's runs warm).
 * DLFAKE_TIMEDCPU_RESIDUAL_US waits that many microseconds more in each run of an op prepared with a
 * fused residual (attrs.residual): the test that placement times a conv with the residual it will
 * take. DLFAKE_TIMEDCPU_RUN_FLAT_US waits that many microseconds more in a session's run of an op
 * whose first input is not 4-D, whatever its images (a classifier's layers, faster on the whole
 * batch at once: the test of the first layers in parts). dlfake_linear_prepares(rows) counts the
 * linear ops prepared on that many rows so far (a prefix's session prepares none past its cut).
 * DLFAKE_TIMEDCPU_DISTURB_US waits that many microseconds more in the process's 4th, 5th and 6th
 * runs of an op timed alone (a checked run, two warm-ups, then 3 of the 5 timed runs: a shared
 * machine's time slice lost in the middle of a timing). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrun/plugin.h"
#include "tensor_convert.h"

typedef struct proxy {
    dl_backend table;
    void *so;
    const dl_backend *cpu;
    int convert;
} proxy;

static int is_cl(const dl_tensor *t) { return dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST; }

static void px_destroy(void *self) {
    proxy *p = self;
    if (p->cpu) p->cpu->destroy(p->cpu->self);
    free(p); /* the cpu plugin stays loaded, as the host keeps plugins: its threads may outlive destroy */
}
#ifdef STORAGE_TIMED
/* The blocks px_alloc gave and px_free has not taken back (timedcpu's run-only waits) */
#define PX_BLOCKS 256
static struct {
    pthread_mutex_t lock;
    const char *at[PX_BLOCKS];
    size_t bytes[PX_BLOCKS];
} blocks = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}};
/* Notes block p of bytes; bytes 0: forgets p */
static void note_block(const void *p, size_t bytes) {
    pthread_mutex_lock(&blocks.lock);
    for (int i = 0; i < PX_BLOCKS; i++)
        if (bytes ? !blocks.at[i] : blocks.at[i] == p) {
            blocks.at[i] = bytes ? p : NULL, blocks.bytes[i] = bytes;
            break;
        }
    pthread_mutex_unlock(&blocks.lock);
}
static int in_own_block(const void *p) {
    int in = 0;
    pthread_mutex_lock(&blocks.lock);
    for (int i = 0; i < PX_BLOCKS && !in; i++)
        in = blocks.at[i] && (const char *)p >= blocks.at[i] && (const char *)p < blocks.at[i] + blocks.bytes[i];
    pthread_mutex_unlock(&blocks.lock);
    return in;
}
#else
static void note_block(const void *p, size_t bytes) {}
#endif
static dl_status px_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    *ptr = NULL;
    if (posix_memalign(ptr, 64, bytes ? bytes : 64)) return dl_fail(err, DL_E_NOMEM, "no memory");
    note_block(*ptr, bytes ? bytes : 64);
    return DL_OK;
}
static void px_free(void *self, void *ptr) {
    if (ptr) note_block(ptr, 0);
    free(ptr);
}
static dl_status px_copy(void *self, void *dst, const void *src, size_t n, dl_copy_kind kind, dl_error *err) {
    memcpy(dst, src, n);
    return DL_OK;
}

/* Only bf16; a 4-D tensor that is not a weight must be channels-last (weights are row-major).
 * timedcpu: whatever the cpu plugin takes. */
static int px_supports(void *self, const dl_op *op, dl_error *why) {
    proxy *p = self;
#ifdef STORAGE_TIMED
    return p->cpu->supports(p->cpu->self, op, why);
#else
    for (int i = 0; i <= op->n_inputs; i++) {
        const dl_tensor *t = i < op->n_inputs ? &op->inputs[i] : &op->outputs[0];
        if (!dl_dtype_eq(t->dtype, DL_BF16)) return dl_fail(why, DL_E_UNSUPPORTED, "bf16 tensors only"), 0;
        int conv_weight = op->kind == DL_OP_CONV2D && i == 1;
        if (t->ndim == 4 && !is_cl(t) && !conv_weight)
            return dl_fail(why, DL_E_UNSUPPORTED, "4-D activations in NHWC only"), 0;
    }
    return p->cpu->supports(p->cpu->self, op, why);
#endif
}
#ifdef STORAGE_TIMED
/* timedcpu: the kernels prepared with a fused residual (DLFAKE_TIMEDCPU_RESIDUAL_US) */
#define PX_RESIDUAL_KERNELS 64
static struct {
    pthread_mutex_t lock;
    const dl_kernel *k[PX_RESIDUAL_KERNELS];
} with_residual = {PTHREAD_MUTEX_INITIALIZER, {0}};
static void note_residual(const dl_kernel *k, int on) {
    pthread_mutex_lock(&with_residual.lock);
    for (int i = 0; i < PX_RESIDUAL_KERNELS; i++)
        if (on ? !with_residual.k[i] : with_residual.k[i] == k) {
            with_residual.k[i] = on ? k : NULL;
            break;
        }
    pthread_mutex_unlock(&with_residual.lock);
}
static int has_residual(const dl_kernel *k) {
    int found = 0;
    pthread_mutex_lock(&with_residual.lock);
    for (int i = 0; i < PX_RESIDUAL_KERNELS && !found; i++) found = with_residual.k[i] == k;
    pthread_mutex_unlock(&with_residual.lock);
    return found;
}
#else
static void note_residual(const dl_kernel *k, int on) {}
#endif

static int linear_prepares[16]; /* by rows, below 16 */
DL_PLUGIN_EXPORT int dlfake_linear_prepares(int64_t rows) { return rows >= 0 && rows < 16 ? linear_prepares[rows] : 0; }

static dl_status px_prepare(void *self, const dl_op *op, dl_kernel **k, size_t *ws, dl_error *err) {
    proxy *p = self;
    if (op->kind == DL_OP_LINEAR && op->inputs[0].shape[0] >= 0 && op->inputs[0].shape[0] < 16)
        __atomic_fetch_add(&linear_prepares[op->inputs[0].shape[0]], 1, __ATOMIC_RELAXED);
    if (!px_supports(self, op, err)) return DL_E_UNSUPPORTED;
    const char *fails = getenv("DLFAKE_BF16NHWC_PREPARE_FAILS");
    if (fails && strcmp(fails, "1") == 0) return dl_fail(err, DL_E_RUNTIME, "prepare was called");
    dl_status st = p->cpu->prepare(p->cpu->self, op, k, ws, err);
    if (st == DL_OK && op->attrs && op->attrs->residual) note_residual(*k, 1);
    return st;
}
static dl_status px_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    proxy *p = self;
#ifdef STORAGE_TIMED
    const char *us =
        in[0].ndim != 4 ? NULL : getenv(is_cl(&in[0]) ? "DLFAKE_TIMEDCPU_NHWC_US" : "DLFAKE_TIMEDCPU_NCHW_US");
    const char *run_us = in[0].ndim != 4 || in_own_block(in[0].data)
                             ? NULL
                             : getenv(is_cl(&in[0]) ? "DLFAKE_TIMEDCPU_RUN_NHWC_US" : "DLFAKE_TIMEDCPU_RUN_NCHW_US");
    /* a session's run of an op on n images: DLFAKE_TIMEDCPU_RUN_IMAGE2_US x n^2 more (a batch in
     * parts runs faster: the tests of --micro-batch auto) */
    const char *image2_us = in[0].ndim < 1 || in_own_block(in[0].data) ? NULL : getenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
    const char *res_us = has_residual(k) ? getenv("DLFAKE_TIMEDCPU_RESIDUAL_US") : NULL;
    static _Thread_local int64_t last_images = -1; /* the first dimension of the thread's run before */
    const int64_t images = in[0].ndim >= 1 ? in[0].shape[0] : -1;
    const char *cold_us = images == 1 && last_images != -1 && last_images != 1 && !in_own_block(in[0].data)
                              ? getenv("DLFAKE_TIMEDCPU_COLD_ONE_US")
                              : NULL;
    last_images = images;
    const char *four_us = in[0].ndim < 1 || in[0].shape[0] != 4 || in_own_block(in[0].data)
                              ? NULL
                              : getenv("DLFAKE_TIMEDCPU_RUN_FOUR_US");
    const char *flat_us = in[0].ndim == 4 || in_own_block(in[0].data) ? NULL : getenv("DLFAKE_TIMEDCPU_RUN_FLAT_US");
    static _Atomic int alone_runs; /* runs of ops timed alone so far */
    const char *disturb_us = NULL;
    int alone = 0;
    if (in_own_block(in[0].data) && (alone = ++alone_runs, alone >= 4 && alone <= 6))
        disturb_us = getenv("DLFAKE_TIMEDCPU_DISTURB_US");
    const long wait = (us ? strtol(us, NULL, 10) : 0) + (run_us ? strtol(run_us, NULL, 10) : 0) +
                      (flat_us ? strtol(flat_us, NULL, 10) : 0) +
                      (image2_us ? strtol(image2_us, NULL, 10) * (long)(in[0].shape[0] * in[0].shape[0]) : 0) +
                      (res_us ? strtol(res_us, NULL, 10) : 0) + (four_us ? strtol(four_us, NULL, 10) : 0) +
                      (cold_us ? strtol(cold_us, NULL, 10) : 0) + (disturb_us ? strtol(disturb_us, NULL, 10) : 0);
    if (wait > 0) nanosleep(&(struct timespec){wait / 1000000, wait % 1000000 * 1000}, NULL);
#endif
    return p->cpu->run(p->cpu->self, k, in, out, ws, err);
}
static void px_release(void *self, dl_kernel *k) {
    proxy *p = self;
    note_residual(k, 0);
    p->cpu->release(p->cpu->self, k);
}
static dl_status px_memory_info(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err) {
    const char *m = getenv("DLFAKE_BF16NHWC_MEMORY");
    *free_bytes = *total_bytes = m ? (size_t)strtoull(m, NULL, 10) : 0; /* 0: unknown */
    return DL_OK;
}
static int px_in_place(void *self, const dl_op *op) {
    proxy *p = self;
    return DL_BACKEND_HAS(p->cpu, supports_in_place) && p->cpu->supports_in_place(p->cpu->self, op);
}
static int px_preferred_layout(void *self, const dl_op *op) {
#ifdef STORAGE_TIMED
    return DL_LAYOUT_AS_INPUT;
#else
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].ndim == 4) return DL_LAYOUT_CHANNELS_LAST;
    return op->outputs[0].ndim == 4 ? DL_LAYOUT_CHANNELS_LAST : DL_LAYOUT_ROW_MAJOR;
#endif
}
static int px_supports_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind) {
    proxy *p = self;
    return p->convert && dl_dtype_is_float(dst->dtype) && dl_dtype_is_float(src->dtype);
}
static dl_status px_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err) {
    if (!dl_convert_host(dst, src)) return dl_fail(err, DL_E_UNSUPPORTED, "cannot convert");
    return DL_OK;
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL;
    proxy *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    const char *conv = getenv("DLFAKE_BF16NHWC_CONVERT");
    p->convert = !conv || strcmp(conv, "0") != 0;
    p->so = dlopen(STORAGE_CPU_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    dl_plugin_init_fn init = p->so ? (dl_plugin_init_fn)dlsym(p->so, DL_PLUGIN_ENTRY) : NULL;
    if (!init || !(p->cpu = init(host, err))) {
        if (!init) dl_fail(err, DL_E_NODEVICE, "cannot load the cpu plugin %s", STORAGE_CPU_PLUGIN);
        free(p);
        return NULL;
    }
#ifdef STORAGE_TIMED
    p->convert = 0; /* host memory: the host converts */
#define PX_NAME "timedcpu"
#define PX_DESCRIPTION "test backend: the cpu plugin, slower in the layout DLFAKE_TIMEDCPU_*_US says"
#define PX_DEVICE {DL_DEVICE_CPU, 0}
#else
#define PX_NAME "bf16nhwc"
#define PX_DESCRIPTION "test backend: bf16 NHWC only, computing through the cpu plugin"
#define PX_DEVICE \
    { 12, 7 }
#endif
    p->table = (dl_backend){.abi_version = DL_ABI_VERSION,
                            .struct_size = sizeof(dl_backend),
                            .name = PX_NAME,
                            .description = PX_DESCRIPTION,
                            .device = PX_DEVICE,
                            .self = p,
                            .destroy = px_destroy,
                            .alloc = px_alloc,
                            .free = px_free,
                            .copy = px_copy,
                            .supports = px_supports,
                            .prepare = px_prepare,
                            .run = px_run,
                            .release = px_release,
                            .memory_info = px_memory_info,
                            .supports_in_place = px_in_place,
                            .preferred_layout = px_preferred_layout,
                            .supports_convert = px_supports_convert,
                            .convert = px_convert};
    return &p->table;
}
