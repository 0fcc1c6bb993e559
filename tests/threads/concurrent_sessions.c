/* concurrent_sessions.c — sessions of one model, created and run at once from several threads at
 * different batch sizes and backends (and a batch in parts run two at a time, on threads of its own
 * inside the worker's), each give exactly the output of a serial run; the model
 * is left as loaded. A plain program (exit 0: passed), not a Criterion suite, because it also
 * runs in tools/test's ThreadSanitizer build (DLRUN_SANITIZE=thread), where Criterion cannot run
 * (its inheritable arena fails under TSan, Criterion issue #274) and any data race is a failure
 * (TSAN_OPTIONS=halt_on_error=1). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

/* A failed check: say which and where, and exit 1 (the test's only way to fail). */
#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define THREADS 4
#define BATCHES 3
/* the third: batch 3 in parts of 1, two at a time (each on one thread, a plan of its own) */
static const int64_t batch_of[BATCHES] = {1, 3, 3};
static const int at_once_of[BATCHES] = {0, 0, 2};

/* The cpu plugin, and the example plugin (relu only, host memory): default placement then times
 * relus on both and may choose either, so concurrent sessions also measure, share the timing
 * cache and run across two backends. */
#define PLUGINS DLRUN_PLUGIN_DIR "/libdlrun-cpu.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-example.so"

/* The images' side: ResNet-18 at 64x64 has every op and plan of the 224x224 one (stem, pools,
 * residual stages down to 2x2 maps, the classifier) at a twelfth of the work. Under ThreadSanitizer,
 * which slows every memory access, 224x224 took two minutes of the whole suite's twenty. */
#define SIDE 64

/* models/resnet18.yaml with its input [1, 3, side, side], written to a temporary file (its name,
 * to unlink and free). */
static char *resnet18_at(int side) {
    FILE *f = fopen(DLRUN_SOURCE_DIR "/models/resnet18.yaml", "rb");
    CHECK(f, "cannot open models/resnet18.yaml");
    static char text[1 << 16];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECK(n > 0 && n < sizeof text - 1, "models/resnet18.yaml: %zu bytes", n);
    text[n] = 0;
    static const char from[] = "shape: [1, 3, 224, 224]";
    char *at = strstr(text, from), *out = malloc(n + 64);
    CHECK(at && out, "models/resnet18.yaml has no input %s", from);
    const int head = (int)(at - text);
    const int len = snprintf(out, n + 64, "%.*sshape: [1, 3, %d, %d]%s", head, text, side, side, at + strlen(from));
    char *path = tu_write_temp(".yaml", out, (size_t)len);
    CHECK(path, "cannot write a temporary model");
    free(out);
    return path;
}

typedef struct shared {
    dl_context *ctx;
    dl_model *m;
    float *input[BATCHES];
    float *expect[BATCHES]; /* serial runs' outputs */
    int64_t out_numel[BATCHES];
    pthread_barrier_t start;
} shared;

typedef struct worker {
    shared *sh;
    int id;
    char failure[DL_ERROR_LEN + 128]; /* empty: every output matched */
} worker;

static dl_session_options options(int b, const char *backend, int retune) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = batch_of[b];
    so.backend = backend;
    so.retune = retune;
    /* one layout for all: auto's plan is measured, and an NHWC session's sums, in another order,
     * would differ from the serial run's in the last bits; the batch at once likewise (auto may
     * measure parts of 1 faster under one load and not under another) */
    so.layout = DL_LAYOUT_MODE_NCHW;
    so.micro_batch = at_once_of[b] ? 1 : batch_of[b];
    so.parts_at_once = at_once_of[b];
    if (at_once_of[b]) so.backend = "cpu"; /* the serial run's plan, for the same bits */
    return so;
}

static dl_status run_once(dl_session *s, const float *x, dl_error *err) {
    dl_tensor in = *dl_session_input(s, 0);
    in.data = (void *)x;
    return dl_session_run(s, &in, 1, err);
}

/* First element where got differs from want (floats compared with ==), or -1. */
static int64_t first_difference(const float *want, const float *got, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(want[i] == got[i])) return i;
    return -1;
}

/* Each worker makes a session per batch (pinned to cpu, or placed by measurement; one worker
 * also retunes, so the timing cache is rewritten while others read it), runs them alternately
 * twice, and compares every output with the serial run's. */
static void *work(void *arg) {
    worker *w = arg;
    shared *sh = w->sh;
    dl_session *s[BATCHES] = {0};
    dl_error err = {{0}};
    pthread_barrier_wait(&sh->start);
    for (int b = 0; b < BATCHES && !w->failure[0]; b++) {
        dl_session_options so = options(b, w->id % 2 ? "cpu" : NULL, w->id == 2);
        if (dl_session_create(sh->ctx, sh->m, &so, &s[b], &err) != DL_OK)
            snprintf(w->failure, sizeof w->failure, "worker %d: create at batch %lld: %s", w->id,
                     (long long)batch_of[b], err.msg);
    }
    for (int r = 0; r < 2 * BATCHES && !w->failure[0]; r++) {
        int b = r % BATCHES;
        if (run_once(s[b], sh->input[b], &err) != DL_OK) {
            snprintf(w->failure, sizeof w->failure, "worker %d: run: %s", w->id, err.msg);
            break;
        }
        const dl_tensor *y = dl_session_output(s[b], 0);
        int64_t at =
            dl_tensor_numel(y) != sh->out_numel[b] ? 0 : first_difference(sh->expect[b], y->data, sh->out_numel[b]);
        if (at >= 0)
            snprintf(w->failure, sizeof w->failure,
                     "worker %d, batch %lld, run %d: output differs from the serial run at %lld", w->id,
                     (long long)batch_of[b], r / BATCHES, (long long)at);
    }
    for (int b = 0; b < BATCHES; b++) dl_session_free(s[b]);
    return NULL;
}

int main(void) {
    char cache[] = "/tmp/dlrun-concurrency-XXXXXX";
    CHECK(mkdtemp(cache), "cannot make a temporary folder");
    setenv("XDG_CACHE_HOME", cache, 1); /* keep placement's timing cache out of $HOME */
    shared sh = {0};
    dl_error err = {{0}};
    dl_context_options co = {sizeof co, 2, 0, PLUGINS, 1};
    CHECK(dl_context_create(&co, &sh.ctx, &err) == DL_OK, "%s", err.msg);
    char *yaml = resnet18_at(SIDE);
    CHECK(dl_model_load(yaml, &sh.m, &err) == DL_OK, "%s", err.msg);
    unlink(yaml);
    free(yaml);
    for (int b = 0; b < BATCHES; b++) { /* the serial reference, one session at a time */
        size_t n = (size_t)batch_of[b] * 3 * SIDE * SIDE;
        sh.input[b] = malloc(n * sizeof(float));
        tu_fill_uniform(sh.input[b], n, 40 + (uint64_t)b, -1, 1);
        dl_session_options so = options(b, "cpu", 0);
        dl_session *s;
        CHECK(dl_session_create(sh.ctx, sh.m, &so, &s, &err) == DL_OK, "%s", err.msg);
        CHECK(run_once(s, sh.input[b], &err) == DL_OK, "%s", err.msg);
        const dl_tensor *y = dl_session_output(s, 0);
        sh.out_numel[b] = dl_tensor_numel(y);
        CHECK(sh.out_numel[b] == batch_of[b] * 1000, "output of %lld elements", (long long)sh.out_numel[b]);
        sh.expect[b] = malloc((size_t)sh.out_numel[b] * sizeof(float));
        memcpy(sh.expect[b], y->data, (size_t)sh.out_numel[b] * sizeof(float));
        dl_session_free(s);
    }
    CHECK(first_difference(sh.expect[0], sh.expect[1], 1000) != -1, "batch 1 and 3 inputs must differ");
    pthread_barrier_init(&sh.start, NULL, THREADS);
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&sh, i, ""};
        CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0, "cannot start thread %d", i);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    int failed = 0;
    for (int i = 0; i < THREADS; i++)
        if (w[i].failure[0]) fprintf(stderr, "%s\n", w[i].failure), failed = 1;
    int nd;
    const int64_t *shape;
    dl_model_input(sh.m, 0, &nd, &shape);
    CHECK(shape[0] == 1, "the model's own batch changed to %lld", (long long)shape[0]);
    pthread_barrier_destroy(&sh.start);
    for (int b = 0; b < BATCHES; b++) free(sh.input[b]), free(sh.expect[b]);
    dl_model_free(sh.m);
    dl_context_free(sh.ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    CHECK(system(cmd) == 0, "cannot remove %s", cache);
    if (failed) return 1;
    printf("%d threads x %d sessions of resnet18 at %dx%d (batches 1 and 3, cpu and measured placement, and 3 in parts "
           "two at "
           "a time): every output equals the serial run's\n",
           THREADS, BATCHES, SIDE, SIDE);
    return 0;
}
