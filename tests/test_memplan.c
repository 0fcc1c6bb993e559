/* test_memplan.c — the memory planner on synthetic graphs (chains, diamonds, residual blocks,
 * concat, random lifetimes), each plan checked by brute force: no two buffers live at the same
 * step share a byte; the real models' plans against their lower bounds at batch 1 and 8; and
 * elided concats (inputs planned as slices of the output) against the same models copying. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memplan.h"
#include "model_yaml.h"
#include "session.h"
#include "test_util.h"

static void check(const dl_mem_request *r, int n, double max_ratio, const char *what) {
    size_t *off = calloc((size_t)n + 1, sizeof *off);
    dl_mem_plan_stats st;
    cr_assert(dl_mem_plan(r, n, 64, off, &st));
    int i = -1, j = -1;
    cr_expect(dl_mem_plan_verify(r, n, off, &i, &j), "%s: buffers %d and %d overlap while both live", what, i, j);
    for (int k = 0; k < n; k++) {
        cr_expect_eq(off[k] % 64, 0, "%s: offset not aligned", what);
        cr_expect_leq(off[k] + r[k].size, st.peak, "%s: buffer %d past the arena", what, k);
        if (r[k].share >= 0) cr_expect_eq(off[k], off[r[k].share], "%s: in-place pair split", what);
    }
    cr_expect_geq(st.peak, st.lower_bound, "%s", what);
    cr_expect_leq((double)st.peak, max_ratio * (double)st.lower_bound, "%s: peak %zu vs lower bound %zu", what, st.peak,
                  st.lower_bound);
    cr_expect_leq(st.peak, st.naive, "%s", what);
    free(off);
}

Test(memplan, chain_reuses_two_buffers) {
    /* x0 -> x1 -> ... -> x9, each read only by the next step: two buffers suffice */
    dl_mem_request r[10];
    for (int i = 0; i < 10; i++) r[i] = (dl_mem_request){1000u * (size_t)(10 - i), i, i + 1, -1};
    check(r, 10, 1.0, "chain");
    size_t off[10];
    dl_mem_plan_stats st;
    dl_mem_plan(r, 10, 64, off, &st);
    cr_expect_lt(st.peak, st.naive / 2);
}

Test(memplan, diamond_and_residual_and_concat) {
    /* diamond: a -> (b, c) -> d */
    dl_mem_request dia[4] = {{4096, 0, 2, -1}, {4096, 1, 3, -1}, {4096, 2, 3, -1}, {4096, 3, 4, -1}};
    check(dia, 4, 1.0, "diamond");
    /* residual block: x feeds conv1 and the add; conv1 -> bn -> relu -> conv2 -> add */
    dl_mem_request res[6] = {{8192, 0, 5, -1}, {8192, 1, 2, -1}, {8192, 2, 3, 1},
                             {8192, 3, 4, 2},  {8192, 4, 5, -1}, {8192, 5, 6, 4}};
    check(res, 6, 1.0, "residual (in place)");
    /* concat of three branches of different sizes */
    dl_mem_request cat[5] = {{1000, 0, 3, -1}, {3000, 1, 4, -1}, {2000, 2, 4, -1}, {500, 3, 4, -1}, {5500, 4, 5, -1}};
    check(cat, 5, 1.1, "concat");
}

Test(memplan, random_lifetimes_never_overlap) {
    uint64_t seed = 12345;
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + trial % 60;
        dl_mem_request r[64];
        float u[4];
        for (int i = 0; i < n; i++) {
            tu_fill_uniform(u, 4, seed++, 0, 1);
            int first = (int)(u[0] * 40), len = (int)(u[1] * 12);
            r[i] = (dl_mem_request){1 + (size_t)(u[2] * 100000), first, first + len, -1};
        }
        check(r, n, 100.0, "random"); /* validity is the point here; the ratio is checked below */
    }
}

/* 1 if slot a lies (transitively) inside slot b: an elided concat's input inside its output. */
static int inside(const dl_session *s, int a, int b) {
    for (int i = s->slots[a].within; i >= 0; i = s->slots[i].within)
        if (i == b) return 1;
    return 0;
}

/* Brute force over a planned session's own slots: two slots live at the same step never share a
 * byte, unless one runs in place over the other (share) or lies inside it (an elided concat's
 * input), and a slice lies within its concat's bytes and lifetime. */
static void expect_plan_valid(const dl_session *s, const char *name) {
    for (int i = 0; i < s->n_slots; i++) {
        const dl_slot *a = &s->slots[i], *c = a->within >= 0 ? &s->slots[a->within] : NULL;
        if (!c) continue;
        cr_expect(c->offset <= a->offset && a->offset + a->size <= c->offset + c->size,
                  "%s: slice %d outside its concat's slot %d", name, i, a->within);
        cr_expect(c->first <= a->first && a->last <= c->last, "%s: slice %d outlives its concat's slot", name, i);
        cr_expect_eq(a->share, -1, "%s: a slice %d taken over in place", name, i);
    }
    for (int i = 0; i < s->n_slots; i++)
        for (int j = i + 1; j < s->n_slots; j++) {
            const dl_slot *a = &s->slots[i], *b = &s->slots[j];
            int ra = i, rb = j;
            while (s->slots[ra].share >= 0) ra = s->slots[ra].share;
            while (s->slots[rb].share >= 0) rb = s->slots[rb].share;
            if (s->places[a->place].dom != s->places[b->place].dom || ra == rb || inside(s, i, j) || inside(s, j, i))
                continue;
            int live = a->first <= b->last && b->first <= a->last;
            int clash = a->offset < b->offset + b->size && b->offset < a->offset + a->size;
            cr_assert(!(live && clash), "%s: slots %d and %d overlap while live", name, i, j);
        }
}

/* name's plan at this batch. Batch 1 as a user gets it (placement and layout measured); larger
 * batches on the cpu plugin in NHWC, measuring nothing: VGG-16 at batch 8 spent 25 s (ASan: over
 * two minutes) timing its ops on a 2-core machine for a test of its memory plan. */
static void model_plan(const char *name, int64_t batch) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s", DLRUN_SOURCE_DIR, name);
    dl_context_options co = {sizeof co, 2, 0, DLRUN_PLUGIN_DIR, 1};
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err;
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK);
    cr_assert_eq(dl_model_load(path, &m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = batch;
    so.micro_batch = batch; /* this batch's plan (auto measures: parts of it may win) */
    if (batch > 1) so.backend = "cpu", so.layout = DL_LAYOUT_MODE_NHWC;
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    dl_memory_info mi;
    dl_session_memory(s, 0, &mi);
    cr_expect_str_eq(mi.domain, "host");
    cr_expect_leq((double)mi.peak_bytes, 1.1 * (double)mi.lower_bound_bytes,
                  "%s batch %lld: planned %llu, lower bound %llu", name, (long long)batch,
                  (unsigned long long)mi.peak_bytes, (unsigned long long)mi.lower_bound_bytes);
    if (batch > 1 || strstr(name, "vgg"))
        cr_expect_lt(mi.peak_bytes, mi.naive_bytes / 2, "%s: reuse should at least halve memory", name);
    expect_plan_valid(s, name);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

Test(memplan, models_within_ten_percent_of_lower_bound, .timeout = 300) {
    model_plan("vgg.yaml", 1);
    model_plan("vgg.yaml", 8);
    model_plan("resnet18.yaml", 1);
    model_plan("resnet18.yaml", 8);
    model_plan("lenet.yaml", 1);
}

/* ---- elided concats: inputs written straight into the concat's output (concat_elide.c) ---- */

/* A session of yaml on plugins (seeded weights) with these options, the batch at once (auto
 * measures: parts of it may win), its memory plan checked by brute force. */
typedef struct planned {
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
} planned;

static planned open_planned(const char *plugins, const char *yaml, int64_t batch, int layout, int no_fuse) {
    planned p;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = batch;
    so.micro_batch = batch;
    so.layout = layout;
    so.no_fuse = no_fuse;
    cr_assert_eq(tu_open_session(plugins, yaml, &so, &p.ctx, &p.m, &p.s, &err), DL_OK, "%s", err.msg);
    expect_plan_valid(p.s, "planned model");
    return p;
}

/* Runs p twice (the second run finds the first's data in the arena) on input 0 drawn from U(-1, 1)
 * with this seed, which each run must leave as it was (the caller's array), then frees p; returns
 * the outputs one after another (malloc'd, *n floats). */
static float *run_twice_and_close(planned *p, uint64_t seed, int64_t *n) {
    dl_error err = {{0}};
    dl_tensor in = *dl_session_input(p->s, 0);
    const int64_t nx = dl_tensor_numel(&in);
    float *x = malloc((size_t)nx * sizeof *x), *x0 = malloc((size_t)nx * sizeof *x0);
    tu_fill_uniform(x0, (size_t)nx, seed, -1, 1);
    memcpy(x, x0, (size_t)nx * sizeof *x);
    in.data = x;
    float *y = NULL;
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(dl_session_run(p->s, &in, 1, &err), DL_OK, "%s", err.msg);
        cr_expect_eq(memcmp(x, x0, (size_t)nx * sizeof *x), 0, "run %d wrote into the caller's input", r);
        *n = 0;
        for (int i = 0; i < dl_session_output_count(p->s); i++) *n += dl_tensor_numel(dl_session_output(p->s, i));
        free(y);
        y = malloc((size_t)*n * sizeof *y);
        int64_t u = 0;
        for (int i = 0; i < dl_session_output_count(p->s); i++) {
            const dl_tensor *t = dl_session_output(p->s, i);
            memcpy(y + u, t->data, (size_t)dl_tensor_numel(t) * sizeof *y);
            u += dl_tensor_numel(t);
        }
    }
    free(x), free(x0);
    dl_session_free(p->s);
    dl_model_free(p->m);
    dl_context_free(p->ctx);
    return y;
}

/* Runs the model (seeded weights, a seeded input) and returns its outputs one after another
 * (malloc'd, *n floats); *elided gets the count of elided concats, and each one's inputs are
 * checked to be consecutive slices of its output, the whole plan by brute force. The slices are
 * NCHW runs (auto measures: nhwc may win). */
static float *run_concats(const char *plugins, const char *yaml, int64_t batch, int no_fuse, int64_t *n, int *elided) {
    planned p = open_planned(plugins, yaml, batch, DL_LAYOUT_MODE_NCHW, no_fuse);
    dl_session *s = p.s;
    *elided = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info info;
        dl_session_step(s, k, &info);
        if (info.kind != DL_STEP_ELIDED) continue;
        ++*elided;
        const dl_op *op = dl_session_step_op(s, k, NULL);
        cr_assert(op, "an elided step gives its op");
        cr_expect_eq(op->kind, DL_OP_CONCAT);
        const char *at = op->outputs[0].data;
        for (int j = 0; j < op->n_inputs; j++) {
            cr_expect_eq((const char *)op->inputs[j].data, at, "%s: input %d is not the next slice of the output",
                         info.layer, j);
            at += dl_tensor_numel(&op->inputs[j]) * (int64_t)sizeof(float);
        }
    }
    return run_twice_and_close(&p, 5, n);
}

/* The model with its concats elided against the same model run op by op (no_fuse: every concat
 * copies); returns how many were elided. */
static int expect_same_as_copying(const char *yaml, int64_t batch) {
    int64_t n, n0;
    int elided, none;
    float *y = run_concats(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", yaml, batch, 0, &n, &elided);
    float *ref = run_concats(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", yaml, batch, 1, &n0, &none);
    cr_assert_eq(none, 0, "no_fuse elides nothing");
    cr_assert_eq(n, n0);
    double e = tu_nmse(ref, y, (size_t)n);
    cr_expect_leq(e, 1e-14, "batch %lld: outputs differ from the copying run (nmse %g)", (long long)batch, e);
    free(y), free(ref);
    return elided;
}

/* Two fire-module-like joins, one feeding the next, with a slice read again after both concats
 * (its buffer must live on inside theirs), a pool reading a slice before the concat, and a
 * container that is a model output; slices 16 channels of 9x11 and up, each 64-byte aligned. */
static const char fire_yaml[] = "model: joins\ninputs:\n  - {name: x, shape: [1, 4, 9, 11]}\nlayers:\n"
                                "  - {name: a, op: conv2d, filters: 16, kernel: 3, padding: 1, inputs: [x]}\n"
                                "  - {name: ar, op: relu}\n"
                                "  - {name: b, op: conv2d, filters: 32, kernel: 1, inputs: [x]}\n"
                                "  - {name: c, op: maxpool2d, kernel: 3, stride: 1, padding: 1, inputs: [ar]}\n"
                                "  - {name: j, op: concat, inputs: [ar, b, c]}\n"
                                "  - {name: d, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                "  - {name: j2, op: concat, inputs: [j, d]}\n"
                                "  - {name: e, op: conv2d, filters: 16, kernel: 1}\n"
                                "  - {name: f, op: add, inputs: [e, ar]}\n"
                                "outputs: [f, j2]\n";

Test(concat_elide, joins_write_into_the_concat_and_match_the_copying_run) {
    cr_expect_eq(expect_same_as_copying(fire_yaml, 1), 2, "both concats elided, the first inside the second");
    /* at batch 2 an input is two runs of the output, not one: every concat copies */
    cr_expect_eq(expect_same_as_copying(fire_yaml, 2), 0);
    /* rows of a matrix: two linear layers joined along the features at batch 1 */
    static const char rows[] = "model: rows\ninputs:\n  - {name: x, shape: [1, 4, 9, 11]}\nlayers:\n"
                               "  - {name: fl, op: flatten}\n"
                               "  - {name: l1, op: linear, units: 16, inputs: [fl]}\n"
                               "  - {name: l2, op: linear, units: 48, inputs: [fl]}\n"
                               "  - {name: j, op: concat, inputs: [l1, l2], axis: 1}\n"
                               "  - {name: o, op: linear, units: 10}\n";
    cr_expect_eq(expect_same_as_copying(rows, 1), 1);
}

/* Where an input cannot be a slice, the concat runs and copies: a model input, one value given
 * twice, a slice that would start off the arena's alignment (3 channels of 9x11 are 1188 bytes),
 * a value that is a slice of an earlier concat already. Only j4 (a, then t at 16 channels) joins. */
Test(concat_elide, concats_that_must_copy_still_do) {
    static const char yaml[] = "model: kept\ninputs:\n  - {name: x, shape: [1, 4, 9, 11]}\nlayers:\n"
                               "  - {name: a, op: conv2d, filters: 16, kernel: 1, inputs: [x]}\n"
                               "  - {name: t, op: conv2d, filters: 3, kernel: 1, inputs: [x]}\n"
                               "  - {name: u, op: conv2d, filters: 16, kernel: 1, inputs: [x]}\n"
                               "  - {name: j1, op: concat, inputs: [x, a]}\n"
                               "  - {name: j2, op: concat, inputs: [a, a]}\n"
                               "  - {name: j3, op: concat, inputs: [t, a]}\n"
                               "  - {name: j4, op: concat, inputs: [a, t]}\n"
                               "  - {name: j5, op: concat, inputs: [u, t]}\n"
                               "outputs: [j1, j2, j3, j4, j5]\n";
    cr_expect_eq(expect_same_as_copying(yaml, 1), 1);
}

/* In a device's memory (fakedev: 256-byte alignment) the inputs' writers may be copies: `a` runs
 * on fakecpu and is uploaded into its slice, `b` is written into its own by fakedev. fakedev does
 * not compute concat at all, so the right output shows the concat was elided. */
Test(concat_elide, device_slices_written_by_an_op_and_by_a_copy) {
    cr_assert(tu_fresh_cache());
    setenv("DLFAKE_FAKEDEV_US", "0", 1);
    setenv("DLFAKE_FAKECPU_US", "0", 1);
    setenv("DLFAKE_FAKEDEV_OPS", "RELU,ADD,CONCAT", 1);
    static const char yaml[] = "model: devjoin\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakecpu}\n"
                               "  - {name: b, op: add, inputs: [x, x], backend: fakedev}\n"
                               "  - {name: j, op: concat, inputs: [a, b], axis: 1, backend: fakedev}\n"
                               "  - {name: y, op: relu, backend: fakedev}\n";
    int64_t n;
    int elided;
    float *y = run_concats(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so",
                           yaml, 1, 0, &n, &elided);
    cr_expect_eq(elided, 1);
    cr_assert_eq(n, 128);
    float x[64];
    tu_fill_uniform(x, 64, 5, -1, 1);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        bad += y[i] != (x[i] > 0 ? x[i] : 0);
        bad += y[64 + i] != (x[i] > 0 ? 2 * x[i] : 0);
    }
    cr_expect_eq(bad, 0, "%d of 128 outputs wrong", bad);
    free(y);
    unsetenv("DLFAKE_FAKEDEV_US");
    unsetenv("DLFAKE_FAKECPU_US");
    unsetenv("DLFAKE_FAKEDEV_OPS");
}

/* ---- a conv over its fused residual, in place (ABI 1.10 kernel_in_place) ---- */

#define ONEDNN_SO DLRUN_PLUGIN_DIR "/libdlrun-onednn.so"

/* Runs yaml on plugins as run_twice_and_close does and returns its outputs (malloc'd, *n floats);
 * *over counts the steps of a conv with a fused residual that write over it (the output's storage
 * that of the residual), *fused all of them. */
static float *run_residuals(const char *plugins, const char *yaml, int layout, int64_t *n, int *over, int *fused) {
    planned p = open_planned(plugins, yaml, 1, layout, 0);
    *over = *fused = 0;
    for (int k = 0; k < dl_session_step_count(p.s); k++) {
        const dl_op *op = dl_session_step_op(p.s, k, NULL);
        if (!op || op->kind != DL_OP_CONV2D || !op->attrs->residual) continue;
        ++*fused;
        *over += op->outputs[0].data == op->inputs[op->n_inputs - 1].data;
    }
    return run_twice_and_close(&p, 11, n);
}

/* yaml on the onednn plugin against the cpu plugin, NCHW (the conv's output in oneDNN's blocked
 * layout, reordered: the residual copied to its blocked form) and NHWC (the conv writes the
 * output itself: no copy at all); *fused as run_residuals; returns the count written in place. */
static int expect_residuals_right(const char *yaml, int *fused) {
    int64_t n, n0;
    int over[2], dummy, f;
    float *ref = run_residuals(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", yaml, DL_LAYOUT_MODE_NCHW, &n0, &dummy, &f);
    for (int l = 0; l < 2; l++) {
        float *y = run_residuals(ONEDNN_SO, yaml, l ? DL_LAYOUT_MODE_NHWC : DL_LAYOUT_MODE_NCHW, &n, &over[l], fused);
        cr_assert_eq(n, n0);
        const double e = tu_nmse(ref, y, (size_t)n);
        cr_expect_leq(e, 1e-10, "%s: onednn against cpu, nmse %g", l ? "nhwc" : "nchw", e);
        free(y);
    }
    free(ref);
    cr_expect_eq(over[0], over[1], "as many in place in nchw (%d) as in nhwc (%d)", over[0], over[1]);
    return over[1];
}

/* A stem, then two residual blocks (3x3 convs, then 1x1 ones): each conv adding a residual that
 * dies there writes over it, on the onednn plugin, whose sum post-op reads it only there. */
Test(in_place, conv_writes_over_a_residual_that_dies_there) {
    if (access(ONEDNN_SO, F_OK) != 0) cr_skip_test("the onednn plugin is not built (no oneDNN)");
    cr_assert(tu_fresh_cache());
    static const char blocks[] = "model: blocks\ninputs:\n  - {name: x, shape: [1, 5, 9, 11]}\nlayers:\n"
                                 "  - {name: sc, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                 "  - {name: s, op: relu}\n"
                                 "  - {name: c1c, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                 "  - {name: c1, op: relu}\n"
                                 "  - {name: c2, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                 "  - {name: a, op: add, inputs: [c2, s]}\n"
                                 "  - {name: r, op: relu}\n"
                                 "  - {name: c3, op: conv2d, filters: 16, kernel: 1}\n"
                                 "  - {name: c4, op: conv2d, filters: 16, kernel: 1}\n"
                                 "  - {name: a2, op: add, inputs: [c4, r]}\n"
                                 "  - {name: g, op: global_avgpool}\n";
    int fused;
    cr_expect_eq(expect_residuals_right(blocks, &fused), 2);
    cr_expect_eq(fused, 2);
}

/* Where the residual is read again later or is the conv's own input too, the conv writes
 * elsewhere; where it is the model's input, over the session's copy of it, never over the
 * caller's array (run_residuals checks it). */
Test(in_place, conv_keeps_a_residual_still_needed) {
    if (access(ONEDNN_SO, F_OK) != 0) cr_skip_test("the onednn plugin is not built (no oneDNN)");
    cr_assert(tu_fresh_cache());
    static const char later[] = "model: later\ninputs:\n  - {name: x, shape: [1, 5, 9, 11]}\nlayers:\n"
                                "  - {name: sc, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                "  - {name: s, op: relu}\n"
                                "  - {name: c1, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                "  - {name: a, op: add, inputs: [c1, s]}\n"
                                "  - {name: b, op: add, inputs: [a, s]}\n"
                                "  - {name: g, op: global_avgpool}\n";
    static const char own_input[] = "model: own\ninputs:\n  - {name: x, shape: [1, 5, 9, 11]}\nlayers:\n"
                                    "  - {name: sc, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                    "  - {name: s, op: relu}\n"
                                    "  - {name: c1, op: conv2d, filters: 16, kernel: 3, padding: 1, inputs: [s]}\n"
                                    "  - {name: a, op: add, inputs: [c1, s]}\n"
                                    "  - {name: g, op: global_avgpool}\n";
    static const char model_input[] = "model: given\ninputs:\n  - {name: x, shape: [1, 16, 9, 11]}\nlayers:\n"
                                      "  - {name: c1, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                      "  - {name: c2, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                                      "  - {name: a, op: add, inputs: [c2, x]}\n"
                                      "  - {name: g, op: global_avgpool}\n";
    int fused;
    cr_expect_eq(expect_residuals_right(later, &fused), 0);
    cr_expect_eq(fused, 1, "later: the first add fused");
    cr_expect_eq(expect_residuals_right(own_input, &fused), 0);
    cr_expect_eq(fused, 1, "own input: fused");
    cr_expect_eq(expect_residuals_right(model_input, &fused), 1);
    cr_expect_eq(fused, 1, "model input: fused");
}

/* ---- layout views: transposes between channels-last and row-major that copy nothing
 * (layout_view.c) ---- */

/* ConvNeXt's block at odd sizes: a channels-last conv's output read as rows by a layer norm and a
 * linear (reshaped to rows and back), read back channels-last, scaled by [C, 1, 1] and added to
 * the conv's output (read again after its view); a last view that is a model output. */
static const char views_yaml[] = "model: views\ninputs:\n  - {name: x, shape: [1, 5, 7, 9]}\n"
                                 "constants:\n  - {name: scale, shape: [11, 1, 1]}\nlayers:\n"
                                 "  - {name: a, op: conv2d, filters: 11, kernel: 3, padding: 1, inputs: [x]}\n"
                                 "  - {name: t, op: transpose, perm: [0, 2, 3, 1]}\n"
                                 "  - {name: n, op: layer_norm, axis: 3}\n"
                                 "  - {name: r, op: reshape, shape: [-1, 11]}\n"
                                 "  - {name: l, op: linear, units: 11}\n"
                                 "  - {name: r2, op: reshape, shape: [-1, 7, 9, 11]}\n"
                                 "  - {name: u, op: transpose, perm: [0, 3, 1, 2]}\n"
                                 "  - {name: m, op: mul, inputs: [scale, u]}\n"
                                 "  - {name: s, op: add, inputs: [m, a]}\n"
                                 "  - {name: b, op: conv2d, filters: 6, kernel: 3, padding: 1}\n"
                                 "  - {name: o, op: transpose, perm: [0, 2, 3, 1]}\n"
                                 "outputs: [o, s]\n";

/* The output pointer of the step of layer `name` in s, or NULL. */
static const void *step_output(const dl_session *s, const char *name) {
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info info;
        dl_session_step(s, k, &info);
        const dl_op *op = info.kind == DL_STEP_COPY ? NULL : dl_session_step_op(s, k, NULL);
        if (op && !strcmp(info.layer, name)) return op->outputs[0].data;
    }
    return NULL;
}

/* Runs yaml on the cpu plugin at batch 2 under layout (no_fuse: every transpose runs) and returns
 * its outputs (malloc'd, *n floats); *views counts the elided transposes, each checked to read
 * its output's memory in the other layout, *copies the transposes the host inserted (COPY steps). */
static float *run_views(const char *yaml, int layout, int no_fuse, int64_t *n, int *views, int *copies) {
    planned p = open_planned(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", yaml, 2, layout, no_fuse);
    *views = *copies = 0;
    for (int k = 0; k < dl_session_step_count(p.s); k++) {
        dl_step_info info;
        dl_session_step(p.s, k, &info);
        *copies += info.kind == DL_STEP_COPY && !strcmp(info.op, "transpose");
        if (info.kind != DL_STEP_ELIDED) continue;
        ++*views;
        const dl_op *op = dl_session_step_op(p.s, k, NULL);
        cr_assert(op && op->kind == DL_OP_TRANSPOSE, "%s: an elided step that is no transpose", info.layer);
        cr_expect_eq(op->inputs[0].data, op->outputs[0].data, "%s: its input is not its output's memory", info.layer);
        const int to_rows = op->attrs->perm[1] == 2;
        cr_expect_eq(dl_tensor_layout(&op->inputs[0]), to_rows ? DL_LAYOUT_CHANNELS_LAST : DL_LAYOUT_ROW_MAJOR,
                     "%s: input layout", info.layer);
        cr_expect_eq(dl_tensor_layout(&op->outputs[0]), to_rows ? DL_LAYOUT_ROW_MAJOR : DL_LAYOUT_CHANNELS_LAST,
                     "%s: output layout", info.layer);
    }
    if (*views && !strcmp(yaml, views_yaml)) /* the linear writes into u's buffer: both reshapes in place */
        cr_expect_eq(step_output(p.s, "l"), step_output(p.s, "u"), "the linear does not write into the view");
    return run_twice_and_close(&p, 7, n);
}

/* Channels-last: the three transposes are views (only the model's input and the output s are
 * transposed, by the host), with the same outputs as every transpose run as a copy (no_fuse);
 * row-major: none is (the convs' outputs are rows already), the outputs within rounding. */
Test(layout_view, transposes_of_a_layout_copy_nothing) {
    int64_t n, n0, n1;
    int views, copies, none, copies0;
    float *y = run_views(views_yaml, DL_LAYOUT_MODE_NHWC, 0, &n, &views, &copies);
    float *ref = run_views(views_yaml, DL_LAYOUT_MODE_NHWC, 1, &n0, &none, &copies0);
    cr_expect_eq(views, 3);
    cr_expect_eq(copies, 2, "the input into the first conv and the output s out of channels-last");
    cr_expect_eq(none, 0, "no_fuse runs every transpose");
    cr_assert_eq(n, n0);
    double e = tu_nmse(ref, y, (size_t)n);
    cr_expect_leq(e, 1e-14, "outputs differ from the copying run (nmse %g)", e);
    float *rows = run_views(views_yaml, DL_LAYOUT_MODE_NCHW, 0, &n1, &none, &copies0);
    cr_expect_eq(none, 0, "row-major: nothing is channels-last");
    cr_expect_eq(copies0, 0);
    cr_assert_eq(n1, n);
    e = tu_nmse(rows, y, (size_t)n);
    cr_expect_leq(e, 1e-10, "channels-last and row-major differ (nmse %g)", e);
    free(y), free(ref), free(rows);
}

/* Two views of one tensor cannot both be its buffer: the second runs, reading the input
 * channels-last and writing rows (the cpu plugin converts its input), and a view of a view
 * (rows, then channels-last again) nests in the buffer of the last. */
Test(layout_view, a_second_view_of_one_tensor_runs) {
    static const char yaml[] = "model: twice\ninputs:\n  - {name: x, shape: [1, 5, 7, 9]}\nlayers:\n"
                               "  - {name: a, op: conv2d, filters: 11, kernel: 3, padding: 1, inputs: [x]}\n"
                               "  - {name: t1, op: transpose, perm: [0, 2, 3, 1], inputs: [a]}\n"
                               "  - {name: t2, op: transpose, perm: [0, 2, 3, 1], inputs: [a]}\n"
                               "  - {name: back, op: transpose, perm: [0, 3, 1, 2], inputs: [t1]}\n"
                               "  - {name: s, op: sub, inputs: [back, a]}\n"
                               "  - {name: d, op: add, inputs: [t1, t2]}\n"
                               "outputs: [s, d]\n";
    int64_t n, n0;
    int views, copies, none, copies0;
    float *y = run_views(yaml, DL_LAYOUT_MODE_NHWC, 0, &n, &views, &copies);
    float *ref = run_views(yaml, DL_LAYOUT_MODE_NHWC, 1, &n0, &none, &copies0);
    cr_expect_eq(views, 2, "t1 and back; t2 runs");
    cr_assert_eq(n, n0);
    cr_expect_leq(tu_nmse(ref, y, (size_t)n), 1e-14);
    const int64_t ns = 2 * 11 * 7 * 9; /* s = back - a: zeros; d = 2 t1 */
    int bad = 0;
    for (int64_t i = 0; i < ns; i++) bad += y[i] != 0;
    cr_expect_eq(bad, 0, "%d of s's elements are not zero", bad);
    free(y), free(ref);
}
