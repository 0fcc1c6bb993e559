/* micro_batch.c — a batch run in parts (dl_session_options.micro_batch; docs/micro-batch.md).
 *
 * At batch 8, SqueezeNet's and MobileNetV2's activations (12-25 MB a layer) no longer fit the
 * caches, and every op streams them from memory: on the 2-core VM of 2026-11-28, SqueezeNet took
 * 14.9 ms at batch 8 and 4 x 3.0 ms at batch 2. So a session may run its batch as several runs of
 * one plan built for fewer images, each on the next images of the caller's inputs, its outputs
 * copied into the whole batch's. Under auto (micro_batch 0) the parts are measured against the
 * whole batch, on the same seeded input as --layout auto's plans: each halving of the part against
 * the fastest so far, down to parts of 1; a part is kept only if it is faster and its outputs
 * agree with the whole batch's (a model that mixes images, or has a batch-sized constant, does
 * not). The choice and the medians go into the timing
 * cache under a hash of the whole batch's plan, so the next session of the model builds only the
 * winner. The trials' step times also price running only the first layers in parts and the rest
 * at once (batch_prefix.c); the best such cut is run against the winner, and kept if faster. Last,
 * parts of 1 run side by side, one a thread, each plan on a context of one thread
 * (dl_session_create_at_once; threads: part_workers.c), are run against the fastest so far. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "part_workers.h"
#include "session.h"
#include "timing_cache.h"

#define PARTS_MIN_MS 5.0  /* a whole run under this is not split: too little to win, tests' models */
#define PARTS_MARGIN 0.97 /* a part must be 3 % faster to be taken over what it is measured against */
#define PARTS_ROUNDS 5    /* timed runs of each, in turn, at least (ResNet-50 b8 at 3: its 5 % went unseen) */
/* A part whose largest layer reads and writes more activations than this is not tried: parts win
 * by keeping a layer's activations in the caches (SqueezeNet at batch 8: 12-25 MB a layer at once,
 * a quarter of that in parts of 2), and no CPU's last-level cache holds this much for one core.
 * Fashion-MNIST at batch 10000 (200 KB an image in its largest layer) tried parts of 5000, 2500,
 * 1250 and 625, 57 s of a first run of 77 on the 2-core VM, for a run of 0.3 s. */
#define PARTS_MAX_LAYER_BYTES ((size_t)64 << 20)
/* Parts at once hold a plan a thread, each with its weights (and its backends' packed copies of
 * them): not tried where those copies would pass this. VGG-16's 528 MB would be read from memory
 * once an image a thread, where at once they are read once a batch. */
#define AT_ONCE_MAX_WEIGHT_BYTES ((size_t)256 << 20)

void dl_session_parts_free(dl_session *s) {
    if (s->whole_out)
        for (int i = 0; i < s->g->n_outputs; i++) free(s->whole_out[i].data);
    free(s->whole_in), free(s->whole_out), free(s->whole_dims), free(s->part_in), free(s->part_ms);
    s->whole_in = s->whole_out = s->part_in = NULL;
    s->whole_dims = NULL, s->part_ms = NULL;
    s->parts = 0;
    dl_part_workers_stop(s->workers); /* between runs: none is running a part */
    s->workers = NULL;
    for (int i = 0; i < s->n_sibs; i++) dl_session_free(s->sibs[i]); /* before own_ctx: dl_session_free */
    free(s->sibs);
    s->sibs = NULL, s->n_sibs = 0;
}

/* 1 if every input and output of s has the batch, n, as its first dimension */
static int batch_first(const dl_session *s, int64_t n) {
    for (int i = 0; i < s->g->n_inputs; i++)
        if (s->inputs[i].ndim < 1 || s->inputs[i].shape[0] != n) return 0;
    for (int i = 0; i < s->g->n_outputs; i++)
        if (s->outputs[i].ndim < 1 || s->outputs[i].shape[0] != n) return 0;
    return s->g->n_inputs > 0;
}

/* t as the whole batch sees it: its shape (copied to dims) with parts times its first dimension */
static dl_tensor widen(const dl_tensor *t, int64_t parts, int64_t *dims) {
    dl_tensor w = *t;
    memcpy(dims, t->shape, (size_t)t->ndim * sizeof *dims);
    dims[0] *= parts;
    w.shape = dims, w.data = NULL, w.strides = NULL;
    return w;
}

dl_status dl_session_make_parts(dl_session *p, int64_t parts, dl_error *err) {
    const int ni = p->g->n_inputs, no = p->g->n_outputs;
    if (parts < 2) return DL_OK;
    if (p->n_doms > 1)
        return dl_fail(err, DL_E_UNSUPPORTED, "a batch runs in parts only where every op runs on the host");
    if (!ni || !batch_first(p, p->inputs[0].ndim ? p->inputs[0].shape[0] : 0))
        return dl_fail(err, DL_E_UNSUPPORTED,
                       "model '%s': a batch runs in parts only where every input and output has it first", p->g->name);
    int dims = 0;
    for (int i = 0; i < ni; i++) dims += p->inputs[i].ndim;
    for (int i = 0; i < no; i++) dims += p->outputs[i].ndim;
    p->whole_in = calloc((size_t)ni, sizeof *p->whole_in);
    p->part_in = calloc((size_t)ni, sizeof *p->part_in);
    p->whole_out = calloc((size_t)no ? (size_t)no : 1, sizeof *p->whole_out);
    p->whole_dims = calloc((size_t)dims, sizeof *p->whole_dims);
    p->part_ms = calloc((size_t)p->n_steps + 1, sizeof *p->part_ms);
    if (!p->whole_in || !p->part_in || !p->whole_out || !p->whole_dims || !p->part_ms) {
        dl_session_parts_free(p);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    int64_t *d = p->whole_dims;
    for (int i = 0; i < ni; i++) {
        if (p->inputs[i].shape[0] > INT64_MAX / parts) {
            dl_session_parts_free(p);
            return dl_fail(err, DL_E_INVALID, "a batch of %lld parts overflows", (long long)parts);
        }
        p->whole_in[i] = widen(&p->inputs[i], parts, d);
        d += p->inputs[i].ndim;
    }
    for (int i = 0; i < no; i++) {
        const size_t bytes = dl_session_value_bytes(p, p->g->outputs[i]);
        p->whole_out[i] = widen(&p->outputs[i], parts, d);
        d += p->outputs[i].ndim;
        if (bytes > SIZE_MAX / (size_t)parts || !(p->whole_out[i].data = malloc(bytes * (size_t)parts))) {
            dl_session_parts_free(p);
            return dl_fail(err, DL_E_NOMEM, "out of memory for the outputs of a batch in %lld parts", (long long)parts);
        }
    }
    p->parts = parts;
    return DL_OK;
}

dl_status dl_session_create_at_once(dl_context *ctx, dl_model *m, const dl_session_options *opt, int64_t parts,
                                    int at_once, dl_session **out, dl_error *err) {
    *out = NULL;
    if (at_once > parts) at_once = (int)parts;
    if (at_once < 2 || at_once > DL_PARTS_AT_ONCE_MAX)
        return dl_fail(err, DL_E_INVALID, "parts at once must be 2 to %d and at most the parts, not %d",
                       DL_PARTS_AT_ONCE_MAX, at_once);
    dl_context *twin = NULL;
    dl_status st = dl_context_host_twin(ctx, ctx->host.n_threads / at_once, &twin, err);
    if (st != DL_OK) return st;
    /* a cap on memory holds for the plans together: each plan gets its share */
    dl_session_options o = *opt, sib;
    if (o.max_memory > 0) o.max_memory /= at_once;
    sib = o;
    sib.reserve_inputs = 0; /* the caller's inputs are counted once, with the first plan */
    dl_session *p = NULL;
    if ((st = dl_session_create_as(twin, m, &o, 0, &p, err)) != DL_OK) {
        dl_session_free(p);
        dl_context_free(twin);
        return st;
    }
    p->own_ctx = twin; /* freed with p, after its kernels */
    st = dl_session_make_parts(p, parts, err);
    if (st == DL_OK && !(p->sibs = calloc((size_t)at_once - 1, sizeof *p->sibs)))
        st = dl_fail(err, DL_E_NOMEM, "out of memory");
    /* the siblings in p's layout (auto's runs of both plans are not repeated) */
    for (int i = 0; st == DL_OK && i < at_once - 1; i++) {
        dl_session *x = NULL;
        st = dl_session_create_as(twin, m, &sib, 1 + p->layout_ask, &x, err);
        if (st == DL_OK && (!(x->part_in = calloc((size_t)p->g->n_inputs + 1, sizeof *x->part_in)) ||
                            !(x->part_ms = calloc((size_t)x->n_steps + 1, sizeof *x->part_ms))))
            st = dl_fail(err, DL_E_NOMEM, "out of memory");
        if (x) p->sibs[p->n_sibs++] = x;
    }
    if (st == DL_OK && !(p->workers = dl_part_workers_start(p->n_sibs)))
        st = dl_fail(err, DL_E_RUNTIME, "cannot start %d thread%s to run parts at once", p->n_sibs,
                     p->n_sibs == 1 ? "" : "s");
    if (st != DL_OK) {
        dl_session_free(p);
        return st;
    }
    *out = p;
    return DL_OK;
}

static int same_dims(const dl_tensor *a, const dl_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

dl_status dl_session_check_host_inputs(const dl_session *s, const dl_tensor *want, const dl_tensor *inputs,
                                       int n_inputs, const char *how, dl_error *err) {
    const dl_graph *g = s->g;
    if (n_inputs != g->n_inputs)
        return dl_fail(err, DL_E_INVALID, "model '%s' takes %d input(s), got %d", g->name, g->n_inputs, n_inputs);
    for (int i = 0; i < n_inputs; i++) {
        const dl_tensor *t = &inputs[i], *w = &want[i];
        if (t->device.device_type != DL_DEVICE_CPU || !t->data || t->strides || !dl_dtype_eq(t->dtype, w->dtype) ||
            !same_dims(t, w)) {
            char shape[128], got[128];
            dl_shape_str(w->shape, w->ndim, shape, sizeof shape);
            dl_shape_str(t->shape, t->ndim, got, sizeof got);
            return dl_fail(err, DL_E_INVALID,
                           "input '%s' must be a dense %s host tensor of shape %s, got %s%s (this session runs %s, on "
                           "the host)",
                           g->values[g->inputs[i]].name, dl_dtype_is_f32(w->dtype) ? "f32" : "int64", shape, got,
                           dl_dtype_eq(t->dtype, w->dtype) ? "" : " of another dtype", how);
        }
        /* each part's gathers would check only its rows of the ids, and name a place in the part
         * (ids [[0, 1, 2], [3, 4, 7]] in parts of 1 read "index 7 (at 2)"): the whole of it here */
        const int64_t bound = dl_session_input_bound(s, i);
        if (!bound || t->dtype.code != DL_DTYPE_INT) continue;
        const int64_t *idx = (const int64_t *)((const char *)t->data + t->byte_offset), n = dl_tensor_numel(t);
        for (int64_t j = 0; j < n; j++)
            if (idx[j] < -bound || idx[j] >= bound)
                return dl_fail(err, DL_E_INVALID,
                               "input '%s': gather: index %lld (at %lld) is out of range for a dimension of size %lld",
                               g->values[g->inputs[i]].name, (long long)idx[j], (long long)j, (long long)bound);
    }
    return DL_OK;
}

/* One thread's share of a run in parts: parts first, first + step, ... of the caller's batch on
 * x (the session in parts, or a sibling of it), each part's outputs into the lead's whole batch */
typedef struct part_job {
    dl_session *lead, *x;
    const dl_tensor *inputs;
    int n_inputs;
    int64_t first, step, done; /* done: the parts it ran */
    dl_run_times sum;          /* their phases, summed */
    dl_status st;
    dl_error err;
} part_job;

static void run_job(void *arg) {
    part_job *j = arg;
    dl_session *s = j->lead, *x = j->x;
    const dl_graph *g = s->g;
    for (int64_t p = j->first; p < s->parts; p += j->step) {
        for (int i = 0; i < j->n_inputs; i++) {
            const size_t bytes = dl_session_value_bytes(x, g->inputs[i]);
            x->part_in[i] = x->inputs[i];
            x->part_in[i].device = j->inputs[i].device;
            x->part_in[i].data = (char *)j->inputs[i].data + j->inputs[i].byte_offset + (size_t)p * bytes;
        }
        if ((j->st = dl_session_run_plan(x, x->part_in, j->n_inputs, &j->err)) != DL_OK) break;
        for (int k = 0; k < x->n_steps; k++) x->part_ms[k] += x->steps[k].last_ms;
        j->sum.inputs_ms += x->last_run.inputs_ms, j->sum.compute_ms += x->last_run.compute_ms;
        j->sum.outputs_ms += x->last_run.outputs_ms;
        j->done++;
        for (int i = 0; i < g->n_outputs; i++) {
            const size_t bytes = dl_session_value_bytes(x, g->outputs[i]);
            memcpy((char *)s->whole_out[i].data + (size_t)p * bytes, x->outputs[i].data, bytes);
        }
    }
}

dl_status dl_session_run_parts(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err) {
    dl_status in_rc = dl_session_check_host_inputs(s, s->whole_in, inputs, n_inputs, "its batch in parts", err);
    if (in_rc != DL_OK) return in_rc;
    const int n_jobs = 1 + s->n_sibs;
    part_job jobs[1 + DL_PARTS_AT_ONCE_MAX];
    const double t0 = dl_now_ms();
    for (int j = 0; j < n_jobs; j++) {
        dl_session *x = j ? s->sibs[j - 1] : s;
        memset(x->part_ms, 0, (size_t)x->n_steps * sizeof *x->part_ms);
        jobs[j] = (part_job){s, x, inputs, n_inputs, j, n_jobs, 0, {0, 0, 0}, DL_OK, {{0}}};
    }
    /* this session's parts on the caller's thread, each sibling's on a thread of its own
     * (part_workers.c), whose kernels' loops run on that one thread (their plugins' contexts have
     * threads / n_jobs); without those threads, on the caller's, one after another */
    for (int j = 1; j < n_jobs && s->workers; j++) dl_part_workers_give(s->workers, j - 1, run_job, &jobs[j]);
    run_job(&jobs[0]);
    for (int j = 1; j < n_jobs; j++) {
        if (s->workers) dl_part_workers_wait(s->workers, j - 1);
        else run_job(&jobs[j]);
    }
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].st != DL_OK) {
            if (err) *err = jobs[j].err;
            return jobs[j].st;
        }
    /* each step once a run: its time the sum over the parts, on every thread */
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *st = &s->steps[k];
        if (st->kind != DL_STEP_OP && st->kind != DL_STEP_COPY) continue;
        st->last_ms = s->part_ms[k];
        for (int j = 0; j < s->n_sibs; j++)
            if (s->sibs[j]->n_steps == s->n_steps) st->last_ms += s->sibs[j]->part_ms[k];
        st->total_ms += st->last_ms - s->part_ms[k];
        st->runs -= jobs[0].done - 1;
    }
    s->last_run = jobs[0].sum;
    if (n_jobs > 1) { /* at once: the run's phases are the caller's parts' copies and the rest */
        const double in_out = jobs[0].sum.inputs_ms + jobs[0].sum.outputs_ms, wall = dl_now_ms() - t0;
        s->last_run.compute_ms = wall > in_out ? wall - in_out : 0;
    }
    return DL_OK;
}

/* ---- auto ---- */

/* Relative L2 distance of a's outputs from ref (one array per output, of a's lengths) */
static double apart_from(const dl_session *a, const float *const *ref) {
    double diff = 0, norm = 0;
    for (int i = 0; i < a->g->n_outputs; i++) {
        const dl_tensor *x = dl_session_output(a, i);
        const float *u = x->data;
        for (int64_t e = 0; e < dl_tensor_numel(x); e++) {
            const double d = (double)u[e] - ref[i][e];
            diff += d * d, norm += (double)ref[i][e] * ref[i][e];
        }
    }
    if (isnan(diff)) return INFINITY;
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* Relative L2 distance of a's outputs from b's (both just run on the same inputs) */
static double outputs_apart(const dl_session *a, const dl_session *b) {
    const float **ref = malloc(((size_t)a->g->n_outputs + 1) * sizeof *ref);
    for (int i = 0; ref && i < a->g->n_outputs; i++) {
        if (dl_tensor_numel(dl_session_output(a, i)) != dl_tensor_numel(dl_session_output(b, i))) {
            free(ref);
            return INFINITY;
        }
        ref[i] = dl_session_output(b, i)->data;
    }
    const double d = ref ? apart_from(a, ref) : INFINITY;
    free(ref);
    return d;
}

/* The session of parts of m images of the whole batch n; NULL (the reason in e) if it cannot be */
static dl_session *part_session(const dl_session *s, dl_model *m, int64_t n, int64_t images, dl_error *e) {
    dl_session_options o = s->opt;
    o.batch = o.micro_batch = images;
    dl_session *p = NULL;
    dl_status st = dl_session_create_as(s->ctx, m, &o, 0, &p, e);
    if (st == DL_OK) st = dl_session_make_parts(p, n / images, e);
    if (st != DL_OK) {
        dl_session_free(p);
        return NULL;
    }
    return p;
}

/* Why s is not tried in parts, or NULL */
static const char *not_tried(const dl_session *s, int64_t n) {
    if (n < 2) return "";
    if (!batch_first(s, n)) return "inputs or outputs without the batch first";
    if (s->n_doms > 1) return "ops on a device";
    if (s->opt.keep_activations || s->opt.prefer_backend || s->opt.trace) return "not with these options";
    const char *runs = getenv("DLRUN_MICRO_BATCH_RUNS"); /* "0": never (tools/test's sanitizer builds) */
    if (runs && strcmp(runs, "0") == 0) return "DLRUN_MICRO_BATCH_RUNS=0";
    return NULL;
}

/* The most activation bytes one node of s reads and writes (its inputs that are not weights, and
 * its output), over s's batch n: a layer's working set per image */
static double layer_bytes_per_image(const dl_session *s, int64_t n) {
    const dl_graph *g = s->g;
    size_t most = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const dl_node *nd = &g->nodes[i];
        size_t b = dl_session_value_bytes(s, nd->output);
        for (int j = 0; j < nd->n_inputs; j++)
            if (g->values[nd->inputs[j]].kind != DL_VALUE_WEIGHT) b += dl_session_value_bytes(s, nd->inputs[j]);
        most = b > most ? b : most;
    }
    return (double)most / (double)n;
}

/* j where parts of `images` are ms_of[j] (n >> j images; j = 0: at once), or 63 where none is */
static int part_index(int64_t n, int64_t images) {
    int j = 0;
    while (j < 63 && (n >> j) != images) j++;
    return j;
}

/* Appends to the text of what was tried */
static void tried_too(char *buf, size_t len, const char *fmt, ...) {
    const size_t u = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + u, len - u, fmt, ap);
    va_end(ap);
}

/* A look, not a measurement: the fastest of up to 4 runs of s on the seeded input, in ms (0 if it
 * cannot run), done at the first under PARTS_MIN_MS: a model is quick if one run is (a loaded
 * machine's preemptions, or threads waiting at a barrier for a core, only ever add time). */
static double one_run_ms(dl_session *s) {
    dl_error e = {{0}};
    dl_tensor *in = dl_session_seeded_inputs(s, &e);
    double ms = 0;
    for (int r = 0; in && r < 4 && (r == 0 || ms >= PARTS_MIN_MS); r++) {
        const double t0 = dl_now_ms();
        if (dl_session_run_plan(s, in, s->g->n_inputs, &e) != DL_OK) {
            ms = 0;
            break;
        }
        const double t = dl_now_ms() - t0;
        ms = r == 0 || t < ms ? t : ms;
    }
    dl_session_free_inputs(s, in);
    dl_session_reset_profile(s);
    return ms;
}

/* A plain session of `images` of s's batch (no parts: the prefix of a run up to node cut, batch_prefix.c) */
static dl_session *prefix_session(const dl_session *s, dl_model *m, int64_t images, int cut, dl_error *e) {
    dl_session_options o = s->opt;
    o.batch = o.micro_batch = images;
    dl_session *p = NULL;
    /* s's layout (the value crossing is stored alike in both), and kernels for the nodes up to the
     * cut only: nothing runs the rest of its plan */
    if (dl_session_create_prefix(s->ctx, m, &o, 1 + s->layout_ask, cut, &p, e) != DL_OK) {
        dl_session_free(p);
        return NULL;
    }
    return p;
}

/* Relative L2 distance of s's outputs with its prefix from best's (s itself without it where best
 * is s), on the seeded input; INFINITY where either cannot run. */
static double prefix_apart(dl_session *best, dl_session *s) {
    dl_error e = {{0}};
    dl_tensor *in = dl_session_seeded_inputs(s, &e);
    dl_session *prefix = s->prefix;
    double apart = INFINITY;
    float **ref = calloc((size_t)s->g->n_outputs + 1, sizeof *ref);
    if (best == s) s->prefix = NULL;
    int ok = in && ref && dl_session_run(best, in, s->g->n_inputs, &e) == DL_OK;
    s->prefix = prefix;
    for (int i = 0; ok && i < s->g->n_outputs; i++) {
        const dl_tensor *y = dl_session_output(best, i);
        const size_t bytes = (size_t)dl_tensor_numel(y) * sizeof(float);
        ok = (ref[i] = malloc(bytes ? bytes : 1)) != NULL;
        if (ok) memcpy(ref[i], y->data, bytes);
    }
    if (ok && dl_session_run(s, in, s->g->n_inputs, &e) == DL_OK) apart = apart_from(s, (const float *const *)ref);
    for (int i = 0; ref && i < s->g->n_outputs; i++) free(ref[i]);
    free(ref);
    dl_session_free_inputs(s, in);
    dl_session_reset_profile(s);
    dl_session_reset_profile(best);
    return apart;
}

static void drop_prefix(dl_session *s) {
    dl_session_free(s->prefix);
    free(s->part_ms), free(s->part_in);
    s->prefix = NULL, s->part_ms = NULL, s->part_in = NULL;
}

/* The first layers in parts (batch_prefix.c) on s, up to cut, in parts of `images`: attached
 * where its session can be built and the cut holds; 0 where not. */
static int try_prefix(dl_session *s, dl_model *m, int64_t n, int64_t images, int cut, const int *cuts) {
    dl_error e = {{0}};
    dl_session *p =
        cut >= 0 && images >= 1 && images < n && n % images == 0 ? prefix_session(s, m, images, cut, &e) : NULL;
    if (p && dl_prefix_attach(s, p, n / images, cut, cuts)) return 1;
    dl_session_free(p);
    drop_prefix(s);
    return 0;
}

/* How many parts of 1 auto runs at once for s at batch n (its threads, or opt.parts_at_once), 0:
 * none: one thread, parts_at_once 1, or weights too large to hold once a thread */
static int at_once_tried(const dl_session *s, int64_t n) {
    int k = s->opt.parts_at_once ? s->opt.parts_at_once : s->ctx->host.n_threads;
    if (k > n) k = (int)n;
    if (k > DL_PARTS_AT_ONCE_MAX) k = DL_PARTS_AT_ONCE_MAX;
    double weights = 0;
    for (int v = 0; v < s->g->n_values; v++)
        if (s->g->values[v].kind == DL_VALUE_WEIGHT) weights += (double)dl_session_value_bytes(s, v);
    return k >= 2 && s->opt.parts_at_once != 1 && weights * k <= (double)AT_ONCE_MAX_WEIGHT_BYTES ? k : 0;
}

/* auto's choice for s's plan (hash h) as the timing cache holds it: 1, the images of a part
 * (*images: n for at once), and, at once, the cut after which its first layers ran in parts (*cut,
 * -1: none) and their images; 0 where none is cached. (The times shown are the pairs', pairs_load.) */
static int cached_choice(const dl_session *s, dl_tcache *cache, unsigned long long h, int64_t n, int64_t *images,
                         int *cut, int64_t *prefix_images) {
    char key[112];
    double choice = 0, cut_d = -1, images_d = 0;
    *cut = -1, *prefix_images = 0;
    snprintf(key, sizeof key, "micro-batch;plan=%016llx;choice", h);
    if (!(cache && dl_tcache_get(cache, key, &choice) && choice >= 1 && choice <= (double)n &&
          n % (int64_t)choice == 0))
        return 0;
    /* a choice made before parts at once were measured (or without them) is made again */
    snprintf(key, sizeof key, "micro-batch;plan=%016llx;at-once", h);
    double k;
    if (at_once_tried(s, n) && !dl_tcache_get(cache, key, &k)) return 0;
    /* nor one cached before the pairs it was measured in were (the description shows them) */
    snprintf(key, sizeof key, "micro-batch;plan=%016llx;pairs", h);
    if (!dl_tcache_get(cache, key, &k)) return 0;
    *images = (int64_t)choice;
    snprintf(key, sizeof key, "micro-batch;plan=%016llx;prefix", h);
    if (*images == n && dl_tcache_get(cache, key, &cut_d) && --cut_d >= 0 && cut_d < s->g->n_nodes - 1) {
        snprintf(key, sizeof key, "micro-batch;plan=%016llx;prefix-images", h);
        dl_tcache_get(cache, key, &images_d);
        if (images_d >= 1 && images_d < (double)n && n % (int64_t)images_d == 0)
            *cut = (int)cut_d, *prefix_images = (int64_t)images_d;
    }
    return 1;
}

int dl_micro_batch_prepare_from(const dl_session *s) {
    const int64_t n = s->g->n_inputs && s->inputs[0].ndim ? s->inputs[0].shape[0] : 0;
    if (s->opt.micro_batch != 0 || s->forced_ask || not_tried(s, n)) return 0;
    char warn[600];
    dl_tcache *cache = dl_tcache_open(s->opt.retune, warn, sizeof warn);
    int64_t images = n, prefix_images;
    int cut, from = 0;
    if (cached_choice(s, cache, (unsigned long long)dl_session_plan_hash(s), n, &images, &cut, &prefix_images))
        from = images < n ? s->g->n_nodes : cut >= 0 ? cut + 1 : 0;
    dl_tcache_free(cache);
    return from;
}

/* The session of n images in parts of 1, k at once (dl_session_create_at_once), or NULL */
static dl_session *at_once_session(const dl_session *s, dl_model *m, int64_t n, int k, dl_error *e) {
    dl_session_options o = s->opt;
    o.batch = o.micro_batch = 1;
    dl_session *q = NULL;
    if (dl_session_create_at_once(s->ctx, m, &o, n, k, &q, e) != DL_OK) return NULL;
    return q;
}

/* The pairs auto measured, each in turn: a plan against the fastest so far, and the time of each
 * in that pair, so that the description puts every time beside the one it was measured against
 * (the fastest plan's time from one pair beside a loser's from another, quieter moment read as a
 * contradiction). A plan is a code: K > 0, parts of K images (K = n: the batch at once); -k, parts
 * of 1, k at a time; 0, the first `cut` + 1 layers in parts of `images` and the rest at once. */
#define PAIRS_MAX 72
typedef struct parts_pairs {
    int n, cut;
    int64_t images;
    double what[PAIRS_MAX], ms[PAIRS_MAX], vs[PAIRS_MAX], vs_ms[PAIRS_MAX];
} parts_pairs;

static void pair_add(parts_pairs *pr, double what, double ms, double vs, double vs_ms) {
    if (pr->n >= PAIRS_MAX) return;
    pr->what[pr->n] = what, pr->ms[pr->n] = ms, pr->vs[pr->n] = vs, pr->vs_ms[pr->n] = vs_ms;
    pr->n++;
}

/* A plan's name after "in" ("at once" alone), as the description writes it */
static void plan_name(char *buf, size_t len, const parts_pairs *pr, double code, int64_t n) {
    if (code == (double)n) snprintf(buf, len, "at once");
    else if (code > 0) snprintf(buf, len, "in parts of %lld", (long long)code);
    else if (code < 0) snprintf(buf, len, "in parts of 1, %d at a time", (int)-code);
    else snprintf(buf, len, "with the first %d layers in parts of %lld", pr->cut + 1, (long long)pr->images);
}

static void pairs_key(char *key, size_t len, unsigned long long h, int i, const char *what) {
    if (i < 0) snprintf(key, len, "micro-batch;plan=%016llx;pairs", h);
    else snprintf(key, len, "micro-batch;plan=%016llx;pair=%d;%s", h, i, what);
}

static void pairs_save(dl_tcache *cache, unsigned long long h, const parts_pairs *pr) {
    char key[112];
    for (int i = 0; i < pr->n; i++) { /* the codes stored past DL_PARTS_AT_ONCE_MAX: a cache holds no negatives */
        const double v[4] = {pr->what[i] + DL_PARTS_AT_ONCE_MAX, pr->ms[i], pr->vs[i] + DL_PARTS_AT_ONCE_MAX,
                             pr->vs_ms[i]};
        static const char *const names[4] = {"what", "ms", "vs", "vs-ms"};
        for (int j = 0; j < 4; j++) {
            pairs_key(key, sizeof key, h, i, names[j]);
            dl_tcache_put(cache, key, v[j]);
        }
    }
    pairs_key(key, sizeof key, h, 0, "cut"), dl_tcache_put(cache, key, pr->cut);
    pairs_key(key, sizeof key, h, 0, "images"), dl_tcache_put(cache, key, (double)pr->images);
    pairs_key(key, sizeof key, h, -1, NULL), dl_tcache_put(cache, key, pr->n);
}

/* The pairs of h's choice from the cache (what cached_choice found there); none where one is amiss */
static void pairs_load(dl_tcache *cache, unsigned long long h, int64_t n, parts_pairs *pr) {
    char key[112];
    double count = 0, cut = -1, images = 0;
    pr->n = 0;
    pairs_key(key, sizeof key, h, -1, NULL);
    if (!dl_tcache_get(cache, key, &count) || !(count >= 0 && count <= PAIRS_MAX)) return;
    pairs_key(key, sizeof key, h, 0, "cut"), dl_tcache_get(cache, key, &cut);
    pairs_key(key, sizeof key, h, 0, "images"), dl_tcache_get(cache, key, &images);
    pr->cut = cut >= 0 && cut < 1e9 ? (int)cut : 0;
    pr->images = images >= 1 && images <= (double)n ? (int64_t)images : 1;
    for (int i = 0; i < (int)count; i++) {
        double v[4] = {0, 0, 0, 0};
        static const char *const names[4] = {"what", "ms", "vs", "vs-ms"};
        for (int j = 0; j < 4; j++) {
            pairs_key(key, sizeof key, h, i, names[j]);
            if (!dl_tcache_get(cache, key, &v[j])) return;
        }
        v[0] -= DL_PARTS_AT_ONCE_MAX, v[2] -= DL_PARTS_AT_ONCE_MAX;
        /* codes inside what a batch of n can be: a hostile cache names no plan of its own */
        if (!(v[0] >= -DL_PARTS_AT_ONCE_MAX && v[0] <= (double)n && v[2] >= -DL_PARTS_AT_ONCE_MAX && v[2] <= (double)n))
            return;
        pair_add(pr, v[0], v[1], v[2], v[3]);
    }
}

/* "(auto: W ms a run, against V ms <the other plan>; <plan> X ms against Y ms <plan>; ...": the
 * kept plan (code won) beside the other of the last pair it was in, then the other pairs in the
 * order they were measured (only those where no pair holds the kept plan) */
static void pairs_text(char *buf, size_t len, const parts_pairs *pr, double won, int64_t n) {
    int last = -1;
    for (int i = 0; i < pr->n; i++)
        if (pr->what[i] == won || pr->vs[i] == won) last = i;
    size_t u = 0;
    char a[96], b[96];
    buf[0] = 0;
    if (last >= 0) {
        const int mine = pr->what[last] == won;
        plan_name(b, sizeof b, pr, mine ? pr->vs[last] : pr->what[last], n);
        u += (size_t)snprintf(buf + u, len - u, "%.2f ms a run, against %.2f ms %s",
                              mine ? pr->ms[last] : pr->vs_ms[last], mine ? pr->vs_ms[last] : pr->ms[last], b);
    }
    for (int i = 0; i < pr->n && u < len; i++) {
        if (i == last) continue;
        plan_name(a, sizeof a, pr, pr->what[i], n);
        plan_name(b, sizeof b, pr, pr->vs[i], n);
        const char *bare = !strncmp(a, "in ", 3) ? a + 3 : !strncmp(a, "with ", 5) ? a + 5 : a; /* "parts of 4" */
        u += (size_t)snprintf(buf + u, len - u, "%s%s %.2f ms against %.2f ms %s", u ? "; " : "", bare, pr->ms[i],
                              pr->vs_ms[i], b);
    }
}

static void choose_parts(dl_session **sp, dl_model *m);

dl_status dl_session_auto_parts(dl_session **sp, dl_model *m, dl_error *err) {
    choose_parts(sp, m);
    /* a session that left its first layers unprepared (dl_micro_batch_prepare_from) runs them
     * after all where the cached parts or prefix could not be had */
    return (*sp)->prefix ? DL_OK : dl_session_prepare_rest(*sp, err);
}

static void choose_parts(dl_session **sp, dl_model *m) {
    dl_session *s = *sp, *best = s;
    const int64_t n = s->g->n_inputs && s->inputs[0].ndim ? s->inputs[0].shape[0] : 0;
    const char *why = not_tried(s, n);
    char *desc = s->batch_desc;
    const size_t room = sizeof s->batch_desc;
    if (why) {
        if (*why) snprintf(desc, room, "%lld at once (auto: %s)", (long long)n, why);
        return;
    }
    const double tol = s->opt.precision == DL_PRECISION_F32 || s->opt.precision == DL_PRECISION_TF32 ? 1e-4 : 3e-2;
    char key[112], warn[600], tried[320] = "";
    const unsigned long long h = (unsigned long long)dl_session_plan_hash(s);
    dl_tcache *cache = dl_tcache_open(s->opt.retune, warn, sizeof warn);
    double ms_of[64] = {0}; /* ms_of[j]: parts of n >> j images (j = 0: at once) */
    int64_t best_images = n;
    int *cuts = dl_prefix_cuts(s->g);
    /* the first layers in parts: the best cut priced, and what its run measured */
    double prefix_est = INFINITY;
    int prefix_cut = -1, cached_cut = -1;
    int64_t prefix_images = 0, cached_images = 0;
    int at_once = 0; /* parts of 1 run this many at once (each on its share of the threads), or 0 */
    parts_pairs pr = {0};
    double cached_code = NAN; /* the plan the cache holds (a pair's code), where one does */
    const int cached = cached_choice(s, cache, h, n, &best_images, &cached_cut, &cached_images);
    if (cached) {
        double k = 0;
        snprintf(key, sizeof key, "micro-batch;plan=%016llx;at-once", h);
        const int some_k = best_images == 1 && dl_tcache_get(cache, key, &k) && k >= 2 && k <= DL_PARTS_AT_ONCE_MAX;
        cached_code = some_k ? -k : cached_cut >= 0 ? 0 : (double)best_images;
        /* kept only as this session would try them: not with parts_at_once 1, nor another k */
        const int cached_k = some_k && (int)k == at_once_tried(s, n);
        /* the batch at once's time, for a line without pairs (every part failed or differed) */
        snprintf(key, sizeof key, "micro-batch;plan=%016llx;images=%lld;run", h, (long long)n);
        dl_tcache_get(cache, key, &ms_of[0]);
        pairs_load(cache, h, n, &pr); /* what was measured, and against what */
        if (cached_cut >= 0 && cuts && try_prefix(s, m, n, cached_images, cached_cut, cuts))
            prefix_images = cached_images, prefix_cut = cached_cut;
        if (cached_k) {
            dl_error e = {{0}};
            dl_session *q = at_once_session(s, m, n, (int)k, &e);
            if (q) best = q, at_once = (int)k;
        }
        if (best_images < n && !at_once) {
            dl_error e = {{0}};
            dl_session *p = part_session(s, m, n, best_images, &e);
            if (p) best = p;
            else best_images = n; /* it cannot be built now (memory): at once */
        }
    } else {
        dl_error e = {{0}};
        if (dl_session_prepare_rest(s, &e) != DL_OK) { /* the cache changed since s was made: all of it runs */
            dl_tcache_free(cache);
            free(cuts);
            return;
        }
        /* a quick look first: a model that runs in under PARTS_MIN_MS is not worth the sessions */
        const double first = one_run_ms(s);
        dl_session *x = s;
        int j = 0;
        if (first < PARTS_MIN_MS) {
            snprintf(desc, room, "%lld at once (auto: a run takes %.2f ms, under %.0f)", (long long)n, first,
                     PARTS_MIN_MS);
            dl_tcache_free(cache);
            free(cuts);
            return;
        }
        double *w_ms = calloc((size_t)s->n_steps + 1, sizeof *w_ms);
        /* every halving, each against the fastest so far: n/2, n/4, ... (n odd: parts of 1). Not
         * only while each is faster: one part size measured slow (a loaded moment, or a size
         * between two that fit the caches) stopped the search, and the choice is cached
         * (SqueezeNet at batch 8 kept "at once", 17.99 ms against parts of 4 19.28, and ran 16.5
         * ms where parts of 1 run 13.4). Each part's steps, and the whole batch's, price every
         * cut for the first layers in parts (batch_prefix.c). */
        const double per_image = layer_bytes_per_image(s, n);
        int64_t too_large = 0; /* the smallest part not tried for its size, or 0 */
        for (int64_t images = n % 2 ? 1 : n / 2; images >= 1; images = images % 2 ? 0 : images / 2) {
            if ((double)images * per_image > (double)PARTS_MAX_LAYER_BYTES) {
                too_large = images;
                continue;
            }
            j = part_index(n, images);
            dl_session *p = part_session(s, m, n, images, &e);
            double ms[2], *p_ms = p ? calloc((size_t)p->n_steps + 1, sizeof *p_ms) : NULL;
            if (!p || !p_ms ||
                dl_session_run_both_steps(x, p, PARTS_ROUNDS, ms, (double *const[2]){x == s ? w_ms : NULL, p_ms}, &e) !=
                    DL_OK) {
                tried_too(tried, sizeof tried, "; parts of %lld: %.40s", (long long)images, e.msg);
                dl_session_free(p);
                free(p_ms);
                break;
            }
            const double apart = outputs_apart(p, x);
            /* the fastest so far as this pair measured it: its latest time (the cut's estimate below
             * prices against it) */
            const int jx = part_index(n, x == s ? n : best_images);
            if (jx < 63) ms_of[jx] = ms[0];
            if (apart > tol) { /* its time is not cached: not a time of this model's outputs */
                tried_too(tried, sizeof tried, "; parts of %lld give other outputs: relative L2 %.2g",
                          (long long)images, apart);
                dl_session_free(p);
                free(p_ms);
                break;
            }
            ms_of[j] = ms[1];
            pair_add(&pr, (double)images, ms[1], (double)(x == s ? n : best_images), ms[0]);
            int c = -1;
            const double est = cuts && w_ms ? dl_prefix_best(s, p, cuts, w_ms, p_ms, &c) : INFINITY;
            if (c >= 0 && est < prefix_est) prefix_est = est, prefix_cut = c, prefix_images = images;
            free(p_ms);
            if (!(ms[1] < ms[0] * PARTS_MARGIN)) { /* the next halving is tried all the same */
                dl_session_free(p);
                continue;
            }
            if (x != s) dl_session_free(x);
            x = best = p;
            best_images = images;
        }
        free(w_ms);
        if (!ms_of[0]) ms_of[0] = first; /* no part was run against the batch at once */
        if (too_large)
            tried_too(tried, sizeof tried, "; parts of %lld%s not tried: a layer's %.0f MB", (long long)too_large,
                      too_large < n / 2 ? " or more" : "", (double)too_large * per_image / 1e6);
        /* the best cut, where its estimate beats the fastest plan, run against it */
        const int jb = part_index(n, best_images);
        const double fastest = jb < 63 ? ms_of[jb] : 0;
        const int64_t images = prefix_images;
        prefix_images = 0;
        if (prefix_cut >= 0 && fastest > 0 && prefix_est < fastest * PARTS_MARGIN &&
            try_prefix(s, m, n, images, prefix_cut, cuts)) {
            double ms[2];
            const int ran = dl_session_run_both(best, s, PARTS_ROUNDS, ms, &e) == DL_OK;
            if (ran) pr.cut = prefix_cut, pr.images = images, pair_add(&pr, 0, ms[1], (double)best_images, ms[0]);
            if (ran && ms[1] < ms[0] * PARTS_MARGIN && prefix_apart(best, s) <= tol) {
                prefix_images = images;
                if (best != s) dl_session_free(best);
                best = s, best_images = n;
            } else {
                if (!ran)
                    tried_too(tried, sizeof tried, "; the first %d layers in parts: %.40s", prefix_cut + 1, e.msg);
                drop_prefix(s);
            }
        }
        /* parts of 1, one a thread, against the fastest plan so far: each thread's images stay in
         * its own caches, and no op waits for the other threads (on the 2-core VM, whose two
         * cores at times sit on dies apart: SqueezeNet at batch 8 ran 13-14 ms in parts of 1
         * while a core-to-core round trip took 100 ns, and 17.7-18.4 while it took 400) */
        const int tried_k = at_once_tried(s, n);
        dl_session *q = tried_k ? at_once_session(s, m, n, tried_k, &e) : NULL;
        double ms[2] = {0, 0};
        const int ran = q && dl_session_run_both(best, q, PARTS_ROUNDS, ms, &e) == DL_OK;
        if (ran) pair_add(&pr, -tried_k, ms[1], best == s && s->prefix ? 0 : (double)best_images, ms[0]);
        if (ran && ms[1] < ms[0] * PARTS_MARGIN && outputs_apart(q, best) <= tol) {
            if (best != s) dl_session_free(best);
            else if (s->prefix) {
                drop_prefix(s);
                prefix_images = 0;
            }
            best = q, best_images = 1, at_once = tried_k;
        } else if (tried_k) {
            if (!ran) tried_too(tried, sizeof tried, "; parts of 1, %d at a time: %.40s", tried_k, e.msg);
            dl_session_free(q);
        }
        if (cache) { /* at-once: the parts at once kept (0: none) */
            snprintf(key, sizeof key, "micro-batch;plan=%016llx;at-once", h);
            dl_tcache_put(cache, key, at_once);
            snprintf(key, sizeof key, "micro-batch;plan=%016llx;images=%lld;run", h, (long long)n);
            dl_tcache_put(cache, key, ms_of[0]);
            pairs_save(cache, h, &pr);
            snprintf(key, sizeof key, "micro-batch;plan=%016llx;choice", h);
            dl_tcache_put(cache, key, (double)best_images);
            snprintf(key, sizeof key, "micro-batch;plan=%016llx;prefix", h);
            dl_tcache_put(cache, key, prefix_images ? (double)prefix_cut + 1 : 0); /* 1 + the cut; 0: none */
            if (prefix_images) {
                snprintf(key, sizeof key, "micro-batch;plan=%016llx;prefix-images", h);
                dl_tcache_put(cache, key, (double)prefix_images);
            }
            dl_tcache_save(cache, warn, sizeof warn);
        }
    }
    dl_tcache_free(cache);
    free(cuts);
    /* "(auto: W ms a run, against V ms <plan>; <plan> X ms against Y ms <plan>; ...; notes)" */
    const double won_code = s->prefix ? 0 : at_once ? -at_once : (double)best_images;
    if (cached && won_code != cached_code) { /* the cache's choice could not be had, or not here */
        char name[96];
        plan_name(name, sizeof name, &pr, cached_code, n);
        if (cached_code == 0) { /* its pairs name that cut */
            pr.n = 0;
            tried_too(tried, sizeof tried, "; the cut cached for this plan no longer holds");
        } else tried_too(tried, sizeof tried, "; the cached choice, %s, is not this session's", name);
    }
    char pairs[sizeof s->batch_desc], body[sizeof s->batch_desc], text[sizeof s->batch_desc];
    pairs_text(pairs, sizeof pairs, &pr, won_code, n);
    if (pr.n) snprintf(body, sizeof body, "%.400s%.200s", pairs, tried);
    else if (ms_of[0] > 0) snprintf(body, sizeof body, "%.2f ms a run%.200s", ms_of[0], tried);
    else snprintf(body, sizeof body, "%.200s", tried[0] ? tried + 2 : "");
    const char *colon = body[0] ? ": " : "";
    if (s->prefix)
        snprintf(text, sizeof text,
                 "%lld: the first %d of %d layers in %lld parts of %lld, the rest at once (auto%s%.500s)", (long long)n,
                 s->prefix_cut + 1, s->g->n_nodes, (long long)s->prefix_parts, (long long)(n / s->prefix_parts), colon,
                 body);
    else if (at_once) {
        const int each = best->ctx->host.n_threads;
        snprintf(text, sizeof text, "%lld in %lld parts of 1, %d at a time on %d thread%s each (auto%s%.500s)",
                 (long long)n, (long long)n, at_once, each, each == 1 ? "" : "s", colon, body);
    } else if (best != s)
        snprintf(text, sizeof text, "%lld in %lld parts of %lld (auto%s%.500s)", (long long)n,
                 (long long)(n / best_images), (long long)best_images, colon, body);
    else snprintf(text, sizeof text, "%lld at once (auto%s%.500s)", (long long)n, colon, body);
    if (best != s) {
        best->place.timed += s->place.timed, best->place.cached += s->place.cached;
        dl_session_free(s);
        *sp = best;
    }
    dl_error e = {{0}};
    if ((*sp)->prefix) dl_prefix_trim(*sp, &e); /* kept for good: each plan keeps only its own steps' memory */
    memcpy((*sp)->batch_desc, text, sizeof text);
}

const char *dl_session_batching(const dl_session *s) { return s->batch_desc; }

int64_t dl_session_micro_batch(const dl_session *s) {
    return s->g->n_inputs && s->inputs[0].ndim ? s->inputs[0].shape[0] : 1;
}
