/* test_session_storage.c — storage dtypes and layouts chosen by the session (ABI 1.3): with a
 * backend that takes only bf16 NHWC (tests/plugins/storage_backend.c, computing through the cpu
 * plugin) the session inserts exactly the casts and transposes expected, converts each tensor at
 * most once per place, converts weights once to half their bytes, agrees with the f32 run, and
 * keeps older plugins and f32 runs unchanged; errors stay one clear line. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrun/dlrun.h"
#include "session.h"
#include "test_util.h"

#define BF16NHWC DLRUN_TEST_PLUGIN_DIR "/libdlrun-bf16nhwc.so"
#define CPU_AND_BF16 DLRUN_PLUGIN_DIR ":" BF16NHWC

static void fresh_env(void) {
    unsetenv("DLFAKE_BF16NHWC_CONVERT");
    unsetenv("DLFAKE_BF16NHWC_MEMORY");
    unsetenv("DLFAKE_BF16NHWC_PREPARE_FAILS");
    unsetenv("DLRUN_PLUGIN_PATH");
    cr_assert(tu_fresh_cache());
}

static dl_session *open_model(const char *path, const char *backend, int precision, int64_t batch, dl_context **ctx,
                              dl_model **m) {
    dl_context_options co = {sizeof co, 2, 0, CPU_AND_BF16, 1};
    dl_error err = {{0}};
    cr_assert_eq(dl_context_create(&co, ctx, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_load(path, m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = backend;
    so.precision = precision;
    so.batch = batch;
    so.micro_batch = DL_MAX_BATCH; /* the batch at once: its bytes are counted */
    /* the cpu plugin's plans are counted row-major (auto measures: nhwc may win); bf16nhwc takes
     * NHWC only, its own answer */
    if (backend && !strcmp(backend, "cpu")) so.layout = DL_LAYOUT_MODE_NCHW;
    dl_session *s = NULL;
    cr_assert_eq(dl_session_create(*ctx, *m, &so, &s, &err), DL_OK, "%s: %s", path, err.msg);
    return s;
}

static float *run_seeded(dl_session *s, uint64_t seed) {
    dl_tensor in = *dl_session_input(s, 0);
    size_t n = (size_t)dl_tensor_numel(&in);
    float *x = malloc(n * sizeof *x);
    tu_fill_uniform(x, n, seed, -1, 1);
    in.data = x;
    dl_error err = {{0}};
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    free(x);
    const dl_tensor *y = dl_session_output(s, 0);
    size_t ny = (size_t)dl_tensor_numel(y);
    float *out = malloc(ny * sizeof *out);
    memcpy(out, y->data, ny * sizeof *out);
    return out;
}

static int64_t argmax(const float *y, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (y[i] > y[b]) b = i;
    return b;
}

/* "copy+cast+transpose conv1, copy+cast fc": the COPY steps in run order */
static void copy_steps(const dl_session *s, char *buf, size_t len) {
    buf[0] = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        if (st.kind != DL_STEP_COPY) continue;
        size_t u = strlen(buf);
        snprintf(buf + u, len - u, "%s%s %s", u ? ", " : "", st.op, st.layer);
    }
}

/* The whole of ResNet-18 on the bf16 NHWC backend: the input is converted once on the way in
 * (cast to bf16 and transposed to NHWC in the copy), the logits once on the way out; nothing
 * in between, since every op there takes bf16 NHWC (flatten's output and fc are 2-D, row-major). */
static void resnet_on_bf16(const char *convert) {
    fresh_env();
    if (convert) setenv("DLFAKE_BF16NHWC_CONVERT", convert, 1);
    dl_context *ctx, *rctx;
    dl_model *m, *rm;
    dl_session *s = open_model(DLRUN_SOURCE_DIR "/models/resnet18.yaml", "bf16nhwc", DL_PRECISION_BF16, 1, &ctx, &m);
    dl_session *ref = open_model(DLRUN_SOURCE_DIR "/models/resnet18.yaml", "cpu", DL_PRECISION_F32, 1, &rctx, &rm);
    char steps[512];
    copy_steps(s, steps, sizeof steps);
    cr_expect_str_eq(steps, "copy+cast+transpose input, copy+cast fc");
    cr_expect_eq(s->casts, 2);
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        int four_d = strcmp(pi.op, "linear") != 0; /* flatten reads NHWC, writes 2-D row-major */
        cr_expect_str_eq(pi.storage, four_d ? "bf16 nhwc" : "bf16", "%s (%s)", pi.layer, pi.op);
    }
    /* the transfers went through the backend's convert(), or through host memory when it has none */
    int via_host = 0, backend = 0;
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_COPY) {
            via_host += s->steps[k].xfer == DL_XFER_VIA_HOST;
            backend += s->steps[k].xfer == DL_XFER_BACKEND;
        }
    cr_expect_eq(convert ? via_host : backend, 2);
    float *y = run_seeded(s, 5), *yr = run_seeded(ref, 5);
    double e = tu_nmse(yr, y, 1000);
    cr_log_info("resnet18 bf16 nhwc vs f32: nmse %.3g, top-1 %lld vs %lld\n", e, (long long)argmax(y, 1000),
                (long long)argmax(yr, 1000));
    cr_expect_lt(e, 1e-4, "bf16 storage vs f32: nmse %g (docs/storage.md bound 1e-4)", e);
    cr_expect_eq(argmax(y, 1000), argmax(yr, 1000), "top-1 changed");
    free(y), free(yr);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
    dl_session_free(ref), dl_model_free(rm), dl_context_free(rctx);
}

Test(session_storage, resnet18_bf16_nhwc_backend_converting_copies) { resnet_on_bf16(NULL); }
Test(session_storage, resnet18_bf16_nhwc_backend_host_converts) { resnet_on_bf16("0"); }

/* Every slot of a device domain's arena starts on 256 bytes (cuBLASLt's and cuDNN's assumption),
 * host slots on 64; the plan has slots of odd sizes (bf16 tensors of odd element counts). */
Test(session_storage, device_slots_256_aligned) {
    fresh_env();
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(DLRUN_SOURCE_DIR "/models/resnet18.yaml", "bf16nhwc", DL_PRECISION_BF16, 1, &ctx, &m);
    int device = 0, odd = 0;
    for (int i = 0; i < s->n_slots; i++) {
        const dl_slot *sl = &s->slots[i];
        int dom = s->places[sl->place].dom;
        cr_expect_eq(sl->offset % (dom ? 256 : 64), 0, "slot %d (domain %d) at offset %zu", i, dom, sl->offset);
        device += dom != 0;
        odd += dom != 0 && sl->size % 256 != 0;
    }
    cr_expect_gt(device, 10, "the model's activations live in the backend's domain");
    cr_expect_gt(odd, 0, "some device slot has a size that is not a multiple of 256 (so alignment is planned)");
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
}

/* A batch too big for a device domain is refused, in one line naming the backend, before any
 * kernel is prepared (preparing allocates on the real shapes: cuDNN's search, tile timing). */
Test(session_storage, too_big_for_the_device_refused_before_prepare) {
    fresh_env();
    setenv("DLFAKE_BF16NHWC_MEMORY", "67108864", 1); /* 64 MiB */
    setenv("DLFAKE_BF16NHWC_PREPARE_FAILS", "1", 1);
    dl_context_options co = {sizeof co, 2, 0, CPU_AND_BF16, 1};
    dl_error err = {{0}};
    dl_context *ctx;
    dl_model *m;
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_load(DLRUN_SOURCE_DIR "/models/resnet18.yaml", &m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "bf16nhwc";
    so.precision = DL_PRECISION_BF16;
    so.batch = 64;
    dl_session *s = NULL;
    cr_expect_eq(dl_session_create(ctx, m, &so, &s, &err), DL_E_NOMEM);
    cr_expect(strstr(err.msg, "needs") && strstr(err.msg, "bf16nhwc memory") && !strchr(err.msg, '\n'), "%s", err.msg);
    cr_expect_null(strstr(err.msg, "prepare"), "refused only after preparing: %s", err.msg);
    so.batch = 1; /* fits: now the failing prepare is reached, which shows the check came first */
    cr_expect_neq(dl_session_create(ctx, m, &so, &s, &err), DL_OK);
    cr_expect(strstr(err.msg, "prepare was called"), "%s", err.msg);
    dl_model_free(m), dl_context_free(ctx);
}

/* Weights are converted once into the backend's domain at half their f32 bytes, and the
 * activations it holds are half their f32 bytes too. */
static void half_the_bytes(const char *model, int64_t batch) {
    fresh_env();
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(model, "bf16nhwc", DL_PRECISION_BF16, batch, &ctx, &m);
    double f32_weights = 0, act_bf16 = 0, act_f32 = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        const unsigned char *constant;
        const dl_op *op = dl_session_step_op(s, k, &constant);
        for (int j = 0; op && j < op->n_inputs; j++)
            if (constant[j]) f32_weights += 4.0 * (double)dl_tensor_numel(&op->inputs[j]);
    }
    int d = -1;
    for (int i = 0; i < dl_session_memory_count(s); i++) {
        dl_memory_info mi;
        dl_session_memory(s, i, &mi);
        if (!strcmp(mi.domain, "bf16nhwc")) {
            d = i;
            cr_expect_eq((double)mi.weight_bytes, f32_weights / 2, "%s: weights %llu bytes, f32 %.0f", model,
                         (unsigned long long)mi.weight_bytes, f32_weights);
            cr_log_info("%s: bf16nhwc arena %llu bytes, weights %llu bytes (f32 %.0f)\n", model,
                        (unsigned long long)mi.peak_bytes, (unsigned long long)mi.weight_bytes, f32_weights);
        }
    }
    cr_assert_geq(d, 1, "no bf16nhwc domain");
    for (int i = 0; i < s->n_slots; i++) {
        const dl_slot *sl = &s->slots[i];
        if (sl->value < 0 || s->places[sl->place].dom != d) continue;
        act_bf16 += (double)sl->size;
        act_f32 += 4.0 * (double)dl_shape_numel(&s->shape[sl->value]);
    }
    cr_expect_eq(act_bf16, act_f32 / 2, "%s: activations %.0f bytes, f32 %.0f", model, act_bf16, act_f32);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
}

Test(session_storage, vgg16_memory_halves) { half_the_bytes(DLRUN_SOURCE_DIR "/models/vgg.yaml", 1); }
Test(session_storage, resnet18_memory_halves) { half_the_bytes(DLRUN_SOURCE_DIR "/models/resnet18.yaml", 2); }

/* Pinned layers alternate between the bf16 NHWC backend and the cpu (bf16 row-major there): each
 * value crossing is converted once per consumer place, however many consumers it has. */
static const char pinned[] = "model: pinned\ninputs:\n  - {name: x, shape: [1, 3, 9, 7]}\nlayers:\n"
                             "  - {name: c1, op: conv2d, filters: 5, kernel: 3, padding: 1, backend: bf16nhwc}\n"
                             "  - {name: r1, op: relu, backend: cpu}\n"
                             "  - {name: s1, op: sigmoid, inputs: [c1], backend: cpu}\n"
                             "  - {name: a1, op: add, inputs: [r1, s1], backend: cpu}\n"
                             "  - {name: c2, op: conv2d, filters: 4, kernel: 3, backend: bf16nhwc}\n";

Test(session_storage, pinned_layers_convert_once_per_place) {
    fresh_env();
    dl_session_options so;
    dl_session_options_init(&so);
    so.precision = DL_PRECISION_BF16;
    so.no_fuse = 1;
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    cr_assert_eq(tu_open_session(CPU_AND_BF16, pinned, &so, &ctx, &m, &s, &err), DL_OK, "%s", err.msg);
    char steps[512];
    copy_steps(s, steps, sizeof steps);
    cr_expect_str_eq(steps, "copy+cast+transpose x, copy+transpose c1, copy+transpose a1, copy+cast+transpose c2");
    /* and the numbers: the same model all in f32 on the cpu */
    so.precision = DL_PRECISION_F32;
    dl_context *rctx;
    dl_model *rm;
    dl_session *ref;
    cr_assert_eq(tu_open_session(DLRUN_PLUGIN_DIR, pinned, &so, &rctx, &rm, &ref, &err), DL_OK, "%s", err.msg);
    float *y = run_seeded(s, 3), *yr = run_seeded(ref, 3);
    int64_t n = dl_tensor_numel(dl_session_output(s, 0));
    double e = tu_nmse(yr, y, (size_t)n);
    cr_expect_lt(e, 1e-4, "nmse %g", e);
    free(y), free(yr);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
    dl_session_free(ref), dl_model_free(rm), dl_context_free(rctx);
}

/* CPU alone at bf16 storage: every op stores bf16; VGG-16 and ResNet-18 agree with f32 within the
 * documented bound, top-1 unchanged on the seeded input. */
static void cpu_bf16(const char *model) {
    fresh_env();
    dl_context *ctx, *rctx;
    dl_model *m, *rm;
    dl_session *s = open_model(model, "cpu", DL_PRECISION_BF16, 1, &ctx, &m);
    dl_session *ref = open_model(model, "cpu", DL_PRECISION_F32, 1, &rctx, &rm);
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        cr_expect_str_eq(pi.storage, "bf16", "%s", pi.layer);
    }
    char steps[256];
    copy_steps(s, steps, sizeof steps);
    cr_expect(strstr(steps, "cast") == steps && strstr(steps, ", cast "), "one cast in, one out: %s", steps);
    int64_t n = dl_tensor_numel(dl_session_output(s, 0));
    float *y = run_seeded(s, 9), *yr = run_seeded(ref, 9);
    double e = tu_nmse(yr, y, (size_t)n);
    cr_log_info("%s cpu bf16 vs f32: nmse %.3g\n", model, e);
    cr_expect_lt(e, 1e-4, "%s: nmse %g (docs/storage.md bound 1e-4)", model, e);
    cr_expect_eq(argmax(y, n), argmax(yr, n), "%s: top-1 changed", model);
    free(y), free(yr);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
    dl_session_free(ref), dl_model_free(rm), dl_context_free(rctx);
}

Test(session_storage, cpu_bf16_resnet18) { cpu_bf16(DLRUN_SOURCE_DIR "/models/resnet18.yaml"); }
Test(session_storage, cpu_bf16_vgg16) { cpu_bf16(DLRUN_SOURCE_DIR "/models/vgg.yaml"); }

/* f32 runs are as before: no conversion, f32 everywhere, even with a 1.3 backend present. */
Test(session_storage, f32_unchanged) {
    fresh_env();
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(DLRUN_SOURCE_DIR "/models/resnet18.yaml", "cpu", DL_PRECISION_F32, 1, &ctx, &m);
    cr_expect_eq(s->casts, 0);
    cr_expect_eq(s->n_places, 1);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
}

/* A backend that takes only bf16 asked for f32: one line naming the op and the reason. */
Test(session_storage, f32_on_a_bf16_only_backend_is_refused_clearly) {
    fresh_env();
    dl_context_options co = {sizeof co, 2, 0, CPU_AND_BF16, 1};
    dl_context *ctx;
    dl_model *m;
    dl_error err = {{0}};
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK);
    cr_assert_eq(dl_model_load(DLRUN_SOURCE_DIR "/models/resnet18.yaml", &m, &err), DL_OK);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "bf16nhwc";
    dl_session *s = NULL;
    cr_expect_eq(dl_session_create(ctx, m, &so, &s, &err), DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "backend 'bf16nhwc' cannot run conv2d 'conv1': bf16 tensors only"), "%s", err.msg);
    cr_expect(!strchr(err.msg, '\n'));
    dl_model_free(m), dl_context_free(ctx);
}

/* A plugin of ABI 1.2 that would accept any dtype is still shown only f32 row-major tensors at
 * --precision bf16: the host never shows an older plugin what its ABI cannot describe. */
Test(session_storage, abi_1_2_plugin_sees_only_f32) {
    fresh_env();
    static const char chain[] = "model: chain\ninputs:\n  - {name: x, shape: [1, 2, 3, 5]}\nlayers:\n"
                                "  - {name: r1, op: relu}\n  - {name: d1, op: dropout}\n"
                                "  - {name: a1, op: add, inputs: [r1, d1]}\n";
    dl_session_options so;
    dl_session_options_init(&so);
    so.precision = DL_PRECISION_BF16;
    so.backend = "fakeold";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    cr_assert_eq(tu_open_session(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakeold.so", chain, &so, &ctx, &m, &s, &err), DL_OK,
                 "%s", err.msg);
    int ops = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        const dl_op *op = dl_session_step_op(s, k, NULL);
        if (!op) continue;
        ops++;
        for (int j = 0; j < op->n_inputs; j++)
            cr_expect(dl_dtype_is_f32(op->inputs[j].dtype) && !op->inputs[j].strides, "input %d of step %d", j, k);
        cr_expect(dl_dtype_is_f32(op->outputs[0].dtype) && !op->outputs[0].strides);
    }
    cr_expect_eq(ops, 3);
    cr_expect_eq(s->casts, 0);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
}

/* The CLI with the bf16 NHWC backend loaded: at f32, --no-fallback names the op and the backend's
 * reason in one line; at bf16 the same model runs there with its two conversions shown. */
Test(session_storage, cli_no_fallback_and_bf16_run) {
    fresh_env();
    char *out = NULL;
    int rc = tu_run(
        "DLRUN_PLUGIN_PATH=" BF16NHWC " " DLRUN_CLI " " DLRUN_SOURCE_DIR "/models/lenet.yaml --no-fallback 2>&1", &out);
    cr_expect(rc == 1 || rc == 2, "exit %d: %s", rc, out);
    cr_expect(out && strstr(out, "bf16 tensors only"), "%s", out);
    cr_expect(out && strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
    free(out);
    rc = tu_run("DLRUN_PLUGIN_PATH=" BF16NHWC " " DLRUN_CLI " " DLRUN_SOURCE_DIR
                "/models/lenet.yaml --precision bf16 --backend bf16nhwc --placement 2>&1",
                &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(out && strstr(out, "2 conversions of storage format"), "%s", out);
    cr_expect(out && strstr(out, "copy+cast+transpose  host f32->bf16nhwc bf16 nhwc"), "%s", out);
    free(out);
}

/* Placement counts casts like copies. Two host backends with the same op time: fakecpu stores
 * f32, fakebf bf16, so its relu on 4M elements moves half the bytes and is measured faster (about
 * 1.5 ms of 2.6 here). Between two relus pinned to fakecpu, running the middle one on fakebf would
 * cast 4M elements in and out (several ms, timed in host memory), so it stays on fakecpu; between
 * two relus pinned to fakebf there is nothing to cast, and it goes to the faster fakebf (there
 * fakecpu's relu waits 30 ms more: the bandwidth alone, 1.1 ms, once lost to noise under ASan in
 * ctest -j2, and so did 1 ms more, since ASan makes fakebf's loop over 16-bit elements the slower
 * one: 24.5 ms against fakecpu's 8.4 at -O1, with casts of several ms on the other side). */
static const char *middle_relu(const char *ends) {
    static char yaml[512];
    snprintf(yaml, sizeof yaml,
             "model: sandwich\ninputs:\n  - {name: x, shape: [1, 4194304]}\nlayers:\n"
             "  - {name: a, op: relu, backend: %s}\n  - {name: b, op: relu}\n  - {name: c, op: relu, backend: %s}\n",
             ends, ends);
    return yaml;
}

Test(session_storage, placement_counts_casts) {
    fresh_env();
    const char *plugins = DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakebf.so";
    dl_session_options so;
    dl_session_options_init(&so);
    so.precision = DL_PRECISION_BF16;
    const char *ends[] = {"fakecpu", "fakebf"};
    for (int e = 0; e < 2; e++) {
        dl_context *ctx;
        dl_model *m;
        dl_session *s;
        dl_error err = {{0}};
        if (e) setenv("DLFAKE_FAKECPU_RELU_US", "30100", 1); /* its default 100 and 30 ms more */
        cr_assert_eq(tu_open_session(plugins, middle_relu(ends[e]), &so, &ctx, &m, &s, &err), DL_OK, "%s", err.msg);
        dl_placement_info pi;
        dl_session_placement(s, 1, &pi);
        cr_expect_str_eq(pi.chosen, ends[e], "middle relu between two %s relus", ends[e]);
        cr_expect_str_eq(pi.storage, e ? "bf16" : "f32");
        dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
    }
    unsetenv("DLFAKE_FAKECPU_RELU_US");
}

/* A run's phases (dl_session_last_run_times): with the model on a backend of its own domain, the
 * upload before the first op and the download after the last are timed apart from the ops; the
 * three add up to no more than the run's wall time, and each is positive. */
Test(session_storage, run_phases_add_up) {
    fresh_env();
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(DLRUN_SOURCE_DIR "/models/lenet.yaml", "bf16nhwc", DL_PRECISION_BF16, 3, &ctx, &m);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    float *y = run_seeded(s, 2);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double wall = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
    dl_run_times t;
    dl_session_last_run_times(s, &t);
    cr_expect(t.inputs_ms > 0 && t.compute_ms > 0 && t.outputs_ms > 0, "inputs %g, compute %g, outputs %g ms",
              t.inputs_ms, t.compute_ms, t.outputs_ms);
    cr_expect_leq(t.inputs_ms + t.compute_ms + t.outputs_ms, wall, "phases %g + %g + %g ms > run %g ms", t.inputs_ms,
                  t.compute_ms, t.outputs_ms, wall);
    free(y);
    dl_session_free(s), dl_model_free(m), dl_context_free(ctx);
}
