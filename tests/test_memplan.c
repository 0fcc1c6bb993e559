/* test_memplan.c — the memory planner on synthetic graphs (chains, diamonds, residual blocks,
 * concat, random lifetimes), each plan checked by brute force: no two buffers live at the same
 * step share a byte; and the real models' plans against their lower bounds at batch 1 and 8. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

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
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    dl_memory_info mi;
    dl_session_memory(s, 0, &mi);
    cr_expect_str_eq(mi.domain, "host");
    cr_expect_leq((double)mi.peak_bytes, 1.1 * (double)mi.lower_bound_bytes,
                  "%s batch %lld: planned %llu, lower bound %llu", name, (long long)batch,
                  (unsigned long long)mi.peak_bytes, (unsigned long long)mi.lower_bound_bytes);
    if (batch > 1 || strstr(name, "vgg"))
        cr_expect_lt(mi.peak_bytes, mi.naive_bytes / 2, "%s: reuse should at least halve memory", name);
    /* brute force over the session's own slots: simultaneously live slots never overlap */
    for (int i = 0; i < s->n_slots; i++)
        for (int j = i + 1; j < s->n_slots; j++) {
            const dl_slot *a = &s->slots[i], *b = &s->slots[j];
            int ra = i, rb = j;
            while (s->slots[ra].share >= 0) ra = s->slots[ra].share;
            while (s->slots[rb].share >= 0) rb = s->slots[rb].share;
            if (s->places[a->place].dom != s->places[b->place].dom || ra == rb) continue;
            int live = a->first <= b->last && b->first <= a->last;
            int clash = a->offset < b->offset + b->size && b->offset < a->offset + a->size;
            cr_assert(!(live && clash), "%s: slots %d and %d overlap while live", name, i, j);
        }
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
