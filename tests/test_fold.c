/* test_fold.c — what core/src/fuse.c folds and fuses: batchnorm folded into the conv2d or conv3d
 * before it (with non-trivial batchnorm statistics, the folded session (default) and the unfolded
 * one (no_fuse) give the same output, the batchnorms show as fused steps, and a conv whose output
 * has another consumer keeps its batchnorm); and residual adds fused into the conv2d or linear
 * computing one operand (ABI 1.8), with the relu after them, where that is allowed. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

typedef struct tensor_spec {
    const char *name;
    int nd;
    int64_t shape[5];
    float lo, hi;
} tensor_spec;

/* Writes the tensors, filled uniform in [lo, hi), as a safetensors file; returns its path. */
static char *write_weights(const tensor_spec *t, int n) {
    char header[4096] = "{";
    size_t off = 0, total = 0;
    for (int i = 0; i < n; i++) {
        int64_t cnt = 1;
        char shape[64] = "";
        for (int d = 0; d < t[i].nd; d++) {
            cnt *= t[i].shape[d];
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "",
                     (long long)t[i].shape[d]);
        }
        snprintf(header + strlen(header), sizeof header - strlen(header),
                 "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name,
                 shape, off, off + (size_t)cnt * 4);
        off += (size_t)cnt * 4;
    }
    strcat(header, "}");
    while (strlen(header) % 8) strcat(header, " ");
    uint64_t hl = strlen(header);
    total = 8 + hl + off;
    unsigned char *buf = malloc(total);
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, header, hl);
    float *data = (float *)(buf + 8 + hl);
    for (int i = 0; i < n; i++) {
        int64_t cnt = 1;
        for (int d = 0; d < t[i].nd; d++) cnt *= t[i].shape[d];
        tu_fill_uniform(data, (size_t)cnt, 100 + (uint64_t)i, t[i].lo, t[i].hi);
        data += cnt;
    }
    char *path = tu_write_temp(".safetensors", buf, total);
    free(buf);
    return path;
}

/* Runs the model on the cpu plugin with the weights (NULL: seeded), fused or not (no_fuse); returns
 * the output (malloc'd), the number of fused steps of op kind `op` and, in joined (len bytes, may
 * be NULL), what each of them joined ("c2 (fused) c5 (fused) "). */
static float *run_steps(const char *yaml, const char *weights, int no_fuse, const char *op, int *count, char *joined,
                        size_t len, int64_t *n) {
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.weights_path = weights;
    so.no_fuse = no_fuse;
    cr_assert_eq(tu_open_session(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", yaml, &so, &ctx, &m, &s, &err), DL_OK, "%s",
                 err.msg);
    *count = 0;
    if (joined) joined[0] = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        if (st.kind != DL_STEP_FUSED || strcmp(st.op, op)) continue;
        (*count)++;
        if (joined) snprintf(joined + strlen(joined), len - strlen(joined), "%s ", st.backend);
    }
    dl_tensor in = *dl_session_input(s, 0);
    int64_t nx = dl_tensor_numel(&in);
    float *x = malloc((size_t)nx * sizeof *x);
    tu_fill_uniform(x, (size_t)nx, 7, -1, 1);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    const dl_tensor *y = dl_session_output(s, 0);
    *n = dl_tensor_numel(y);
    float *out = malloc((size_t)*n * sizeof *out);
    memcpy(out, y->data, (size_t)*n * sizeof *out);
    free(x);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
    return out;
}

/* Runs the model with the weights, folded or not; the output and the number of fused batchnorm steps. */
static float *run(const char *yaml, const char *weights, int no_fuse, int *folded, int64_t *n) {
    return run_steps(yaml, weights, no_fuse, "batchnorm", folded, NULL, 0, n);
}

#define BN(layer, c)                                                             \
    {layer ".weight", 1, {c}, 0.5f, 1.5f}, {layer ".bias", 1, {c}, -0.5f, 0.5f}, \
        {layer ".running_mean", 1, {c}, -0.3f, 0.3f}, {                          \
        layer ".running_var", 1, {c}, 0.3f, 2.0f                                 \
    }

/* Runs yaml with the weights t folded (default) and not (no_fuse): `want` batchnorms fold, none
 * without fusion, and both outputs agree. */
static void check_fold(const char *yaml, const tensor_spec *t, int nt, int want, const char *what) {
    char *w = write_weights(t, nt);
    int folded, plain;
    int64_t n, n2;
    float *y = run(yaml, w, 0, &folded, &n), *ref = run(yaml, w, 1, &plain, &n2);
    cr_expect_eq(folded, want, "%s: %d batchnorms folded, not %d", what, folded, want);
    cr_expect_eq(plain, 0, "no_fuse keeps every batchnorm");
    cr_assert_eq(n, n2);
    double nmse = tu_nmse(ref, y, (size_t)n);
    cr_expect(nmse < 1e-12, "%s: folded output differs from the unfolded one: NMSE %.3g", what, nmse);
    unlink(w);
    free(w);
    free(y);
    free(ref);
}

Test(fold, batchnorm_folds_into_conv_and_agrees) {
    static const char yaml[] = "model: fold\ninputs:\n  - {name: x, shape: [2, 3, 9, 7]}\nlayers:\n"
                               "  - {name: c1, op: conv2d, filters: 5, kernel: 3, padding: 1, bias: false}\n"
                               "  - {name: b1, op: batchnorm}\n"
                               "  - {name: r1, op: relu}\n"
                               "  - {name: c2, op: conv2d, filters: 4, kernel: 3, stride: 2}\n"
                               "  - {name: b2, op: batchnorm, eps: 0.001}\n";
    const tensor_spec t[] = {{"c1.weight", 4, {5, 3, 3, 3}, -0.5f, 0.5f},
                             BN("b1", 5),
                             {"c2.weight", 4, {4, 5, 3, 3}, -0.5f, 0.5f},
                             {"c2.bias", 1, {4}, -1, 1},
                             BN("b2", 4)};
    check_fold(yaml, t, sizeof t / sizeof t[0], 2, "both batchnorms fold into their convs");
}

Test(fold, batchnorm_folds_into_conv3d_and_agrees) {
    static const char yaml[] = "model: fold3d\ninputs:\n  - {name: x, shape: [1, 3, 5, 7, 6]}\nlayers:\n"
                               "  - {name: c1, op: conv3d, filters: 4, kernel: [3, 3, 3], padding: 1, bias: false}\n"
                               "  - {name: b1, op: batchnorm}\n"
                               "  - {name: r1, op: relu}\n";
    const tensor_spec t[] = {{"c1.weight", 5, {4, 3, 3, 3, 3}, -0.5f, 0.5f}, BN("b1", 4)};
    check_fold(yaml, t, sizeof t / sizeof t[0], 1, "the batchnorm folds into the conv3d");
}

Test(fold, conv_output_used_twice_keeps_its_batchnorm) {
    static const char yaml[] = "model: nofold\ninputs:\n  - {name: x, shape: [1, 3, 6, 6]}\nlayers:\n"
                               "  - {name: c1, op: conv2d, filters: 3, kernel: 1}\n"
                               "  - {name: b1, op: batchnorm}\n"
                               "  - {name: s, op: add, inputs: [c1, b1]}\n";
    const tensor_spec t[] = {{"c1.weight", 4, {3, 3, 1, 1}, -1, 1}, {"c1.bias", 1, {3}, -1, 1}, BN("b1", 3)};
    check_fold(yaml, t, sizeof t / sizeof t[0], 0, "c1's output also feeds the add: folding would change it");
}

/* ---- residual adds (fuse.c's fuse_residual) ---- */

/* `want` adds fuse, into the layers `into` names in order, and the output agrees with no_fuse's */
static void check_residual(const char *yaml, int want, const char *into) {
    int adds, plain;
    int64_t n, n2;
    char joined[256], none[256];
    float *y = run_steps(yaml, NULL, 0, "add", &adds, joined, sizeof joined, &n);
    float *ref = run_steps(yaml, NULL, 1, "add", &plain, none, sizeof none, &n2);
    cr_expect_eq(adds, want, "%d residual adds fused, not %d", adds, want);
    cr_expect_eq(plain, 0, "no_fuse fuses no add");
    cr_expect(strstr(joined, into) != NULL, "fused into '%s', expected '%s'", joined, into);
    cr_assert_eq(n, n2);
    double nmse = tu_nmse(ref, y, (size_t)n);
    cr_expect(nmse < 1e-12, "fused output differs from the unfused one: NMSE %.3g", nmse);
    free(y);
    free(ref);
}

Test(fold, residual_adds_fuse_into_the_conv_or_linear_before_them) {
    /* a basic block (conv, batchnorm, + the block's input, relu), then a downsampling block whose
     * shortcut conv (c5) comes after the main path's (c4): the add fuses into c5, the conv that
     * runs last, with c4's output as its residual; then a linear + residual */
    static const char yaml[] = "model: res\ninputs:\n  - {name: x, shape: [2, 6, 9, 11]}\nlayers:\n"
                               "  - {name: c1, op: conv2d, filters: 6, kernel: 3, padding: 1}\n"
                               "  - {name: r1, op: relu}\n"
                               "  - {name: c2, op: conv2d, filters: 6, kernel: 3, padding: 1, bias: false}\n"
                               "  - {name: b2, op: batchnorm}\n"
                               "  - {name: a2, op: add, inputs: [b2, x]}\n"
                               "  - {name: r2, op: relu}\n"
                               "  - {name: c4, op: conv2d, filters: 10, kernel: 3, stride: 2, padding: 1}\n"
                               "  - {name: c5, op: conv2d, filters: 10, kernel: 1, stride: 2, inputs: [r2]}\n"
                               "  - {name: b5, op: batchnorm}\n"
                               "  - {name: a5, op: add, inputs: [c4, b5]}\n"
                               "  - {name: r5, op: relu}\n"
                               "  - {name: f, op: flatten}\n"
                               "  - {name: l1, op: linear, units: 300}\n"
                               "  - {name: a6, op: add, inputs: [f, l1]}\n";
    check_residual(yaml, 3, "c2 (fused) c5 (fused) l1 (fused) ");
    /* DLRUN_FUSE_RESIDUAL=0, the A/B switch, keeps every add; the relus then fuse into the adds */
    setenv("DLRUN_FUSE_RESIDUAL", "0", 1);
    int adds;
    int64_t n;
    free(run_steps(yaml, NULL, 0, "add", &adds, NULL, 0, &n));
    unsetenv("DLRUN_FUSE_RESIDUAL");
    cr_expect_eq(adds, 0, "DLRUN_FUSE_RESIDUAL=0 fused %d adds", adds);
}

Test(fold, residual_adds_that_must_not_fuse) {
    static const char yaml[] = "model: nores\ninputs:\n  - {name: x, shape: [1, 4, 7, 7]}\nlayers:\n"
                               "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                               "  - {name: a1, op: add, inputs: [c1, x]}\n"
                               "  - {name: c2, op: conv2d, filters: 4, kernel: 1, inputs: [c1]}\n"
                               "  - {name: a2, op: add, inputs: [c2, c2]}\n"
                               "  - {name: c3, op: conv2d, filters: 4, kernel: 1, padding: 0, inputs: [a1]}\n"
                               "  - {name: r3, op: relu}\n"
                               "  - {name: a3, op: add, inputs: [a2, r3]}\n"
                               "  - {name: c4, op: conv2d, filters: 1, kernel: 1}\n"
                               "  - {name: a4, op: add, inputs: [c4, a3]}\n";
    /* a1: c1 has two readers; a2: c2 + c2; a3: r3 is c3's relu (an activation before the add);
     * a4: c4 [1,1,7,7] + a3 [1,4,7,7] broadcasts. None fuses. */
    check_residual(yaml, 0, "");
}
