/* test_noalloc.c — after the first run, running a session again allocates nothing: malloc and
 * friends are interposed for the whole process (libdlrun, the CPU plugin, OpenMP, OpenBLAS) and
 * counted around the second and third runs, every op on the cpu plugin (oneDNN allocates inside
 * each execute call); with a trace recording too (its storage is allocated with the session). Not built
 * with sanitizers, which own malloc. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static volatile int counting;
static long allocations;

static void note(void) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
}
void *malloc(size_t n) {
    note();
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    note();
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    note();
    return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n) {
    note();
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    note();
    return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    note();
    *p = __libc_memalign(a, n);
    return *p ? 0 : ENOMEM;
}

/* model: a file of models/, or of tests/data/models/ when it starts with "test:" */
/* at_once: parts of the batch run side by side (dl_session_options.parts_at_once), on threads
 * started with the session */
static void runs_allocate_nothing_on(const char *model, int64_t batch, int trace, int64_t micro_batch, int at_once,
                                     int threads, dl_layout_mode layout) {
    char path[512];
    if (strncmp(model, "test:", 5) == 0)
        snprintf(path, sizeof path, "%s/tests/data/models/%s", DLRUN_SOURCE_DIR, model + 5);
    else snprintf(path, sizeof path, "%s/models/%s", DLRUN_SOURCE_DIR, model);
    dl_context_options co = {sizeof co, threads, 0, DLRUN_PLUGIN_DIR, 1};
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err;
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK);
    cr_assert_eq(dl_model_load(path, &m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = batch;
    so.trace = trace;
    so.micro_batch = micro_batch; /* 0: auto, measured (parts of the batch may win) */
    so.parts_at_once = at_once;
    so.layout = layout;
    /* the cpu plugin: oneDNN's dnnl_primitive_execute builds a small argument map (C++) on every
     * call, so a session with ops on the onednn plugin allocates a few blocks per run */
    so.backend = "cpu";
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    dl_tensor in = *dl_session_input(s, 0);
    int64_t n = dl_tensor_numel(&in);
    float *x = __libc_malloc((size_t)n * sizeof *x);
    tu_fill_uniform(x, (size_t)n, 1, -1, 1);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg); /* first run: may warm up */
    allocations = 0;
    counting = 1;
    dl_status a = dl_session_run(s, &in, 1, &err), b = dl_session_run(s, &in, 1, &err);
    counting = 0;
    cr_assert_eq(a, DL_OK);
    cr_assert_eq(b, DL_OK);
    cr_expect_eq(allocations, 0, "%s%s on %d thread(s), layout %d: %ld allocations in two runs", model,
                 trace ? " (traced)" : "", threads, (int)layout, allocations);
    /* the counter does count: the library allocates when it builds a session */
    counting = 1;
    dl_session_free(s);
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK);
    counting = 0;
    cr_expect_gt(allocations, 0, "interposition is not working");
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
    free(x);
}

static void runs_allocate_nothing(const char *model, int64_t batch, int trace, int64_t micro_batch, int at_once) {
    runs_allocate_nothing_on(model, batch, trace, micro_batch, at_once, 2, DL_LAYOUT_MODE_AUTO);
}

Test(noalloc, run_loop_allocates_nothing, .timeout = 300) {
    runs_allocate_nothing("lenet.yaml", 3, 0, 0, 0);
    runs_allocate_nothing("resnet18.yaml", 2, 0, 0, 0);
    runs_allocate_nothing("vgg.yaml", 1, 0, 0, 0);
    runs_allocate_nothing("test:mobile_block.yaml", 1, 0, 0, 0); /* small ops: the serial paths */
    runs_allocate_nothing("test:mobile_block.yaml", 3, 0, 0, 0);
    runs_allocate_nothing("lenet.yaml", 3, 1, 0, 0);
    runs_allocate_nothing("resnet18.yaml", 2, 1, 0, 0);
    runs_allocate_nothing("lenet.yaml", 4, 0, 2, 0); /* a batch in parts (docs/micro-batch.md) */
    runs_allocate_nothing("test:mobile_block.yaml", 3, 0, 1, 0);
    runs_allocate_nothing("test:mobile_block.yaml", 4, 0, 1, 2); /* parts side by side */
}

/* On one thread every kernel stays out of OpenMP (a region of one allocates its team): ResNet-18's
 * convs (Winograd, im2col), pools and linear layer allocated 22 times a run channels-last and 28
 * row-major before. Parts side by side run each part on one thread so. */
Test(noalloc, runs_on_one_thread_allocate_nothing, .timeout = 300) {
    runs_allocate_nothing_on("resnet18.yaml", 1, 0, 0, 0, 1, DL_LAYOUT_MODE_NCHW);
    runs_allocate_nothing_on("resnet18.yaml", 1, 0, 0, 0, 1, DL_LAYOUT_MODE_NHWC);
    runs_allocate_nothing_on("lenet.yaml", 3, 0, 0, 0, 1, DL_LAYOUT_MODE_AUTO);
    runs_allocate_nothing_on("test:mobile_block.yaml", 3, 0, 0, 0, 1, DL_LAYOUT_MODE_NHWC);
}

/* The first layers in parts and the rest at once (batch_prefix.c): its runs allocate nothing
 * either. The timedcpu test plugin's waits make auto choose it, as in test_micro_batch. */
Test(noalloc, a_run_with_its_first_layers_in_parts_allocates_nothing, .timeout = 120) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    setenv("DLFAKE_TIMEDCPU_RUN_FLAT_US", "5000", 1);
    static const char stages[] = "model: stages\ninputs:\n  - {name: x, shape: [8, 4, 5, 5]}\nlayers:\n"
                                 "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                                 "  - {name: r, op: relu}\n"
                                 "  - {name: c2, op: conv2d, filters: 6, kernel: 3, padding: 1}\n"
                                 "  - {name: p, op: global_avgpool}\n"
                                 "  - {name: f, op: flatten}\n"
                                 "  - {name: l1, op: linear, units: 7}\n"
                                 "  - {name: l2, op: linear, units: 5}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "timedcpu";
    so.parts_at_once = 1; /* the timedcpu waits of parts side by side would overlap, and win */
    cr_assert_eq(tu_open_session(DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so", stages, &so, &ctx, &m, &s, &err), DL_OK,
                 "%s", err.msg);
    cr_assert(strstr(dl_session_batching(s), "the first 5 of 7 layers in "), "%s", dl_session_batching(s));
    dl_tensor in = *dl_session_input(s, 0);
    const int64_t n = dl_tensor_numel(&in);
    float *x = __libc_malloc((size_t)n * sizeof *x);
    tu_fill_uniform(x, (size_t)n, 1, -1, 1);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    allocations = 0;
    counting = 1;
    dl_status a = dl_session_run(s, &in, 1, &err), b = dl_session_run(s, &in, 1, &err);
    counting = 0;
    cr_assert_eq(a, DL_OK);
    cr_assert_eq(b, DL_OK);
    cr_expect_eq(allocations, 0, "%ld allocations in two runs", allocations);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
    free(x);
    unsetenv("DLFAKE_TIMEDCPU_RUN_FLAT_US");
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}
