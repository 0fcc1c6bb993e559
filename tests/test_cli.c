/* test_cli.c — the dlrun command end to end: lenet and vgg run out of the box, options work,
 * outputs are deterministic, bad input gives a one-line error and exit status 2. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

#define MODEL(name) DLRUN_SOURCE_DIR "/models/" name

Test(cli, help_and_version) {
    char *out;
    cr_expect_eq(tu_dlrun("--help", &out), 0);
    cr_expect(strstr(out, "usage: dlrun MODEL.yaml"), "%s", out);
    cr_expect(strstr(out, "--list-backends"));
    free(out);
    cr_expect_eq(tu_dlrun("--version", &out), 0);
    cr_expect(strstr(out, "dlrun 0."), "%s", out);
    free(out);
}

Test(cli, usage_errors_exit_2) {
    char *out;
    cr_expect_eq(tu_dlrun("", &out), 2);
    cr_expect(strstr(out, "no model given"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun(MODEL("lenet.yaml") " --frobnicate", &out), 2);
    cr_expect(strstr(out, "unknown option '--frobnicate'"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun(MODEL("lenet.yaml") " --batch zero", &out), 2);
    cr_expect(strstr(out, "--batch wants a positive integer"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun(MODEL("lenet.yaml") " --backend nosuch", &out), 2);
    cr_expect(strstr(out, "unknown backend 'nosuch' (loaded: cpu"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun("/nonexistent/model.yaml", &out), 2);
    cr_expect(strstr(out, "/nonexistent/model.yaml"), "%s", out);
    free(out);
}

Test(cli, list_backends_shows_cpu) {
    char *out;
    cr_assert_eq(tu_dlrun("--list-backends", &out), 0);
    cr_expect(strstr(out, "cpu      loaded"), "%s", out);
    free(out);
}

Test(cli, list_backends_shows_skipped_plugins) {
    char *out, *cmd;
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s %s --list-backends", DLRUN_TEST_PLUGIN_DIR, DLRUN_CLI) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "badabi   skipped  built for plugin ABI 99.3"), "%s", out);
    cr_expect(strstr(out, "initfail skipped  no CUDA device"), "%s", out);
    cr_expect(strstr(out, "example  loaded"), "%s", out);
    cr_expect(strstr(out, "cpu      loaded"), "%s", out);
    free(out);
    free(cmd);
}

Test(cli, compare_times_two_builds_in_turn) {
    /* the same plugins on both sides: every op pairs up, the outputs are the same bits */
    char *out;
    cr_assert_eq(tu_dlrun("compare " MODEL("lenet.yaml") " --base " DLRUN_PLUGIN_DIR
                                                         " --backend cpu --iterations 3 --warmup 1 --threads 1 --all",
                          &out),
                 0, "%s", out);
    cr_expect(strstr(out, "base: " DLRUN_PLUGIN_DIR "/libdlrun-cpu.so"), "%s", out);
    cr_expect(strstr(out, "3 runs each, in turn; outputs: max |new - base| 0, relative L2 0"), "%s", out);
    cr_expect(strstr(out, "base/new"), "%s", out);
    cr_expect(strstr(out, "conv2d"), "%s", out);
    cr_expect(strstr(out, "whole run"), "%s", out);
    free(out);
    /* not pinned: each side lists every plugin it loaded, the ones DIR did not replace included */
    cr_assert_eq(
        tu_dlrun("compare " MODEL("lenet.yaml") " --base " DLRUN_PLUGIN_DIR " --iterations 2 --warmup 0", &out), 0,
        "%s", out);
    cr_expect(strstr(out, "new:  " DLRUN_PLUGIN_DIR "/libdlrun-cpu.so"), "%s", out);
    if (DLRUN_HAVE_ONEDNN) cr_expect(strstr(out, DLRUN_PLUGIN_DIR "/libdlrun-onednn.so"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun("compare " MODEL("lenet.yaml"), &out), 2);
    cr_expect(strstr(out, "--base DIR is required"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun("compare --base " DLRUN_PLUGIN_DIR, &out), 2);
    cr_expect(strstr(out, "no model given"), "%s", out);
    free(out);
    cr_expect_eq(tu_dlrun("compare /nonexistent.yaml --base " DLRUN_PLUGIN_DIR, &out), 2);
    cr_expect(strstr(out, "/nonexistent.yaml"), "%s", out);
    free(out);
}

/* compare's report: the two sides' outputs within 1e-5 of each other */
static void expect_outputs_agree(const char *out) {
    double max_abs = 1;
    const char *at = strstr(out, "max |new - base| ");
    cr_assert(at, "%s", out);
    cr_expect(sscanf(at, "max |new - base| %lf", &max_abs) == 1 && max_abs < 1e-5, "%s", out);
}

/* One build, two layouts (--base-layout, no --base): LeNet in NCHW against NHWC on the cpu
 * plugin. The steps differ (the NHWC side transposes at its edges), so only whole runs pair up;
 * the outputs agree to rounding. */
Test(cli, compare_times_two_layouts_of_one_build) {
    char *out;
    cr_assert_eq(
        tu_dlrun("compare " MODEL("lenet.yaml") " --base-layout nchw --layout nhwc --backend cpu --iterations 2 "
                                                "--warmup 0 --threads 1",
                 &out),
        0, "%s", out);
    cr_expect(strstr(out, "layout: base nchw; new nhwc at every conv"), "%s", out);
    cr_expect(strstr(out, "(the two sessions run different steps: whole runs only)"), "%s", out);
    expect_outputs_agree(out);
    free(out);
    cr_expect_eq(tu_dlrun("compare " MODEL("lenet.yaml") " --layout nhwc", &out), 2);
    cr_expect(strstr(out, "or --base-layout other than --layout"), "%s", out);
    free(out);
}

/* --micro-batch: the batch in parts of N images (a line saying so, and --json); bad values are
 * usage errors; compare times one build at once against in parts, whose steps pair up (the same
 * steps at the part's shapes), with the same outputs. The layout is asked: under auto each
 * session chooses its own, and on LeNet's 0.1-0.2 ms runs noise can make them differ (a fresh
 * clone's CI run once got NHWC at once and NCHW in parts: whole runs only). */
Test(cli, micro_batch_runs_the_batch_in_parts) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --batch 4 --micro-batch 2 --json", &out), 0, "%s", out);
    cr_expect(strstr(out, "\"batching\":\t\"4 in 2 parts of 2 (asked)\"") && strstr(out, "\"micro_batch\":\t2"), "%s",
              out);
    cr_expect(strstr(out, "\"input_shape\":\t[4, 1, 28, 28]"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --batch 4 --micro-batch 1 --profile", &out), 0, "%s",
                 out);
    cr_expect(strstr(out, "\nbatch: 4 in 4 parts of 1 (asked)\n"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --batch 4 --micro-batch 3", &out), 2, "%s", out);
    cr_expect(strstr(out, "micro-batch 3 must divide the batch, 4"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --micro-batch half", &out), 2, "%s", out);
    cr_expect(strstr(out, "--micro-batch wants auto or a positive integer, not 'half'"), "%s", out);
    free(out);
    /* --parts-at-once: parts run side by side, each on its share of the threads */
    cr_assert_eq(
        tu_dlrun(MODEL("lenet.yaml") " --backend cpu --batch 4 --micro-batch 1 --parts-at-once 2 --threads 2", &out), 0,
        "%s", out);
    cr_expect(strstr(out, "\nbatch: 4 in 4 parts of 1, 2 at a time on 1 thread each (asked)\n"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --batch 4 --micro-batch 1 --parts-at-once 3 --threads 2", &out), 2,
                 "%s", out);
    cr_expect(strstr(out, "parts at once (3) must be 0 (auto), 1, or at most the threads (2)"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --parts-at-once 0", &out), 2, "%s", out);
    cr_expect(strstr(out, "--parts-at-once wants auto or a positive integer, not '0'"), "%s", out);
    free(out);
    cr_assert_eq(
        tu_dlrun("compare " MODEL("lenet.yaml") " --backend cpu --batch 4 --base-micro-batch 4 --micro-batch 2 "
                                                "--layout nchw --iterations 2 --warmup 0 --threads 1 --all",
                 &out),
        0, "%s", out);
    cr_expect(strstr(out, "batch: base 4 at once; new 4 in 2 parts of 2 (asked)"), "%s", out);
    cr_expect_null(strstr(out, "whole runs only"), "%s", out);
    expect_outputs_agree(out);
    free(out);
}

/* --layout: what it became, on a line of its own and in --json; auto says which plan it measured
 * cheaper, and the other's cost (which one wins is the test_placement's, on a backend whose speed
 * it sets). */
Test(cli, layout_is_reported) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --layout nhwc --placement", &out), 0, "%s", out);
    cr_expect(strstr(out, "\nlayout: nhwc at every conv\n"), "%s", out);
    cr_expect(strstr(out, "f32 nhwc"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --layout nchw --placement", &out), 0, "%s", out);
    cr_expect(strstr(out, "\nlayout: nchw\n"), "%s", out);
    cr_expect_null(strstr(out, "nhwc"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --placement", &out), 0, "%s", out);
    cr_expect(strstr(out, "\nlayout: each backend's own (auto: ") ||
                  strstr(out, "\nlayout: nhwc at every conv on the host (auto: "),
              "%s", out);
    /* op by op, or (where a run is slow enough, as under load) whole runs of both plans */
    cr_expect(strstr(out, " ms measured, against ") || strstr(out, " ms a run, against "), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu --json", &out), 0, "%s", out);
    cr_expect(strstr(out, "\"layout\":\t\"") &&
                  (strstr(out, " ms measured, against ") || strstr(out, " ms a run, against ")),
              "%s", out);
    free(out);
    /* no conv: nothing to measure */
    cr_assert_eq(tu_dlrun(MODEL("mlp.yaml") " --backend cpu", &out), 0, "%s", out);
    cr_expect(strstr(out, "\nlayout: each backend's own (auto: no conv on the host)\n"), "%s", out);
    free(out);
}

/* A depthwise model's convs channels-last on the cpu plugin at f32 (--layout nhwc); at bf16,
 * where the plugin answers row-major (no 16-bit NHWC kernel), auto keeps them row-major in both
 * plans, as --layout nchw does; --layout nhwc overrides that answer. */
Test(cli, layouts_of_a_depthwise_model_respect_row_major) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [1, 8, 15, 13]}\nlayers:\n"
                        "  - {name: pw, op: conv2d, filters: 16, kernel: 1}\n"
                        "  - {name: dw, op: conv2d, filters: 16, kernel: 3, padding: 1, groups: 16}\n"
                        "  - {name: g, op: global_avgpool}\n";
    char *model = tu_write_temp(".yaml", text, strlen(text));
    static const struct {
        const char *opts, *want, *nowant;
    } runs[] = {
        {" --layout nhwc", "f32 nhwc", NULL},
        {" --precision bf16", "bf16", "bf16 nhwc"},
        {" --precision bf16 --layout nhwc", "bf16 nhwc", NULL},
        {" --layout nchw", "f32", "f32 nhwc"},
    };
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        char *args, *out;
        cr_assert(asprintf(&args, "%s --backend cpu --placement%s", model, runs[r].opts) > 0);
        cr_assert_eq(tu_dlrun(args, &out), 0, "%s: %s", args, out);
        char want[64];
        snprintf(want, sizeof want, "dw                           conv2d          cpu        %s", runs[r].want);
        cr_expect(strstr(out, want), "%s: no '%s': %s", args, want, out);
        if (runs[r].nowant) cr_expect_null(strstr(out, runs[r].nowant), "%s: %s", args, out);
        free(out), free(args);
    }
    unlink(model);
    free(model);
}

Test(cli, lenet_runs_and_prints_summary) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml"), &out), 0, "%s", out);
    cr_expect(strstr(out, "input [1, 1, 28, 28] -> output [1, 10]"), "%s", out);
    cr_expect(strstr(out, "placement: ") && strstr(out, " cpu "), "%s", out); /* and onednn, where built */
    cr_expect(strstr(out, "top-5:"), "%s", out);
    cr_expect(strstr(out, "latency:"), "%s", out);
    free(out);
}

/* Where the model's weights exceed the last-level cache (DLRUN_CACHE_BYTES stands for it), the
 * summary says how many ops placement timed with their weights out of cache; else it says nothing.
 * A timing cache of its own each time: ops another test timed (under ctest -j2, at once) would be
 * read from the shared one, not timed. */
Test(cli, placement_says_which_ops_it_timed_cold) {
    static const char *const sizes[2] = {"65536", "1073741824"};
    for (int big = 0; big < 2; big++) {
        cr_assert(tu_fresh_cache());
        setenv("DLRUN_CACHE_BYTES", sizes[big], 1);
        char *out;
        cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --backend cpu", &out), 0, "%s", out);
        const char *line = strstr(out, "4 ops timed with their weights out of cache (the model's 241.0 KiB of "
                                       "weights exceed the 64.0 KiB last-level cache)");
        cr_expect(big ? !line : line != NULL, "cache %s: %s", sizes[big], out);
        free(out);
    }
    unsetenv("DLRUN_CACHE_BYTES");
}

Test(cli, profile_and_iterations) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --profile --iterations 3 --warmup 1", &out), 0, "%s", out);
    cr_expect(strstr(out, "GFLOP/s"), "%s", out);
    cr_expect(strstr(out, "fused into"), "%s", out);
    cr_expect(strstr(out, "median"), "%s", out);
    cr_expect(strstr(out, "images/s"), "%s", out);
    free(out);
}

Test(cli, json_is_valid_and_complete) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("mlp.yaml") " --json --batch 3", &out), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *shape = cJSON_GetObjectItem(j, "output_shape");
    cr_assert(cJSON_IsArray(shape) && cJSON_GetArraySize(shape) == 2);
    cr_expect_eq(cJSON_GetArrayItem(shape, 0)->valueint, 3);
    cr_expect_eq(cJSON_GetArrayItem(shape, 1)->valueint, 10);
    cJSON *ops = cJSON_GetObjectItem(j, "ops");
    cr_assert(cJSON_IsArray(ops) && cJSON_GetArraySize(ops) >= 5);
    cr_expect(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 0), "backend"));
    /* per-op times only with --profile: unprofiled, an asynchronous op's time is its enqueueing */
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 0), "time_ms"));
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 0), "gflops_per_s"));
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "phases_ms"), "compute")));
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(j, "top5")));
    cJSON_Delete(j);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("mlp.yaml") " --json --profile", &out), 0, "%s", out);
    j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *op0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "ops"), 0);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(op0, "time_ms")) && cJSON_GetObjectItem(op0, "gflops_per_s"));
    cJSON_Delete(j);
    free(out);
}

static float *read_npy(const char *path, int64_t *shape, int *ndim) {
    float *data = NULL;
    dl_error err;
    cr_assert_eq(dl_npy_read(path, &data, shape, ndim, &err), DL_OK, "%s", err.msg);
    return data;
}

Test(cli, output_is_deterministic_and_input_round_trips) {
    char a[] = "/tmp/dlrun-cli-a-XXXXXX.npy", b[] = "/tmp/dlrun-cli-b-XXXXXX.npy", x[] = "/tmp/dlrun-cli-x-XXXXXX.npy";
    close(mkstemps(a, 4));
    close(mkstemps(b, 4));
    close(mkstemps(x, 4));
    /* the input dlrun draws with --seed 5, written out so --input can replay it */
    float in[784];
    tu_fill_uniform(in, 784, 5, -1, 1);
    int64_t xs[4] = {1, 1, 28, 28};
    dl_error err;
    cr_assert_eq(dl_npy_write(x, in, xs, 4, &err), DL_OK);
    char *out, *args;
    cr_assert(asprintf(&args, "%s --seed 5 --input %s --output %s", MODEL("lenet.yaml"), x, a) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out);
    free(args);
    cr_assert(asprintf(&args, "%s --seed 5 --input %s --output %s --no-fuse", MODEL("lenet.yaml"), x, b) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out);
    free(args);
    int64_t sa[8], sb[8];
    int na, nb;
    float *ya = read_npy(a, sa, &na), *yb = read_npy(b, sb, &nb);
    cr_assert_eq(na, 2);
    cr_assert_eq(sa[1], 10);
    cr_expect_leq(tu_nmse(ya, yb, 10), 1e-12, "fused and unfused runs differ");
    double sum = 0;
    for (int i = 0; i < 10; i++) sum += ya[i];
    cr_expect_float_eq(sum, 1.0, 1e-4, "lenet ends in softmax");
    free(ya);
    free(yb);
    /* wrong input shape */
    int64_t bad[4] = {1, 1, 28, 27};
    cr_assert_eq(dl_npy_write(x, in, bad, 4, &err), DL_OK);
    cr_assert(asprintf(&args, "%s --input %s", MODEL("lenet.yaml"), x) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 2);
    cr_expect(strstr(out, "does not match the model's input 'image' [1, 1, 28, 28]"), "%s", out);
    free(out);
    free(args);
    unlink(a);
    unlink(b);
    unlink(x);
}

/* Runs the model fused (the default) and with --no-fuse, both with the options `opts`; the fused
 * run's report must contain `fused_report`, the unfused run's none, and both outputs ([2, 7])
 * must agree. */
static void expect_fusion_keeps_output_with(const char *text, const char *opts, const char *fused_report) {
    char *model = tu_write_temp(".yaml", text, strlen(text));
    char a[] = "/tmp/dlrun-fuse-a-XXXXXX.npy", b[] = "/tmp/dlrun-fuse-b-XXXXXX.npy";
    cr_assert(mkstemps(a, 4) >= 0 && mkstemps(b, 4) >= 0);
    char *out, *args;
    /* pinned to the cpu plugin: which activations can fuse depends on the backend of their
     * producer (onednn's batchnorm takes no clip), and placement's choice on measured times */
    cr_assert(asprintf(&args, "%s --backend cpu --seed 3 --output %s%s", model, a, opts) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cr_expect(strstr(out, fused_report), "%s", out);
    free(out), free(args);
    cr_assert(asprintf(&args, "%s --backend cpu --seed 3 --output %s --no-fuse%s", model, b, opts) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cr_expect_null(strstr(out, "fused"), "--no-fuse fuses nothing: %s", out);
    free(out), free(args);
    int64_t sa[8], sb[8];
    int na, nb;
    float *ya = read_npy(a, sa, &na), *yb = read_npy(b, sb, &nb);
    cr_assert_eq(na, 2);
    cr_assert_eq(sa[0] * sa[1], 14);
    cr_expect_leq(tu_nmse(ya, yb, 14), 1e-12, "fused and unfused runs differ");
    free(ya), free(yb);
    unlink(a), unlink(b), unlink(model);
    free(model);
}

/* silu, hard_swish and gelu (both forms) fuse into the conv, linear, add and batchnorm before
 * them on the cpu plugin, and the fused run gives the unfused run's output. */
Test(cli, activations_fuse_into_their_producer) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [2, 3, 11, 11]}\nlayers:\n"
                        "  - {name: c1, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                        "  - {name: a1, op: silu}\n"
                        "  - {name: cw, op: conv2d, filters: 16, kernel: 3, padding: 1}\n" /* Winograd */
                        "  - {name: aw, op: silu}\n"
                        "  - {name: c2, op: conv2d, filters: 16, kernel: 1}\n"
                        "  - {name: bn, op: batchnorm}\n"
                        "  - {name: a2, op: hard_swish}\n"
                        "  - {name: sum, op: add, inputs: [a2, a1]}\n"
                        "  - {name: a3, op: gelu}\n"
                        "  - {name: f, op: flatten}\n"
                        "  - {name: fc, op: linear, units: 7}\n"
                        "  - {name: a4, op: gelu, approximate: tanh}\n";
    expect_fusion_keeps_output_with(text, " --layout nchw",
                                    "(+2 silu fused) (+1 hard_swish fused) (+2 gelu fused) (+1 batchnorm folded)");
}

/* A concat whose inputs were written into it (batch 1) is reported as elided: in the summary, the
 * profile (no time of its own) and --json; --no-fuse copies, and says nothing of it. */
Test(cli, elided_concat_is_reported) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"
                        "  - {name: a, op: conv2d, filters: 16, kernel: 3, padding: 1, inputs: [x]}\n"
                        "  - {name: b, op: conv2d, filters: 16, kernel: 1, inputs: [x]}\n"
                        "  - {name: j, op: concat, inputs: [a, b]}\n"
                        "  - {op: global_avgpool}\n";
    char *model = tu_write_temp(".yaml", text, strlen(text));
    char *out, *args;
    cr_assert(asprintf(&args, "%s --backend cpu --layout nchw --profile --iterations 2", model) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "(+1 concat elided: inputs written into it)"), "%s", out);
    cr_expect(strstr(out, "concat          elided: its inputs were written into it"), "%s", out);
    free(out), free(args);
    cr_assert(asprintf(&args, "%s --backend cpu --layout nchw --profile --iterations 2 --json", model) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cJSON *root = cJSON_Parse(out), *op, *j = NULL;
    cr_assert(root, "not JSON: %s", out);
    cJSON_ArrayForEach(
        op, cJSON_GetObjectItem(root, "ops")) if (!strcmp(cJSON_GetObjectItem(op, "layer")->valuestring, "j")) j = op;
    cr_assert(j, "no op j: %s", out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "elided")), "%s", out);
    cr_expect_null(cJSON_GetObjectItem(j, "time_ms"), "an elided concat has no time: %s", out);
    cJSON_Delete(root);
    free(out), free(args);
    cr_assert(asprintf(&args, "%s --backend cpu --layout nchw --profile --iterations 2 --no-fuse", model) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cr_expect_null(strstr(out, "elided"), "--no-fuse elides nothing: %s", out);
    free(out), free(args);
    unlink(model);
    free(model);
}

/* Transposes between channels-last and rows that are views of a layout are reported apart from
 * concats: in the summary and the profile (layout_view.c). */
Test(cli, layout_views_are_reported) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"
                        "  - {name: a, op: conv2d, filters: 16, kernel: 3, padding: 1, inputs: [x]}\n"
                        "  - {name: t, op: transpose, perm: [0, 2, 3, 1]}\n"
                        "  - {name: n, op: layer_norm, axis: 3}\n"
                        "  - {name: u, op: transpose, perm: [0, 3, 1, 2]}\n"
                        "  - {op: global_avgpool}\n";
    char *model = tu_write_temp(".yaml", text, strlen(text));
    char *out, *args;
    cr_assert(asprintf(&args, "%s --backend cpu --layout nhwc --profile --iterations 2", model) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "(+2 transposes elided: a view of the layout)"), "%s", out);
    cr_expect(strstr(out, "transpose       elided: its input's memory is its output"), "%s", out);
    cr_expect_null(strstr(out, "concat elided"), "%s", out);
    free(out), free(args);
    unlink(model);
    free(model);
}

/* ABI 1.5: clip (relu6 and two-sided), leaky_relu and sigmoid fuse into the depthwise, 1x1, im2col
 * and Winograd convs, add, batchnorm and linear before them on the cpu plugin, and the fused run
 * gives the unfused run's output; in NHWC (--layout nhwc) into
 * the channels-last convs the same, with the transposes at the edges of the NHWC chain. */
Test(cli, clip_leaky_relu_and_sigmoid_fuse_into_their_producer) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [2, 16, 11, 11]}\nlayers:\n"
                        "  - {name: dw, op: conv2d, filters: 16, kernel: 3, padding: 1, groups: 16}\n"
                        "  - {name: r6, op: clip, min: 0, max: 6}\n"
                        "  - {name: pw, op: conv2d, filters: 24, kernel: 1}\n"
                        "  - {name: cl, op: clip, min: -0.2, max: 0.3}\n"
                        "  - {name: c3, op: conv2d, filters: 24, kernel: 3, stride: 2, padding: 1}\n"
                        "  - {name: lr, op: leaky_relu, alpha: 0.1}\n"
                        "  - {name: cw, op: conv2d, filters: 24, kernel: 3, padding: 1}\n" /* Winograd */
                        "  - {name: sg, op: sigmoid}\n"
                        "  - {name: bn, op: batchnorm}\n"
                        "  - {name: r7, op: clip, min: 0, max: 6}\n"
                        "  - {name: sum, op: add, inputs: [r7, lr]}\n"
                        "  - {name: l2, op: leaky_relu, alpha: 0.2}\n"
                        "  - {name: f, op: flatten}\n"
                        "  - {name: fc, op: linear, units: 7}\n"
                        "  - {name: s2, op: sigmoid}\n";
    const char *fused = "cpu 8 ops (+3 clip fused) (+2 leaky_relu fused) (+2 sigmoid fused)";
    char want[160];
    snprintf(want, sizeof want, "%s\n", fused);
    expect_fusion_keeps_output_with(text, " --layout nchw", want);
    snprintf(want, sizeof want, "%s; 2 conversions of storage format\n", fused); /* in and out: bn runs NHWC too */
    expect_fusion_keeps_output_with(text, " --layout nhwc", want);
}

/* Token ids: an int64 input feeds gather (an embedding lookup); read from an int64 .npy exactly,
 * seeded inside the vocabulary when not given; an index past the table is a one-line error, and
 * float data for it is refused. */
Test(cli, int64_token_ids_feed_an_embedding) {
    const char text[] = "model: m\ninputs:\n  - {name: ids, shape: [2, 3], dtype: int64}\n"
                        "constants:\n  - {name: table, shape: [7, 4]}\nlayers:\n"
                        "  - {name: emb, op: gather, inputs: [table, ids]}\n";
    char *model = tu_write_temp(".yaml", text, strlen(text));
    char ids[] = "/tmp/dlrun-ids-XXXXXX.npy", bad[] = "/tmp/dlrun-bad-XXXXXX.npy", y[] = "/tmp/dlrun-emb-XXXXXX.npy";
    cr_assert(mkstemps(ids, 4) >= 0 && mkstemps(bad, 4) >= 0 && mkstemps(y, 4) >= 0);
    /* an int64 .npy by hand: the header, then the six ids (two of them negative: from the end) */
    const int64_t v[6] = {0, 6, -1, 3, -7, 2}, w[6] = {0, 1, 2, 3, 4, 7};
    const int64_t *vals[2] = {v, w};
    const char *paths[2] = {ids, bad};
    for (int f = 0; f < 2; f++) {
        char hdr[128] = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }";
        size_t hl = strlen(hdr);
        while ((10 + hl + 1) % 64) hdr[hl++] = ' ';
        hdr[hl++] = '\n';
        FILE *fp = fopen(paths[f], "wb");
        cr_assert(fp);
        fwrite("\x93NUMPY\x01\x00", 1, 8, fp);
        unsigned char len[2] = {(unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
        fwrite(len, 1, 2, fp);
        fwrite(hdr, 1, hl, fp);
        fwrite(vals[f], sizeof(int64_t), 6, fp);
        fclose(fp);
    }
    char *out, *args;
    cr_assert(asprintf(&args, "%s --input ids=%s --output emb=%s", model, ids, y) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out), free(args);
    int64_t ys[8];
    int ynd;
    float *e = read_npy(y, ys, &ynd);
    cr_assert_eq(ynd, 3);
    cr_assert(ys[0] == 2 && ys[1] == 3 && ys[2] == 4);
    /* rows picked by the ids: id 6 and id -1 are the same row, id -7 is row 0 */
    for (int j = 0; j < 4; j++) {
        cr_expect_eq(e[1 * 4 + j], e[2 * 4 + j], "ids 6 and -1 differ at %d", j);
        cr_expect_eq(e[0 * 4 + j], e[4 * 4 + j], "ids 0 and -7 differ at %d", j);
    }
    cr_expect_neq(e[0], e[4], "ids 0 and 6 gave the same row");
    free(e);
    cr_assert(asprintf(&args, "%s --input ids=%s", model, bad) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "gather: index 7 (at 5) is out of range for a dimension of size 7"), "%s", out);
    free(out), free(args);
    /* in parts of one row (as auto may choose): the place is still the whole input's, not "(at 2)" */
    cr_assert(asprintf(&args, "%s --input ids=%s --micro-batch 1", model, bad) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "gather: index 7 (at 5) is out of range for a dimension of size 7"), "%s", out);
    free(out), free(args);
    cr_assert_eq(tu_dlrun(model, &out), 0, "seeded ids: %s", out); /* no --input: ids drawn inside [0, 7) */
    free(out);
    unlink(ids), unlink(bad), unlink(y), unlink(model);
    free(model);
}

Test(cli, bad_model_reports_file_line_col) {
    const char text[] =
        "model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nlayers:\n  - {name: c, op: conv2d, kernel: 3}\n";
    char *path = tu_write_temp(".yaml", text, strlen(text));
    char *out, *args;
    cr_assert(asprintf(&args, "%s", path) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 2);
    char want[256];
    snprintf(want, sizeof want, "%s:5:5: conv2d 'c' needs 'filters'", path);
    cr_expect(strstr(out, want), "got: %s want: %s", out, want);
    cr_expect_eq(strchr(out, '\n') - out + 1, (long)strlen(out), "one line: %s", out);
    free(out);
    free(args);
    unlink(path);
    free(path);
}

Test(cli, vgg_runs_out_of_the_box, .timeout = 300) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("vgg.yaml") " --threads 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "input [1, 3, 224, 224] -> output [1, 1000]"), "%s", out);
    cr_expect(strstr(out, "top-5:"), "%s", out);
    free(out);
}

Test(cli, resnet18_runs_and_reports_its_memory_plan, .timeout = 300) {
    char *out;
    cr_assert_eq(tu_dlrun(MODEL("resnet18.yaml") " --threads 2 --json --batch 2", &out), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cJSON *mem = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "memory"), 0);
    cr_assert(mem);
    cr_expect_str_eq(cJSON_GetObjectItem(mem, "domain")->valuestring, "host");
    double peak = cJSON_GetObjectItem(mem, "peak_bytes")->valuedouble;
    double lb = cJSON_GetObjectItem(mem, "lower_bound_bytes")->valuedouble;
    double naive = cJSON_GetObjectItem(mem, "naive_bytes")->valuedouble;
    cr_expect(lb > 0 && peak >= lb && peak <= 1.1 * lb && naive > peak, "peak %g lower bound %g naive %g", peak, lb,
              naive);
    cJSON_Delete(j);
    free(out);
    /* on the cpu plugin alone: timed placement may put a conv on onednn, which fuses differently */
    cr_assert_eq(tu_dlrun(MODEL("resnet18.yaml") " --profile --backend cpu", &out), 0, "%s", out);
    cr_expect(strstr(out, "memory plan (per domain)"), "%s", out);
    /* its 20 batchnorms fold into their convs, its 8 residual adds fuse into the convs before
     * them (the shortcut's conv in a downsampling block), and the 17 relus into those convs */
    cr_expect(strstr(out, "(+17 relu fused) (+8 residual adds fused) (+20 batchnorm folded)"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("resnet18.yaml") " --no-fuse", &out), 0, "%s", out);
    cr_expect_null(strstr(out, "folded"), "--no-fuse folds nothing: %s", out);
    free(out);
}

Test(cli, batch_too_big_for_max_memory_is_refused_before_running) {
    char *out;
    /* VGG-16's 528 MiB of seeded weights fit in 1 GiB; its activations at batch 64 do not. Its first
     * conv's output alone (784 MiB) with the weights passes 1 GiB: refused before any op is timed,
     * whatever the backends (--layout auto would time every op on the cpu plugin alone) */
    const char *const floor_runs[] = {" --backend cpu", "", " --backend onednn --layout nhwc"};
    for (size_t r = 0; r < sizeof floor_runs / sizeof *floor_runs; r++) {
        char args[256];
        snprintf(args, sizeof args, "%s --batch 64 --max-memory 1G%s", MODEL("vgg.yaml"), floor_runs[r]);
        int rc = tu_dlrun(args, &out);
        if (r == 2 && strstr(out, "unknown backend 'onednn'")) { /* built without oneDNN */
            free(out);
            continue;
        }
        cr_expect_eq(rc, 1, "%s: %s", args, out);
        cr_expect(strstr(out, "model 'vgg16' at batch 64 needs at least 1.3 GiB of host memory (the weights, "
                              "the inputs, and 784.0 MiB for the output of conv2d 'features.0'), but "
                              "--max-memory allows 1.0 GiB; use a smaller --batch"),
                  "%s: %s", args, out);
        cr_expect_null(strstr(out, "timing"), "it timed ops first: %s", out);
        cr_expect_null(strstr(out, "latency"), "it ran anyway: %s", out);
        free(out);
    }
    /* above that floor, the memory plan counts the whole run: with one layout and one backend
     * nothing is timed before it */
    cr_expect_eq(tu_dlrun(MODEL("vgg.yaml") " --batch 64 --max-memory 1600M --backend cpu --layout nchw", &out), 1);
    cr_expect(strstr(out, "model 'vgg16' at batch 64 needs 2.1 GiB of host memory (activations, scratch, weights, "
                          "inputs)"),
              "%s", out);
    cr_expect(strstr(out, "but --max-memory allows 1.6 GiB; use a smaller --batch"), "%s", out);
    cr_expect_null(strstr(out, "latency"), "it ran anyway: %s", out);
    free(out);
    cr_expect_eq(tu_dlrun(MODEL("lenet.yaml") " --max-memory lots", &out), 2);
    cr_expect(strstr(out, "--max-memory wants a byte count"), "%s", out);
    free(out);
}

Test(cli, named_inputs_and_outputs) {
    const char model[] = "model: two\ninputs:\n  - {name: a, shape: [2, 3]}\n  - {name: b, shape: [2, 3]}\n"
                         "layers:\n  - {name: s, op: add, inputs: [a, b]}\n  - {name: r, op: relu}\noutputs: [s, r]\n";
    char *path = tu_write_temp(".yaml", model, strlen(model));
    float a[6] = {1, -2, 3, -4, 5, -6}, b[6] = {0.5f, 0.5f, -5, 1, 1, 1};
    int64_t shape[2] = {2, 3};
    char fa[] = "/tmp/dlrun-a-XXXXXX.npy", fb[] = "/tmp/dlrun-b-XXXXXX.npy", fs[] = "/tmp/dlrun-s-XXXXXX.npy",
         fr[] = "/tmp/dlrun-r-XXXXXX.npy";
    close(mkstemps(fa, 4)), close(mkstemps(fb, 4)), close(mkstemps(fs, 4)), close(mkstemps(fr, 4));
    dl_error err;
    cr_assert_eq(dl_npy_write(fa, a, shape, 2, &err), DL_OK);
    cr_assert_eq(dl_npy_write(fb, b, shape, 2, &err), DL_OK);
    char *args, *out;
    cr_assert(asprintf(&args, "%s --input b=%s --input a=%s --output %s --output r=%s", path, fb, fa, fs, fr) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out);
    free(args);
    int64_t s1[8], s2[8];
    int n1, n2;
    float *ys = read_npy(fs, s1, &n1), *yr = read_npy(fr, s2, &n2);
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(ys[i], a[i] + b[i], "first output (s) at %d", i);
        cr_expect_eq(yr[i], a[i] + b[i] > 0 ? a[i] + b[i] : 0, "named output r at %d", i);
    }
    free(ys);
    free(yr);
    cr_assert(asprintf(&args, "%s --input %s", path, fa) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 2);
    cr_expect(strstr(out, "the model has 2 inputs (a, b); use --input NAME=FILE"), "%s", out);
    free(out);
    free(args);
    unlink(fa), unlink(fb), unlink(fs), unlink(fr), unlink(path);
    free(path);
}

/* A model may have more outputs than the 64 inputs the CLI takes: --output NAME=FILE finds any of
 * them (the names once went into a fixed array of 64, and the 65th was read past its end). */
Test(cli, an_output_past_the_64th_by_name) {
    size_t cap = 8192, n = 0;
    char *model = malloc(cap);
    n += (size_t)snprintf(model, cap,
                          "model: many\ninputs: [{name: x, shape: [1, 4]}]\nlayers:\n  - {name: r1, op: relu}\n");
    for (int k = 2; k <= 100; k++)
        n += (size_t)snprintf(model + n, cap - n, "  - {name: r%d, op: add, inputs: [r%d, r1]}\n", k, k - 1);
    n += (size_t)snprintf(model + n, cap - n, "outputs: [");
    for (int k = 1; k <= 100; k++) n += (size_t)snprintf(model + n, cap - n, "%sr%d", k > 1 ? ", " : "", k);
    snprintf(model + n, cap - n, "]\n");
    char *path = tu_write_temp(".yaml", model, strlen(model));
    float x[4] = {-1, 0.5f, 2, -3};
    int64_t shape[2] = {1, 4};
    char fx[] = "/tmp/dlrun-x-XXXXXX.npy", fy[] = "/tmp/dlrun-y-XXXXXX.npy";
    close(mkstemps(fx, 4)), close(mkstemps(fy, 4));
    dl_error err;
    cr_assert_eq(dl_npy_write(fx, x, shape, 2, &err), DL_OK);
    char *args, *out;
    cr_assert(asprintf(&args, "%s --input %s --output r90=%s", path, fx, fy) > 0);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out);
    free(args);
    int64_t ys[8];
    int nd;
    float *y = read_npy(fy, ys, &nd);
    for (int i = 0; i < 4; i++) cr_expect_eq(y[i], 90 * (x[i] > 0 ? x[i] : 0), "r90 = 90 relu(x) at %d: %g", i, y[i]);
    free(y);
    unlink(fx), unlink(fy), unlink(path);
    free(path), free(model);
}

/* The option tables (core/cli/options.c): each failure names the option, says what it wants,
 * points at the command's --help and exits 2. */
static void expect_usage_error(const char *args, const char *message, const char *hint) {
    char *out;
    cr_expect_eq(tu_dlrun(args, &out), 2, "%s: %s", args, out);
    cr_expect(strstr(out, message), "%s: want '%s', got: %s", args, message, out);
    cr_expect(strstr(out, hint), "%s: want '%s', got: %s", args, hint, out);
    free(out);
}

Test(cli, option_errors_name_the_option_and_exit_2) {
    const char *run = "(dlrun --help lists the options)", *check = "(dlrun check --help lists the options)";
    expect_usage_error(MODEL("lenet.yaml") " --no-such-option", "dlrun: unknown option '--no-such-option'", run);
    expect_usage_error(MODEL("lenet.yaml") " --batch", "dlrun: --batch needs a value", run);
    expect_usage_error(MODEL("lenet.yaml") " --batch 0", "dlrun: --batch wants a positive integer, not '0'", run);
    expect_usage_error(MODEL("lenet.yaml") " --batch=1048577", "--batch must be between 1 and 1048576, not '1048577'",
                       run);
    expect_usage_error(MODEL("lenet.yaml") " --warmup -1", "--warmup wants a non-negative integer, not '-1'", run);
    expect_usage_error(MODEL("lenet.yaml") " --precision f64", "--precision wants f32, tf32, f16 or bf16, not 'f64'",
                       run);
    expect_usage_error(MODEL("lenet.yaml") " --max-memory 2T", "--max-memory wants a byte count", run);
    expect_usage_error(MODEL("lenet.yaml") " --seed -1", "--seed wants a non-negative integer, not '-1'", run);
    expect_usage_error("check " MODEL("lenet.yaml") " --no-such-option", "unknown option '--no-such-option'", check);
    expect_usage_error("check " MODEL("lenet.yaml") " --seed", "dlrun: --seed needs a value", check);
    expect_usage_error("check " MODEL("lenet.yaml") " --op relu", "dlrun: --op is for test-ops", check);
    expect_usage_error("check " MODEL("lenet.yaml") " --mode perf", "dlrun: --mode is for test-ops", check);
    expect_usage_error("test-ops --mode fast", "dlrun: --mode wants test or perf, not 'fast'", check);
    expect_usage_error("test-ops --threads 0", "dlrun: --threads wants a positive integer, not '0'", check);
    expect_usage_error("check " MODEL("lenet.yaml") " --precision half", "--precision wants f32, tf32, f16 or bf16",
                       check);
    expect_usage_error(MODEL("lenet.yaml") " --layout nchwc", "--layout wants auto, nchw or nhwc, not 'nchwc'", run);
    expect_usage_error("test-ops --layout NHWC", "--layout wants auto, nchw or nhwc, not 'NHWC'", check);
}

Test(cli, values_in_both_spellings_and_max_memory_suffixes) {
    char *out;
    /* --opt=value and --opt value, and a unique prefix as getopt_long allows */
    cr_assert_eq(tu_dlrun(MODEL("mlp.yaml") " --json --batch=2 --seed 7 --precision=f32 --iter 2", &out), 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert(j, "not JSON: %s", out);
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "output_shape"), 0)->valueint, 2, "%s", out);
    cJSON_Delete(j);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --max-memory 2G", &out), 0, "%s", out);
    cr_expect(strstr(out, "latency:"), "%s", out);
    free(out);
    /* 2G is 2 GiB: lenet at the largest batch needs far more, and the refusal quotes the cap */
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --batch 1048576 --max-memory 2G", &out), 1, "%s", out);
    cr_expect(strstr(out, "but --max-memory allows 2.0 GiB"), "%s", out);
    free(out);
    cr_assert_eq(tu_dlrun(MODEL("lenet.yaml") " --batch 64 --max-memory 512k", &out), 1, "%s", out);
    cr_expect(strstr(out, "but --max-memory allows 512.0 KiB"), "%s", out);
    free(out);
}

/* Every option of a command is listed in its --help, one line each starting "  --NAME". */
static void expect_help_lists(const char *args, const char *head, const char *const *names, int n) {
    char *out;
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s: %s", args, out);
    cr_expect(strstr(out, head), "%s: %s", args, out);
    for (int i = 0; i < n; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n  --%s", names[i]);
        cr_expect(strstr(out, line), "%s does not list --%s: %s", args, names[i], out);
    }
    cr_expect(strstr(out, "\n  -h, --help"), "%s: %s", args, out);
    free(out);
}

Test(cli, help_lists_every_option) {
    static const char *const run[] = {"backend",
                                      "batch",
                                      "input",
                                      "output",
                                      "weights",
                                      "seed",
                                      "iterations",
                                      "warmup",
                                      "threads",
                                      "device",
                                      "precision f32|tf32|f16|bf16",
                                      "layout auto|nchw|nhwc",
                                      "no-fuse",
                                      "placement",
                                      "retune",
                                      "no-fallback",
                                      "max-memory BYTES",
                                      "profile",
                                      "json",
                                      "list-backends",
                                      "version"};
    static const char *const check[] = {"backend NAME",
                                        "precision f32|tf32|f16|bf16",
                                        "layout auto|nchw|nhwc",
                                        "seed N",
                                        "op NAME",
                                        "mode test|perf",
                                        "iterations N",
                                        "threads N",
                                        "json"};
    expect_help_lists("--help", "usage: dlrun MODEL.yaml [options]", run, sizeof run / sizeof *run);
    expect_help_lists("check --help", "usage: dlrun check MODEL.yaml", check, sizeof check / sizeof *check);
    expect_help_lists("test-ops --help", "dlrun test-ops [--backend NAME]...", check, sizeof check / sizeof *check);
    expect_help_lists("test-ops -h", "thresholds: docs/check.md", check, sizeof check / sizeof *check);
}

/* --profile gives each op's median over the timed runs, not its mean: one slow run (a JIT's first
 * run, the first touch of memory) does not show in every op's figure. Each fakecpu op takes 1 ms,
 * its first run 300 ms more: a mean over 5 runs would be 61 ms. */
Test(cli, profile_times_are_medians, .timeout = 60) {
    const char text[] = "model: m\ninputs:\n  - {name: x, shape: [1, 257]}\nlayers:\n"
                        "  - {name: a, op: relu, inputs: [x]}\n"
                        "  - {name: b, op: relu, inputs: [a]}\n";
    char *model = tu_write_temp(".yaml", text, strlen(text));
    char *out, *cmd;
    cr_assert(asprintf(&cmd,
                       "DLFAKE_FAKECPU_US=1000 DLFAKE_FAKECPU_FIRST_US=300000 DLRUN_PLUGIN_PATH=%s %s %s "
                       "--backend fakecpu --profile --iterations 5 --json",
                       DLRUN_TEST_PLUGIN_DIR, DLRUN_CLI, model) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cJSON *root = cJSON_Parse(out), *op;
    cr_assert(root, "not JSON: %s", out);
    int n = 0;
    cJSON_ArrayForEach(op, cJSON_GetObjectItem(root, "ops")) {
        const cJSON *ms = cJSON_GetObjectItem(op, "time_ms");
        if (!cJSON_IsNumber(ms)) continue;
        n++;
        cr_expect(ms->valuedouble >= 0.9 && ms->valuedouble < 30, "%s: %g ms, not the median of its runs",
                  cJSON_GetObjectItem(op, "layer")->valuestring, ms->valuedouble);
    }
    cr_expect_eq(n, 2, "%s", out);
    cJSON_Delete(root);
    free(out), free(cmd);
    unlink(model);
    free(model);
}
