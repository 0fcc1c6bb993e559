/* test_check.c — `dlrun check` and `dlrun test-ops`: the CPU reference passes against itself;
 * deliberately broken plugins (relu a little off, half unwritten, a write past the end, a NaN)
 * are each caught by both commands; unsupported ops are listed, not counted as passes; a seed
 * replays a run exactly; a reference in channels-last storage reaches the checked backend converted
 * to the layout that backend takes; infinities both sides have (a causal mask) match. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "test_util.h"

static int dlrun(const char *args, char **out) {
    char *cmd;
    /* the fake backends in that folder make placement time ops: keep the cache out of $HOME */
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=/tmp/dlrun-test-check-cache %s %s",
                       DLRUN_TEST_PLUGIN_DIR, DLRUN_CLI, args) > 0);
    int rc = tu_run(cmd, out);
    free(cmd);
    return rc;
}

#define LENET DLRUN_SOURCE_DIR "/models/lenet.yaml"

Test(check, cpu_reference_passes_against_itself, .timeout = 120) {
    char *out;
    cr_expect_eq(dlrun("check " LENET " --backend cpu --seed 4", &out), 0, "%s", out);
    /* 13 ops, the model op by op, and as dlrun runs it (its relus fused) */
    cr_expect(strstr(out, "15 passed, 0 failed, 0 not supported"), "%s", out);
    cr_expect(strstr(out, "(end to end, fused)        model          cpu"), "%s", out);
    cr_expect(strstr(out, "seed 4 (replay with --seed 4)"), "%s", out);
    free(out);
    cr_expect_eq(dlrun("test-ops --backend cpu", &out), 0, "%s", out);
    cr_expect(strstr(out, " passed, 0 failed, 0 not supported"), "%s", out);
    cr_expect(strstr(out, "conv dilation 2"), "%s", out);
    free(out);
}

/* --layout nhwc: the checked backend takes LeNet's convs (and what follows them) channels-last,
 * from the reference's row-major tensors; the reference itself stays row-major. Rows name the
 * storage ("cpu f32 nhwc"), and every one passes on cpu and onednn. */
Test(check, the_checked_backend_runs_channels_last_with_layout_nhwc, .timeout = 120) {
    const char *backends[] = {"cpu", "onednn"};
    for (int b = 0; b < 2; b++) {
        if (b == 1 && !DLRUN_HAVE_ONEDNN) continue; /* the onednn plugin is not built (no oneDNN) */
        char args[256], want[64], *out;
        snprintf(args, sizeof args, "check " LENET " --backend %s --layout nhwc --seed 4", backends[b]);
        snprintf(want, sizeof want, "conv2d         %s f32 nhwc", backends[b]);
        cr_expect_eq(dlrun(args, &out), 0, "%s: %s", args, out);
        cr_expect(strstr(out, want), "%s: no '%s' row: %s", args, want, out);
        cr_expect(strstr(out, " passed, 0 failed"), "%s: %s", args, out);
        free(out);
        snprintf(args, sizeof args, "check " LENET " --backend %s --layout nchw --seed 4", backends[b]);
        cr_expect_eq(dlrun(args, &out), 0, "%s: %s", args, out);
        cr_expect_null(strstr(out, "nhwc"), "%s: %s", args, out);
        free(out);
    }
}

/* Every op's 16-bit rows hold on the CPU, against the CPU at the same storage and against f32: a
 * case whose inputs the 16-bit rounding alone pushes past the f32-reference threshold (exp on
 * U(-10, 10) did, |x| times the input's error) fails here, not first on a GPU. */
Test(check, cpu_16_bit_storage_passes_every_op, .timeout = 120) {
    const char *precisions[] = {"f16", "bf16"};
    for (int p = 0; p < 2; p++)
        for (int seed = 1; seed <= 3; seed++) {
            char args[128], *out;
            snprintf(args, sizeof args, "test-ops --backend cpu --precision %s --seed %d", precisions[p], seed);
            cr_expect_eq(dlrun(args, &out), 0, "%s: %s", args, out);
            cr_expect(strstr(out, " passed, 0 failed, 0 not supported"), "%s: %s", args, out);
            free(out);
        }
}

static const struct {
    const char *backend, *want;
} broken[] = {
    {"relu_off", "(differs)"},
    {"relu_unwritten", "never written (still the poison value)"},
    {"relu_overrun", "wrote past the end of its output (guard bytes changed)"},
    {"relu_nan", "not finite where the reference is"},
};

Test(check, broken_plugins_are_caught_by_both_commands, .timeout = 120) {
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        char args[512], *out;
        snprintf(args, sizeof args, "test-ops --backend %s --op relu", broken[i].backend);
        cr_expect_eq(dlrun(args, &out), 1, "test-ops %s: %s", broken[i].backend, out);
        cr_expect(strstr(out, broken[i].want), "test-ops %s lacks '%s': %s", broken[i].backend, broken[i].want, out);
        cr_expect(strstr(out, "0 passed, 2 failed, 0 not supported"), "%s", out);
        free(out);
        snprintf(args, sizeof args, "check %s --backend %s", LENET, broken[i].backend);
        cr_expect_eq(dlrun(args, &out), 1, "check %s: %s", broken[i].backend, out);
        cr_expect(strstr(out, broken[i].want), "check %s lacks '%s': %s", broken[i].backend, broken[i].want, out);
        cr_expect(strstr(out, "not supported: only relu"), "%s", out);
        cr_expect(strstr(out, ", 9 not supported"), "unsupported ops must not count as passes: %s", out);
        if (!strcmp(broken[i].backend, "relu_overrun")) /* it would write past a tensor of the session */
            cr_expect_null(strstr(out, "(end to end)"), "a backend that overran ran end to end: %s", out);
        else cr_expect(strstr(out, "(end to end)"), "%s", out);
        free(out);
    }
}

Test(check, unsupported_ops_are_listed_and_the_example_passes, .timeout = 120) {
    char *out;
    cr_expect_eq(dlrun("check " LENET " --backend example --seed 9", &out), 0, "%s", out);
    cr_expect(strstr(out, "conv2d         example            cpu f32   [1, 6, 28, 28]       not supported: only relu"),
              "%s", out);
    cr_expect(strstr(out, "6 passed, 0 failed, 9 not supported"), "%s", out);
    free(out);
}

Test(check, json_and_seed_replay, .timeout = 120) {
    char *a, *b;
    cr_assert_eq(dlrun("test-ops --backend relu_off --op relu --json --seed 77", &a), 1, "%s", a);
    cr_assert_eq(dlrun("test-ops --backend relu_off --op relu --json --seed 77", &b), 1, "%s", b);
    cr_expect_str_eq(a, b, "the same seed must replay the same run");
    cJSON *j = cJSON_Parse(a);
    cr_assert(j, "not JSON: %s", a);
    cr_expect_eq(cJSON_GetObjectItem(j, "seed")->valuedouble, 77);
    cr_expect_eq(cJSON_GetObjectItem(j, "failed")->valueint, 2);
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "rows"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(row, "result")->valuestring, "fail");
    cr_expect(strstr(cJSON_GetObjectItem(row, "detail")->valuestring, "first mismatch at index"));
    cJSON_Delete(j);
    free(a);
    free(b);
}

Test(check, perf_mode_reports_rates, .timeout = 120) {
    char *out;
    cr_expect_eq(dlrun("test-ops --backend cpu --op linear --mode perf --iterations 3", &out), 0, "%s", out);
    cr_expect(strstr(out, "GFLOP/s"), "%s", out);
    cr_expect(strstr(out, "6 passed, 0 failed, 0 not supported"), "linear's 6 cases: %s", out);
    free(out);
    cr_expect_eq(dlrun("test-ops --op frobnicate", &out), 2, "%s", out);
    cr_expect(strstr(out, "unknown op 'frobnicate'"), "%s", out);
    free(out);
}

/* At --precision bf16 a backend that stores bf16 NHWC is checked per op against the CPU at the
 * same storage (tight) and against f32 (the bf16 threshold): two rows per op; test-ops too. A
 * backend that refuses bf16 (the example plugin's relu) is checked in f32, one row per op. */
Test(check, bf16_storage_is_checked_against_both_references, .timeout = 300) {
    char *out;
    cr_expect_eq(dlrun("check " LENET " --backend bf16nhwc --precision bf16 --seed 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "conv1                      conv2d         bf16nhwc bf16 nhwc cpu bf16  [1, 6, 28, 28]"),
              "%s", out);
    cr_expect(strstr(out, "conv1                      conv2d         bf16nhwc bf16 nhwc cpu f32   [1, 6, 28, 28]"),
              "%s", out);
    cr_expect(strstr(out, "fc3                        linear         bf16nhwc bf16      cpu bf16"), "%s", out);
    cr_expect(strstr(out, "28 passed, 0 failed, 0 not supported"), "13 ops x 2 + end to end, unfused and fused: %s",
              out);
    free(out);
    cr_expect_eq(dlrun("test-ops --backend bf16nhwc --precision bf16 --op conv2d --seed 2", &out), 0, "%s", out);
    cr_expect(strstr(out, "cpu bf16") && strstr(out, "cpu f32") && strstr(out, " 0 failed"), "%s", out);
    free(out);
    cr_expect_eq(dlrun("test-ops --backend example --precision bf16 --op relu --seed 2", &out), 0, "%s", out);
    cr_expect(!strstr(out, "cpu bf16") && strstr(out, "example            cpu f32"), "%s", out);
    free(out);
}

/* A causal mask adds -inf (tools/zoo's decoders): where the checked backend gives the reference's
 * own infinity, or NaN where the reference has NaN, the op passes, and the NMSE is taken over the
 * finite elements (it was NaN, a FAIL, on an output both backends agreed on to the bit). An
 * element left unwritten (the poison value, itself a NaN) fails even where the reference is NaN. */
Test(check, infinities_the_reference_has_too_are_a_match, .timeout = 120) {
    const char header[] = "{\"mask\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}    ";
    const float mask[6] = {0, -INFINITY, -INFINITY, NAN, NAN, NAN}; /* the second row: NaN after relu */
    unsigned char file[8 + sizeof header - 1 + sizeof mask];
    const uint64_t len = sizeof header - 1; /* a multiple of 8, with the spaces */
    cr_assert_eq(len % 8, 0);
    memcpy(file, &len, 8);
    memcpy(file + 8, header, len);
    memcpy(file + 8 + len, mask, sizeof mask);
    char *weights = tu_write_temp(".safetensors", file, sizeof file), *yaml_text, *out;
    cr_assert(asprintf(&yaml_text,
                       "model: masked\nweights: \"%s\"\ninputs:\n  - {name: x, shape: [2, 3]}\n"
                       "constants:\n  - {name: mask, shape: [2, 3]}\nlayers:\n"
                       "  - {name: masked, op: add, inputs: [x, mask]}\n  - {name: y, op: relu}\n",
                       weights) > 0);
    char *yaml = tu_write_temp(".yaml", yaml_text, strlen(yaml_text)), args[600];
    snprintf(args, sizeof args, "check %s --backend cpu --seed 3", yaml);
    cr_expect_eq(dlrun(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "4 passed, 0 failed, 0 not supported"), "2 ops, end to end, fused: %s", out);
    cr_expect(strstr(out, "masked                     add            cpu"), "%s", out);
    free(out);
    /* relu_unwritten leaves the second half of relu's output (NaN in the reference) unwritten */
    snprintf(args, sizeof args, "check %s --backend relu_unwritten --seed 3", yaml);
    cr_expect_eq(dlrun(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "never written (still the poison value)"), "%s", out);
    free(out);
    unlink(yaml);
    unlink(weights);
    free(yaml);
    free(weights);
    free(yaml_text);
}
