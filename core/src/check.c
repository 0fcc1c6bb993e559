/* check.c — cross-checks backends against the CPU reference, op by op (dlrun check, test-ops).
 *
 * Every op runs in the checked backend's own memory domain on exactly the reference op's inputs,
 * so error does not accumulate along a model. The output buffer is poisoned (a NaN bit pattern)
 * with guard bytes before and after it: an element left unwritten still holds the poison, a
 * write past either end changes a guard. Errors are compared on the normalized mean squared
 * error Σ(a−b)²/Σa² against a threshold per op kind and precision (docs/check.md); NaN or Inf
 * where the reference is finite always fails. Modelled on ggml's test-backend-ops. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "context.h"
#include "model_yaml.h"
#include "oprun.h"
#include "rng.h"
#include "session.h"
#include "tensor_convert.h"

double dl_check_threshold(int kind, int precision) { return dl_op_nmse(kind, precision); }

static double end_to_end_threshold(int precision) {
    return precision == DL_PRECISION_F32 ? 1e-8 : precision == DL_PRECISION_TF32 ? 1e-6 : 1e-4;
}

/* ---- comparing ---- */

static int is_poison(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u == DL_POISON;
}

/* Fills the error fields of row and returns 1 if it passes. */
static int compare(const float *ref, const float *got, int64_t n, double threshold, dl_check_row *row, char *detail,
                   size_t dlen) {
    double num = 0, den = 0, max_abs = 0, max_rel = 0;
    int64_t bad = -1;
    const char *why = NULL;
    for (int64_t i = 0; i < n; i++) {
        double a = ref[i], b = got[i], d = fabs(a - b);
        const char *off = NULL;
        if (is_poison(got[i])) off = "never written (still the poison value)"; /* a NaN too */
        else if (isfinite(a)) off = isfinite(b) ? NULL : "not finite where the reference is";
        else if (a == b || (isnan(a) && isnan(b))) continue; /* the same infinity (a causal mask's -inf), or NaN */
        else off = isnan(a) ? "a number where the reference is NaN" : "not the reference's infinity";
        if (off) {
            if (bad < 0) bad = i, why = off;
            num = INFINITY;
            continue;
        }
        den += a * a;
        num += d * d;
        if (d > max_abs) max_abs = d;
        double rel = d / fmax(fabs(a), 1e-6);
        if (rel > max_rel) max_rel = rel;
    }
    double nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    row->max_abs = max_abs;
    row->max_rel = max_rel;
    row->nmse = nmse;
    row->threshold = threshold;
    if (bad < 0 && nmse > threshold) { /* first element off by more than the threshold allows */
        double tol = sqrt(threshold * den / (double)(n ? n : 1));
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (fabs((double)ref[i] - got[i]) > tol) bad = i, why = "differs";
    }
    if (bad >= 0)
        snprintf(detail, dlen, "first mismatch at index %lld: reference %.9g, got %.9g (%s)", (long long)bad, ref[bad],
                 got[bad], why);
    return bad < 0 && nmse <= threshold;
}

/* ---- one op case on one backend: run, compare, report ---- */

typedef struct reporter {
    dl_check_fn fn;
    void *user;
    dl_check_summary *sum;
    int overruns; /* rows whose backend wrote past its output */
} reporter;

/* The storage a backend takes op in at this precision (dl_backend_accepts_as): sop (tensors in
 * sin/sout, strides 4 per tensor) in that format, named in `name` ("bf16 nhwc"); f32 as the op came
 * when it refuses every format (the check then reports its reason). */
static void storage_op(const dl_backend *be, const dl_op *op, const unsigned char *is_weight, int precision, int ask,
                       dl_op *sop, dl_tensor *sin, dl_tensor *sout, int64_t *strides, char *name, size_t len) {
    *sop = *op;
    memcpy(sin, op->inputs, (size_t)op->n_inputs * sizeof *sin);
    *sout = op->outputs[0];
    sop->inputs = sin, sop->outputs = sout, sop->precision = precision;
    for (int i = 0; i < op->n_inputs; i++) sin[i].device = be->device;
    sout->device = be->device;
    dl_format f = {DL_F32, DL_LAYOUT_ROW_MAJOR};
    dl_error why;
    if (!dl_backend_accepts_as(be, precision, ask, 0, sop, sin, sout, is_weight, strides, &f, &why))
        dl_op_apply_format(sop, sin, sout, is_weight, f, strides);
    dl_format_str(f, name, len);
}

/* Against the same storage, the only differences are the order of sums and the final rounding:
 * the TF32 threshold of the op plus about one output in 64 one unit of the dtype off. */
static double same_storage_threshold(int kind, dl_dtype d) {
    double u = dl_dtype_eq(d, DL_BF16) ? 1.0 / 256 : 1.0 / 2048;
    return dl_op_nmse(kind, DL_PRECISION_TF32) + u * u / 64;
}

/* One comparison of a checked run against a reference: a row, counted and reported. */
static void report(reporter *rep, dl_check_row row, const dl_op *op, const dl_op_result *r, const float *ref,
                   const float *got, double flops) {
    char detail[DL_ERROR_LEN + 64] = "";
    int64_t n = dl_tensor_numel(&op->outputs[0]);
    row.detail = detail;
    if (!r->supported) {
        row.result = DL_CHECK_UNSUPPORTED;
        snprintf(detail, sizeof detail, "%s", r->why);
        rep->sum->unsupported++;
    } else if (r->guards_ok != 1) {
        row.result = DL_CHECK_FAIL;
        row.nmse = INFINITY;
        snprintf(detail, sizeof detail, "%s",
                 r->guards_ok == 0 ? "wrote past the end of its output (guard bytes changed)" : r->why);
        rep->overruns += r->guards_ok == 0;
        rep->sum->failed++;
    } else {
        int ok = compare(ref, got, n, row.threshold, &row, detail, sizeof detail);
        row.result = ok ? DL_CHECK_PASS : DL_CHECK_FAIL;
        if (ok) rep->sum->passed++;
        else rep->sum->failed++;
        if (r->ms > 0) {
            row.ms = r->ms;
            row.gflops = flops / r->ms * 1e-6;
            double bytes = (double)n * (double)dl_dtype_size(op->outputs[0].dtype);
            for (int i = 0; i < op->n_inputs; i++)
                bytes += (double)dl_tensor_numel(&op->inputs[i]) * (double)dl_dtype_size(op->inputs[i].dtype);
            row.gbps = bytes / r->ms * 1e-6;
        }
    }
    rep->fn(rep->user, &row);
}

/* Runs the CPU reference on op (its formats, computing exactly); an error if it cannot. */
static dl_status run_reference(const dl_backend *cpu, const dl_op *op, const unsigned char *is_weight, float *out,
                               const char *layer, dl_error *err) {
    dl_op_result rr;
    dl_op refop = *op;
    refop.precision = DL_PRECISION_F32;
    dl_status st = dl_run_op(cpu, &refop, is_weight, out, 0, NULL, &rr, err);
    if (st == DL_OK && (!rr.supported || rr.guards_ok != 1))
        st = dl_fail(err, DL_E_RUNTIME, "the CPU reference cannot run %s '%s' in %s: %s", dl_op_kind_name(op->kind),
                     layer, dl_dtype_name(op->outputs[0].dtype), rr.why[0] ? rr.why : "guard bytes changed");
    return st;
}

/* One op on one backend at the asked precision. The backend stores the op's tensors as it
 * accepts them (storage_op). In f32 storage: one row against the f32 CPU reference (given, or
 * run here on the same inputs). In f16/bf16 storage: one row against the CPU reference run at the
 * same storage (tight threshold) and one against the f32 reference (the op's threshold at that
 * precision). */
static dl_status check_case(const dl_backend *be, const dl_backend *cpu, const dl_op *op,
                            const unsigned char *is_weight, const float *ref_f32, const char *layer, int precision,
                            int ask, int perf_iters, double flops, reporter *rep, dl_error *err) {
    int64_t n = dl_tensor_numel(&op->outputs[0]);
    size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
    float *got = malloc(bytes), *own_f32 = NULL, *same = NULL;
    if (!got) return dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_status st = DL_OK;
    if (!ref_f32) { /* test-ops: the reference is the CPU backend on the same inputs */
        own_f32 = malloc(bytes);
        st = own_f32 ? run_reference(cpu, op, is_weight, own_f32, layer, err)
                     : dl_fail(err, DL_E_NOMEM, "out of memory");
        ref_f32 = own_f32;
    }
    dl_op sop;
    dl_tensor sin[DL_MAX_OP_INPUTS], sout;
    int64_t strides[4 * (DL_MAX_OP_INPUTS + 1)];
    char storage[32];
    storage_op(be, op, is_weight, precision, ask, &sop, sin, &sout, strides, storage, sizeof storage);
    dl_op_result r;
    if (st == DL_OK) st = dl_run_op(be, &sop, is_weight, got, perf_iters, NULL, &r, err);
    int stored = !dl_dtype_is_f32(sout.dtype);
    if (st == DL_OK && stored && r.supported) { /* the CPU at the same storage, row-major */
        dl_op cop = sop;
        dl_tensor cin[DL_MAX_OP_INPUTS], cout = sout;
        memcpy(cin, sin, (size_t)op->n_inputs * sizeof *cin);
        for (int i = 0; i < op->n_inputs; i++) cin[i].strides = NULL;
        cout.strides = NULL;
        cop.inputs = cin, cop.outputs = &cout;
        same = malloc(bytes);
        st = same ? run_reference(cpu, &cop, is_weight, same, layer, err) : dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    if (st == DL_OK) {
        char shape[96], vs_same[32];
        dl_shape_str(op->outputs[0].shape, op->outputs[0].ndim, shape, sizeof shape);
        snprintf(vs_same, sizeof vs_same, "cpu %s", dl_dtype_name(sout.dtype));
        dl_check_row row = {.layer = layer,
                            .op = dl_op_kind_name(op->kind),
                            .backend = be->name,
                            .shape = shape,
                            .storage = storage,
                            .reference = "cpu f32"};
        if (stored && r.supported) {
            dl_check_row tight = row;
            tight.reference = vs_same;
            tight.threshold = same_storage_threshold(op->kind, sout.dtype);
            report(rep, tight, &sop, &r, same, got, flops);
            r.ms = 0; /* timed once */
        }
        row.threshold = dl_op_nmse(op->kind, precision);
        report(rep, row, &sop, &r, ref_f32, got, flops);
    }
    free(got);
    free(own_f32);
    free(same);
    return st;
}

/* The backends to check: the ones named, or every loaded one but cpu (cpu alone if no other). */
static dl_status pick_backends(dl_context *ctx, const dl_check_options *o, const dl_backend **out, int *n,
                               dl_error *err) {
    *n = 0;
    if (o->backends && o->n_backends > 0) {
        for (int i = 0; i < o->n_backends && *n < 32; i++) {
            const dl_backend *be = dl_context_backend(ctx, o->backends[i]);
            if (!be)
                return dl_fail(err, DL_E_INVALID, "unknown backend '%s' (see dlrun --list-backends)", o->backends[i]);
            out[(*n)++] = be;
        }
        return DL_OK;
    }
    for (int i = 0; i < dl_context_plugin_count(ctx) && *n < 32; i++) {
        const dl_plugin_info *p = dl_context_plugin(ctx, i);
        if (p->loaded && strcmp(p->name, "cpu") != 0) out[(*n)++] = dl_context_backend(ctx, p->name);
    }
    if (*n == 0 && dl_context_backend(ctx, "cpu")) out[(*n)++] = dl_context_backend(ctx, "cpu");
    return *n ? DL_OK : dl_fail(err, DL_E_INVALID, "no backend to check");
}

/* What both checks start from: the options with their defaults, an empty summary, the backends
 * to check and the CPU reference. */
typedef struct check_setup {
    dl_check_options o;
    const dl_backend *bes[32];
    int nb;
    const dl_backend *cpu;
} check_setup;

static dl_status setup(dl_context *ctx, const dl_check_options *in, dl_check_summary *sum, check_setup *c,
                       dl_error *err) {
    memset(c, 0, sizeof *c);
    memset(sum, 0, sizeof *sum);
    c->o.struct_size = sizeof c->o;
    c->o.seed = 1;
    c->o.iterations = 10;
    if (in) memcpy(&c->o, in, in->struct_size < sizeof c->o ? in->struct_size : sizeof c->o);
    if (c->o.iterations <= 0) c->o.iterations = 10;
    if (c->o.layout < DL_LAYOUT_MODE_AUTO || c->o.layout > DL_LAYOUT_MODE_NHWC)
        return dl_fail(err, DL_E_INVALID, "unknown layout %d (auto 0, nchw 1, nhwc 2)", c->o.layout);
    dl_status st = pick_backends(ctx, &c->o, c->bes, &c->nb, err);
    c->cpu = dl_context_backend(ctx, "cpu");
    if (st == DL_OK && !c->cpu) st = dl_fail(err, DL_E_NODEVICE, "the CPU reference plugin is not loaded");
    return st;
}

/* ---- dlrun check ---- */

/* With no_fuse, every op on its own, as the model file writes it. */
static dl_status make_session(dl_context *ctx, dl_model *m, const char *backend, const char *prefer, int precision,
                              int layout, int keep, int no_fuse, uint64_t seed, dl_session **s, dl_error *err) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.layout = layout;
    so.backend = backend;
    so.prefer_backend = prefer;
    so.precision = precision;
    so.no_fuse = no_fuse;
    so.keep_activations = keep;
    so.seed = seed;
    so.micro_batch = DL_MAX_BATCH; /* at once: both sides' ops at the same shapes */
    return dl_session_create(ctx, m, &so, s, err);
}

/* 1 if some step of s is a fused activation, a folded batchnorm or an elided concat. */
static int has_fusion(const dl_session *s) {
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info info;
        dl_session_step(s, k, &info);
        if (info.kind == DL_STEP_FUSED || info.kind == DL_STEP_ELIDED) return 1;
    }
    return 0;
}

/* The whole model placed on backend b of c wherever it can run, the CPU elsewhere, on the inputs
 * ins, against the reference's output: the `(end to end)` row; with `fused`, as dlrun runs it by
 * default, the `(end to end, fused)` row, reported only where fusion changed any step. */
static dl_status end_to_end(dl_context *ctx, dl_model *m, const check_setup *c, int b, const dl_tensor *ins, int nin,
                            const dl_session *ref, int fused, const reporter *rep, dl_error *err) {
    dl_session *s = NULL;
    const dl_check_options *o = &c->o;
    dl_status st = make_session(ctx, m, NULL, c->bes[b]->name, o->precision, o->layout, 0, !fused, o->seed, &s, err);
    if (st == DL_OK && fused && !has_fusion(s)) {
        dl_session_free(s);
        return DL_OK;
    }
    /* the inputs where a caller puts them to upload fastest, the session's input buffers (a CUDA
     * plugin's page-locked memory: its DMA reads them where they are), so the check covers that
     * way too; the caller's memory where there is none */
    dl_tensor *own = st == DL_OK && nin > 0 ? malloc((size_t)nin * sizeof *own) : NULL;
    for (int i = 0; own && i < nin; i++) {
        void *buf = dl_session_input_buffer(s, i);
        own[i] = ins[i];
        if (buf) memcpy(buf, ins[i].data, (size_t)dl_tensor_numel(&ins[i]) * dl_dtype_size(ins[i].dtype));
        if (buf) own[i].data = buf;
    }
    if (st == DL_OK) st = dl_session_run(s, own ? own : ins, nin, err);
    free(own);
    if (st == DL_OK) {
        const dl_tensor *y = dl_session_output(s, 0), *yr = dl_session_output(ref, 0);
        char shape[96], detail[DL_ERROR_LEN + 64] = "";
        dl_shape_str(y->shape, y->ndim, shape, sizeof shape);
        dl_check_row row = {.layer = fused ? "(end to end, fused)" : "(end to end)",
                            .op = "model",
                            .backend = c->bes[b]->name,
                            .shape = shape,
                            .result = DL_CHECK_PASS,
                            .threshold = end_to_end_threshold(o->precision),
                            .detail = detail};
        int ok = compare(yr->data, y->data, dl_tensor_numel(y), row.threshold, &row, detail, sizeof detail);
        row.result = ok ? DL_CHECK_PASS : DL_CHECK_FAIL;
        if (ok) rep->sum->passed++;
        else rep->sum->failed++;
        rep->fn(rep->user, &row);
    }
    dl_session_free(s);
    return st;
}

dl_status dl_check_model(dl_context *ctx, dl_model *m, const dl_check_options *opt, dl_check_fn fn, void *user,
                         dl_check_summary *sum, dl_error *err) {
    check_setup c;
    dl_status st = setup(ctx, opt, sum, &c, err);
    if (st != DL_OK) return st;
    const dl_check_options *o = &c.o;
    dl_session *ref = NULL;
    /* the reference: every op on cpu, on its own, row-major (its tensors reach the checked backends
     * as they are, each converting them into the storage it takes) */
    st = make_session(ctx, m, "cpu", NULL, DL_PRECISION_F32, DL_LAYOUT_MODE_NCHW, 1, 1, o->seed, &ref, err);
    if (st != DL_OK) return st;
    const int ask = dl_layout_ask_for(o->layout, ref->depthwise);
    /* one seeded input per model input */
    int nin = dl_session_input_count(ref);
    dl_tensor *ins = calloc((size_t)nin, sizeof *ins);
    for (int i = 0; ins && i < nin; i++) {
        ins[i] = *dl_session_input(ref, i);
        int64_t n = dl_tensor_numel(&ins[i]), bound = dl_session_input_bound(ref, i);
        void *x = malloc((size_t)n * dl_dtype_size(ins[i].dtype));
        if (!x) break;
        dl_rng r;
        dl_rng_seed(&r, dl_rng_derive(o->seed, "input"));
        for (int64_t j = 0; j < n; j++) { /* f32 in [-1, 1), int64 indices in [0, bound) */
            float u = dl_rng_uniform(&r, 0, 1);
            if (ins[i].dtype.code == DL_DTYPE_INT)
                ((int64_t *)x)[j] = (int64_t)(u * (float)bound) % (bound ? bound : 1);
            else ((float *)x)[j] = 2 * u - 1;
        }
        ins[i].data = x;
    }
    st = ins && (nin == 0 || ins[nin - 1].data) ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) st = dl_session_run(ref, ins, nin, err);
    reporter rep = {fn, user, sum, 0};
    for (int b = 0; st == DL_OK && b < c.nb; b++) {
        rep.overruns = 0;
        for (int k = 0; st == DL_OK && k < dl_session_step_count(ref); k++) {
            const unsigned char *constant;
            const dl_op *op = dl_session_step_op(ref, k, &constant); /* host data: the reference's */
            if (!op) continue;
            dl_step_info info;
            dl_session_step(ref, k, &info);
            st = check_case(c.bes[b], c.cpu, op, constant, op->outputs[0].data, info.layer, o->precision, ask, 0,
                            info.flops, &rep, err);
        }
        /* end to end: the model placed on this backend wherever it can run, cpu elsewhere; op by op,
         * then as dlrun runs it (activations fused, batchnorms folded, concats elided) where that
         * differs. Not for a backend that wrote past an output op by op: in a session it would
         * write into the memory of the next tensor, or past the arena (its failed rows say so). */
        for (int fused = 0; st == DL_OK && !rep.overruns && fused < 2; fused++)
            st = end_to_end(ctx, m, &c, b, ins, nin, ref, fused, &rep, err);
    }
    for (int i = 0; ins && i < nin; i++) free(ins[i].data);
    free(ins);
    dl_session_free(ref);
    return st;
}

/* ---- dlrun test-ops: the op table's cases ---- */

/* Builds the one-layer model of a case through the model reader, so shapes come from the op
 * table exactly as for a model file. */
static dl_status case_graph(const dl_op_def *row, const dl_op_case *c, dl_graph **g, dl_error *err) {
    char text[1024], names[256] = "";
    size_t u = (size_t)snprintf(text, sizeof text, "model: case\ninputs:\n");
    /* split "[[..], [..]]" into inputs x0, x1, ... */
    const char *p = c->inputs + 1;
    int i = 0;
    while ((p = strchr(p, '[')) != NULL) {
        const char *e = strchr(p, ']');
        u += (size_t)snprintf(text + u, sizeof text - u, "  - {name: x%d, shape: %.*s%s}\n", i, (int)(e - p + 1), p,
                              row->int_inputs >> i & 1 ? ", dtype: int64" : "");
        size_t nu = strlen(names);
        snprintf(names + nu, sizeof names - nu, "%sx%d", i ? ", " : "", i);
        i++;
        p = e + 1;
    }
    snprintf(text + u, sizeof text - u, "layers:\n  - {name: op, op: %s%s%s, inputs: [%s]}\n", row->name,
             c->attrs[0] ? ", " : "", c->attrs, names);
    return dl_model_parse_yaml(text, strlen(text), "<test-ops case>", g, err);
}

/* Fresh random inputs for the case's layer: activations in [-scale, scale) (or [lo, scale) when
 * the case gives lo), weights around their
 * initial value (ones: [0.5, 1.5), so a variance stays positive; others [-0.5, 0.5)). */
static float *draw(const dl_value *v, uint64_t seed, float scale, float low) {
    int64_t n = dl_shape_numel(&v->shape);
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (!x) return NULL;
    dl_rng r;
    dl_rng_seed(&r, dl_rng_derive(seed, v->name));
    float lo = low != 0 ? low : -scale, hi = scale;
    if (v->kind == DL_VALUE_WEIGHT) lo = v->init == DL_INIT_ONES ? 0.5f : -0.5f, hi = lo + 1.0f;
    for (int64_t e = 0; e < n; e++) x[e] = dl_rng_uniform(&r, lo, hi);
    return x;
}

/* Fresh int64 indices in [-bound, bound): negative ones count from the end. */
static int64_t *draw_indices(const dl_value *v, uint64_t seed, int64_t bound) {
    int64_t n = dl_shape_numel(&v->shape);
    int64_t *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (!x) return NULL;
    dl_rng r;
    dl_rng_seed(&r, dl_rng_derive(seed, v->name));
    for (int64_t e = 0; e < n; e++) {
        int64_t i = (int64_t)floor(dl_rng_uniform(&r, -(float)bound, (float)bound));
        x[e] = i < -bound ? -bound : i >= bound ? bound - 1 : i;
    }
    return x;
}

/* One case on every checked backend against the CPU reference. */
static dl_status run_case(const dl_op_def *row, const dl_op_case *c, uint64_t seed, const check_setup *cs,
                          reporter *rep, dl_error *err) {
    const dl_check_options *o = &cs->o;
    dl_graph *g = NULL;
    dl_status st = case_graph(row, c, &g, err);
    if (st != DL_OK) return st;
    const dl_node *nd = &g->nodes[0];
    dl_shape shapes[DL_MAX_NODE_INPUTS + 2];
    dl_tensor tin[DL_MAX_OP_INPUTS], tout;
    unsigned char isw[DL_MAX_OP_INPUTS];
    void *data[DL_MAX_OP_INPUTS] = {0};
    dl_op_attrs fused;
    if (g->n_values > (int)(sizeof shapes / sizeof shapes[0]))
        st = dl_fail(err, DL_E_INVALID, "case '%s' is too big", c->name);
    for (int v = 0; st == DL_OK && v < g->n_values; v++) shapes[v] = g->values[v].shape;
    dl_op op;
    dl_node_op(g, 0, nd->inputs, nd->n_inputs, shapes, &nd->params.attrs, o->precision, &op, tin, &tout);
    op.name = c->name;
    for (int j = 0; j < nd->n_inputs && st == DL_OK; j++) {
        const dl_value *v = &g->values[nd->inputs[j]];
        if (v->dtype.code == DL_DTYPE_INT) { /* indices valid along any dimension of the first input */
            int64_t bound = INT64_MAX;
            for (int d = 0; d < shapes[nd->inputs[0]].ndim; d++)
                if (shapes[nd->inputs[0]].d[d] < bound) bound = shapes[nd->inputs[0]].d[d];
            data[j] = draw_indices(v, seed, bound);
        } else {
            data[j] = draw(v, seed, c->scale, c->lo);
        }
        if (!data[j]) st = dl_fail(err, DL_E_NOMEM, "out of memory");
        tin[j].data = data[j];
        isw[j] = v->kind == DL_VALUE_WEIGHT;
    }
    if (st == DL_OK && c->residual) { /* y = relu(op(x) + r): r of the output's shape, the last input */
        const int j = op.n_inputs++;
        fused = nd->params.attrs;
        fused.residual = 1;
        fused.activation = DL_ACT_RELU;
        op.attrs = &fused;
        tin[j] = tout;
        dl_value r = {.name = "residual", .kind = DL_VALUE_ACTIVATION, .dtype = DL_F32};
        dl_shape_of(&tout, &r.shape);
        if (!(tin[j].data = data[j] = draw(&r, seed, c->scale, c->lo))) st = dl_fail(err, DL_E_NOMEM, "out of memory");
        isw[j] = 0;
    }
    double flops = row->flops(&op);
    for (int b = 0; st == DL_OK && b < cs->nb; b++)
        st = check_case(cs->bes[b], cs->cpu, &op, isw, NULL, c->name, o->precision, dl_layout_ask_for(o->layout, 0),
                        o->perf ? o->iterations : 0, flops, rep, err);
    for (int j = 0; j < op.n_inputs; j++) free(data[j]);
    dl_graph_free(g);
    return st;
}

dl_status dl_test_ops(dl_context *ctx, const dl_check_options *opt, dl_check_fn fn, void *user, dl_check_summary *sum,
                      dl_error *err) {
    check_setup c;
    dl_status st = setup(ctx, opt, sum, &c, err);
    const char *only = c.o.op;
    if (st == DL_OK && only && dl_op_kind_from_name(only) < 0) st = dl_fail(err, DL_E_INVALID, "unknown op '%s'", only);
    reporter rep = {fn, user, sum};
    /* each case's inputs come from the seed and the case's name, never from its place in the
     * table: a case added to one row leaves every other case's inputs as they were */
    for (int k = 0; st == DL_OK && k < DL_OP_COUNT; k++) {
        const dl_op_def *row = dl_op_def_of(k);
        for (const dl_op_case *k_case = row->cases; st == DL_OK && k_case && k_case->name; k_case++)
            if (!only || !strcmp(only, row->name))
                st = run_case(row, k_case, dl_rng_derive(c.o.seed, k_case->name), &c, &rep, err);
    }
    return st;
}
