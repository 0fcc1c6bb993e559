/* trace.c — a session's timeline, recorded when dl_session_options.trace is 1 and written as Chrome
 * trace-event JSON (dl_session_write_trace; the format and its tracks in docs/trace.md).
 *
 * What is recorded. Creation: spans (name, category, host times, arguments as cJSON) opened and
 * closed by session.c and placement.c; they nest as the calls do. Runs: a ring of the last
 * cap_runs runs (DL_TRACE_MAX_RUNS, fewer where the steps would pass DL_TRACE_MAX_EVENTS), each a
 * row of one record per step; the run in progress fills a row of its own, copied into the ring when
 * the run succeeds, so a failed run leaves the kept ones intact. All of it is allocated by
 * dl_trace_prepare, before the first run: a run allocates nothing (tests/test_noalloc.c), and a
 * plugin allocates a step's device events at their first record only.
 *
 * Clocks. Host steps are timed by dl_now_ms around the step. A step on a backend with timing
 * events (ABI 1.6) records one before and one after its work, with no synchronize in between; at
 * the start of each run that backend synchronizes and records a reference event, whose host time
 * is noted; after the run's final synchronize a device step's time is that host time plus the
 * elapsed device time from the reference to its events.
 *
 * Writing. Each event is built as a cJSON object, printed by cJSON and freed before the next, so
 * a trace of a million events never holds a million cJSON trees; only the commas of the event
 * array and the top-level object's keys around them are written here. */
#define _GNU_SOURCE
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "clock.h"
#include "session.h"

#define TRACE_MAX_EVENT_BACKENDS 16

typedef struct span {
    char *name;
    const char *cat;
    double t0, t1; /* host ms */
    cJSON *args;   /* or NULL */
} span;

typedef struct step_rec {
    double ts, dur; /* ms from the origin */
    int32_t device; /* 1: timed by device events */
} step_rec;

typedef struct run_rec {
    int64_t index; /* the session's run count when it ran, from 0 */
    double ts, dur;
    dl_run_times ph;
} run_rec;

typedef struct event_backend {
    const dl_backend *be;
    void *ref;     /* its reference event, recorded at each run's start */
    double ref_ms; /* host time of that record */
    int ok;        /* the reference was recorded this run */
} event_backend;

struct dl_trace {
    double origin;
    span *spans;
    int n_spans, cap_spans;
    int n_steps, cap_runs;
    step_rec *rec;    /* (cap_runs + 1) rows of n_steps; row cap_runs is the run in progress */
    run_rec *runs;    /* cap_runs, a ring from head */
    int head, n_kept; /* the ring's oldest and its count */
    int64_t n_runs;   /* runs completed since creation */
    /* device events */
    event_backend evb[TRACE_MAX_EVENT_BACKENDS];
    int n_evb;
    int *ev_of;             /* step -> evb index, or -1 (host clock) */
    void **ev;              /* 2 per step: before, after; NULL until first recorded */
    unsigned char *ev_done; /* per step this run: bit 0 before, bit 1 after recorded */
};

dl_trace *dl_trace_new(double origin_ms) {
    dl_trace *t = calloc(1, sizeof *t);
    if (t) t->origin = origin_ms;
    return t;
}

void dl_trace_free(dl_trace *t) {
    if (!t) return;
    for (int i = 0; i < t->n_spans; i++) {
        free(t->spans[i].name);
        cJSON_Delete(t->spans[i].args);
    }
    free(t->spans);
    for (int k = 0; t->ev && k < t->n_steps; k++)
        for (int j = 0; j < 2; j++)
            if (t->ev[2 * k + j]) {
                const dl_backend *be = t->evb[t->ev_of[k]].be;
                be->event_release(be->self, t->ev[2 * k + j]);
            }
    for (int i = 0; i < t->n_evb; i++)
        if (t->evb[i].ref) t->evb[i].be->event_release(t->evb[i].be->self, t->evb[i].ref);
    free(t->ev);
    free(t->ev_of);
    free(t->ev_done);
    free(t->rec);
    free(t->runs);
    free(t);
}

/* ---- creation spans ---- */

int dl_trace_begin(dl_trace *t, const char *name, const char *cat) {
    if (!t) return -1;
    if (t->n_spans == t->cap_spans) {
        int cap = t->cap_spans ? 2 * t->cap_spans : 32;
        span *p = realloc(t->spans, (size_t)cap * sizeof *p);
        if (!p) return -1;
        t->spans = p;
        t->cap_spans = cap;
    }
    span *sp = &t->spans[t->n_spans];
    if (!(sp->name = strdup(name))) return -1;
    sp->cat = cat;
    sp->t0 = sp->t1 = dl_now_ms();
    sp->args = NULL;
    return t->n_spans++;
}

void dl_trace_end(dl_trace *t, int i) {
    if (t && i >= 0) t->spans[i].t1 = dl_now_ms();
}

static cJSON *span_args(dl_trace *t, int i) {
    if (!t || i < 0) return NULL;
    if (!t->spans[i].args) t->spans[i].args = cJSON_CreateObject();
    return t->spans[i].args;
}

void dl_trace_arg_str(dl_trace *t, int i, const char *key, const char *value) {
    cJSON *a = span_args(t, i);
    if (a) cJSON_AddStringToObject(a, key, value ? value : "");
}

void dl_trace_arg_num(dl_trace *t, int i, const char *key, double value) {
    cJSON *a = span_args(t, i);
    if (a) cJSON_AddNumberToObject(a, key, value);
}

/* ---- runs ---- */

static int has_events(const dl_backend *be) {
    return DL_BACKEND_HAS(be, event_record) && DL_BACKEND_HAS(be, event_elapsed) && DL_BACKEND_HAS(be, event_release);
}

static int executed(const dl_step *st) { return st->kind != DL_STEP_FUSED && st->kind != DL_STEP_ELIDED; }

static int executed_steps(const dl_session *s) {
    int n = 0;
    for (int k = 0; k < s->n_steps; k++) n += executed(&s->steps[k]);
    return n;
}

dl_status dl_trace_prepare(dl_trace *t, const dl_session *s, dl_error *err) {
    if (!t) return DL_OK;
    int n = s->n_steps, exec = executed_steps(s);
    int cap =
        exec > 0 && DL_TRACE_MAX_EVENTS / exec < DL_TRACE_MAX_RUNS ? DL_TRACE_MAX_EVENTS / exec : DL_TRACE_MAX_RUNS;
    if (cap < 1) cap = 1;
    t->n_steps = n;
    t->cap_runs = cap;
    t->rec = calloc(((size_t)cap + 1) * (size_t)n + 1, sizeof *t->rec);
    t->runs = calloc((size_t)cap, sizeof *t->runs);
    t->ev_of = malloc(((size_t)n + 1) * sizeof *t->ev_of);
    t->ev = calloc(2 * (size_t)n + 1, sizeof *t->ev);
    t->ev_done = calloc((size_t)n + 1, 1);
    if (!t->rec || !t->runs || !t->ev_of || !t->ev || !t->ev_done)
        return dl_fail(err, DL_E_NOMEM, "out of memory for the trace of %d runs of %d steps", cap, n);
    for (int k = 0; k < n; k++) {
        const dl_step *st = &s->steps[k];
        t->ev_of[k] = -1;
        if (st->kind != DL_STEP_OP || !has_events(st->be)) continue;
        int b = 0;
        while (b < t->n_evb && t->evb[b].be != st->be) b++;
        if (b == t->n_evb) {
            if (b == TRACE_MAX_EVENT_BACKENDS) continue; /* host clock for the rest */
            t->evb[t->n_evb++] = (event_backend){st->be, NULL, 0, 0};
        }
        t->ev_of[k] = b;
    }
    return DL_OK;
}

void dl_trace_run_start(dl_trace *t) {
    if (!t) return;
    memset(t->ev_done, 0, (size_t)t->n_steps);
    for (int i = 0; i < t->n_evb; i++) {
        event_backend *b = &t->evb[i];
        dl_error e = {{0}};
        b->ok = 0;
        if (DL_BACKEND_HAS(b->be, synchronize) && b->be->synchronize(b->be->self, &e) != DL_OK) continue;
        double h0 = dl_now_ms();
        /* the queue is idle: the event completes as it is recorded, between h0 and now */
        if (b->be->event_record(b->be->self, &b->ref, &e) != DL_OK) continue;
        b->ref_ms = 0.5 * (h0 + dl_now_ms());
        b->ok = 1;
    }
}

void dl_trace_op_event(dl_trace *t, int k, int end) {
    if (!t || t->ev_of[k] < 0) return;
    event_backend *b = &t->evb[t->ev_of[k]];
    dl_error e = {{0}};
    if (b->ok && b->be->event_record(b->be->self, &t->ev[2 * k + end], &e) == DL_OK)
        t->ev_done[k] |= (unsigned char)(1u << end);
}

void dl_trace_step(dl_trace *t, int k, double t0, double t1) {
    if (!t) return;
    step_rec *r = &t->rec[(size_t)t->cap_runs * (size_t)t->n_steps + (size_t)k];
    *r = (step_rec){t0 - t->origin, t1 - t0, 0};
}

void dl_trace_run_end(dl_trace *t, double t_start, double t_end, const dl_run_times *ph) {
    if (!t) return;
    step_rec *row = &t->rec[(size_t)t->cap_runs * (size_t)t->n_steps];
    for (int k = 0; k < t->n_steps; k++) {
        if (t->ev_of[k] < 0 || t->ev_done[k] != 3) continue;
        event_backend *b = &t->evb[t->ev_of[k]];
        dl_error e = {{0}};
        double a, z;
        if (b->be->event_elapsed(b->be->self, b->ref, t->ev[2 * k], &a, &e) != DL_OK ||
            b->be->event_elapsed(b->be->self, b->ref, t->ev[2 * k + 1], &z, &e) != DL_OK)
            continue; /* the host's times stand */
        row[k] = (step_rec){b->ref_ms - t->origin + a, z > a ? z - a : 0, 1};
    }
    int slot;
    if (t->n_kept < t->cap_runs) slot = (t->head + t->n_kept++) % t->cap_runs;
    else slot = t->head, t->head = (t->head + 1) % t->cap_runs; /* drop the oldest */
    memcpy(&t->rec[(size_t)slot * (size_t)t->n_steps], row, (size_t)t->n_steps * sizeof *row);
    t->runs[slot] = (run_rec){t->n_runs++, t_start - t->origin, t_end - t_start, *ph};
}

int dl_trace_on_device(const dl_trace *t, int k) { return t && t->ev_of[k] >= 0 && t->evb[t->ev_of[k]].ok; }

int dl_trace_device_ms(const dl_trace *t, int k, double *ms) {
    if (!t) return 0;
    const step_rec *r = &t->rec[(size_t)t->cap_runs * (size_t)t->n_steps + (size_t)k];
    if (!r->device) return 0;
    *ms = r->dur;
    return 1;
}

/* ---- writing ---- */

enum { TID_SESSION = 1 }; /* backends from 2 in the order they first run a step, copies last */

typedef struct tracks {
    const dl_backend *be[DL_MAX_DOMAINS * 4];
    int n_be, copies; /* copies: 1 if any copy step */
} tracks;

static int backend_tid(tracks *tr, const dl_backend *be, int add) {
    for (int i = 0; i < tr->n_be; i++)
        if (tr->be[i] == be || !strcmp(tr->be[i]->name, be->name)) return 2 + i;
    if (!add || tr->n_be == (int)(sizeof tr->be / sizeof tr->be[0])) return 2 + tr->n_be - 1;
    tr->be[tr->n_be++] = be;
    return 2 + tr->n_be - 1;
}

static void find_tracks(const dl_session *s, tracks *tr) {
    memset(tr, 0, sizeof *tr);
    for (int k = 0; k < s->n_steps; k++) {
        const dl_step *st = &s->steps[k];
        if (st->kind == DL_STEP_OP) backend_tid(tr, st->be, 1);
        else if (st->kind == DL_STEP_COPY) tr->copies = 1;
    }
}

static int copies_tid(const tracks *tr) { return 2 + tr->n_be; }

int64_t dl_session_trace_event_count(const dl_session *s) {
    const dl_trace *t = s->trace;
    if (!t) return 0;
    tracks tr;
    find_tracks(s, &tr);
    int n_tracks = 1 + tr.n_be + tr.copies;
    return 1 + 2 * (int64_t)n_tracks + t->n_spans + (int64_t)t->n_kept * (1 + executed_steps(s));
}

/* The writer: events printed one by one into f; fails sticks. */
typedef struct writer {
    FILE *f;
    int64_t n;
    int failed;
} writer;

static void emit(writer *w, cJSON *ev) {
    if (!ev) {
        w->failed = 1;
        return;
    }
    char *text = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!text || fprintf(w->f, "%s\n%s", w->n ? "," : "", text) < 0) w->failed = 1;
    free(text);
    w->n++;
}

static cJSON *event(const char *name, const char *ph, int tid) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "ph", ph);
    cJSON_AddNumberToObject(e, "pid", 1);
    cJSON_AddNumberToObject(e, "tid", tid);
    return e;
}

/* A complete event from ms (from the origin) to microseconds, args taken over. */
static cJSON *complete(const char *name, const char *cat, int tid, double ts_ms, double dur_ms, cJSON *args) {
    cJSON *e = event(name, "X", tid);
    if (!e) return cJSON_Delete(args), NULL;
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddNumberToObject(e, "ts", ts_ms > 0 ? ts_ms * 1e3 : 0);
    cJSON_AddNumberToObject(e, "dur", dur_ms > 0 ? dur_ms * 1e3 : 0);
    if (args) cJSON_AddItemToObject(e, "args", args);
    return e;
}

static void meta(writer *w, const char *what, int tid, const char *key, const char *str, double num) {
    cJSON *e = event(what, "M", tid), *a = cJSON_CreateObject();
    if (!e || !a) {
        cJSON_Delete(e), cJSON_Delete(a), emit(w, NULL);
        return;
    }
    if (str) cJSON_AddStringToObject(a, key, str);
    else cJSON_AddNumberToObject(a, key, num);
    cJSON_AddItemToObject(e, "args", a);
    emit(w, e);
}

static void track(writer *w, int tid, const char *name, int order) {
    meta(w, "thread_name", tid, "name", name, 0);
    meta(w, "thread_sort_index", tid, "sort_index", NULL, order);
}

enum { FUSED_LEN = 64 };

/* Per step, the op kinds fused into its op ("relu", "batchnorm, relu"), or "": n_steps strings of
 * FUSED_LEN bytes, NULL when out of memory. */
static char *fused_names(const dl_session *s) {
    char *names = calloc((size_t)s->n_steps + 1, FUSED_LEN);
    int *step_of = malloc(((size_t)s->g->n_nodes + 1) * sizeof *step_of);
    if (!names || !step_of) {
        free(names), free(step_of);
        return NULL;
    }
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_OP) step_of[s->steps[k].node] = k;
    for (int j = 0; j < s->n_steps; j++) {
        const dl_step *f = &s->steps[j];
        if (f->kind != DL_STEP_FUSED) continue;
        char *buf = names + (size_t)step_of[s->fuse.into[f->node]] * FUSED_LEN;
        size_t u = strlen(buf);
        if (u < FUSED_LEN)
            snprintf(buf + u, FUSED_LEN - u, "%s%s", u ? ", " : "", dl_op_kind_name(s->g->nodes[f->node].kind));
    }
    free(step_of);
    return names;
}

static cJSON *step_args(const dl_session *s, int k, const step_rec *r, int64_t run, const char *fused) {
    const dl_step *st = &s->steps[k];
    dl_step_info info;
    dl_session_step(s, k, &info);
    cJSON *a = cJSON_CreateObject();
    if (!a) return NULL;
    char shape[160], buf[256];
    dl_shape_str(info.shape, info.ndim, shape, sizeof shape);
    cJSON_AddStringToObject(a, "layer", info.layer);
    cJSON_AddStringToObject(a, "op", info.op);
    cJSON_AddStringToObject(a, "backend", st->kind == DL_STEP_OP ? st->be->name : info.backend);
    cJSON_AddStringToObject(a, "shape", shape);
    if (st->kind == DL_STEP_COPY) {
        snprintf(buf, sizeof buf, "%s %s -> %s %s", dl_domain_name(s, st->src_dom), s->place_name[st->src_place],
                 dl_domain_name(s, st->dom), s->place_name[st->place]);
        cJSON_AddStringToObject(a, "storage", buf);
        cJSON_AddNumberToObject(a, "bytes", info.bytes);
        if (r->dur > 0) cJSON_AddNumberToObject(a, "GB/s", info.bytes / r->dur * 1e-6);
    } else {
        cJSON_AddStringToObject(a, "storage", s->place_name[st->place]);
        cJSON_AddNumberToObject(a, "flops", info.flops);
        if (info.flops > 0 && r->dur > 0) cJSON_AddNumberToObject(a, "GFLOP/s", info.flops / r->dur * 1e-6);
        if (fused[0]) cJSON_AddStringToObject(a, "fused", fused);
    }
    cJSON_AddNumberToObject(a, "run", (double)run);
    cJSON_AddStringToObject(a, "clock", r->device ? "device" : "host");
    return a;
}

static cJSON *other_data(const dl_session *s, const dl_trace *t) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "dlrun", dl_version());
    cJSON_AddStringToObject(o, "model", s->g->name);
    cJSON_AddNumberToObject(o, "batch", s->inputs && s->g->n_inputs ? (double)s->inputs[0].shape[0] : 0);
    cJSON_AddNumberToObject(o, "runs", (double)t->n_runs);
    cJSON_AddNumberToObject(o, "runs_recorded", t->n_kept);
    cJSON_AddNumberToObject(o, "runs_dropped", (double)(t->n_runs - t->n_kept));
    cJSON_AddNumberToObject(o, "max_runs", t->cap_runs);
    cJSON_AddStringToObject(o, "clock", "ts 0 is the start of dl_session_create (host monotonic clock)");
    return o;
}

static void write_events(writer *w, const dl_session *s, const dl_trace *t) {
    tracks tr;
    find_tracks(s, &tr);
    char *fused = fused_names(s), name[160];
    if (!fused) {
        w->failed = 1;
        return;
    }
    snprintf(name, sizeof name, "dlrun %s", s->g->name);
    meta(w, "process_name", TID_SESSION, "name", name, 0);
    track(w, TID_SESSION, "session", 0);
    for (int i = 0; i < tr.n_be; i++) track(w, 2 + i, tr.be[i]->name, 1 + i);
    if (tr.copies) track(w, copies_tid(&tr), "copies", 1 + tr.n_be);
    for (int i = 0; i < t->n_spans && !w->failed; i++) {
        const span *sp = &t->spans[i];
        emit(w, complete(sp->name, sp->cat, TID_SESSION, sp->t0 - t->origin, sp->t1 - sp->t0,
                         sp->args ? cJSON_Duplicate(sp->args, 1) : NULL));
    }
    for (int i = 0; i < t->n_kept && !w->failed; i++) {
        int slot = (t->head + i) % t->cap_runs;
        const run_rec *run = &t->runs[slot];
        cJSON *a = cJSON_CreateObject();
        if (a) {
            cJSON_AddNumberToObject(a, "run", (double)run->index);
            cJSON_AddNumberToObject(a, "inputs_ms", run->ph.inputs_ms);
            cJSON_AddNumberToObject(a, "compute_ms", run->ph.compute_ms);
            cJSON_AddNumberToObject(a, "outputs_ms", run->ph.outputs_ms);
        }
        emit(w, complete("run", "run", TID_SESSION, run->ts, run->dur, a));
        for (int k = 0; k < s->n_steps && !w->failed; k++) {
            const dl_step *st = &s->steps[k];
            if (!executed(st)) continue;
            const step_rec *r = &t->rec[(size_t)slot * (size_t)t->n_steps + (size_t)k];
            dl_step_info info;
            dl_session_step(s, k, &info);
            int tid = st->kind == DL_STEP_COPY ? copies_tid(&tr) : backend_tid(&tr, st->be, 0);
            emit(w, complete(info.layer, info.op, tid, r->ts, r->dur,
                             step_args(s, k, r, run->index, fused + (size_t)k * FUSED_LEN)));
        }
    }
    free(fused);
}

dl_status dl_session_write_trace(const dl_session *s, const char *path, dl_error *err) {
    const dl_trace *t = s->trace;
    if (!t) return dl_fail(err, DL_E_INVALID, "no trace: the session was not created with trace = 1");
    FILE *f = fopen(path, "w");
    if (!f) return dl_fail(err, DL_E_IO, "cannot write trace %s: %s", path, strerror(errno));
    writer w = {f, 0, 0};
    if (fputs("{\"traceEvents\": [\n", f) < 0) w.failed = 1;
    if (!w.failed) write_events(&w, s, t);
    cJSON *other = w.failed ? NULL : other_data(s, t);
    char *text = other ? cJSON_PrintUnformatted(other) : NULL;
    if (!text || fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": %s}\n", text) < 0) w.failed = 1;
    free(text);
    cJSON_Delete(other);
    int errno_write = ferror(f) ? errno : 0;
    if (fclose(f) != 0 && !errno_write) errno_write = errno;
    if (w.failed || errno_write) {
        remove(path);
        return dl_fail(err, DL_E_IO, "cannot write trace %s: %s", path,
                       errno_write ? strerror(errno_write) : "out of memory");
    }
    return DL_OK;
}
