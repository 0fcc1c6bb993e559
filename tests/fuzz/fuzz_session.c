/* fuzz_session.c — libFuzzer harness for the whole path from a model file to outputs: the input is
 * a YAML model, read as dl_model_load reads one, then a session on the cpu plugin (seeded weights,
 * fusion, storage formats, memory plan, kernels prepared) and one run with generated inputs.
 *
 * Work is capped so that a huge but valid model is skipped, not a timeout: at most FZ_MAX_ELEMENTS
 * elements over all values before the session is created, FZ_MAX_FLOPS per run (the step record of
 * a session made with nothing measured) before a session that measures is made or any runs, and a
 * FZ_MAX_MEMORY arena. A value above the limit of one tensor
 * (DL_MAX_TENSOR_ELEMENTS, op_table.h) is never skipped: the reader promises none gets through,
 * so the session must refuse such a model itself, and the harness lets it try. A model naming a `weights:` file is
 * skipped (fuzz_safetensors covers that reader). A hash of the input picks the session's batch,
 * precision, fusion and the kind of input values (ordinary, specials such as NaN, or token ids
 * out of range), so one model is tried several ways as it mutates. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model_yaml.h"
#include "session.h"

#define FZ_MAX_ELEMENTS (1 << 21) /* all values together: 8 MiB of f32 */
#define FZ_MAX_FLOPS 5e7
#define FZ_MAX_MEMORY (64 << 20)
#define FZ_READER_BOUND ((double)DL_MAX_TENSOR_ELEMENTS)

static dl_context *ctx;
/* What became of the inputs: DLRUN_FUZZ_STATS=1 prints it at exit, to see how deep they get. */
static long n_inputs, n_parsed, n_skipped, n_sessions, n_runs, n_run_ok;

static void print_stats(void) {
    fprintf(stderr,
            "fuzz_session: %ld inputs, %ld models, %ld skipped (caps, weights file), %ld sessions, %ld runs (%ld ok)\n",
            n_inputs, n_parsed, n_skipped, n_sessions, n_runs, n_run_ok);
}

static void quiet(void *user, int level, const char *msg) { (void)user, (void)level, (void)msg; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    const char *plugin = getenv("DLRUN_FUZZ_CPU_PLUGIN");
    dl_context_options co = {sizeof co, 1, 0, plugin && *plugin ? plugin : DLRUN_FUZZ_CPU_PLUGIN, 1};
    dl_error err = {{0}};
    if (dl_context_create(&co, &ctx, &err) != DL_OK || !dl_context_backend(ctx, "cpu")) {
        fprintf(stderr, "fuzz_session: cannot load the cpu plugin %s: %s\n", co.plugin_path,
                ctx && dl_context_plugin_count(ctx) && dl_context_plugin(ctx, 0)->reason
                    ? dl_context_plugin(ctx, 0)->reason
                    : err.msg);
        abort();
    }
    ctx->host.log = quiet; /* plugins keep the host table: warnings go nowhere */
    if (getenv("DLRUN_FUZZ_STATS")) atexit(print_stats);
    return 0;
}

static uint64_t fnv1a(const uint8_t *data, size_t size) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

static double elements(const dl_shape *s) {
    double n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (double)s->d[d];
    return n;
}

/* 1 when the model is small enough to bind and run here, or so large that only a bug lets it
 * through the reader (then the session must refuse it); 0 to skip it. */
static int within_caps(const dl_graph *g, int64_t batch) {
    dl_shape *shapes = calloc((size_t)g->n_values + 1, sizeof *shapes);
    if (!shapes) return 0;
    dl_error err;
    int ok = dl_graph_infer(g, batch, shapes, &err) == DL_OK;
    double total = 0;
    for (int v = 0; ok && v < g->n_values; v++) {
        double e = elements(&shapes[v]);
        if (e > FZ_READER_BOUND) {
            free(shapes);
            return 1;
        }
        total += e;
    }
    free(shapes);
    return ok && total <= FZ_MAX_ELEMENTS;
}

static float special(uint64_t i) {
    static const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, 0.5f, 1e6f};
    return v[i % (sizeof v / sizeof v[0])];
}

/* One run with generated inputs, unless it would take more than FZ_MAX_FLOPS. */
static void run_once(dl_session *s, uint64_t h) {
    double flops = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info info;
        dl_session_step(s, i, &info);
        flops += info.flops;
    }
    if (!(flops <= FZ_MAX_FLOPS)) return;
    int n = dl_session_input_count(s), mode = (int)(h >> 8 & 3);
    dl_tensor *ins = calloc((size_t)n + 1, sizeof *ins);
    int ok = ins != NULL;
    for (int i = 0; ok && i < n; i++) {
        ins[i] = *dl_session_input(s, i);
        double count = 1;
        for (int d = 0; d < ins[i].ndim; d++) count *= (double)ins[i].shape[d];
        if (!(count <= FZ_MAX_ELEMENTS)) {
            ok = 0;
            break;
        }
        size_t k = (size_t)count;
        if (ins[i].dtype.code == DL_DTYPE_INT) {
            int64_t *x = malloc(k * sizeof *x + 1), bound = dl_session_input_bound(s, i);
            for (size_t j = 0; x && j < k; j++) {
                int64_t b = bound > 0 ? bound : 1, idx = (int64_t)(j * 7 % (uint64_t)(2 * b)) - b; /* [-b, b) */
                x[j] = mode == 3 && j == k / 2 ? (j % 2 ? INT64_MIN : b) : idx; /* mode 3: one out of range */
            }
            ins[i].data = x;
        } else {
            float *x = malloc(k * sizeof *x + 1);
            for (size_t j = 0; x && j < k; j++)
                x[j] = mode == 2 ? special(j + h) : (float)sin((double)j * 0.37 + (double)i) * 2.0f;
            ins[i].data = x;
        }
        ok = ins[i].data != NULL;
    }
    dl_error err;
    n_runs += ok;
    if (ok && dl_session_run(s, ins, n, &err) == DL_OK) {
        n_run_ok++;
        volatile float sum = 0; /* read every output: ASan checks it lies inside its buffer */
        for (int o = 0; o < dl_session_output_count(s); o++) {
            const dl_tensor *y = dl_session_output(s, o);
            double count = 1;
            for (int d = 0; d < y->ndim; d++) count *= (double)y->shape[d];
            for (size_t j = 0; j < (size_t)count; j++) sum += ((const float *)y->data)[j];
        }
        (void)sum;
    }
    for (int i = 0; ins && i < n; i++) free(ins[i].data);
    free(ins);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dl_graph *g = NULL;
    dl_error err;
    n_inputs++;
    if (dl_model_parse_yaml((const char *)data, size, "fuzz.yaml", &g, &err) != DL_OK) return 0;
    n_parsed++;
    uint64_t h = fnv1a(data, size);
    static const int precisions[] = {DL_PRECISION_F32, DL_PRECISION_F32, DL_PRECISION_BF16, DL_PRECISION_F16};
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = (h >> 16) % 4 == 0 ? 2 : 0;
    so.seed = h >> 32;
    so.backend = "cpu";
    so.precision = precisions[h % 4];
    so.no_fuse = (int)(h >> 4 & 1);
    so.max_memory = FZ_MAX_MEMORY;
    if (g->weights_path || !within_caps(g, so.batch)) {
        n_skipped++;
        dl_graph_free(g);
        return 0;
    }
    dl_model *m = calloc(1, sizeof *m);
    if (!m) {
        dl_graph_free(g);
        return 0;
    }
    m->g = g;
    /* First a session that measures nothing (one layout, the batch at once): its steps' flops bound
     * the work of the one the hash asks for, whose placement times ops and whose micro-batch trials
     * run it (a conv of 0.5 GFLOP timed so under the sanitizers passed libFuzzer's 10 s). A model
     * over FZ_MAX_FLOPS, and every other one, stays with the first. */
    dl_session_options fixed = so;
    fixed.layout = (h >> 8 & 1) ? DL_LAYOUT_MODE_NHWC : DL_LAYOUT_MODE_NCHW;
    fixed.micro_batch = DL_MAX_BATCH;
    dl_session *s = NULL;
    if (dl_session_create(ctx, m, &fixed, &s, &err) == DL_OK) {
        double flops = 0;
        for (int i = 0; i < dl_session_step_count(s); i++) {
            dl_step_info info;
            dl_session_step(s, i, &info);
            flops += info.flops;
        }
        if (flops <= FZ_MAX_FLOPS && (h >> 9 & 1)) { /* the options the hash asked for */
            dl_session_free(s);
            s = NULL;
            if (dl_session_create(ctx, m, &so, &s, &err) != DL_OK) s = NULL;
        }
    }
    if (s) {
        n_sessions++;
        run_once(s, h);
    }
    dl_session_free(s);
    dl_model_free(m);
    return 0;
}
