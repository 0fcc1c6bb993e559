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

#include "model_yaml.h"
#include "oprun.h"
#include "rng.h"
#include "session.h"


double dl_check_threshold(int kind, int precision) {
    int half = precision == DL_PRECISION_F16, bf = precision == DL_PRECISION_BF16;
    switch (kind) {
    case DL_OP_CONV2D:
    case DL_OP_LINEAR:
    case DL_OP_MATMUL:
        return bf ? 1e-3 : half ? 1e-4 : precision == DL_PRECISION_TF32 ? 1e-5 : 1e-8;
    case DL_OP_RELU:
    case DL_OP_LEAKY_RELU:
    case DL_OP_CLIP:
    case DL_OP_MAXPOOL2D:
    case DL_OP_FLATTEN:
    case DL_OP_DROPOUT:
    case DL_OP_RESHAPE:
    case DL_OP_CONCAT: /* exact in f32: only rounding to a narrower type may change them */
        return bf ? 1e-4 : half ? 1e-6 : 1e-12;
    default: /* avgpool, global_avgpool, add, batchnorm, softmax: rounding-order differences */
        return bf ? 1e-4 : half ? 1e-6 : 1e-10;
    }
}

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
        den += a * a;
        if (isfinite(a) && !isfinite(b)) {
            if (bad < 0) bad = i, why = is_poison(got[i]) ? "never written (still the poison value)" : "not finite where the reference is";
            num = INFINITY;
            continue;
        }
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
    if (bad >= 0) snprintf(detail, dlen, "first mismatch at index %lld: reference %.9g, got %.9g (%s)", (long long)bad,
                           ref[bad], got[bad], why);
    return bad < 0 && nmse <= threshold;
}

/* ---- one op case on one backend: run, compare, report ---- */

typedef struct reporter {
    dl_check_fn fn;
    void *user;
    dl_check_summary *sum;
} reporter;

static dl_status check_case(const dl_backend *be, const dl_backend *cpu, const dl_op *op, const unsigned char *is_weight,
                            const float *ref_or_null, const char *layer, int precision, int perf_iters, double flops,
                            reporter *rep, dl_error *err) {
    int64_t n = dl_tensor_numel(&op->outputs[0]);
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got), *ref = NULL;
    if (!got) return dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_op_result rr, r;
    dl_status st = DL_OK;
    if (!ref_or_null) { /* test-ops: the reference is the CPU backend on the same inputs */
        ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
        dl_op refop = *op;
        refop.precision = DL_PRECISION_F32;
        st = ref ? dl_run_op(cpu, &refop, is_weight, ref, 0, &rr, err) : dl_fail(err, DL_E_NOMEM, "out of memory");
        if (st == DL_OK && (!rr.supported || rr.guards_ok != 1))
            st = dl_fail(err, DL_E_RUNTIME, "the CPU reference cannot run %s '%s': %s", dl_op_kind_name((dl_op_kind)op->kind),
                         layer, rr.why[0] ? rr.why : "guard bytes changed");
        ref_or_null = ref;
    }
    dl_op bop = *op;
    bop.precision = precision;
    if (st == DL_OK) st = dl_run_op(be, &bop, is_weight, got, perf_iters, &r, err);
    if (st == DL_OK) {
        char shape[96], detail[DL_ERROR_LEN + 64] = "";
        dl_shape_str(op->outputs[0].shape, op->outputs[0].ndim, shape, sizeof shape);
        dl_check_row row = {layer, dl_op_kind_name((dl_op_kind)op->kind), be->name, shape, DL_CHECK_PASS, 0, 0, 0,
                            dl_check_threshold(op->kind, precision), detail, 0, 0, 0};
        if (!r.supported) {
            row.result = DL_CHECK_UNSUPPORTED;
            snprintf(detail, sizeof detail, "%s", r.why);
            rep->sum->unsupported++;
        } else if (r.guards_ok != 1) {
            row.result = DL_CHECK_FAIL;
            row.nmse = INFINITY;
            snprintf(detail, sizeof detail, "%s", r.guards_ok == 0 ? "wrote past the end of its output (guard bytes changed)" : r.why);
            rep->sum->failed++;
        } else {
            int ok = compare(ref_or_null, got, n, row.threshold, &row, detail, sizeof detail);
            row.result = ok ? DL_CHECK_PASS : DL_CHECK_FAIL;
            if (ok) rep->sum->passed++;
            else rep->sum->failed++;
            if (perf_iters > 0 && r.ms > 0) {
                row.ms = r.ms;
                row.gflops = flops / r.ms * 1e-6;
                double bytes = (double)n * 4;
                for (int i = 0; i < op->n_inputs; i++) bytes += (double)dl_tensor_numel(&op->inputs[i]) * 4;
                row.gbps = bytes / r.ms * 1e-6;
            }
        }
        rep->fn(rep->user, &row);
    }
    free(got);
    free(ref);
    return st;
}

/* The backends to check: the ones named, or every loaded one but cpu (cpu alone if no other). */
static dl_status pick_backends(dl_context *ctx, const dl_check_options *o, const dl_backend **out, int *n, dl_error *err) {
    *n = 0;
    if (o->backends && o->n_backends > 0) {
        for (int i = 0; i < o->n_backends && *n < 32; i++) {
            const dl_backend *be = dl_context_backend(ctx, o->backends[i]);
            if (!be) return dl_fail(err, DL_E_INVALID, "unknown backend '%s' (see dlrun --list-backends)", o->backends[i]);
            out[(*n)++] = be;
        }
        return DL_OK;
    }
    for (int i = 0; i < ctx->n_plugins && *n < 32; i++)
        if (ctx->plugins[i].be && strcmp(ctx->plugins[i].be->name, "cpu") != 0) out[(*n)++] = ctx->plugins[i].be;
    if (*n == 0 && dl_context_backend(ctx, "cpu")) out[(*n)++] = dl_context_backend(ctx, "cpu");
    return *n ? DL_OK : dl_fail(err, DL_E_INVALID, "no backend to check");
}

static void default_options(const dl_check_options *in, dl_check_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->seed = 1;
    o->iterations = 10;
    if (in) memcpy(o, in, in->struct_size < sizeof *o ? in->struct_size : sizeof *o);
    if (o->iterations <= 0) o->iterations = 10;
}

/* ---- dlrun check ---- */

static dl_status make_session(dl_context *ctx, dl_model *m, const char *backend, const char *prefer, int precision, int keep,
                              uint64_t seed, dl_session **s, dl_error *err) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = backend;
    so.prefer_backend = prefer;
    so.precision = precision;
    so.no_fuse = 1; /* every op on its own, as the model file writes it */
    so.keep_activations = keep;
    so.seed = seed;
    return dl_session_create(ctx, m, &so, s, err);
}

dl_status dl_check_model(dl_context *ctx, dl_model *m, const dl_check_options *opt, dl_check_fn fn, void *user,
                         dl_check_summary *sum, dl_error *err) {
    dl_check_options o;
    default_options(opt, &o);
    memset(sum, 0, sizeof *sum);
    const dl_backend *bes[32];
    int nb;
    dl_status st = pick_backends(ctx, &o, bes, &nb, err);
    if (st != DL_OK) return st;
    if (!dl_context_backend(ctx, "cpu")) return dl_fail(err, DL_E_NODEVICE, "the CPU reference plugin is not loaded");
    dl_session *ref = NULL;
    st = make_session(ctx, m, "cpu", NULL, DL_PRECISION_F32, 1, o.seed, &ref, err);
    if (st != DL_OK) return st;
    /* one seeded input per model input */
    int nin = dl_session_input_count(ref);
    dl_tensor *ins = calloc((size_t)nin, sizeof *ins);
    for (int i = 0; ins && i < nin; i++) {
        ins[i] = *dl_session_input(ref, i);
        int64_t n = dl_tensor_numel(&ins[i]);
        float *x = malloc((size_t)n * sizeof *x);
        if (!x) break;
        dl_rng r;
        dl_rng_seed(&r, dl_rng_derive(o.seed, "input"));
        for (int64_t j = 0; j < n; j++) x[j] = dl_rng_uniform(&r, -1, 1);
        ins[i].data = x;
    }
    st = ins && (nin == 0 || ins[nin - 1].data) ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) st = dl_session_run(ref, ins, nin, err);
    reporter rep = {fn, user, sum};
    dl_graph *g = ref->g;
    for (int b = 0; st == DL_OK && b < nb; b++) {
        for (int k = 0; st == DL_OK && k < ref->n_steps; k++) {
            const dl_step *step = &ref->steps[k];
            if (step->kind != DL_STEP_OP) continue;
            const dl_node *nd = &g->nodes[step->node];
            dl_tensor tin[64];
            unsigned char isw[64];
            dl_op op = step->op;
            for (int j = 0; j < nd->n_inputs && j < 64; j++) {
                int v = dl_session_root(ref, nd->inputs[j]);
                tin[j] = step->in[j];
                tin[j].data = ref->buf[(size_t)v * DL_MAX_DOMAINS];
                isw[j] = g->values[v].kind == DL_VALUE_WEIGHT;
            }
            op.inputs = tin;
            const float *expect = ref->buf[(size_t)dl_session_root(ref, nd->output) * DL_MAX_DOMAINS];
            st = check_case(bes[b], NULL, &op, isw, expect, nd->name, o.precision, 0, step->flops, &rep, err);
        }
        /* end to end: the model placed on this backend wherever it can run, cpu elsewhere */
        dl_session *s = NULL;
        dl_status est = st == DL_OK ? make_session(ctx, m, NULL, bes[b]->name, o.precision, 0, o.seed, &s, err) : st;
        if (est == DL_OK) est = dl_session_run(s, ins, nin, err);
        if (st == DL_OK && est == DL_OK) {
            const dl_tensor *y = dl_session_output(s, 0), *yr = dl_session_output(ref, 0);
            char shape[96], detail[DL_ERROR_LEN + 64] = "";
            dl_shape_str(y->shape, y->ndim, shape, sizeof shape);
            dl_check_row row = {"(end to end)", "model", bes[b]->name, shape, DL_CHECK_PASS, 0, 0, 0,
                                end_to_end_threshold(o.precision), detail, 0, 0, 0};
            int ok = compare(yr->data, y->data, dl_tensor_numel(y), row.threshold, &row, detail, sizeof detail);
            row.result = ok ? DL_CHECK_PASS : DL_CHECK_FAIL;
            if (ok) sum->passed++;
            else sum->failed++;
            fn(user, &row);
        } else if (st == DL_OK) {
            st = est;
        }
        dl_session_free(s);
    }
    for (int i = 0; ins && i < nin; i++) free(ins[i].data);
    free(ins);
    dl_session_free(ref);
    return st;
}

/* ---- dlrun test-ops: the built-in table ---- */

typedef struct op_case {
    const char *name;
    const char *inputs; /* YAML list of input shapes */
    const char *layer;  /* YAML flow mapping of the layer's attributes (op included) */
    float scale;        /* inputs drawn from U(-scale, scale) */
} op_case;

static const op_case cases[] = {
    {"conv 3x3 pad 1", "[[1, 3, 11, 13]]", "op: conv2d, filters: 5, kernel: 3, padding: 1", 1},
    {"conv stride 2 batch 2", "[[2, 4, 9, 7]]", "op: conv2d, filters: 6, kernel: 3, stride: 2, padding: 1", 1},
    {"conv asymmetric pad", "[[1, 5, 13, 11]]", "op: conv2d, filters: 7, kernel: [3, 5], stride: [1, 2], padding: [2, 0, 1, 3]", 1},
    {"conv dilation 2", "[[1, 3, 15, 15]]", "op: conv2d, filters: 4, kernel: 3, padding: 2, dilation: 2", 1},
    {"conv groups 3 batch 3", "[[3, 6, 8, 9]]", "op: conv2d, filters: 9, kernel: 3, padding: 1, groups: 3", 1},
    {"conv depthwise", "[[2, 8, 7, 7]]", "op: conv2d, filters: 8, kernel: 3, stride: [2, 1], padding: 1, groups: 8", 1},
    {"conv 7x7 stride 2 no bias", "[[1, 3, 17, 19]]", "op: conv2d, filters: 8, kernel: 7, stride: 2, padding: 3, bias: false", 1},
    {"conv 1x1", "[[2, 9, 5, 6]]", "op: conv2d, filters: 11, kernel: 1", 1},
    {"conv 3x3 64 channels", "[[1, 64, 57, 61]]", "op: conv2d, filters: 33, kernel: 3, padding: 1", 1},
    {"conv 3x3 batch 3 deep", "[[3, 32, 10, 10]]", "op: conv2d, filters: 24, kernel: 3", 1},
    {"linear batch 1", "[[1, 37]]", "op: linear, units: 23", 1},
    {"linear batch 5", "[[5, 129]]", "op: linear, units: 67, bias: false", 1},
    {"linear wide", "[[1, 513]]", "op: linear, units: 1001", 1},
    {"maxpool 2", "[[2, 3, 11, 13]]", "op: maxpool2d, kernel: 2", 1},
    {"maxpool 3 s2 p1", "[[1, 5, 9, 9]]", "op: maxpool2d, kernel: 3, stride: 2, padding: 1", 1},
    {"maxpool ceil", "[[1, 4, 10, 7]]", "op: maxpool2d, kernel: 3, stride: 2, padding: 1, ceil_mode: true", 1},
    {"avgpool ceil pad", "[[1, 4, 10, 7]]", "op: avgpool2d, kernel: 3, stride: 2, padding: 1, ceil_mode: true", 1},
    {"avgpool exclude pad", "[[2, 2, 8, 11]]", "op: avgpool2d, kernel: 3, stride: 2, padding: 1, count_include_pad: false", 1},
    {"global avgpool", "[[3, 5, 7, 9]]", "op: global_avgpool", 1},
    {"relu", "[[2, 3, 5, 7]]", "op: relu", 1},
    {"relu 1-D odd", "[[1, 1001]]", "op: relu", 1},
    {"add", "[[3, 7, 5, 3], [3, 7, 5, 3]]", "op: add", 1},
    {"concat axis 1", "[[2, 1, 4, 5], [2, 3, 4, 5], [2, 2, 4, 5]]", "op: concat, axis: 1", 1},
    {"concat axis 3", "[[2, 3, 4, 1], [2, 3, 4, 3]]", "op: concat, axis: 3", 1},
    {"softmax axis 1", "[[3, 5, 4, 7]]", "op: softmax, axis: 1", 3},
    {"softmax last", "[[4, 1000]]", "op: softmax", 3},
    {"softmax large values", "[[2, 37]]", "op: softmax", 1000},
    {"batchnorm", "[[2, 5, 3, 7]]", "op: batchnorm, eps: 0.001", 2},
    {"batchnorm 2-D", "[[4, 9]]", "op: batchnorm", 2},
    {"flatten", "[[2, 3, 5, 7]]", "op: flatten", 1},
    {"dropout", "[[2, 3, 5, 7]]", "op: dropout, rate: 0.5", 1},
    {"leaky_relu", "[[2, 3, 5, 7]]", "op: leaky_relu, alpha: 0.2", 1},
    {"sigmoid wide range", "[[3, 101]]", "op: sigmoid", 30},
    {"clip", "[[2, 3, 5, 7]]", "op: clip, min: -0.5, max: 0.25", 1},
    {"clip min only", "[[1, 77]]", "op: clip, min: 0", 1},
    {"maxpool dilation 2", "[[1, 3, 13, 11]]", "op: maxpool2d, kernel: 3, stride: 1, dilation: 2", 1},
    {"maxpool dilated ceil pad", "[[2, 2, 12, 9]]", "op: maxpool2d, kernel: 2, stride: 2, padding: 1, dilation: 3, ceil_mode: true", 1},
    {"avgpool pad over half", "[[1, 2, 9, 8]]", "op: avgpool2d, kernel: 3, stride: 2, padding: 2", 1},
    {"add broadcast channel", "[[3, 7, 5, 3], [7, 1, 1]]", "op: add", 1},
    {"add broadcast both", "[[2, 1, 5], [3, 1]]", "op: add", 1},
    {"matmul", "[[3, 5], [5, 7]]", "op: matmul", 1},
    {"matmul batch bcast + c", "[[2, 1, 4, 6], [3, 6, 5], [5]]", "op: matmul", 1},
    {"matmul trans alpha beta", "[[6, 4], [9, 6], [4, 1]]", "op: matmul, trans_a: true, trans_b: true, alpha: 0.25, beta: -0.5", 1},
    {"matmul wide", "[[37, 129], [301, 129], [37, 301]]", "op: matmul, trans_b: true", 1},
    {"reshape", "[[2, 3, 5, 7]]", "op: reshape, shape: [0, -1, 5]", 1},
};

/* Builds the one-op graph of a case through the model reader, so shapes come from shape.c. */
static dl_status case_graph(const op_case *c, dl_graph **g, dl_error *err) {
    char text[1024], names[256] = "";
    size_t u = (size_t)snprintf(text, sizeof text, "model: case\ninputs:\n");
    /* split "[[..], [..]]" into inputs x0, x1, ... */
    const char *p = c->inputs + 1;
    int i = 0;
    while ((p = strchr(p, '[')) != NULL) {
        const char *e = strchr(p, ']');
        u += (size_t)snprintf(text + u, sizeof text - u, "  - {name: x%d, shape: %.*s}\n", i, (int)(e - p + 1), p);
        size_t nu = strlen(names);
        snprintf(names + nu, sizeof names - nu, "%sx%d", i ? ", " : "", i);
        i++;
        p = e + 1;
    }
    snprintf(text + u, sizeof text - u, "layers:\n  - {name: op, %s, inputs: [%s]}\n", c->layer, names);
    return dl_model_parse_yaml(text, strlen(text), "<test-ops case>", g, err);
}

dl_status dl_test_ops(dl_context *ctx, const dl_check_options *opt, dl_check_fn fn, void *user, dl_check_summary *sum,
                      dl_error *err) {
    dl_check_options o;
    default_options(opt, &o);
    memset(sum, 0, sizeof *sum);
    const dl_backend *bes[32];
    int nb;
    dl_status st = pick_backends(ctx, &o, bes, &nb, err);
    const dl_backend *cpu = dl_context_backend(ctx, "cpu");
    if (st == DL_OK && !cpu) st = dl_fail(err, DL_E_NODEVICE, "the CPU reference plugin is not loaded");
    if (st == DL_OK && o.op && dl_op_kind_from_name(o.op) < 0) st = dl_fail(err, DL_E_INVALID, "unknown op '%s'", o.op);
    reporter rep = {fn, user, sum};
    for (size_t c = 0; st == DL_OK && c < sizeof cases / sizeof cases[0]; c++) {
        dl_graph *g = NULL;
        st = case_graph(&cases[c], &g, err);
        if (st != DL_OK) break;
        dl_node *nd = &g->nodes[0];
        if (o.op && strcmp(o.op, dl_op_kind_name(nd->kind)) != 0) {
            dl_graph_free(g);
            continue;
        }
        dl_tensor tin[64], tout;
        unsigned char isw[64];
        float *data[64] = {0};
        for (int j = 0; j < nd->n_inputs && st == DL_OK; j++) {
            dl_value *v = &g->values[nd->inputs[j]];
            int64_t n = dl_value_numel(v);
            data[j] = malloc((size_t)(n ? n : 1) * sizeof(float));
            if (!data[j]) {
                st = dl_fail(err, DL_E_NOMEM, "out of memory");
                break;
            }
            dl_rng r;
            dl_rng_seed(&r, dl_rng_derive(o.seed + c, v->name));
            int var = strstr(v->name, "running_var") != NULL, w = v->kind == DL_VALUE_WEIGHT;
            for (int64_t e = 0; e < n; e++)
                data[j][e] = var ? dl_rng_uniform(&r, 0.5f, 1.5f) : w ? dl_rng_uniform(&r, -0.5f, 0.5f) : dl_rng_uniform(&r, -cases[c].scale, cases[c].scale);
            tin[j] = (dl_tensor){data[j], {DL_DEVICE_CPU, 0}, v->ndim, v->dtype, v->shape, NULL, 0};
            isw[j] = (unsigned char)w;
        }
        dl_value *ov = &g->values[nd->output];
        tout = (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, ov->ndim, ov->dtype, ov->shape, NULL, 0};
        dl_op op = {sizeof op, (int32_t)nd->kind, cases[c].name, &nd->attrs, nd->n_inputs, tin, 1, &tout, o.precision};
        for (int b = 0; st == DL_OK && b < nb; b++)
            st = check_case(bes[b], cpu, &op, isw, NULL, cases[c].name, o.precision, o.perf ? o.iterations : 0,
                            dl_node_flops(g, nd), &rep, err);
        for (int j = 0; j < nd->n_inputs; j++) free(data[j]);
        dl_graph_free(g);
    }
    return st;
}
