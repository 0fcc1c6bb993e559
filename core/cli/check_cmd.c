/* check_cmd.c — the `dlrun check` and `dlrun test-ops` subcommands: parse their options, call
 * dl_check_model / dl_test_ops, print a table (or JSON) and the closing count line. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"

static const char check_usage[] =
    "usage: dlrun check MODEL.yaml [--backend NAME]... [--precision P] [--seed N] [--json]\n"
    "       dlrun test-ops [--backend NAME]... [--op NAME] [--mode test|perf] [--seed N]\n"
    "                      [--iterations N] [--json]\n"
    "\n"
    "check:    runs MODEL on the CPU reference, then each op on each backend with exactly the\n"
    "          inputs the reference op saw, and the whole model placed on that backend.\n"
    "test-ops: a built-in table of op cases (odd sizes, strides, padding, dilation, groups,\n"
    "          batch > 1) on each backend against the CPU reference; --mode perf also times them.\n"
    "\n"
    "  --backend NAME   check this backend (repeatable; default: every loaded backend but cpu,\n"
    "                   or cpu against itself when it is the only one)\n"
    "  --precision P    f32 | tf32 | f16 | bf16 asked of the checked backends (default f32)\n"
    "  --seed N         seed of the random inputs (default: fresh; printed for replay)\n"
    "  --op NAME        test-ops: only cases of this op\n"
    "  --threads N      CPU threads\n"
    "  --json           rows and counts as JSON\n"
    "thresholds: docs/check.md. exit status: 0 all passed, 1 a failure, 2 bad usage.\n";

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
        cJSON_AddStringToObject(e, "result", r->result == DL_CHECK_PASS ? "pass" : r->result == DL_CHECK_FAIL ? "fail" : "not supported");
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
    if (r->result == DL_CHECK_UNSUPPORTED) {
        printf("%-26s %-14s %-14s %-20s %s: %s\n", r->layer, r->op, r->backend, r->shape, res[2], r->detail);
        return;
    }
    printf("%-26s %-14s %-14s %-20s %9.2e %9.2e %9.2e %9.1e  %s", r->layer, r->op, r->backend, r->shape, r->max_abs,
           r->max_rel, r->nmse, r->threshold, res[r->result]);
    if (r->ms > 0) {
        if (r->gflops > 0.01) printf("  %8.3f ms %8.1f GFLOP/s", r->ms, r->gflops);
        else printf("  %8.3f ms %8.2f GB/s", r->ms, r->gbps);
    }
    printf("\n");
    if (r->result == DL_CHECK_FAIL && r->detail && r->detail[0]) printf("    %s\n", r->detail);
}

static int usage_err(const char *fmt, const char *arg) {
    fprintf(stderr, "dlrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(dlrun check --help lists the options)\n");
    return 2;
}

int cli_check_main(int argc, char **argv, int test_ops) {
    enum { O_BACKEND = 256, O_PRECISION, O_SEED, O_JSON, O_OP, O_MODE, O_ITER, O_THREADS };
    static const struct option longopts[] = {
        {"backend", required_argument, 0, O_BACKEND}, {"precision", required_argument, 0, O_PRECISION},
        {"seed", required_argument, 0, O_SEED},       {"json", no_argument, 0, O_JSON},
        {"op", required_argument, 0, O_OP},           {"mode", required_argument, 0, O_MODE},
        {"iterations", required_argument, 0, O_ITER}, {"threads", required_argument, 0, O_THREADS},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    const char *backends[32];
    dl_check_options o = {sizeof o, backends, 0, DL_PRECISION_F32, 0, NULL, 0, 10};
    int json = 0, threads = 0, have_seed = 0, c;
    char *end;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_BACKEND:
            if (o.n_backends == 32) return usage_err("%s", "too many --backend options");
            backends[o.n_backends++] = optarg;
            break;
        case O_PRECISION:
            if (!strcmp(optarg, "f32")) o.precision = DL_PRECISION_F32;
            else if (!strcmp(optarg, "tf32")) o.precision = DL_PRECISION_TF32;
            else if (!strcmp(optarg, "f16")) o.precision = DL_PRECISION_F16;
            else if (!strcmp(optarg, "bf16")) o.precision = DL_PRECISION_BF16;
            else return usage_err("--precision wants f32, tf32, f16 or bf16, not '%s'", optarg);
            break;
        case O_SEED:
            errno = 0;
            o.seed = strtoull(optarg, &end, 10);
            if (errno || *end || end == optarg) return usage_err("--seed wants a non-negative integer, not '%s'", optarg);
            have_seed = 1;
            break;
        case O_JSON: json = 1; break;
        case O_OP:
            if (!test_ops) return usage_err("%s", "--op is for test-ops");
            o.op = optarg;
            break;
        case O_MODE:
            if (!test_ops) return usage_err("%s", "--mode is for test-ops");
            if (!strcmp(optarg, "perf")) o.perf = 1;
            else if (strcmp(optarg, "test")) return usage_err("--mode wants test or perf, not '%s'", optarg);
            break;
        case O_ITER:
            o.iterations = (int)strtol(optarg, &end, 10);
            if (*end || o.iterations < 1) return usage_err("--iterations wants a positive integer, not '%s'", optarg);
            break;
        case O_THREADS:
            threads = (int)strtol(optarg, &end, 10);
            if (*end || threads < 1) return usage_err("--threads wants a positive integer, not '%s'", optarg);
            break;
        case 'h': fputs(check_usage, stdout); return 0;
        case ':': return usage_err("%s needs a value", argv[optind - 1]);
        default: return usage_err("unknown option '%s'", argv[optind - 1]);
        }
    }
    const char *model = NULL;
    if (!test_ops) {
        if (optind >= argc) return usage_err("%s", "check needs a model");
        model = argv[optind++];
    }
    if (optind < argc) return usage_err("unexpected argument '%s'", argv[optind]);
    if (!have_seed) o.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    dl_context_options co = {sizeof co, threads, 0, NULL, 0};
    dl_context *ctx = NULL;
    dl_model *m = NULL;
    dl_error err = {{0}};
    dl_status st = dl_context_create(&co, &ctx, &err);
    if (st == DL_OK && model) st = dl_model_load(model, &m, &err);
    printer p = {json, json ? cJSON_CreateArray() : NULL};
    dl_check_summary sum = {0, 0, 0};
    if (st == DL_OK && !json) {
        printf("%s: seed %llu (replay with --seed %llu)\n", test_ops ? "test-ops" : model, (unsigned long long)o.seed,
               (unsigned long long)o.seed);
        printf("%-26s %-14s %-14s %-20s %9s %9s %9s %9s  %s\n", test_ops ? "case" : "layer", "op", "backend", "output shape",
               "max abs", "max rel", "nmse", "threshold", "result");
    }
    if (st == DL_OK) st = test_ops ? dl_test_ops(ctx, &o, print_row, &p, &sum, &err) : dl_check_model(ctx, m, &o, print_row, &p, &sum, &err);
    int rc = 0;
    if (st != DL_OK) {
        fprintf(stderr, "dlrun: %s\n", err.msg);
        rc = st == DL_E_INVALID || st == DL_E_IO ? 2 : 1;
    } else {
        if (json) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddNumberToObject(root, "seed", (double)o.seed);
            cJSON_AddItemToObject(root, "rows", p.rows);
            p.rows = NULL;
            cJSON_AddNumberToObject(root, "passed", sum.passed);
            cJSON_AddNumberToObject(root, "failed", sum.failed);
            cJSON_AddNumberToObject(root, "not_supported", sum.unsupported);
            char *text = cJSON_Print(root);
            if (text) puts(text);
            free(text);
            cJSON_Delete(root);
        } else {
            printf("%d passed, %d failed, %d not supported\n", sum.passed, sum.failed, sum.unsupported);
        }
        rc = sum.failed ? 1 : 0;
    }
    cJSON_Delete(p.rows);
    dl_model_free(m);
    dl_context_free(ctx);
    return rc;
}
