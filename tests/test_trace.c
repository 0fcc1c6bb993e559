/* test_trace.c — the Chrome trace (dl_session_options.trace, dl_session_write_trace, dlrun --trace):
 * the file is valid trace-event JSON (named tracks, complete events that do not overlap on a track
 * or nest on the session's), one event per executed step per run with its arguments, creation
 * spans with placement inside, device events (ABI 1.6, faked by tests/plugins/fake_backend.c) for
 * a backend that has them and the host clock beside it, the cap on runs kept, and clean failures:
 * no trace asked, an old caller's smaller options, a path that cannot be written. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

#define EPS_US 0.01 /* rounding of ms to us in doubles */

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static cJSON *load_trace(const char *path) {
    char *text = read_all(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cr_assert(root, "%s is not JSON", path);
    return root;
}

typedef struct xev {
    double ts, dur;
    const char *name;
} xev;

static int by_start(const void *a, const void *b) {
    const xev *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->dur < y->dur) - (x->dur > y->dur); /* the enclosing one first */
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The tid of the track named `name`, or -1. */
static int track_tid(const cJSON *events, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *n = str_of(e, "name");
        if (n && !strcmp(n, "thread_name") && !strcmp(str_of(cJSON_GetObjectItem(e, "args"), "name"), name))
            return cJSON_GetObjectItem(e, "tid")->valueint;
    }
    return -1;
}

/* Checks root against the trace-event format (JSON object format) and the tracks' rules: on the
 * session track (tid 1) spans nest, on every other track events do not overlap. */
static void validate(const cJSON *root) {
    cr_assert(cJSON_IsObject(root));
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    cr_assert(cJSON_IsArray(events), "no traceEvents array");
    cr_expect_str_eq(str_of(root, "displayTimeUnit"), "ms");
    cr_expect(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "otherData")));
    enum { MAX_TID = 64 };
    int named[MAX_TID] = {0}, n = cJSON_GetArraySize(events), count[MAX_TID] = {0};
    xev *per[MAX_TID];
    for (int t = 0; t < MAX_TID; t++) per[t] = calloc((size_t)n + 1, sizeof(xev));
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *name = str_of(e, "name"), *ph = str_of(e, "ph");
        cr_assert(name, "an event without a string name");
        cr_assert(ph && (!strcmp(ph, "X") || !strcmp(ph, "M")), "%s: ph %s", name, ph ? ph : "missing");
        const cJSON *pid = cJSON_GetObjectItem(e, "pid"), *tid = cJSON_GetObjectItem(e, "tid");
        cr_assert(cJSON_IsNumber(pid) && cJSON_IsNumber(tid), "%s: pid and tid must be numbers", name);
        int t = tid->valueint;
        cr_assert(t >= 0 && t < MAX_TID);
        const cJSON *args = cJSON_GetObjectItem(e, "args");
        if (!strcmp(ph, "M")) {
            cr_assert(cJSON_IsObject(args), "%s: metadata without args", name);
            if (!strcmp(name, "thread_name") || !strcmp(name, "process_name")) {
                cr_assert(str_of(args, "name"), "%s without args.name", name);
                if (!strcmp(name, "thread_name")) named[t] = 1;
            } else {
                cr_assert_str_eq(name, "thread_sort_index");
                cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(args, "sort_index")));
            }
            continue;
        }
        const cJSON *ts = cJSON_GetObjectItem(e, "ts"), *dur = cJSON_GetObjectItem(e, "dur");
        cr_assert(cJSON_IsNumber(ts) && cJSON_IsNumber(dur), "%s: ts and dur must be numbers", name);
        cr_assert(ts->valuedouble >= 0 && dur->valuedouble >= 0, "%s: ts %g dur %g", name, ts->valuedouble,
                  dur->valuedouble);
        cr_assert(str_of(e, "cat"), "%s: no category", name);
        per[t][count[t]++] = (xev){ts->valuedouble, dur->valuedouble, name};
    }
    for (int t = 0; t < MAX_TID; t++) {
        if (count[t]) cr_expect(named[t], "tid %d has events but no thread_name", t);
        qsort(per[t], (size_t)count[t], sizeof(xev), by_start);
        if (t == 1) { /* the session track: spans nest */
            double end[64];
            int depth = 0;
            for (int i = 0; i < count[t]; i++) {
                const xev *x = &per[t][i];
                while (depth && end[depth - 1] <= x->ts + EPS_US) depth--;
                if (depth)
                    cr_expect(x->ts + x->dur <= end[depth - 1] + EPS_US, "session span %s overlaps its parent",
                              x->name);
                cr_assert(depth < 64);
                end[depth++] = x->ts + x->dur;
            }
        } else
            for (int i = 0; i + 1 < count[t]; i++)
                cr_expect(per[t][i].ts + per[t][i].dur <= per[t][i + 1].ts + EPS_US,
                          "tid %d: %s (%.3f + %.3f us) overlaps %s (%.3f us)", t, per[t][i].name, per[t][i].ts,
                          per[t][i].dur, per[t][i + 1].name, per[t][i + 1].ts);
        free(per[t]);
    }
}

/* A step's event: args.run and args.layer (a run's span has no layer, a placement timing no run). */
static int is_step(const cJSON *e) {
    const cJSON *a = cJSON_GetObjectItem(e, "args");
    return cJSON_GetObjectItem(a, "run") && cJSON_GetObjectItem(a, "layer");
}

/* Step events and runs ("run" spans). */
static int count_steps(const cJSON *events, int *runs) {
    int steps = 0;
    *runs = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str_of(e, "ph"), "X")) continue;
        if (!strcmp(str_of(e, "name"), "run") && !strcmp(str_of(e, "cat"), "run")) ++*runs;
        else if (is_step(e)) steps++;
    }
    return steps;
}

static const cJSON *find_span(const cJSON *events, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events) if (!strcmp(str_of(e, "name"), name) && !strcmp(str_of(e, "ph"), "X")) return e;
    return NULL;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

static int executed_steps(const dl_session *s) {
    int n = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info si;
        dl_session_step(s, k, &si);
        n += si.kind != DL_STEP_FUSED && si.kind != DL_STEP_ELIDED;
    }
    return n;
}

static void run_n(dl_session *s, int runs) {
    dl_tensor in = *dl_session_input(s, 0);
    int64_t n = dl_tensor_numel(&in);
    float *x = malloc((size_t)n * sizeof *x);
    tu_fill_uniform(x, (size_t)n, 3, -1, 1);
    in.data = x;
    dl_error err;
    for (int i = 0; i < runs; i++) cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    free(x);
}

static char *temp_json(void) {
    char *path = tu_write_temp(".json", "", 0);
    cr_assert(path);
    return path;
}

static void fresh_cache(void) { cr_assert(tu_fresh_cache()); }

Test(trace, lenet_on_the_cpu_backends, .timeout = 120) {
    fresh_cache();
    dl_context_options co = {sizeof co, 2, 0, DLRUN_PLUGIN_DIR, 1};
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err;
    cr_assert_eq(dl_context_create(&co, &ctx, &err), DL_OK);
    cr_assert_eq(dl_model_load(DLRUN_SOURCE_DIR "/models/lenet.yaml", &m, &err), DL_OK, "%s", err.msg);
    dl_session_options so;
    dl_session_options_init(&so);
    so.trace = 1;
    so.batch = 2;
    so.layout = DL_LAYOUT_MODE_NCHW; /* conv1's storage below: "f32" (auto measures, nhwc may win) */
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    run_n(s, 3);
    char *path = temp_json();
    cr_assert_eq(dl_session_write_trace(s, path, &err), DL_OK, "%s", err.msg);
    cJSON *root = load_trace(path);
    validate(root);
    const cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
    cr_expect_eq(cJSON_GetArraySize(events), dl_session_trace_event_count(s));
    int runs, steps = count_steps(events, &runs);
    cr_expect_eq(runs, 3);
    cr_expect_eq(steps, 3 * executed_steps(s), "%d step events, %d runs of %d steps", steps, runs, executed_steps(s));
    /* creation: the whole call contains placement, placement its op timings */
    const cJSON *create = find_span(events, "dl_session_create"), *place = find_span(events, "placement");
    cr_assert(create && place);
    cr_expect(num(place, "ts") >= num(create, "ts") &&
              num(place, "ts") + num(place, "dur") <= num(create, "ts") + num(create, "dur") + EPS_US);
    for (const char *phase[] = {"infer shapes", "bind weights", "prepare kernels", "plan memory"}, **p = phase;
         p < phase + 4; p++)
        cr_expect(find_span(events, *p), "no span '%s'", *p);
    /* every step's arguments; conv1 runs on a CPU backend by the host's clock */
    const cJSON *e;
    int conv1 = 0;
    cJSON_ArrayForEach(e, events) {
        const cJSON *a = cJSON_GetObjectItem(e, "args");
        if (!is_step(e)) continue;
        for (const char *key[] = {"layer", "op", "backend", "shape", "storage", "clock"}, **k = key; k < key + 6; k++)
            cr_expect(str_of(a, *k), "%s: no args.%s", str_of(e, "name"), *k);
        cr_expect_str_eq(str_of(a, "layer"), str_of(e, "name"));
        cr_expect_str_eq(str_of(a, "op"), str_of(e, "cat"));
        if (strcmp(str_of(e, "name"), "conv1")) continue;
        conv1++;
        cr_expect_str_eq(str_of(a, "op"), "conv2d");
        cr_expect_str_eq(str_of(a, "shape"), "[2, 6, 28, 28]");
        cr_expect_str_eq(str_of(a, "storage"), "f32");
        cr_expect_str_eq(str_of(a, "clock"), "host");
        cr_expect(num(a, "flops") > 0);
        cr_expect(track_tid(events, str_of(a, "backend")) == cJSON_GetObjectItem(e, "tid")->valueint,
                  "conv1 is not on its backend's track");
    }
    cr_expect_eq(conv1, 3);
    const cJSON *other = cJSON_GetObjectItem(root, "otherData");
    cr_expect_eq(num(other, "runs_recorded"), 3);
    cr_expect_eq(num(other, "runs_dropped"), 0);
    cJSON_Delete(root);
    unlink(path);
    free(path);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

/* fakedev times its ops with fake device events of 1.5 ms (its host time is ~0: run() queues); fakedev2,
 * sharing its memory domain, has no events and is timed by the host; the input and the output are
 * copied between host memory and theirs. */
Test(trace, device_events_and_copies, .timeout = 60) {
    fresh_cache();
    setenv("DLFAKE_FAKEDEV_ASYNC", "1", 1);
    setenv("DLFAKE_FAKEDEV_US", "0", 1);
    setenv("DLFAKE_FAKEDEV2_US", "0", 1);
    setenv("DLFAKE_FAKEDEV_EVENT_US", "1500", 1);
    static const char yaml[] = "model: devtrace\ninputs:\n  - {name: x, shape: [1, 513]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: fakedev2}\n"
                               "  - {name: c, op: relu, backend: fakedev}\n"
                               "  - {name: d, op: add, inputs: [c, x], backend: fakedev2}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.trace = 1;
    cr_assert_eq(tu_open_session(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so:" DLRUN_TEST_PLUGIN_DIR
                                                       "/libdlrun-fakedev2.so",
                                 yaml, &so, &ctx, &m, &s, &err),
                 DL_OK, "%s", err.msg);
    unsetenv("DLFAKE_FAKEDEV_EVENT_US");
    unsetenv("DLFAKE_FAKEDEV_ASYNC");
    run_n(s, 4);
    char *path = temp_json();
    cr_assert_eq(dl_session_write_trace(s, path, &err), DL_OK, "%s", err.msg);
    cJSON *root = load_trace(path);
    validate(root);
    const cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
    int runs, steps = count_steps(events, &runs);
    cr_expect_eq(runs, 4);
    cr_expect_eq(steps, 4 * executed_steps(s));
    int dev = track_tid(events, "fakedev"), dev2 = track_tid(events, "fakedev2"), cp = track_tid(events, "copies");
    cr_assert(dev > 1 && dev2 > 1 && cp > 1 && dev != dev2 && dev != cp && dev2 != cp);
    int n_dev = 0, n_host = 0, n_copy = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const cJSON *a = cJSON_GetObjectItem(e, "args");
        if (!is_step(e)) continue;
        int tid = cJSON_GetObjectItem(e, "tid")->valueint;
        const char *clock = str_of(a, "clock"), *backend = str_of(a, "backend");
        if (tid == dev) {
            n_dev++;
            cr_expect_str_eq(clock, "device");
            cr_expect_str_eq(backend, "fakedev");
            /* 1500 us from the op's start on the fake device, which lags its event by the host's
             * few instructions between recording it and queuing the op */
            cr_expect(num(e, "dur") >= 1500 - EPS_US && num(e, "dur") < 1600, "%s: %.3f us, not the device's 1500",
                      str_of(e, "name"), num(e, "dur"));
        } else if (tid == dev2) {
            n_host++;
            cr_expect_str_eq(clock, "host");
        } else {
            cr_expect_eq(tid, cp);
            n_copy++;
            cr_expect_str_eq(clock, "host");
            cr_expect_eq(num(a, "bytes"), 513 * 4);
            cr_expect(strstr(str_of(a, "storage"), "->"), "%s", str_of(a, "storage"));
        }
    }
    cr_expect_eq(n_dev, 8);
    cr_expect_eq(n_host, 8);
    cr_expect_eq(n_copy, 8); /* x in, d out */
    cJSON_Delete(root);
    unlink(path);
    free(path);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
    unsetenv("DLFAKE_FAKEDEV_US");
    unsetenv("DLFAKE_FAKEDEV2_US");
}

/* --profile without --trace: a step on a backend with timing events is timed by them, without a
 * synchronize after it. Each fakedev op takes 1.5 ms on its device and a synchronize 3 ms more on
 * the host: an op timed around a synchronize would show 4.5 ms or more. */
Test(trace, profile_times_device_steps_by_events, .timeout = 60) {
    fresh_cache();
    setenv("DLFAKE_FAKEDEV_ASYNC", "1", 1);
    setenv("DLFAKE_FAKEDEV_US", "0", 1);
    setenv("DLFAKE_FAKEDEV_EVENT_US", "1500", 1);
    setenv("DLFAKE_FAKEDEV_SYNC_US", "3000", 1);
    static const char yaml[] = "model: devprofile\ninputs:\n  - {name: x, shape: [1, 257]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: fakedev}\n"
                               "  - {name: c, op: relu, inputs: [x], backend: fakedev}\n"
                               "  - {name: d, op: add, inputs: [b, c], backend: fakedev}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    cr_assert_eq(tu_open_session(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so", yaml, NULL, &ctx, &m, &s, &err), DL_OK,
                 "%s", err.msg);
    unsetenv("DLFAKE_FAKEDEV_EVENT_US");
    unsetenv("DLFAKE_FAKEDEV_SYNC_US");
    unsetenv("DLFAKE_FAKEDEV_ASYNC");
    unsetenv("DLFAKE_FAKEDEV_US");
    dl_session_set_profiling(s, 1);
    run_n(s, 3);
    int n_ops = 0;
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info info;
        dl_session_step(s, k, &info);
        if (info.kind != DL_STEP_OP) continue;
        n_ops++;
        cr_expect_eq(info.runs, 3);
        cr_expect(info.last_ms >= 1.5 - EPS_US * 1e-3 && info.last_ms < 1.6, "%s: %.3f ms, not the device's 1.5",
                  info.layer, info.last_ms);
        cr_expect(info.total_ms >= 3 * (1.5 - EPS_US * 1e-3) && info.total_ms < 3 * 1.6, "%s: %.3f ms in 3 runs",
                  info.layer, info.total_ms);
    }
    cr_expect_eq(n_ops, 4);
    char *path = temp_json(); /* its trace is its own: the session still has none to write */
    cr_expect_neq(dl_session_write_trace(s, path, &err), DL_OK);
    unlink(path);
    free(path);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

Test(trace, keeps_the_last_runs, .timeout = 60) {
    fresh_cache();
    /* the concat is elided (its inputs written into it): it runs nothing and has no event */
    static const char yaml[] = "model: tiny\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n"
                               "  - {name: r, op: relu}\n  - {name: q, op: relu, inputs: [x]}\n"
                               "  - {name: j, op: concat, inputs: [r, q]}\n  - {name: f, op: flatten}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.trace = 1;
    so.backend = "cpu";
    cr_assert_eq(tu_open_session(DLRUN_PLUGIN_DIR, yaml, &so, &ctx, &m, &s, &err), DL_OK, "%s", err.msg);
    dl_step_info elided = {0};
    for (int k = 0; k < dl_session_step_count(s) && !elided.layer; k++) {
        dl_session_step(s, k, &elided);
        if (elided.kind != DL_STEP_ELIDED) elided.layer = NULL;
    }
    cr_assert(elided.layer && !strcmp(elided.layer, "j"), "the concat is elided");
    run_n(s, DL_TRACE_MAX_RUNS + 7);
    char *path = temp_json();
    cr_assert_eq(dl_session_write_trace(s, path, &err), DL_OK, "%s", err.msg);
    cJSON *root = load_trace(path);
    validate(root);
    const cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
    int runs, steps = count_steps(events, &runs);
    cr_expect_eq(runs, DL_TRACE_MAX_RUNS);
    cr_expect_eq(steps, DL_TRACE_MAX_RUNS * executed_steps(s));
    const cJSON *other = cJSON_GetObjectItem(root, "otherData");
    cr_expect_eq(num(other, "runs"), DL_TRACE_MAX_RUNS + 7);
    cr_expect_eq(num(other, "runs_dropped"), 7);
    cr_expect_eq(num(other, "max_runs"), DL_TRACE_MAX_RUNS);
    /* the oldest kept is run 7, the newest run 106 */
    const cJSON *run = find_span(events, "run");
    cr_expect_eq(num(cJSON_GetObjectItem(run, "args"), "run"), 7);
    cJSON_Delete(root);
    unlink(path);
    free(path);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

Test(trace, clean_failures) {
    fresh_cache();
    static const char yaml[] = "model: tiny\ninputs:\n  - {name: x, shape: [1, 8]}\nlayers:\n  - {name: r, op: relu}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_error err = {{0}};
    /* no trace asked */
    cr_assert_eq(tu_open_session(DLRUN_PLUGIN_DIR, yaml, NULL, &ctx, &m, &s, &err), DL_OK, "%s", err.msg);
    run_n(s, 1);
    cr_expect_eq(dl_session_write_trace(s, "/tmp/never-written.json", &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "trace = 1") && !strchr(err.msg, '\n'), "%s", err.msg);
    cr_expect_eq(dl_session_trace_event_count(s), 0);
    cr_expect_eq(access("/tmp/never-written.json", F_OK), -1);
    dl_session_free(s);
    /* an older caller's options end before `trace`: whatever lies past them is not read */
    struct {
        dl_session_options o;
        int32_t pad;
    } old;
    dl_session_options_init(&old.o);
    memset((char *)&old.o + offsetof(dl_session_options, trace), 0xff,
           sizeof old.o - offsetof(dl_session_options, trace));
    old.o.struct_size = offsetof(dl_session_options, trace);
    cr_assert_eq(dl_session_create(ctx, m, &old.o, &s, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_session_write_trace(s, "/tmp/never-written.json", &err), DL_E_INVALID);
    dl_session_free(s);
    /* a path that cannot be written */
    dl_session_options so;
    dl_session_options_init(&so);
    so.trace = 1;
    cr_assert_eq(dl_session_create(ctx, m, &so, &s, &err), DL_OK, "%s", err.msg);
    run_n(s, 1);
    cr_expect_eq(dl_session_write_trace(s, "/nonexistent/dir/t.json", &err), DL_E_IO);
    cr_expect(strstr(err.msg, "/nonexistent/dir/t.json") && !strchr(err.msg, '\n'), "%s", err.msg);
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

Test(trace, cli, .timeout = 120) {
    fresh_cache();
    char *path = temp_json(), *out, args[512], want[600];
    snprintf(args, sizeof args, "%s/models/lenet.yaml --iterations 3 --warmup 2 --profile --trace %s", DLRUN_SOURCE_DIR,
             path);
    cr_assert_eq(tu_dlrun(args, &out), 0, "%s", out);
    const char *line = strstr(out, "trace: ");
    cr_assert(line, "%s", out);
    snprintf(want, sizeof want, "trace: %s (", path);
    cr_expect(!strncmp(line, want, strlen(want)), "%s", line);
    cr_expect(strstr(line, " events; open in https://ui.perfetto.dev or chrome://tracing)\n"), "%s", line);
    long n_events = atol(line + strlen(want));
    cJSON *root = load_trace(path);
    validate(root);
    const cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
    cr_expect_eq(cJSON_GetArraySize(events), n_events);
    int runs;
    count_steps(events, &runs);
    cr_expect_eq(runs, 5, "warm-up and timed runs: %d", runs);
    cJSON_Delete(root);
    free(out);
    /* a path that cannot be written: one line, exit 2 as for --output */
    snprintf(args, sizeof args, "%s/models/lenet.yaml --trace /nonexistent/dir/t.json", DLRUN_SOURCE_DIR);
    cr_expect_eq(tu_dlrun(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "dlrun: cannot write trace /nonexistent/dir/t.json: No such file or directory\n"), "%s", out);
    cr_expect(!strstr(out, "latency:"), "a report after the failure: %s", out);
    free(out);
    unlink(path);
    free(path);
}
