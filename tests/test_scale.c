/* test_scale.c — models and files of hostile size still work, with the right answers (issue 20):
 * a 20,000-layer chain and a 20,000-layer fan-out through load, session, memory plan and run; the
 * graph's reader index against a brute-force count; a safetensors header of 20,000 tensors.
 * Nothing here is timed: tools/bench-scale measures the same paths at 10^5 against time budgets.
 * Before they were made near-linear, these took minutes at 10^5 (quadratic scans). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "model_yaml.h"
#include "names.h"
#include "safetensors.h"
#include "test_util.h"

#define LAYERS 20000
#define HEADER "model: deep\ninputs: [{name: x, shape: [1, 4]}]\nlayers:\n"

/* HEADER + LAYERS copies of line (with %d: the 1-based layer number) + tail, malloc'd. */
static char *deep_model(const char *line, const char *tail) {
    size_t cap = strlen(HEADER) + (size_t)LAYERS * (strlen(line) + 16) + strlen(tail) + 1, n = 0;
    char *t = malloc(cap);
    cr_assert(t);
    n += (size_t)snprintf(t, cap, "%s", HEADER);
    for (int i = 1; i <= LAYERS; i++) n += (size_t)snprintf(t + n, cap - n, line, i, i - 1);
    snprintf(t + n, cap - n, "%s", tail);
    return t;
}

/* Loads yaml, runs it once on the cpu plugin (one thread) with x = [-2, -1, 0.5, 3] and returns the
 * first output's four values in y. */
static void run_model(const char *yaml, float y[4], dl_session_options *so_in) {
    dl_context *ctx;
    dl_context_options co = {sizeof co, 1, 0, DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", 1};
    dl_error err = {{0}};
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK, "%s", err.msg);
    char *path = tu_write_temp(".yaml", yaml, strlen(yaml));
    dl_model *m;
    cr_assert_eq(dl_model_load(path, &m, &err), DL_OK, "%s", err.msg);
    unlink(path);
    free(path);
    cr_expect_eq(dl_model_layer_count(m), LAYERS);
    dl_session_options so;
    dl_session_options_init(&so);
    if (so_in) so = *so_in;
    dl_session *s;
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    float x[4] = {-2, -1, 0.5f, 3};
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    memcpy(y, dl_session_output(s, 0)->data, 4 * sizeof *y);
    dl_memory_info mi;
    dl_session_memory(s, 0, &mi);
    cr_expect_leq(mi.peak_bytes, mi.naive_bytes);
    cr_expect_geq(mi.peak_bytes, mi.lower_bound_bytes);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

Test(scale, a_20000_layer_chain_loads_plans_and_runs) {
    char *yaml = deep_model("  - {op: relu}\n", "");
    float y[4];
    run_model(yaml, y, NULL);
    float want[4] = {0, 0, 0.5f, 3};
    for (int i = 0; i < 4; i++) cr_expect_eq(y[i], want[i], "y[%d] = %g", i, y[i]);
    dl_session_options so; /* and keeping every activation (dlrun check): no buffer is reused */
    dl_session_options_init(&so);
    so.keep_activations = 1;
    run_model(yaml, y, &so);
    for (int i = 0; i < 4; i++) cr_expect_eq(y[i], want[i], "keep_activations: y[%d] = %g", i, y[i]);
    free(yaml);
}

Test(scale, a_20000_layer_dag_runs) {
    /* each layer adds the previous layer and the input: not a chain (placement's other path), and
     * x is read by every layer; layer i is x * (i + 1) for x >= 0 after the first relu */
    char *yaml = deep_model("  - {name: a%d, op: add, inputs: [a%d, x]}\n", "");
    memcpy(strstr(yaml, "[a0, x]"), "[x,  x]", 7); /* the first layer: x + x */
    float y[4];
    run_model(yaml, y, NULL);
    float x[4] = {-2, -1, 0.5f, 3};
    for (int i = 0; i < 4; i++) cr_expect_eq(y[i], x[i] * (LAYERS + 1), "y[%d] = %g", i, y[i]);
    free(yaml);
}

/* The reader index (dl_graph_index) agrees with a scan of every node's inputs and the outputs. */
Test(scale, reader_index_matches_a_scan) {
    char *yaml = deep_model("  - {name: a%d, op: add, inputs: [a%d, x]}\n", "outputs: [a1, a20000, x, a7]\n");
    memcpy(strstr(yaml, "[a0, x]"), "[x,  x]", 7);
    dl_graph *g;
    dl_error err = {{0}};
    cr_assert_eq(dl_model_parse_yaml(yaml, strlen(yaml), "dag.yaml", &g, &err), DL_OK, "%s", err.msg);
    int *count = calloc((size_t)g->n_values, sizeof *count);
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) count[g->nodes[i].inputs[j]]++;
    for (int v = 0; v < g->n_values; v++) {
        cr_assert_eq(dl_graph_consumers(g, v), count[v], "value %s", g->values[v].name);
        int out = 0;
        for (int k = 0; k < g->n_outputs; k++) out |= g->outputs[k] == v;
        cr_assert_eq(dl_graph_is_output(g, v), out, "value %s", g->values[v].name);
        for (int r = g->reader_start[v]; r < g->reader_start[v + 1]; r++) {
            const dl_node *n = &g->nodes[g->reader_node[r]];
            int reads = 0;
            for (int j = 0; j < n->n_inputs; j++) reads |= n->inputs[j] == v;
            cr_assert(reads, "node %s listed as a reader of %s", n->name, g->values[v].name);
        }
        cr_assert_eq(dl_graph_find_value(g, g->values[v].name), v);
    }
    cr_expect_eq(dl_graph_consumers(g, dl_graph_find_value(g, "x")), LAYERS + 1);
    cr_expect_eq(dl_graph_find_value(g, "a20001"), -1);
    free(count);
    dl_graph_free(g);
    free(yaml);
}

/* A header of n one-element F32 tensors t0..t{n-1} (and `extra` appended inside the object). */
static char *many_tensors(int n, const char *extra) {
    size_t cap = (size_t)n * 80 + strlen(extra) + 64, len = 1;
    char *json = malloc(cap);
    cr_assert(json);
    json[0] = '{';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", i,
                                4 * i, 4 * i + 4);
    len += (size_t)snprintf(json + len, cap - len, "%s}", extra);
    size_t total = 8 + len + 4 * (size_t)n;
    unsigned char *buf = calloc(total, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)len >> (8 * i));
    memcpy(buf + 8, json, len);
    float *data = (float *)(buf + 8 + len);
    for (int i = 0; i < n; i++) memcpy(&data[i], &(float){(float)i}, sizeof(float));
    char *path = tu_write_temp(".safetensors", buf, total);
    free(buf), free(json);
    return path;
}

Test(scale, a_header_of_20000_tensors) {
    char *path = many_tensors(LAYERS, "");
    dl_safetensors *st;
    dl_error err = {{0}};
    cr_assert_eq(dl_safetensors_open(path, &st, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(st->n_tensors, LAYERS);
    for (int i = 0; i < LAYERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        const dl_st_tensor *t = dl_safetensors_find(st, name);
        cr_assert(t, "%s not found", name);
        float v;
        memcpy(&v, t->data, sizeof v);
        cr_assert_eq(v, (float)i, "%s holds %g", name, v);
    }
    cr_expect_null(dl_safetensors_find(st, "t20000"));
    dl_safetensors_close(st);
    unlink(path);
    free(path);
    /* the last name repeats the first: found without comparing every pair */
    path = many_tensors(LAYERS, ",\"t0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
    cr_expect_eq(dl_safetensors_open(path, &st, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "tensor 't0' appears twice in the header"), "%s", err.msg);
    unlink(path);
    free(path);
}

/* The name map itself: many keys, repeats keep the first value, absent keys are -1. */
Test(scale, names_map) {
    dl_names m = {0};
    cr_expect_eq(dl_names_find(&m, "a"), -1, "an empty map finds nothing");
    char(*keys)[16] = malloc(100000 * sizeof *keys);
    for (int i = 0; i < 100000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        cr_assert_eq(dl_names_add(&m, keys[i], i), 1);
    }
    cr_expect_eq(dl_names_add(&m, "k5", 7), 0, "a repeat is not added");
    for (int i = 0; i < 100000; i++) cr_assert_eq(dl_names_find(&m, keys[i]), i);
    cr_expect_eq(dl_names_find(&m, "k100000"), -1);
    cr_expect_eq(dl_names_find(&m, ""), -1);
    dl_names_free(&m);
    free(keys);
}
