/* check_cmd.c — the `dlrun check` and `dlrun test-ops` subcommands: parse their options, call
 * dl_check_model / dl_test_ops, print a table (or JSON) and the closing count line. */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "options.h"

static const char usage_head[] =
    "usage: dlrun check MODEL.yaml [--backend NAME]... [--precision P] [--layout L] [--seed N]\n"
    "                              [--json]\n"
    "       dlrun test-ops [--backend NAME]... [--op NAME] [--mode test|perf] [--layout L]\n"
    "                      [--seed N] [--iterations N] [--json]\n"
    "\n"
    "check:    runs MODEL on the CPU reference, then each op on each backend with exactly the\n"
    "          inputs the reference op saw, and the whole model placed on that backend.\n"
    "test-ops: a built-in table of op cases (odd sizes, strides, padding, dilation, groups,\n"
    "          batch > 1) on each backend against the CPU reference; --mode perf also times them.\n"
    "\n";
static const char usage_tail[] = "thresholds: docs/check.md. exit status: 0 all passed, 1 a failure, 2 bad usage.\n";

/* What the options of check and test-ops set. */
typedef struct check_args {
    const char *backends[32];
    int n_backends;
    int precision;
    int layout;
    unsigned long long seed;
    const char *op;
    int perf;
    int iterations;
    int threads;
    int json;
} check_args;

static const cli_word mode_words[] = {{"test", 0}, {"perf", 1}, {NULL, 0}};

#define FIELD(member) CLI_FIELD(check_args, member)
static const cli_opt check_opts[] = {
    {"backend", CLI_LIST, FIELD(backends), .count_at = offsetof(check_args, n_backends), .value_name = "NAME",
     .help = "check this backend (repeatable; default: every loaded backend but cpu,\n"
             "or cpu against itself when it is the only one)"},
    {"precision", CLI_WORD, FIELD(precision), .words = cli_precision_words,
     .help = "asked of the checked backends (default f32)"},
    {"layout", CLI_WORD, FIELD(layout), .words = cli_layout_words,
     .help = "asked of the checked backends (default auto; the CPU\n"
             "reference is always nchw; test-ops: auto is each\n"
             "backend's own)"},
    {"seed", CLI_SEED, FIELD(seed), .value_name = "N", .wants = "a non-negative integer",
     .help = "seed of the random inputs (default: fresh; printed for replay)"},
    {"op", CLI_STRING, FIELD(op), .only_for = "test-ops", .value_name = "NAME",
     .help = "test-ops: only cases of this op"},
    {"mode", CLI_WORD, FIELD(perf), .words = mode_words, .only_for = "test-ops",
     .help = "test-ops: test (default) checks each case; perf also times it"},
    {"iterations", CLI_INT, FIELD(iterations), .lo = 1, .hi = INT_MAX, .value_name = "N", .wants = "a positive integer",
     .help = "timed runs per case with --mode perf (default 10)"},
    {"threads", CLI_INT, FIELD(threads), .lo = 1, .hi = INT_MAX, .value_name = "N", .wants = "a positive integer",
     .help = "CPU threads"},
    {"json", CLI_FLAG, FIELD(json), .help = "rows and counts as JSON"},
    {"help", CLI_HELP, .help = "this text"},
};
#undef FIELD

static const cli_command check_command = {"dlrun check", usage_head, usage_tail, 17, CLI_TABLE(check_opts)};

typedef struct printer {
    int json;
    cJSON *rows;
} printer;

static void print_row(void *user, const dl_check_row *r) {
    printer *p = user;
    static const char *const res[] = {"PASS", "FAIL", "not supported"};
    if (p->json) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "layer", r->layer);
        cJSON_AddStringToObject(e, "op", r->op);
        cJSON_AddStringToObject(e, "backend", r->backend);
        cJSON_AddStringToObject(e, "shape", r->shape);
        if (r->storage) cJSON_AddStringToObject(e, "storage", r->storage);
        if (r->reference) cJSON_AddStringToObject(e, "reference", r->reference);
        cJSON_AddStringToObject(e, "result",
                                r->result == DL_CHECK_PASS   ? "pass"
                                : r->result == DL_CHECK_FAIL ? "fail"
                                                             : "not supported");
        if (r->result != DL_CHECK_UNSUPPORTED) {
            cJSON_AddNumberToObject(e, "max_abs", isfinite(r->max_abs) ? r->max_abs : -1);
            cJSON_AddNumberToObject(e, "max_rel", isfinite(r->max_rel) ? r->max_rel : -1);
            if (isfinite(r->nmse)) cJSON_AddNumberToObject(e, "nmse", r->nmse);
            else cJSON_AddStringToObject(e, "nmse", "inf");
            cJSON_AddNumberToObject(e, "threshold", r->threshold);
        }
        if (r->detail && r->detail[0]) cJSON_AddStringToObject(e, "detail", r->detail);
        if (r->ms > 0) {
            cJSON_AddNumberToObject(e, "time_ms", r->ms);
            cJSON_AddNumberToObject(e, "gflops_per_s", r->gflops);
            cJSON_AddNumberToObject(e, "gbytes_per_s", r->gbps);
        }
        cJSON_AddItemToArray(p->rows, e);
        return;
    }
    char be[64]; /* the backend, with its storage when not f32: "cudnn bf16 nhwc" */
    snprintf(be, sizeof be, "%s%s%s", r->backend, r->storage && strcmp(r->storage, "f32") ? " " : "",
             r->storage && strcmp(r->storage, "f32") ? r->storage : "");
    const char *vs = r->reference ? r->reference : "cpu f32";
    if (r->result == DL_CHECK_UNSUPPORTED) {
        printf("%-26s %-14s %-18s %-9s %-20s %s: %s\n", r->layer, r->op, be, vs, r->shape, res[2], r->detail);
        return;
    }
    printf("%-26s %-14s %-18s %-9s %-20s %9.2e %9.2e %9.2e %9.1e  %s", r->layer, r->op, be, vs, r->shape, r->max_abs,
           r->max_rel, r->nmse, r->threshold, res[r->result]);
    if (r->ms > 0) {
        if (r->gflops > 0.01) printf("  %8.3f ms %8.1f GFLOP/s", r->ms, r->gflops);
        else printf("  %8.3f ms %8.2f GB/s", r->ms, r->gbps);
    }
    printf("\n");
    if (r->result == DL_CHECK_FAIL && r->detail && r->detail[0]) printf("    %s\n", r->detail);
}

/* The options and the model (check only); 0, -1 after --help, or 2 after a usage error. */
static int parse_check_args(int argc, char **argv, int test_ops, check_args *a, const char **model) {
    memset(a, 0, sizeof *a);
    a->precision = DL_PRECISION_F32;
    a->iterations = 10;
    a->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16); /* fresh unless --seed */
    int first;
    int rc = cli_parse(&check_command, test_ops ? "test-ops" : "check", argc, argv, a, &first);
    if (rc) return rc;
    *model = NULL;
    if (!test_ops) {
        if (first >= argc) return cli_usage_error(&check_command, "check needs a model");
        *model = argv[first++];
    }
    if (first < argc) return cli_usage_error(&check_command, "unexpected argument '%s'", argv[first]);
    return 0;
}

/* The seed line and the column titles of the text table. */
static void print_table_head(const char *what, unsigned long long seed, const char *first_column) {
    printf("%s: seed %llu (replay with --seed %llu)\n", what, seed, seed);
    printf("%-26s %-14s %-18s %-9s %-20s %9s %9s %9s %9s  %s\n", first_column, "op", "backend", "vs", "output shape",
           "max abs", "max rel", "nmse", "threshold", "result");
}

/* The closing count line, or the JSON document holding the rows and the counts. */
static void print_summary(printer *p, unsigned long long seed, const dl_check_summary *sum) {
    if (!p->json) {
        printf("%d passed, %d failed, %d not supported\n", sum->passed, sum->failed, sum->unsupported);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "seed", (double)seed);
    cJSON_AddItemToObject(root, "rows", p->rows);
    p->rows = NULL;
    cJSON_AddNumberToObject(root, "passed", sum->passed);
    cJSON_AddNumberToObject(root, "failed", sum->failed);
    cJSON_AddNumberToObject(root, "not_supported", sum->unsupported);
    char *text = cJSON_Print(root);
    if (text) puts(text);
    free(text);
    cJSON_Delete(root);
}

int cli_check_main(int argc, char **argv, int test_ops) {
    check_args a;
    const char *model;
    int rc = parse_check_args(argc, argv, test_ops, &a, &model);
    if (rc) return rc < 0 ? 0 : rc;
    dl_check_options o = {sizeof o, a.backends, a.n_backends, a.precision, a.seed,
                          a.op,     a.perf,     a.iterations, a.layout};
    dl_context_options co = {sizeof co, a.threads, 0, NULL, 0};
    dl_context *ctx = NULL;
    dl_model *m = NULL;
    dl_error err = {{0}};
    dl_status st = dl_context_create(&co, &ctx, &err);
    if (st == DL_OK && model) st = dl_model_load(model, &m, &err);
    printer p = {a.json, a.json ? cJSON_CreateArray() : NULL};
    dl_check_summary sum = {0, 0, 0};
    if (st == DL_OK && !a.json) print_table_head(test_ops ? "test-ops" : model, a.seed, test_ops ? "case" : "layer");
    if (st == DL_OK && test_ops) st = dl_test_ops(ctx, &o, print_row, &p, &sum, &err);
    else if (st == DL_OK) st = dl_check_model(ctx, m, &o, print_row, &p, &sum, &err);
    if (st != DL_OK) {
        fprintf(stderr, "dlrun: %s\n", err.msg);
        rc = st == DL_E_INVALID || st == DL_E_IO ? 2 : 1;
    } else {
        print_summary(&p, o.seed, &sum);
        rc = sum.failed ? 1 : 0;
    }
    cJSON_Delete(p.rows);
    dl_model_free(m);
    dl_context_free(ctx);
    return rc;
}
