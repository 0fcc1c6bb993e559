/* test_plugins.c — plugin loading: the CPU plugin and the example plugin load; plugins with no
 * entry symbol, a wrong ABI, a failing init, a missing function or a non-ELF file are skipped with
 * their reason; $DLRUN_PLUGIN_PATH is searched; a session can run on the example plugin; a plugin
 * is never shown an op of a newer ABI minor than its own; the host keeps what a plugin measured
 * across processes, apart from other plugins' (ABI 1.12). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "oprun.h"
#include "test_util.h"

static dl_context *open_dir(const char *dir) {
    dl_context_options o = {sizeof o, 2, 0, dir, 1};
    dl_context *ctx = NULL;
    dl_error err = {{0}};
    cr_assert_eq(dl_context_create(&o, &ctx, &err), DL_OK, "%s", err.msg);
    return ctx;
}

static const dl_plugin_info *find(const dl_context *ctx, const char *name) {
    for (int i = 0; i < dl_context_plugin_count(ctx); i++) {
        const dl_plugin_info *p = dl_context_plugin(ctx, i);
        if (strcmp(p->name, name) == 0) return p;
    }
    return NULL;
}

static void expect_skipped(const dl_context *ctx, const char *name, const char *reason) {
    const dl_plugin_info *p = find(ctx, name);
    cr_assert(p, "plugin %s not listed", name);
    cr_expect_not(p->loaded, "%s should be skipped", name);
    cr_expect(p->reason && strstr(p->reason, reason), "%s: reason '%s' lacks '%s'", name,
              p->reason ? p->reason : "(null)", reason);
    cr_expect(p->reason && !strchr(p->reason, '\n'), "reason must be one line");
}

Test(plugins, cpu_plugin_loads_from_build_tree) {
    unsetenv("DLRUN_PLUGIN_PATH");
    dl_context *ctx = open_dir(DLRUN_PLUGIN_DIR);
    const dl_plugin_info *p = find(ctx, "cpu");
    cr_assert(p && p->loaded, "cpu plugin did not load: %s", p && p->reason ? p->reason : "not found");
    cr_expect_eq(p->device.device_type, DL_DEVICE_CPU);
    cr_expect(strlen(p->description) > 0);
    dl_context_free(ctx);
}

Test(plugins, broken_plugins_are_skipped_with_reasons) {
    unsetenv("DLRUN_PLUGIN_PATH");
    dl_context *ctx = open_dir(DLRUN_TEST_PLUGIN_DIR);
    const dl_plugin_info *ex = find(ctx, "example");
    cr_assert(ex && ex->loaded, "example plugin did not load: %s", ex && ex->reason ? ex->reason : "missing");
    const dl_plugin_info *old = find(ctx, "example10");
    cr_expect(old && old->loaded, "an ABI 1.0 plugin (shorter table) must still load: %s",
              old && old->reason ? old->reason : "missing");
    expect_skipped(ctx, "noentry", "no 'dl_plugin_init' symbol");
    expect_skipped(ctx, "badabi", "built for plugin ABI 99.3");
    expect_skipped(ctx, "initfail", "no CUDA device (test plugin)");
    expect_skipped(ctx, "incomplete", "no 'alloc' function");
    expect_skipped(ctx, "notelf", "");
    dl_context_free(ctx);
}

Test(plugins, env_path_is_searched) {
    setenv("DLRUN_PLUGIN_PATH", "/nonexistent/dir:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-example.so", 1);
    dl_context_options o = {sizeof o, 1, 0, NULL, 1};
    dl_context *ctx = NULL;
    dl_error err;
    cr_assert_eq(dl_context_create(&o, &ctx, &err), DL_OK);
    const dl_plugin_info *ex = find(ctx, "example");
    cr_expect(ex && ex->loaded);
    cr_expect_eq(dl_context_plugin_count(ctx), 1);
    dl_context_free(ctx);
    unsetenv("DLRUN_PLUGIN_PATH");
}

static const char relu_model[] = "model: tiny\n"
                                 "inputs:\n"
                                 "  - {name: x, shape: [2, 3, 5, 7]}\n"
                                 "layers:\n"
                                 "  - {name: r, op: relu}\n";

static const char conv_model[] = "model: tinyconv\n"
                                 "inputs:\n"
                                 "  - {name: x, shape: [1, 3, 5, 5]}\n"
                                 "layers:\n"
                                 "  - {name: c, op: conv2d, filters: 2, kernel: 3}\n";

static void run_relu_on(const char *backend, int retune, const char *file);
Test(plugins, session_runs_on_example_backend) {
    run_relu_on("example", 0, NULL);
    run_relu_on("example10", 0, NULL); /* a plugin of ABI 1.0: no in-place member, still runs */
}

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *text = calloc(1, 1 << 20);
    if (text) fread(text, 1, (1 << 20) - 1, fp);
    fclose(fp);
    return text;
}

/* A model's session (the relu model's: relu_open) on `backend` in a new context (as a new process would make);
 * relu_close frees what it made. */
typedef struct relu_setup {
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    char *path;
} relu_setup;
static dl_session *model_open(relu_setup *r, const char *yaml, const char *backend, int retune) {
    unsetenv("DLRUN_PLUGIN_PATH");
    r->ctx = open_dir(DLRUN_TEST_PLUGIN_DIR);
    r->path = tu_write_temp(".yaml", yaml, strlen(yaml));
    dl_error err = {{0}};
    cr_assert_eq(dl_model_load(r->path, &r->m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = backend;
    so.retune = retune;
    cr_assert_eq(dl_session_create(r->ctx, r->m, &so, &r->s, &err), DL_OK, "%s", err.msg);
    return r->s;
}
static dl_session *relu_open(relu_setup *r, const char *backend, int retune) {
    return model_open(r, relu_model, backend, retune);
}
static void relu_close(relu_setup *r) {
    dl_session_free(r->s);
    dl_model_free(r->m);
    unlink(r->path);
    free(r->path);
    dl_context_free(r->ctx);
}

/* A relu session on backend `name` in a new context (as a new process would make), run once: relu's
 * output, on that backend; with `file`, that file holds the fake plugin's store entry once the
 * session is made (the context still open: dlrun writes it then, not only when the context ends). */
static void run_relu_on(const char *backend, int retune, const char *file) {
    relu_setup r;
    dl_session *s = relu_open(&r, backend, retune);
    dl_error err = {{0}};
    float x[210], expect[210];
    tu_fill_uniform(x, 210, 7, -1, 1);
    for (int i = 0; i < 210; i++) expect[i] = x[i] > 0 ? x[i] : 0;
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    const dl_tensor *y = dl_session_output(s, 0);
    cr_assert_eq(memcmp(y->data, expect, sizeof expect), 0);
    dl_step_info info = {.kind = -1};
    for (int k = 0; k < dl_session_step_count(s) && info.kind != DL_STEP_OP; k++) dl_session_step(s, k, &info);
    cr_expect_str_eq(info.backend, backend); /* the relu (a device backend's copies around it) */
    char *text = file ? slurp(file) : NULL;
    if (file) cr_expect(text && strstr(text, "key=RELU n=210"), "%s lacks the entry with the session made", file);
    free(text);
    relu_close(&r);
}

Test(plugins, forced_backend_that_cannot_run_an_op_names_it) {
    unsetenv("DLRUN_PLUGIN_PATH");
    dl_context *ctx =
        open_dir(DLRUN_TEST_PLUGIN_DIR "/libdlrun-example.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-example10.so");
    char *path = tu_write_temp(".yaml", conv_model, strlen(conv_model));
    dl_model *m;
    dl_session *s = NULL;
    dl_error err = {{0}};
    cr_assert_eq(dl_model_load(path, &m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "example";
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "backend 'example' cannot run conv2d 'c': only relu"), "%s", err.msg);
    so.backend = "nosuch";
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "unknown backend 'nosuch' (loaded: example, example10)"), "%s", err.msg);
    so.backend = NULL; /* no backend can run conv here: the example only does relu */
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "no backend can run conv2d 'c': example: only relu; example10: only relu"), "%s",
              err.msg);
    dl_model_free(m);
    unlink(path);
    free(path);
    dl_context_free(ctx);
}

#if DLRUN_HAVE_CUDA
/* A GPU plugin built here loads on a machine with a GPU, and otherwise is listed as skipped with
 * one line saying what is missing: no CUDA device, or (cudnn) the cuDNN/cuBLAS libraries. */
static void expect_gpu_plugin(const char *file, const char *name, const char *describes) {
    unsetenv("DLRUN_PLUGIN_PATH");
    dl_context *ctx = open_dir(file);
    const dl_plugin_info *p = find(ctx, name);
    cr_assert(p, "%s must be built and listed", file);
    if (p->loaded) {
        cr_expect_eq(p->device.device_type, DL_DEVICE_CUDA);
        cr_expect(strstr(p->description, describes), "%s", p->description);
    } else {
        cr_expect(!strncmp(p->reason, "no CUDA device", 14) || strstr(p->reason, "libcudnn") ||
                      strstr(p->reason, "libcublas"),
                  "it must say what is missing: '%s'", p->reason);
        cr_expect_null(strchr(p->reason, '\n'), "one line: '%s'", p->reason);
        /* no device: the cudnn plugin's loader never maps cuDNN and cuBLASLt (200 MB) */
        FILE *maps = !strncmp(p->reason, "no CUDA device", 14) ? fopen("/proc/self/maps", "r") : NULL;
        char line[4096];
        int mapped = 0;
        while (maps && !mapped && fgets(line, sizeof line, maps))
            mapped = strstr(line, "libcudnn") || strstr(line, "libcublasLt");
        cr_expect_not(mapped, "%s maps cuDNN or cuBLASLt on a machine without a GPU: %s", name, line);
        if (maps) fclose(maps);
    }
    dl_context_free(ctx);
}
#endif

Test(plugins, cuda_plugin_builds_and_loads_or_says_why) {
#if DLRUN_HAVE_CUDA
    expect_gpu_plugin(DLRUN_PLUGIN_DIR "/libdlrun-cuda.so", "cuda", "sm_");
#else
    cr_skip_test("built without nvcc: no CUDA plugin to load");
#endif
}

/* A switch of the cuda plugin with a value it does not take: the plugin does not load, and says
 * which and why in one line, with or without a GPU (DLRUN_CUDA_WGMMA here: a typo must not test
 * the default silently). */
Test(plugins, cuda_plugin_refuses_a_bad_switch_in_one_line) {
#if DLRUN_HAVE_CUDA
    unsetenv("DLRUN_PLUGIN_PATH");
    setenv("DLRUN_CUDA_WGMMA", "yes", 1);
    dl_context *ctx = open_dir(DLRUN_PLUGIN_DIR "/libdlrun-cuda.so");
    const dl_plugin_info *p = find(ctx, "cuda");
    cr_assert(p);
    cr_expect_not(p->loaded);
    cr_expect(strstr(p->reason, "DLRUN_CUDA_WGMMA is \"yes\": it takes 0 or 1"), "'%s'", p->reason);
    cr_expect_null(strchr(p->reason, '\n'), "one line: '%s'", p->reason);
    dl_context_free(ctx);
#else
    cr_skip_test("built without nvcc: no CUDA plugin to load");
#endif
}

Test(plugins, cudnn_plugin_builds_and_loads_or_says_why) {
#if DLRUN_HAVE_CUDNN
    expect_gpu_plugin(DLRUN_PLUGIN_DIR "/libdlrun-cudnn.so", "cudnn", "cuDNN 9.");
#else
    cr_skip_test("built without nvcc or cuDNN: no cudnn plugin to load");
#endif
}

/* ---- ABI minor gating: a plugin is never shown an op newer than the ABI it was built for ---- */

static int accept_all(void *self, const dl_op *op, dl_error *why) {
    (void)self, (void)op, (void)why;
    return 1;
}

Test(plugins, older_plugins_never_see_newer_ops) {
    dl_backend be = {.abi_version = (DL_ABI_MAJOR << 16) | 1u, .supports = accept_all};
    dl_op_attrs a = {.struct_size = sizeof a, .dilation = {1, 1}};
    int64_t s4[4] = {2, 3, 4, 5}, s1[1] = {5};
    dl_tensor in[2] = {{NULL, {1, 0}, 4, DL_F32, s4, NULL, 0}, {NULL, {1, 0}, 4, DL_F32, s4, NULL, 0}};
    dl_tensor out = {NULL, {1, 0}, 4, DL_F32, s4, NULL, 0};
    dl_op op = {sizeof op, DL_OP_ADD, "a", &a, 2, in, 1, &out, 0};
    dl_error why = {{0}};
    cr_expect(dl_backend_accepts(&be, &op, &why), "same-shape add is ABI 1.0: %s", why.msg);
    in[1].ndim = 1, in[1].shape = s1; /* broadcasting: ABI 1.2 */
    cr_expect(!dl_backend_accepts(&be, &op, &why) && strstr(why.msg, "needs plugin ABI 1.2, the plugin speaks 1.1"),
              "%s", why.msg);
    op.kind = DL_OP_MATMUL;
    cr_expect(!dl_backend_accepts(&be, &op, &why), "matmul shown to an ABI 1.1 plugin");
    op.kind = DL_OP_MAXPOOL2D, op.n_inputs = 1, a.dilation[0] = 2;
    cr_expect(!dl_backend_accepts(&be, &op, &why), "dilated maxpool shown to an ABI 1.1 plugin");
    a.dilation[0] = 1;
    cr_expect(dl_backend_accepts(&be, &op, &why), "plain maxpool refused: %s", why.msg);
    op.kind = DL_OP_SIGMOID;
    cr_expect(dl_backend_accepts(&be, &op, &why), "an ABI 1.1 op refused to an ABI 1.1 plugin: %s", why.msg);
    be.abi_version = DL_ABI_MAJOR << 16; /* 1.0 */
    cr_expect(!dl_backend_accepts(&be, &op, &why) && strstr(why.msg, "needs plugin ABI 1.1"), "%s", why.msg);
    be.abi_version = DL_ABI_VERSION;
    op.kind = DL_OP_MATMUL;
    cr_expect(dl_backend_accepts(&be, &op, &why), "%s", why.msg);
}

/* ---- preferred_layout's three answers (1.9), and what a 1.8 plugin's row-major meant ---- */

static int answer; /* what layout_pref says */
static int layout_pref(void *self, const dl_op *op) {
    (void)self, (void)op;
    return answer;
}

/* The layout the host offers first to a backend of ABI minor `minor` in memory of type `dev` for
 * op `kind` (a relu, or a conv2d with its weight), whose input is (input_cl) or is not
 * channels-last already, under the session's layout ask. */
static int first_layout_of(unsigned minor, int input_cl, int kind, int ask, int dev) {
    dl_backend be = {.abi_version = (DL_ABI_MAJOR << 16) | minor,
                     .struct_size = sizeof be,
                     .device = {dev, 0},
                     .supports = accept_all,
                     .preferred_layout = layout_pref};
    dl_op_attrs a = {.struct_size = sizeof a, .dilation = {1, 1}, .stride = {1, 1}, .kernel = {1, 1}, .groups = 1};
    int64_t s4[4] = {2, 3, 4, 5}, w4[4] = {3, 3, 1, 1}, strides[12];
    dl_tensor in[2] = {{NULL, {dev, 0}, 4, DL_F32, s4, NULL, 0}, {NULL, {dev, 0}, 4, DL_F32, w4, NULL, 0}};
    dl_tensor out = {NULL, {dev, 0}, 4, DL_F32, s4, NULL, 0};
    dl_op op = {sizeof op, kind, "op", &a, kind == DL_OP_CONV2D ? 2 : 1, in, 1, &out, 0};
    unsigned char isw[2] = {0, 1};
    dl_format f = {DL_F32, -5};
    dl_error why = {{0}};
    cr_assert(dl_backend_accepts_as(&be, DL_PRECISION_F32, ask, input_cl, &op, in, &out, isw, strides, &f, &why), "%s",
              why.msg);
    cr_assert_null(in[1].strides, "a conv's weight is never channels-last");
    return f.layout;
}

static int first_layout(unsigned minor, int input_cl) {
    return first_layout_of(minor, input_cl, DL_OP_RELU, DL_ASK_PLUGIN, DL_DEVICE_CPU);
}

Test(plugins, preferred_layout_row_major_as_input_and_channels_last) {
    for (int input_cl = 0; input_cl < 2; input_cl++) {
        answer = DL_LAYOUT_CHANNELS_LAST;
        cr_expect_eq(first_layout(9, input_cl), DL_LAYOUT_CHANNELS_LAST);
        answer = DL_LAYOUT_AS_INPUT;
        cr_expect_eq(first_layout(9, input_cl), input_cl ? DL_LAYOUT_CHANNELS_LAST : DL_LAYOUT_ROW_MAJOR);
        answer = DL_LAYOUT_ROW_MAJOR; /* 1.9: row-major even after a channels-last op */
        cr_expect_eq(first_layout(9, input_cl), DL_LAYOUT_ROW_MAJOR, "input_cl %d", input_cl);
        /* a 1.8 plugin's row-major followed the input, as it always had */
        cr_expect_eq(first_layout(8, input_cl), input_cl ? DL_LAYOUT_CHANNELS_LAST : DL_LAYOUT_ROW_MAJOR);
    }
}

/* The session's layout (dl_session_options.layout) over the plugin's answer: nchw is row-major
 * whatever the plugin or the input; nhwc asks channels-last at every conv, on any device; auto on a
 * model with depthwise convs asks it at the convs of host backends only, and not where the plugin
 * answers row-major (no NHWC kernel for that conv); the other ops keep the plugin's answer under
 * every ask but nchw. */
Test(plugins, the_session_layout_over_the_plugin_answer) {
    const int cpu = DL_DEVICE_CPU, gpu = DL_DEVICE_CUDA, CL = DL_LAYOUT_CHANNELS_LAST, RM = DL_LAYOUT_ROW_MAJOR;
    for (int input_cl = 0; input_cl < 2; input_cl++) {
        answer = CL;
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_ROW_MAJOR, cpu), RM);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_RELU, DL_ASK_ROW_MAJOR, cpu), RM);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_RELU, DL_ASK_CL_CONVS, cpu), CL);
        answer = RM;
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS, cpu), CL);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS, gpu), CL);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS_HOST, cpu), RM);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS_HOST, gpu), RM);
        cr_expect_eq(first_layout_of(8, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS_HOST, cpu), CL); /* 1.8: AS_INPUT */
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_RELU, DL_ASK_CL_CONVS, cpu), RM);
        answer = DL_LAYOUT_AS_INPUT;
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS_HOST, cpu), CL);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_RELU, DL_ASK_CL_CONVS_HOST, cpu), input_cl ? CL : RM);
        cr_expect_eq(first_layout_of(9, input_cl, DL_OP_CONV2D, DL_ASK_CL_CONVS_HOST, gpu), input_cl ? CL : RM);
    }
    /* the mode resolved: auto depends on the model's depthwise convs */
    cr_expect_eq(dl_layout_ask_for(DL_LAYOUT_MODE_AUTO, 0), DL_ASK_PLUGIN);
    cr_expect_eq(dl_layout_ask_for(DL_LAYOUT_MODE_AUTO, 3), DL_ASK_CL_CONVS_HOST);
    cr_expect_eq(dl_layout_ask_for(DL_LAYOUT_MODE_NCHW, 3), DL_ASK_ROW_MAJOR);
    cr_expect_eq(dl_layout_ask_for(DL_LAYOUT_MODE_NHWC, 0), DL_ASK_CL_CONVS);
}

/* ---- a plugin checks the host: the helper every in-tree plugin's init uses ---- */

#include <dlfcn.h>

static void ignore_log(void *ctx, int level, const char *msg) { (void)ctx, (void)level, (void)msg; }

Test(plugins, plugins_refuse_a_host_of_another_major_abi) {
    void *h = dlopen(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "%s", dlerror());
    dl_plugin_init_fn init;
    void *sym = dlsym(h, DL_PLUGIN_ENTRY);
    memcpy(&init, &sym, sizeof init);
    cr_assert(init);
    dl_host host = {(2u << 16) | 0u, sizeof host, NULL, 1, 0, ignore_log};
    dl_error err = {{0}};
    cr_expect_null(init(&host, &err), "a 2.0 host was accepted");
    cr_expect(strstr(err.msg, "host speaks plugin ABI 2.0, this plugin 1."), "%s", err.msg);
    host.abi_version = DL_ABI_VERSION;
    host.struct_size = (uint32_t)offsetof(dl_host, log); /* no log member */
    cr_expect_null(init(&host, &err), "an incomplete host table was accepted");
    cr_expect(strstr(err.msg, "host table of"), "%s", err.msg);
    cr_expect_null(init(NULL, &err));
    host.struct_size = sizeof host;
    const dl_backend *be = init(&host, &err);
    cr_assert(be, "%s", err.msg);
    cr_expect(DL_BACKEND_HAS(be, memory_info) == 0 && DL_BACKEND_HAS(be, supports_in_place), "optional members");
    be->destroy(be->self);
    /* dlclose is skipped on purpose: OpenMP threads may outlive the plugin (context.c says why) */
}

/* A loaded fake plugin's counts from its exported `symbol`: dlfake_store_counts (DLFAKE_<NAME>_STORE:
 * measured, kept, wrong, answered at init) or dlfake_hostmem_counts (DLFAKE_<NAME>_HOSTMEM: host
 * blocks given, freed, uploads from one). */
static void fake_counts(const char *name, const char *symbol, int *c) {
    void *sym = tu_fake_symbol(name, symbol);
    cr_assert(sym, "%s: no %s loaded", name, symbol);
    void (*counts)(int *);
    memcpy(&counts, &sym, sizeof counts);
    counts(c);
}
static void store_counts(const char *name, int c[4]) { fake_counts(name, "dlfake_store_counts", c); }
static void hostmem_counts(const char *name, int c[3]) { fake_counts(name, "dlfake_hostmem_counts", c); }

/* ABI 1.12: a number a plugin measured at prepare (dl_host.cache_put) is in the timing cache file
 * once the session is made, and the next context (a new process) finds it (cache_get), with no
 * measuring; another plugin's same key is its own; --retune measures again; a negative or NaN is
 * never kept; nothing is answered during dl_plugin_init. */
Test(plugins, the_host_keeps_what_a_plugin_measured) {
    unsetenv("DLRUN_PLUGIN_PATH");
    const char *dir = tu_fresh_cache();
    cr_assert(dir);
    setenv("DLFAKE_FAKECPU_STORE", "1", 1);
    setenv("DLFAKE_FAKEDEV_STORE", "1", 1);
    int a[4], b[4], c[4], d[4], e[4], f0[4], f1[4];
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/dlrun/timing-cache.json", dir) > 0);
    run_relu_on("fakecpu", 0, path); /* loads both fakes: their counts exist from here */
    store_counts("fakecpu", a);
    cr_expect_eq(a[0], 1, "the first session measures its relu once (%d)", a[0]);
    cr_expect_eq(a[1] + a[2], 0);
    char *text = slurp(path);
    cr_assert(text, "no %s", path);
    cr_expect(strstr(text, "plugin=fakecpu;") && strstr(text, "key=RELU n=210\":\t210"), "%s", text);
    cr_expect_null(strstr(text, "negative"), "a negative value was kept");
    cr_expect_null(strstr(text, "nan\""), "a NaN was kept");
    free(text);
    run_relu_on("fakecpu", 0, NULL);
    store_counts("fakecpu", b);
    cr_expect_eq(b[0], a[0], "a new context measured again instead of reading the file");
    cr_expect_eq(b[1], a[1] + 1, "the kept value was not found");
    cr_expect_eq(b[2], 0, "a wrong value, or a negative or NaN, was read back");
    store_counts("fakedev", f0);
    run_relu_on("fakedev", 0, NULL);
    store_counts("fakedev", f1);
    cr_expect_eq(f1[0], f0[0] + 1, "fakedev was answered from fakecpu's entry");
    run_relu_on("fakecpu", 1, NULL);
    store_counts("fakecpu", c);
    cr_expect_eq(c[0], b[0] + 1, "--retune did not measure again");
    run_relu_on("fakecpu", 0, NULL);
    store_counts("fakecpu", d);
    cr_expect_eq(d[0], c[0], "after --retune the value is kept again");
    store_counts("fakedev", e);
    cr_expect_eq(d[3] + e[3], 0, "the store answered during dl_plugin_init");
    unsetenv("DLFAKE_FAKECPU_STORE");
    unsetenv("DLFAKE_FAKEDEV_STORE");
    free(path);
}

/* ABI 1.13: dl_session_input_buffer's memory comes from the backend whose copy uploads the input
 * (host_alloc: a CUDA plugin's page-locked memory), the upload reads it where it is, and the
 * session gives it back when freed; where no backend uploads the input, it is plain host memory
 * and works the same. */
Test(plugins, input_buffers_come_from_the_backend_that_uploads_them) {
    unsetenv("DLRUN_PLUGIN_PATH");
    setenv("DLFAKE_FAKEDEV_HOSTMEM", "1", 1);
    for (int dev = 1; dev >= 0; dev--) {
        const char *backend = dev ? "fakedev" : "fakecpu";
        relu_setup r;
        dl_session *s = relu_open(&r, backend, 0);
        dl_error err = {{0}};
        int c0[3], c1[3], c2[3];
        hostmem_counts("fakedev", c0);
        float *buf = dl_session_input_buffer(s, 0);
        cr_assert(buf);
        cr_expect_eq(((uintptr_t)buf) % 64, 0, "aligned");
        cr_expect_eq(dl_session_input_buffer(s, 0), buf, "one buffer per input");
        cr_expect_null(dl_session_input_buffer(s, 1));
        cr_expect_null(dl_session_input_buffer(s, -1));
        hostmem_counts("fakedev", c1);
        cr_expect_eq(c1[0], c0[0] + dev, "%s: blocks given %d -> %d", backend, c0[0], c1[0]);
        float expect[210];
        tu_fill_uniform(buf, 210, 7, -1, 1);
        for (int i = 0; i < 210; i++) expect[i] = buf[i] > 0 ? buf[i] : 0;
        dl_tensor in = *dl_session_input(s, 0);
        in.data = buf;
        for (int run = 0; run < 2; run++) {
            cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
            cr_expect_eq(memcmp(dl_session_output(s, 0)->data, expect, sizeof expect), 0);
        }
        hostmem_counts("fakedev", c2);
        cr_expect_eq(c2[2], c1[2] + 2 * dev, "%s: uploads read the block %d times", backend, c2[2] - c1[2]);
        relu_close(&r);
        hostmem_counts("fakedev", c2);
        cr_expect_eq(c2[1], c0[1] + dev, "the block given back with the session");
    }
    unsetenv("DLFAKE_FAKEDEV_HOSTMEM");
}

/* A run stopped by an error returns only once every backend has done what it queued before, so
 * nothing queued still reads the caller's inputs (a CUDA plugin's upload from a page-locked input
 * buffer) or writes the session's memory: fakedev queues the relu (ASYNC), then its add fails. */
Test(plugins, a_run_stopped_by_an_error_waits_for_the_work_it_queued) {
    setenv("DLFAKE_FAKEDEV_ASYNC", "1", 1);
    setenv("DLFAKE_FAKEDEV_FAIL_ADD", "1", 1);
    static const char yaml[] = "model: fails\ninputs:\n  - {name: x, shape: [1, 257]}\nlayers:\n"
                               "  - {name: a, op: relu}\n"
                               "  - {name: b, op: add, inputs: [a, x]}\n";
    relu_setup r;
    dl_session *s = model_open(&r, yaml, "fakedev", 0);
    float x[257];
    tu_fill_uniform(x, 257, 5, -1, 1);
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    dl_error err = {{0}};
    cr_expect_neq(dl_session_run(s, &in, 1, &err), DL_OK);
    cr_expect(strstr(err.msg, "fake add failure") != NULL, "%s", err.msg);
    int (*pending)(void);
    void *sym = tu_fake_symbol("fakedev", "dlfake_pending");
    cr_assert(sym);
    memcpy(&pending, &sym, sizeof pending);
    cr_expect_eq(pending(), 0, "%d ops still queued after the failed run returned", pending());
    relu_close(&r);
    unsetenv("DLFAKE_FAKEDEV_ASYNC");
    unsetenv("DLFAKE_FAKEDEV_FAIL_ADD");
}
