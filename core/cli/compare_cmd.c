/* compare_cmd.c — `dlrun compare`: two builds of the plugins side by side in one process, for a
 * speed claim between commits that this machine's drift does not spoil. Two contexts (this
 * build's plugins, and another folder's in place of those of the same name), two sessions of one
 * model with the same weights and input, run in turn (A B B A ...), each op timed in every run;
 * prints per op the median of each, their ratio, and how far the two builds' outputs differ. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"

typedef struct compare_args {
    const char *base, *new_dir, *backend;
    int iterations, warmup, threads, all, layout, base_layout;
    long long batch, micro, base_micro;
    unsigned long long seed;
} compare_args;

static const char usage_head[] =
    "usage: dlrun compare MODEL.yaml (--base DIR | --base-layout L | --base-micro-batch N) [options]\n"
    "\n"
    "Times two builds of the plugins in one process: `base`, the plugins in DIR (an older build's\n"
    "lib/dlrun) in place of this build's plugins of the same names, and `new`, this build's (or\n"
    "--new DIR's). One session of MODEL each, same seeded weights and input, run in turn (base,\n"
    "new, new, base, ...), every op timed; prints each op's median in both, base / new (above 1:\n"
    "new is faster), the whole runs' medians, and the largest difference between the outputs.\n"
    "Use --backend to pin both to one backend (else each places its ops by its own timings).\n"
    "With --base-layout, the base side may be this build's plugins (no --base): one build, two\n"
    "layouts (--base-layout nchw --layout auto); with --base-micro-batch, one build, two ways of\n"
    "running the batch (--base-micro-batch 8 --micro-batch 2: at once against in 4 parts).\n"
    "\n"
    "options:\n";
static const char usage_tail[] = "\nexit status: 0 compared, 1 runtime failure, 2 bad input or usage.\n";

#define FIELD(member) CLI_FIELD(compare_args, member)
static const cli_opt compare_opts[] = {
    {"base", CLI_STRING, FIELD(base), .value_name = "DIR",
     .help = "the plugins to compare against (required\nwithout --base-layout)"},
    {"new", CLI_STRING, FIELD(new_dir), .value_name = "DIR", .help = "the plugins to compare (default: this build's)"},
    {"backend", CLI_STRING, FIELD(backend), .value_name = "NAME", .help = "run every op of both on backend NAME"},
    {"iterations", CLI_INT, FIELD(iterations), .lo = 1, .hi = 1000000, .value_name = "N", .wants = "a positive integer",
     .help = "timed runs of each (default 30)"},
    {"warmup", CLI_INT, FIELD(warmup), .lo = 0, .hi = 1000000, .value_name = "N", .wants = "a non-negative integer",
     .help = "untimed runs of each first (default 3)"},
    {"threads", CLI_INT, FIELD(threads), .lo = 1, .hi = 4096, .value_name = "N", .wants = "a positive integer",
     .help = "CPU threads (default: all cores)"},
    {"batch", CLI_INT, FIELD(batch), .lo = 1, .hi = 1 << 20, .value_name = "N", .wants = "a positive integer",
     .help = "batch size (default: the model file's)"},
    {"seed", CLI_SEED, FIELD(seed), .value_name = "N", .wants = "a non-negative integer",
     .help = "seed for weights and input (default 1)"},
    {"layout", CLI_WORD, FIELD(layout), .words = cli_layout_words, .help = "the new side's layout (default auto)"},
    {"base-layout", CLI_WORD, FIELD(base_layout), .words = cli_layout_words,
     .help = "the base side's layout (default: --layout's)"},
    {"micro-batch", CLI_INT, FIELD(micro), .lo = 0, .hi = 1 << 20, .value_name = "N",
     .wants = "0 or a positive integer",
     .help = "the new side's images at once (0, the default: auto;\ndocs/micro-batch.md)"},
    {"base-micro-batch", CLI_INT, FIELD(base_micro), .lo = -1, .hi = 1 << 20, .value_name = "N",
     .wants = "0 or a positive integer", .help = "the base side's (default: --micro-batch's)"},
    {"all", CLI_FLAG, FIELD(all), .help = "every op (default: those whose medians differ by 2 % or more)"},
    {"help", CLI_HELP, .help = "this text"},
};
static const cli_command compare_command = {"dlrun compare", usage_head, usage_tail, 22, CLI_TABLE(compare_opts)};

/* One side: its plugins, its session, and every timed run's per-step and whole times. */
typedef struct side {
    const char *dir; /* its plugins first, or NULL: this build's */
    dl_context *ctx;
    dl_session *s;
    double *step_ms; /* [run][step] */
    double *run_ms;  /* [run] */
} side;

static int open_side(side *d, const compare_args *a, int layout, long long micro, dl_model *m, dl_error *err) {
    dl_context_options co = {sizeof co, a->threads, 0, d->dir, 0};
    dl_status st = dl_context_create(&co, &d->ctx, err);
    if (st != DL_OK) return st;
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = a->batch;
    so.seed = a->seed;
    so.backend = a->backend;
    so.layout = layout;
    so.micro_batch = micro;
    st = dl_session_create(d->ctx, m, &so, &d->s, err);
    if (st != DL_OK) return st;
    dl_session_set_profiling(d->s, 1);
    return DL_OK;
}

/* label, then the files side d's plugins came from: only `backend`'s where both are pinned to
 * it, else every loaded one (a folder given may replace only some of this build's). */
static void print_plugins(const char *label, const side *d, const char *backend) {
    printf("%s", label);
    for (int i = 0; i < dl_context_plugin_count(d->ctx); i++) {
        const dl_plugin_info *p = dl_context_plugin(d->ctx, i);
        if (p->loaded && (!backend || !strcmp(p->name, backend))) printf(" %s", p->path);
    }
    printf("\n");
}

static dl_status run_side(side *d, const dl_tensor *ins, int nin, int run, int steps, dl_error *err) {
    const double t0 = cli_now_ms();
    dl_status st = dl_session_run(d->s, ins, nin, err);
    if (st != DL_OK || run < 0) return st;
    d->run_ms[run] = cli_now_ms() - t0;
    for (int i = 0; i < steps; i++) {
        dl_step_info si;
        dl_session_step(d->s, i, &si);
        d->step_ms[(size_t)run * (size_t)steps + (size_t)i] = si.last_ms;
    }
    return DL_OK;
}

/* The largest |new - base| over every output, and the relative L2 distance of the two. */
static void output_distance(const side *b, const side *n, double *max_abs, double *rel_l2) {
    double d2 = 0, n2 = 0;
    *max_abs = 0;
    for (int o = 0; o < dl_session_output_count(n->s); o++) {
        const dl_tensor *x = dl_session_output(b->s, o), *y = dl_session_output(n->s, o);
        const int64_t count = dl_tensor_numel(y);
        if (dl_tensor_numel(x) != count) {
            *max_abs = INFINITY;
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            const double u = ((const float *)x->data)[i], v = ((const float *)y->data)[i], e = fabs(v - u);
            if (!(e <= *max_abs)) *max_abs = e; /* NaN on one side only: NaN */
            d2 += (v - u) * (v - u), n2 += u * u;
        }
    }
    *rel_l2 = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
}

static void print_report(const compare_args *a, side *sd, int steps, int same_steps) {
    side *b = &sd[0], *n = &sd[1];
    const int runs = a->iterations;
    double max_abs, rel_l2;
    output_distance(b, n, &max_abs, &rel_l2);
    print_plugins("base:", b, a->backend);
    print_plugins("new: ", n, a->backend);
    if (strcmp(dl_session_layout(b->s), dl_session_layout(n->s)))
        printf("layout: base %s; new %s\n", dl_session_layout(b->s), dl_session_layout(n->s));
    if (strcmp(dl_session_batching(b->s), dl_session_batching(n->s)))
        printf("batch: base %s; new %s\n", dl_session_batching(b->s), dl_session_batching(n->s));
    printf("%d runs each, in turn; outputs: max |new - base| %.3g, relative L2 %.3g\n\n", runs, max_abs, rel_l2);
    double *v = malloc((size_t)runs * sizeof *v);
    if (!v) return;
    int shown = 0;
    if (same_steps) {
        printf("%-44s %-14s %9s %9s %9s\n", "layer", "op", "base ms", "new ms", "base/new");
        for (int i = 0; i < steps; i++) {
            dl_step_info si;
            dl_session_step(n->s, i, &si);
            if (si.kind == DL_STEP_FUSED || si.kind == DL_STEP_ELIDED) continue;
            double med[2];
            for (int q = 0; q < 2; q++) {
                for (int r = 0; r < runs; r++) v[r] = sd[q].step_ms[(size_t)r * (size_t)steps + (size_t)i];
                med[q] = cli_median(v, runs);
            }
            const double ratio = med[1] > 0 ? med[0] / med[1] : NAN;
            if (!a->all && !(fabs(ratio - 1) >= 0.02)) continue;
            printf("%-44.44s %-14.14s %9.3f %9.3f %9.2f\n", si.layer, si.op, med[0], med[1], ratio);
            shown++;
        }
        if (!shown) printf("(no op differs by 2 %% or more; --all lists them all)\n");
    } else {
        printf("(the two sessions run different steps: whole runs only)\n");
    }
    double total[2];
    for (int q = 0; q < 2; q++) {
        memcpy(v, sd[q].run_ms, (size_t)runs * sizeof *v);
        total[q] = cli_median(v, runs);
    }
    printf("%-44s %-14s %9.3f %9.3f %9.2f\n", "whole run", "", total[0], total[1], total[0] / total[1]);
    free(v);
}

/* Whether the two sessions run the same steps (layer and op), so that per-op rows pair up. */
static int same_steps(const side *sd, int *steps) {
    *steps = dl_session_step_count(sd[1].s);
    if (dl_session_step_count(sd[0].s) != *steps) return 0;
    for (int i = 0; i < *steps; i++) {
        dl_step_info x, y;
        dl_session_step(sd[0].s, i, &x);
        dl_session_step(sd[1].s, i, &y);
        if (x.kind != y.kind || strcmp(x.layer, y.layer) || strcmp(x.op, y.op)) return 0;
    }
    return 1;
}

int cli_compare_main(int argc, char **argv) {
    compare_args a = {NULL, NULL, NULL, 30, 3, 0, 0, DL_LAYOUT_MODE_AUTO, -1, 0, 0, -1, 1};
    int first;
    int rc = cli_parse(&compare_command, "compare", argc, argv, &a, &first);
    if (rc) return rc < 0 ? 0 : rc;
    if (first >= argc) return cli_usage_error(&compare_command, "no model given");
    if (argc - first > 1)
        return cli_usage_error(&compare_command, "one model at a time; extra argument '%s'", argv[first + 1]);
    if (a.base_layout < 0) a.base_layout = a.layout;
    if (a.base_micro < 0) a.base_micro = a.micro;
    if (!a.base && a.base_layout == a.layout && a.base_micro == a.micro)
        return cli_usage_error(&compare_command,
                               "--base DIR is required (the plugins to compare against), or --base-layout other than "
                               "--layout, or --base-micro-batch other than --micro-batch");
    side sd[2] = {{a.base, NULL, NULL, NULL, NULL}, {a.new_dir, NULL, NULL, NULL, NULL}};
    dl_error err = {{0}};
    dl_model *m = NULL;
    void *bufs[64] = {0};
    dl_tensor ins[64];
    int nin = 0, steps = 0, paired = 0;
    dl_status st = dl_model_load(argv[first], &m, &err);
    for (int q = 0; st == DL_OK && q < 2; q++)
        st = open_side(&sd[q], &a, q ? a.layout : a.base_layout, q ? a.micro : a.base_micro, m, &err);
    if (st == DL_OK) {
        nin = dl_session_input_count(sd[1].s);
        if (nin > 64) st = dl_fail(&err, DL_E_INVALID, "%s: more than 64 inputs", argv[first]);
    }
    for (int i = 0; st == DL_OK && i < nin; i++) { /* seeded as `dlrun MODEL` seeds them */
        ins[i] = *dl_session_input(sd[1].s, i);
        const int64_t count = dl_tensor_numel(&ins[i]);
        const size_t elem = dl_dtype_size(ins[i].dtype);
        if (count < 0 || (uint64_t)count > SIZE_MAX / (elem ? elem : 1) ||
            !(bufs[i] = malloc((size_t)count * elem + 1))) {
            st = dl_fail(&err, DL_E_NOMEM, "out of memory for input %d", i);
            break;
        }
        const int ids = ins[i].dtype.code == DL_DTYPE_INT;
        cli_fill_random(ids ? NULL : bufs[i], ids ? bufs[i] : NULL, dl_session_input_bound(sd[1].s, i), (size_t)count,
                        a.seed + (unsigned long long)i);
        ins[i].data = bufs[i];
    }
    if (st == DL_OK) {
        paired = same_steps(sd, &steps);
        for (int q = 0; q < 2; q++) {
            sd[q].step_ms = malloc((size_t)a.iterations * (size_t)(steps ? steps : 1) * sizeof(double));
            sd[q].run_ms = malloc((size_t)a.iterations * sizeof(double));
            if (!sd[q].step_ms || !sd[q].run_ms) st = dl_fail(&err, DL_E_NOMEM, "out of memory for the timings");
        }
    }
    /* warm-up, then the timed runs in the order base new new base ...: a drift of the machine's
     * speed within a pair falls on both sides alike */
    for (int r = -a.warmup; st == DL_OK && r < a.iterations; r++)
        for (int k = 0; st == DL_OK && k < 2; k++) {
            side *d = &sd[(r & 1) ^ k];
            st = run_side(d, ins, nin, r, paired ? steps : 0, &err);
        }
    if (st == DL_OK) print_report(&a, sd, steps, paired);
    else {
        fprintf(stderr, "dlrun: %s\n", err.msg);
        rc = st == DL_E_INVALID || st == DL_E_IO ? 2 : 1;
    }
    for (int i = 0; i < 64; i++) free(bufs[i]);
    for (int q = 0; q < 2; q++) {
        dl_session_free(sd[q].s);
        dl_context_free(sd[q].ctx);
        free(sd[q].step_ms), free(sd[q].run_ms);
    }
    dl_model_free(m);
    return rc;
}
