/* test_micro_batch.c — a batch run in parts (dl_session_options.micro_batch, docs/micro-batch.md):
 * asked parts give the outputs of the batch run at once, the caller sees the whole batch, the steps
 * count a run once with the whole batch's flops; bad sizes and models that cannot be split are
 * refused with a reason; auto halves the part while the timedcpu test backend (waits growing with
 * the square of the images an op runs) makes that faster, caches its choice, keeps the batch at
 * once where parts give other outputs (a softmax across the batch), tries nothing on a quick
 * model, and no part whose largest layer no cache holds; parts run at once, each on a thread of
 * its own, asked or where auto measures them faster. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "session.h"
#include "test_util.h"
#include "timing_cache.h"

/* The time beside `what` in a batch: description, "... 19.59 ms at once": the number before it
 * (each pair reads "<plan> X ms against Y ms <plan>"), or -1 */
static double ms_before(const char *desc, const char *what) {
    const char *at = strstr(desc, what), *b = at;
    while (b && b > desc && ((b[-1] >= '0' && b[-1] <= '9') || b[-1] == '.')) b--;
    return at && b < at ? strtod(b, NULL) : -1;
}

#define CPU DLRUN_PLUGIN_DIR "/libdlrun-cpu.so"
#define TIMED DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so"

/* a small CNN: conv, pool, flatten, linear; the batch first everywhere */
static const char cnn[] = "model: parts\ninputs:\n  - {name: x, shape: [6, 3, 13, 11]}\nlayers:\n"
                          "  - {name: c, op: conv2d, filters: 8, kernel: 3, padding: 1}\n"
                          "  - {name: r, op: relu}\n"
                          "  - {name: p, op: maxpool2d, kernel: 2, stride: 2}\n"
                          "  - {name: f, op: flatten}\n"
                          "  - {name: l, op: linear, units: 7}\n";

typedef struct opened {
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
} opened;

/* at_once: dl_session_options.parts_at_once (on a context of 2 threads) */
static dl_status open_at_once(const char *plugins, const char *yaml, int64_t batch, int64_t micro, int at_once,
                              const char *backend, opened *o, dl_error *err) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = batch;
    so.micro_batch = micro;
    so.parts_at_once = at_once;
    so.backend = backend;
    return tu_open_session(plugins, yaml, &so, &o->ctx, &o->m, &o->s, err);
}

/* parts one at a time, never at once (the tests of the halving and the cut) */
static dl_status open_with(const char *plugins, const char *yaml, int64_t batch, int64_t micro, const char *backend,
                           opened *o, dl_error *err) {
    return open_at_once(plugins, yaml, batch, micro, 1, backend, o, err);
}

static void close_all(opened *o) {
    dl_session_free(o->s);
    dl_model_free(o->m);
    dl_context_free(o->ctx);
}

/* Runs o's session on a seeded input of its (whole) shape; returns its first output, copied. */
static float *run_seeded(opened *o, int64_t *n) {
    dl_tensor in = *dl_session_input(o->s, 0);
    const int64_t count = dl_tensor_numel(&in);
    float *x = malloc((size_t)count * sizeof *x);
    tu_fill_uniform(x, (size_t)count, 11, -1, 1);
    in.data = x;
    dl_error err = {{0}};
    cr_assert_eq(dl_session_run(o->s, &in, 1, &err), DL_OK, "%s", err.msg);
    free(x);
    const dl_tensor *y = dl_session_output(o->s, 0);
    *n = dl_tensor_numel(y);
    float *out = malloc((size_t)*n * sizeof *out);
    memcpy(out, y->data, (size_t)*n * sizeof *out);
    return out;
}

static double total_flops(const dl_session *s) {
    double f = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info si;
        dl_session_step(s, k, &si);
        f += si.flops;
    }
    return f;
}

Test(micro_batch, asked_parts_give_the_outputs_of_the_batch_at_once) {
    cr_assert(tu_fresh_cache());
    dl_error err = {{0}};
    opened whole, part;
    cr_assert_eq(open_with(CPU, cnn, 0, 6, "cpu", &whole, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(whole.s), "6 at once");
    int64_t n0, n;
    float *ref = run_seeded(&whole, &n0);
    const int64_t sizes[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(open_with(CPU, cnn, 0, sizes[i], "cpu", &part, &err), DL_OK, "%s", err.msg);
        char want[64];
        snprintf(want, sizeof want, "6 in %lld parts of %lld (asked)", (long long)(6 / sizes[i]), (long long)sizes[i]);
        cr_expect_str_eq(dl_session_batching(part.s), want);
        cr_expect_eq(dl_session_micro_batch(part.s), sizes[i]);
        cr_expect_eq(dl_session_input(part.s, 0)->shape[0], 6, "the caller sees the whole batch");
        cr_expect_eq(dl_session_output(part.s, 0)->shape[0], 6);
        cr_expect_eq(dl_session_output(part.s, 0)->shape[1], 7);
        float *got = run_seeded(&part, &n);
        cr_assert_eq(n, n0);
        /* each image's output in its place: the same kernels at another batch, up to rounding */
        cr_expect_leq(tu_nmse(ref, got, (size_t)n), 1e-12, "parts of %lld", (long long)sizes[i]);
        cr_expect_neq(memcmp(got, got + 7, 7 * sizeof *got), 0, "images differ");
        /* the steps: the part's shapes, once a run, the whole batch's flops */
        cr_expect_leq(fabs(total_flops(part.s) - total_flops(whole.s)), 1e-6 * total_flops(whole.s));
        dl_step_info si;
        dl_session_step(part.s, 0, &si);
        cr_expect_eq(si.runs, 1, "a run counts once, not once a part");
        cr_expect_eq(si.shape[0], sizes[i], "the step runs at the part's batch");
        cr_expect_gt(si.last_ms, 0);
        dl_run_times t;
        dl_session_last_run_times(part.s, &t);
        cr_expect_gt(t.compute_ms, 0);
        free(got);
        close_all(&part);
    }
    /* a part as large as the batch, or larger: at once */
    cr_assert_eq(open_with(CPU, cnn, 0, 64, "cpu", &part, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(part.s), "6 at once");
    close_all(&part);
    free(ref);
    close_all(&whole);
}

Test(micro_batch, bad_sizes_inputs_and_models_are_refused) {
    cr_assert(tu_fresh_cache());
    dl_error err = {{0}};
    opened o;
    cr_expect_eq(open_with(CPU, cnn, 0, 4, "cpu", &o, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "micro-batch 4 must divide the batch, 6"), "%s", err.msg);
    close_all(&o);
    cr_expect_eq(open_with(CPU, cnn, 0, -2, "cpu", &o, &err), DL_E_INVALID);
    close_all(&o);
    /* an output without the batch first (a reshape to one row) cannot be put together from parts */
    static const char flat[] = "model: flat\ninputs:\n  - {name: x, shape: [4, 6]}\nlayers:\n"
                               "  - {name: r, op: relu}\n"
                               "  - {name: s, op: reshape, shape: [1, -1]}\n";
    cr_expect_eq(open_with(CPU, flat, 0, 2, "cpu", &o, &err), DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "has it first"), "%s", err.msg);
    close_all(&o);
    /* a run given one part's input instead of the batch's */
    cr_assert_eq(open_with(CPU, cnn, 0, 3, "cpu", &o, &err), DL_OK, "%s", err.msg);
    int64_t shape[4] = {3, 3, 13, 11};
    float *x = calloc(3 * 3 * 13 * 11, sizeof *x);
    dl_tensor in = *dl_session_input(o.s, 0);
    in.shape = shape, in.data = x;
    cr_expect_eq(dl_session_run(o.s, &in, 1, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "[6, 3, 13, 11]") && strstr(err.msg, "in parts"), "%s", err.msg);
    cr_expect_eq(dl_session_run(o.s, &in, 2, &err), DL_E_INVALID);
    free(x);
    close_all(&o);
}

/* Parts at once: each a thread (of the context's 2) and a plan of its own on a context of one
 * thread; the outputs those of the batch at once, each image's in its place, run after run; the
 * steps count a run once; the memory report holds every plan. */
Test(micro_batch, asked_parts_at_once_give_the_outputs_of_the_batch_at_once) {
    cr_assert(tu_fresh_cache());
    dl_error err = {{0}};
    opened whole, part;
    cr_assert_eq(open_with(CPU, cnn, 0, 6, "cpu", &whole, &err), DL_OK, "%s", err.msg);
    int64_t n0, n;
    float *ref = run_seeded(&whole, &n0);
    dl_memory_info mem_whole;
    dl_session_memory(whole.s, 0, &mem_whole);
    const int64_t sizes[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(open_at_once(CPU, cnn, 0, sizes[i], 2, "cpu", &part, &err), DL_OK, "%s", err.msg);
        char want[96];
        snprintf(want, sizeof want, "6 in %lld parts of %lld, 2 at a time on 1 thread each (asked)",
                 (long long)(6 / sizes[i]), (long long)sizes[i]);
        cr_expect_str_eq(dl_session_batching(part.s), want);
        cr_expect_eq(part.s->n_sibs, 1);
        cr_expect_eq(part.s->ctx->host.n_threads, 1, "each part on one thread");
        cr_expect_eq(dl_session_input(part.s, 0)->shape[0], 6, "the caller sees the whole batch");
        for (int r = 0; r < 2; r++) { /* a second run over the buffers the first left */
            float *got = run_seeded(&part, &n);
            cr_assert_eq(n, n0);
            cr_expect_leq(tu_nmse(ref, got, (size_t)n), 1e-10, "parts of %lld, run %d", (long long)sizes[i], r);
            cr_expect_neq(memcmp(got, got + 7, 7 * sizeof *got), 0, "images differ");
            free(got);
        }
        cr_expect_leq(fabs(total_flops(part.s) - total_flops(whole.s)), 1e-6 * total_flops(whole.s));
        dl_step_info si;
        dl_session_step(part.s, 0, &si);
        cr_expect_eq(si.runs, 2, "two runs count twice, not once a part");
        cr_expect_eq(si.shape[0], sizes[i]);
        cr_expect_gt(si.last_ms, 0);
        dl_run_times t;
        dl_session_last_run_times(part.s, &t);
        cr_expect_gt(t.compute_ms, 0);
        dl_memory_info mem;
        dl_session_memory(part.s, 0, &mem);
        cr_expect_eq(mem.weight_bytes, 2 * mem_whole.weight_bytes, "both plans' (seeded) weights: %llu",
                     (unsigned long long)mem.weight_bytes);
        close_all(&part);
    }
    free(ref);
    close_all(&whole);
}

Test(micro_batch, bad_parts_at_once_are_refused) {
    cr_assert(tu_fresh_cache());
    dl_error err = {{0}};
    opened o;
    cr_expect_eq(open_at_once(CPU, cnn, 0, 1, 3, "cpu", &o, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "parts at once (3) must be 0 (auto), 1, or at most the threads (2)"), "%s", err.msg);
    close_all(&o);
    cr_expect_eq(open_at_once(CPU, cnn, 0, 1, -1, "cpu", &o, &err), DL_E_INVALID);
    close_all(&o);
    cr_expect_eq(open_at_once(CPU, cnn, 0, 6, 2, "cpu", &o, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "need the batch, 6, in parts"), "%s", err.msg);
    close_all(&o);
    /* parts that do not share out evenly: the caller's thread takes one more */
    cr_assert_eq(open_at_once(CPU, cnn, 3, 1, 2, "cpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(o.s), "3 in 3 parts of 1, 2 at a time on 1 thread each (asked)");
    int64_t n;
    free(run_seeded(&o, &n));
    cr_expect_eq(n, 3 * 7);
    close_all(&o);
}

/* Each op of a run on n images waits 150 us x n^2 (timedcpu): 8 images at once 9.6 ms an op,
 * in parts of 1, 8 x 0.15 */
static const char chain[] = "model: chain\ninputs:\n  - {name: x, shape: [8, 4, 5, 5]}\nlayers:\n"
                            "  - {name: c, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                            "  - {name: r, op: relu}\n"
                            "  - {name: p, op: global_avgpool}\n";

Test(micro_batch, auto_halves_the_part_while_that_is_faster_and_caches_the_choice) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    dl_error err = {{0}};
    char first[700] = "";
    for (int round = 0; round < 2; round++) { /* measured, then from the cache */
        opened o;
        cr_assert_eq(open_with(TIMED, chain, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
        const char *got = dl_session_batching(o.s);
        /* the same times for the choice and the batch at once: read back, not measured again (a
         * cache it could not read is rebuilt) */
        /* every pair read back as measured (a cache that refused one was rebuilt, and measured again) */
        if (round) cr_expect_str_eq(got, first, "the choice was measured again: %s | %s", got, first);
        else snprintf(first, sizeof first, "%s", got);
        /* each pair's two times side by side: parts of 1 beside parts of 2 (the last it won),
         * then parts of 4 against the batch at once, parts of 2 against parts of 4 */
        double parts_ms, vs_ms;
        cr_expect_eq(
            sscanf(got, "8 in 8 parts of 1 (auto: %lf ms a run, against %lf ms in parts of 2; ", &parts_ms, &vs_ms), 2,
            "round %d: %s", round, got);
        cr_expect_lt(parts_ms, vs_ms * 0.97, "round %d: %s", round, got);
        cr_expect(strstr(got, "; parts of 4 ") && strstr(got, "; parts of 2 "), "round %d: %s", round, got);
        cr_expect_lt(parts_ms * 3, ms_before(got, " ms at once"), "round %d: %s", round, got);
        cr_expect_eq(dl_session_micro_batch(o.s), 1);
        /* the kept session has not run: the measuring runs were not its own */
        dl_step_info si;
        dl_session_step(o.s, 0, &si);
        cr_expect_eq(si.runs, 0, "round %d", round);
        int64_t n;
        free(run_seeded(&o, &n));
        cr_expect_eq(n, 8 * 4);
        close_all(&o);
    }
    /* asked at once, it stays so */
    opened o;
    cr_assert_eq(open_with(TIMED, chain, 0, 8, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(o.s), "8 at once");
    close_all(&o);
    /* DLRUN_MICRO_BATCH_RUNS=0: nothing tried */
    setenv("DLRUN_MICRO_BATCH_RUNS", "0", 1);
    cr_assert_eq(open_with(TIMED, chain, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(o.s), "8 at once (auto: DLRUN_MICRO_BATCH_RUNS=0)");
    close_all(&o);
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}

/* Parts of 1, one a thread: two threads' timedcpu waits overlap, so auto keeps them over parts of
 * 1 one at a time (measured first), and reads the choice back from the cache. */
Test(micro_batch, auto_runs_parts_at_once_where_that_is_faster) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    dl_error err = {{0}};
    opened o;
    cr_assert_eq(open_with(TIMED, chain, 0, 8, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    int64_t n0, n;
    float *ref = run_seeded(&o, &n0);
    close_all(&o);
    char first[700] = "";
    for (int round = 0; round < 2; round++) { /* measured, then from the cache */
        cr_assert_eq(open_at_once(TIMED, chain, 0, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
        const char *got = dl_session_batching(o.s);
        /* every pair read back as measured (a cache that refused one was rebuilt, and measured again) */
        if (round) cr_expect_str_eq(got, first, "the choice was measured again: %s | %s", got, first);
        else snprintf(first, sizeof first, "%s", got);
        double ms, vs_ms;
        cr_expect_eq(sscanf(got,
                            "8 in 8 parts of 1, 2 at a time on 1 thread each (auto: %lf ms a run, against %lf ms in "
                            "parts of 1; ",
                            &ms, &vs_ms),
                     2, "round %d: %s", round, got);
        cr_expect_lt(ms, vs_ms * 0.97, "round %d: %s", round, got);
        cr_expect_lt(ms * 3, ms_before(got, " ms at once"), "round %d: %s", round, got);
        cr_expect(strstr(got, "; parts of 1 "), "round %d: one at a time not measured: %s", round, got);
        /* the pairs kept with the choice (a plan of parts at once among them) leave the cache
         * readable: a value it refused made every session rebuild it, placement's times too */
        char warn[600] = "", text[1 << 16] = "";
        dl_tcache *c = dl_tcache_open(0, warn, sizeof warn);
        FILE *f = c && dl_tcache_path(c) ? fopen(dl_tcache_path(c), "rb") : NULL;
        if (f) text[fread(text, 1, sizeof text - 1, f)] = 0, fclose(f);
        cr_expect(c && !warn[0] && strstr(text, ";pairs\""), "round %d: %s", round, warn);
        dl_tcache_free(c);
        cr_expect_eq(o.s->n_sibs, 1, "round %d", round);
        float *y = run_seeded(&o, &n);
        cr_assert_eq(n, n0);
        cr_expect_leq(tu_nmse(ref, y, (size_t)n), 1e-10, "round %d: other outputs than at once", round);
        free(y);
        close_all(&o);
    }
    /* the same plan with parts_at_once 1: never side by side, the cached choice notwithstanding */
    cr_assert_eq(open_with(TIMED, chain, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect(strstr(dl_session_batching(o.s), "8 in 8 parts of 1 (auto: ") == dl_session_batching(o.s), "%s",
              dl_session_batching(o.s));
    /* and the line says the cache's choice was not taken */
    cr_expect(
        strstr(dl_session_batching(o.s), "; the cached choice, in parts of 1, 2 at a time, is not this session's"),
        "%s", dl_session_batching(o.s));
    cr_expect_eq(o.s->n_sibs, 0);
    close_all(&o);
    free(ref);
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}

/* Every halving is tried, not only while each is faster: with 5 ms more an op on 4 images, parts
 * of 4 run slower than the batch at once (2 x (2.4 + 5) against 9.6 ms an op), yet parts of 2
 * and 1 are faster, and parts of 1 are kept. */
Test(micro_batch, auto_tries_each_halving_past_one_that_is_not_faster) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    setenv("DLFAKE_TIMEDCPU_RUN_FOUR_US", "5000", 1);
    dl_error err = {{0}};
    opened o;
    cr_assert_eq(open_with(TIMED, chain, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    const char *got = dl_session_batching(o.s);
    cr_expect(strstr(got, "8 in 8 parts of 1 (auto: ") == got && strstr(got, "; parts of 4 "), "%s", got);
    cr_expect_eq(dl_session_micro_batch(o.s), 1);
    close_all(&o);
    unsetenv("DLFAKE_TIMEDCPU_RUN_FOUR_US");
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}

/* A part whose largest layer moves over 64 MiB is not tried (no cache holds it): here a relu reads
 * and writes 16.9 MB an image, so parts of 4 (67.5 MB) are left out and parts of 2 and 1 tried. */
static const char wide[] = "model: wide\ninputs:\n  - {name: x, shape: [8, 2, 1030, 1024]}\nlayers:\n"
                           "  - {name: r, op: relu}\n"
                           "  - {name: p, op: global_avgpool}\n";

Test(micro_batch, auto_leaves_out_parts_too_large_for_any_cache) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    dl_error err = {{0}};
    opened o;
    cr_assert_eq(open_with(TIMED, wide, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    const char *got = dl_session_batching(o.s);
    /* in parts of 2 or 1 (which: the relu's own time against the waits; under ASan parts of 1
     * measured slower than parts of 2), parts of 2 measured, parts of 4 never built */
    cr_expect(strstr(got, "8 in 8 parts of 1 (auto: ") == got || strstr(got, "8 in 4 parts of 2 (auto: ") == got, "%s",
              got);
    cr_expect(strstr(got, "8 in 4 parts of 2 (auto: ") == got || strstr(got, "; parts of 2 "), "%s", got);
    /* (then, where the first layers in parts came close, that trial too: under a loaded machine) */
    static const char four[] = "; parts of 4 not tried: a layer's 68 MB";
    const char *left = strstr(got, four), *after = left ? left + strlen(four) : NULL;
    cr_expect(after && (*after == ')' || *after == ';'), "%s", got);
    close_all(&o);
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}

/* The trials time each plan's runs warm, as a model's repeated runs are: a run on 1 image straight
 * after a run on 8 waits 40 ms more (its data evicted by the other plan's run). Timed straight
 * after the other plan, parts of 1 would take 40 ms more a run and lose to parts of 2; timed as
 * the second of two runs in a row they take 3 x 8 x 0.15 ms, and are kept. */
Test(micro_batch, auto_times_each_plan_warm) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    setenv("DLFAKE_TIMEDCPU_COLD_ONE_US", "40000", 1);
    dl_error err = {{0}};
    opened o;
    cr_assert_eq(open_with(TIMED, chain, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    const char *got = dl_session_batching(o.s);
    cr_expect(strstr(got, "8 in 8 parts of 1 (auto: ") == got, "%s", got);
    close_all(&o);
    unsetenv("DLFAKE_TIMEDCPU_COLD_ONE_US");
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}

Test(micro_batch, auto_keeps_the_batch_at_once_where_parts_give_other_outputs) {
    cr_assert(tu_fresh_cache());
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    /* a softmax across the batch: each image's output depends on the others */
    static const char mixing[] = "model: mixing\ninputs:\n  - {name: x, shape: [8, 6]}\nlayers:\n"
                                 "  - {name: l, op: linear, units: 5}\n"
                                 "  - {name: s, op: softmax, axis: 0}\n"
                                 "  - {name: r, op: relu}\n";
    dl_error err = {{0}};
    opened o;
    cr_assert_eq(open_with(TIMED, mixing, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    const char *got = dl_session_batching(o.s);
    cr_expect(strstr(got, "8 at once (auto: ") == got && strstr(got, "parts of 4 give other outputs"), "%s", got);
    cr_expect_eq(dl_session_micro_batch(o.s), 8);
    close_all(&o);
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
    /* a quick model is not tried (on one thread: on a loaded machine two can wait longer for a
     * core at each op's barrier than the model computes, run after run) */
    dl_context_options co = {sizeof co, 1, 0, CPU, 1};
    cr_assert_eq(dl_context_create(&co, &o.ctx, &err), DL_OK, "%s", err.msg);
    char *path = tu_write_temp(".yaml", cnn, strlen(cnn));
    cr_assert_eq(dl_model_load(path, &o.m, &err), DL_OK, "%s", err.msg);
    unlink(path);
    free(path);
    dl_session_options so;
    dl_session_options_init(&so);
    cr_assert_eq(dl_session_create(o.ctx, o.m, &so, &o.s, &err), DL_OK, "%s", err.msg);
    got = dl_session_batching(o.s);
    cr_expect(strstr(got, "6 at once (auto: a run takes ") == got && strstr(got, "under 5"), "%s", got);
    close_all(&o);
    /* batch 1: nothing to split */
    cr_assert_eq(open_with(CPU, cnn, 1, 0, "cpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(dl_session_batching(o.s), "1 at once");
    close_all(&o);
}

/* ---- the first layers in parts, the rest at once (batch_prefix.c) ---- */

/* Two convs and a pool, then a classifier: each op waits 0.15 ms x images^2 (parts win) and the
 * classifier's linears 5 ms more a run whatever their images (the whole batch at once wins): at
 * once about 67 ms a run, the best parts (of 4) 49, the convs and pool in parts of 1 and the
 * linears at once 34. */
static const char stages[] = "model: stages\ninputs:\n  - {name: x, shape: [8, 4, 5, 5]}\nlayers:\n"
                             "  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                             "  - {name: r, op: relu}\n"
                             "  - {name: c2, op: conv2d, filters: 6, kernel: 3, padding: 1}\n"
                             "  - {name: p, op: global_avgpool}\n"
                             "  - {name: f, op: flatten}\n"
                             "  - {name: l1, op: linear, units: 7}\n"
                             "  - {name: l2, op: linear, units: 5}\n";

/* The cut: after the flatten (the one value crossing there), the layers before it in parts (of 1,
 * or of 2 on a loaded machine);
 * the outputs those of the batch at once; the steps a run reports are the parts' (their flops
 * the whole batch's) and then the classifier's; the choice cached. */
Test(micro_batch, auto_runs_the_first_layers_in_parts_and_the_rest_at_once) {
    const char *dir = tu_fresh_cache();
    cr_assert(dir);
    unsetenv("DLRUN_MICRO_BATCH_RUNS");
    setenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US", "150", 1);
    setenv("DLFAKE_TIMEDCPU_RUN_FLAT_US", "5000", 1);
    dl_error err = {{0}};
    opened once;
    cr_assert_eq(open_with(TIMED, stages, 0, 8, "timedcpu", &once, &err), DL_OK, "%s", err.msg);
    int64_t n0;
    float *ref = run_seeded(&once, &n0);
    const double flops = total_flops(once.s);
    dl_memory_info mem_once;
    dl_session_memory(once.s, 0, &mem_once);
    close_all(&once);
    void *h = dlopen(TIMED, RTLD_NOW | RTLD_NOLOAD); /* loaded by the sessions above, never closed */
    int (*linear_prepares)(int64_t);
    void *sym = h ? dlsym(h, "dlfake_linear_prepares") : NULL;
    cr_assert(sym);
    memcpy(&linear_prepares, &sym, sizeof linear_prepares);
    for (int round = 0; round < 2; round++) { /* measured, then from the cache */
        opened o;
        int before[3] = {linear_prepares(1), linear_prepares(2), 0};
        cr_assert_eq(open_with(TIMED, stages, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
        const char *got = dl_session_batching(o.s);
        double ms, vs;
        long long parts = 0, images = 0; /* parts of 1 priced best (34 ms against 39 in parts of 2) */
        cr_expect_eq(sscanf(got,
                            "8: the first 5 of 7 layers in %lld parts of %lld, the rest at once (auto: %lf ms a run, "
                            "against %lf ms ",
                            &parts, &images, &ms, &vs),
                     4, "round %d: %s", round, got);
        cr_expect(images >= 1 && images <= 2 && parts * images == 8, "round %d: %s", round, got);
        cr_expect_lt(ms, vs * 0.97, "round %d: %s", round, got);
        cr_expect_lt(ms * 1.5, ms_before(got, " ms at once"), "round %d: %s", round, got);
        int64_t n;
        float *y = run_seeded(&o, &n);
        cr_assert_eq(n, n0);
        cr_expect_leq(tu_nmse(ref, y, (size_t)n), 1e-12, "round %d: other outputs than at once", round);
        cr_expect(fabs(total_flops(o.s) - flops) <= 1e-9 * flops, "round %d: flops %g, at once %g", round,
                  total_flops(o.s), flops);
        int parts_steps = 0, whole_steps = 0;
        for (int k = 0; k < dl_session_step_count(o.s); k++) {
            dl_step_info si;
            dl_session_step(o.s, k, &si);
            if (si.kind != DL_STEP_OP) continue;
            cr_expect_eq(si.runs, 1, "round %d, step %d (%s): a run counts once", round, k, si.layer);
            const int is_linear = !strcmp(si.op, "linear");
            cr_expect_eq(si.shape[0], is_linear ? 8 : images, "round %d: %s on %lld images", round, si.layer,
                         (long long)si.shape[0]);
            parts_steps += !is_linear, whole_steps += is_linear;
        }
        cr_expect_eq(whole_steps, 2, "round %d", round);
        /* the memory report adds the part's arena and (seeded) weights to the whole batch's; each
         * arena holds only its own steps' activations (trimmed): the convs' at 1 or 2 images, the
         * classifier's at 8, together less than the batch at once */
        dl_memory_info mem;
        dl_session_memory(o.s, 0, &mem);
        cr_expect_lt(mem.peak_bytes, mem_once.peak_bytes, "round %d: %llu planned, at once %llu", round,
                     (unsigned long long)mem.peak_bytes, (unsigned long long)mem_once.peak_bytes);
        cr_expect_eq(mem.weight_bytes, 2 * mem_once.weight_bytes, "round %d: weights %llu, at once %llu", round,
                     (unsigned long long)mem.weight_bytes, (unsigned long long)mem_once.weight_bytes);
        cr_expect_geq(parts_steps, 3, "round %d", round);
        /* each plan holds kernels and buffers for the steps it runs only: the part's up to the cut
         * (never prepared past it), the whole batch's after it (released) */
        const dl_session *w = o.s, *p = w->prefix;
        cr_assert(p, "round %d: no prefix", round);
        for (int k = 0; k < p->n_steps; k++)
            if (p->steps[k].kind == DL_STEP_OP)
                cr_expect_eq(p->steps[k].kernel != NULL, k < w->prefix_steps, "round %d: the part's step %d", round, k);
        for (int k = 0; k < w->n_steps; k++)
            if (w->steps[k].kind == DL_STEP_OP)
                cr_expect_eq(w->steps[k].kernel != NULL, k >= w->first_step, "round %d: the batch's step %d", round, k);
        int unused = 0;
        for (int i = 0; i < w->n_slots; i++) unused += w->slots[i].unused;
        cr_expect_gt(unused, 0, "round %d: the whole batch's plan keeps the first layers' buffers", round);
        if (round == 1 && images >= 1 && images <= 2) /* from the cache: no trials, only the two plans made */
            cr_expect_eq(linear_prepares(images), before[images - 1],
                         "the part's session prepared the linears after the cut (%d times)",
                         linear_prepares(images) - before[images - 1]);
        /* from the cache, the whole batch's session never prepared its first layers */
        cr_expect_eq(w->prepare_from_node, round ? w->prefix_cut + 1 : 0, "round %d", round);
        /* the caller gives the whole batch: half of it is refused, saying why */
        dl_tensor half = *dl_session_input(o.s, 0);
        int64_t dims[4] = {4, 4, 5, 5};
        float data[4 * 4 * 5 * 5] = {0};
        half.shape = dims, half.data = data;
        cr_expect_eq(dl_session_run(o.s, &half, 1, &err), DL_E_INVALID);
        cr_expect(strstr(err.msg, "shape [8, 4, 5, 5], got [4, 4, 5, 5] (this session runs its first layers in parts"),
                  "%s", err.msg);
        free(y);
        y = run_seeded(&o, &n); /* again, on the trimmed plans' buffers as the first run left them */
        cr_expect_leq(tu_nmse(ref, y, (size_t)n), 1e-12, "round %d: a second run differs", round);
        free(y);
        close_all(&o);
    }
    /* a cached cut that no longer holds (after c1, whose relu is fused into it: an edited file, or
     * another fusion): the whole batch's session, made without its first layers' kernels for it,
     * prepares them and runs at once */
    char path[512], *text = NULL, tmp[520];
    snprintf(path, sizeof path, "%s/dlrun/timing-cache.json", dir);
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    text = calloc(1, 1 << 20);
    len = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    char *at = strstr(text, ";prefix\":");
    cr_assert(at, "no cached cut");
    at += strlen(";prefix\":");
    while (*at == ' ' || *at == '\t') at++;
    cr_assert(*at >= '2' && *at <= '9' && (at[1] < '0' || at[1] > '9'), "cut + 1 = %.3s", at);
    *at = '1'; /* the cut after node 0 */
    snprintf(tmp, sizeof tmp, "%s.edit", path);
    f = fopen(tmp, "wb");
    cr_assert(f && fwrite(text, 1, len, f) == len);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0);
    free(text);
    opened o;
    cr_assert_eq(open_with(TIMED, stages, 0, 0, "timedcpu", &o, &err), DL_OK, "%s", err.msg);
    cr_expect(!strstr(dl_session_batching(o.s), "first"), "%s", dl_session_batching(o.s));
    cr_expect(strstr(dl_session_batching(o.s), "the cut cached for this plan no longer holds"), "%s",
              dl_session_batching(o.s));
    cr_expect_eq(o.s->prepare_from_node, 0);
    for (int k = 0; k < o.s->n_steps; k++)
        if (o.s->steps[k].kind == DL_STEP_OP) cr_expect(o.s->steps[k].kernel, "step %d has no kernel", k);
    int64_t n;
    float *y = run_seeded(&o, &n);
    cr_expect_leq(tu_nmse(ref, y, (size_t)n), 1e-12, "other outputs than at once: NMSE %g", tu_nmse(ref, y, (size_t)n));
    free(y);
    close_all(&o);
    free(ref);
    dlclose(h);
    unsetenv("DLFAKE_TIMEDCPU_RUN_FLAT_US");
    unsetenv("DLFAKE_TIMEDCPU_RUN_IMAGE2_US");
}
