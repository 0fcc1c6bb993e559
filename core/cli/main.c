/* main.c — `dlrun`: parses arguments and drives the library (load plugins, model, session, run).
 * Exit status: 0 success, 1 runtime failure, 2 bad input or usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

static const char usage[] =
    "usage: dlrun MODEL.yaml [options]\n"
    "       dlrun check MODEL.yaml [--backend NAME]...   (each op against the CPU reference)\n"
    "       dlrun test-ops [--backend NAME] [--op NAME] [--mode test|perf]\n"
    "       dlrun --list-backends | --version | --help\n"
    "\n"
    "Runs a model declared in YAML, each op on a backend plugin (cpu, cuda, cudnn).\n"
    "\n"
    "options:\n"
    "  --backend NAME        run every op on backend NAME (an op it cannot run is an error)\n"
    "  --batch N             batch size (default: the model file's)\n"
    "  --input [NAME=]FILE.npy  an input tensor; NAME= picks the model input (needed when it\n"
    "                        has several); inputs not given are seeded uniform in [-1, 1)\n"
    "  --output [NAME=]FILE.npy  write the first output, or the one named (repeatable)\n"
    "  --weights FILE        weights as .safetensors (default: the model's `weights:`, else\n"
    "                        seeded PyTorch-style initialisation)\n"
    "  --seed N              seed for random weights and input (default 1)\n"
    "  --iterations N        timed runs (default 1); reports median, min, max, images/s\n"
    "  --warmup N            untimed runs before timing (default 0)\n"
    "  --threads N           CPU threads (default: all cores)\n"
    "  --device N            GPU ordinal for GPU backends (default 0)\n"
    "  --precision P         f32 (default, exact) | tf32 | f16 | bf16\n"
    "  --no-fuse             do not fuse relu into the op before it nor fold\n"
    "                        batchnorm into the conv before it\n"
    "  --placement           per op: each candidate backend's measured time, the choice, copies\n"
    "  --retune              ignore the timing cache and measure again\n"
    "  --no-fallback         an op the requested or pinned backend cannot run is an error,\n"
    "                        not a fallback to another backend (or the CPU)\n"
    "  --max-memory BYTES    cap each memory domain (suffixes K, M, G); a plan that does not\n"
    "                        fit is refused before anything runs\n"
    "  --profile             per-op table: layer, op, backend, shape, time, GFLOP/s, share\n"
    "  --json                print the report as JSON\n"
    "  --list-backends       list plugins found, loaded or skipped with the reason\n"
    "  --version             print the version\n"
    "  -h, --help            this text\n"
    "\n"
    "plugins are found beside libdlrun (lib/dlrun/) and in $DLRUN_PLUGIN_PATH (colon-separated).\n"
    "exit status: 0 success, 1 runtime failure, 2 bad input or usage.\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "dlrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(dlrun --help lists the options)\n");
    return EXIT_USAGE;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int exit_for(dl_status st) {
    return st == DL_E_INVALID || st == DL_E_IO ? EXIT_USAGE : EXIT_RUNTIME;
}

static int fail(dl_status st, const dl_error *err) {
    fprintf(stderr, "dlrun: %s\n", err->msg);
    return exit_for(st);
}

static int parse_args(int argc, char **argv, cli_options *o) {
    enum { O_BACKEND = 256, O_BATCH, O_INPUT, O_OUTPUT, O_WEIGHTS, O_SEED, O_ITER, O_WARMUP,
           O_THREADS, O_DEVICE, O_PRECISION, O_PROFILE, O_JSON, O_LIST, O_VERSION, O_NOFUSE, O_MAXMEM, O_PLACEMENT, O_RETUNE, O_NOFALLBACK };
    static const struct option longopts[] = {
        {"backend", required_argument, 0, O_BACKEND},   {"batch", required_argument, 0, O_BATCH},
        {"input", required_argument, 0, O_INPUT},       {"output", required_argument, 0, O_OUTPUT},
        {"weights", required_argument, 0, O_WEIGHTS},   {"seed", required_argument, 0, O_SEED},
        {"iterations", required_argument, 0, O_ITER},   {"warmup", required_argument, 0, O_WARMUP},
        {"threads", required_argument, 0, O_THREADS},   {"device", required_argument, 0, O_DEVICE},
        {"precision", required_argument, 0, O_PRECISION}, {"profile", no_argument, 0, O_PROFILE},
        {"json", no_argument, 0, O_JSON},               {"list-backends", no_argument, 0, O_LIST},
        {"version", no_argument, 0, O_VERSION},         {"no-fuse", no_argument, 0, O_NOFUSE},
        {"max-memory", required_argument, 0, O_MAXMEM},
        {"placement", no_argument, 0, O_PLACEMENT},     {"retune", no_argument, 0, O_RETUNE},
        {"no-fallback", no_argument, 0, O_NOFALLBACK},
        {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->iterations = 1;
    opterr = 0;
    int c;
    long long v;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_BACKEND: o->backend = optarg; break;
        case O_INPUT:
            if (o->n_inputs == 16) return usage_error("%s", "at most 16 --input options");
            o->inputs[o->n_inputs++] = optarg;
            break;
        case O_OUTPUT:
            if (o->n_outputs == 16) return usage_error("%s", "at most 16 --output options");
            o->outputs[o->n_outputs++] = optarg;
            break;
        case O_WEIGHTS: o->weights = optarg; break;
        case O_BATCH:
            if (!parse_int(optarg, 1, 1 << 20, &v)) return usage_error("--batch wants a positive integer, not '%s'", optarg);
            o->batch = v;
            break;
        case O_SEED:
            if (!parse_int(optarg, 0, 0x7fffffffffffffffLL, &v)) return usage_error("--seed wants a non-negative integer, not '%s'", optarg);
            o->seed = (unsigned long long)v;
            break;
        case O_ITER:
            if (!parse_int(optarg, 1, 1000000, &v)) return usage_error("--iterations wants a positive integer, not '%s'", optarg);
            o->iterations = (int)v;
            break;
        case O_WARMUP:
            if (!parse_int(optarg, 0, 1000000, &v)) return usage_error("--warmup wants a non-negative integer, not '%s'", optarg);
            o->warmup = (int)v;
            break;
        case O_THREADS:
            if (!parse_int(optarg, 1, 4096, &v)) return usage_error("--threads wants a positive integer, not '%s'", optarg);
            o->threads = (int)v;
            break;
        case O_DEVICE:
            if (!parse_int(optarg, 0, 1024, &v)) return usage_error("--device wants a GPU ordinal, not '%s'", optarg);
            o->device = (int)v;
            break;
        case O_PRECISION:
            if (!strcmp(optarg, "f32")) o->precision = DL_PRECISION_F32;
            else if (!strcmp(optarg, "tf32")) o->precision = DL_PRECISION_TF32;
            else if (!strcmp(optarg, "f16")) o->precision = DL_PRECISION_F16;
            else if (!strcmp(optarg, "bf16")) o->precision = DL_PRECISION_BF16;
            else return usage_error("--precision wants f32, tf32, f16 or bf16, not '%s'", optarg);
            break;
        case O_MAXMEM: {
            char *end;
            errno = 0;
            double b = strtod(optarg, &end);
            double mult = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0 : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
            if (mult > 1) end++;
            if (errno || end == optarg || *end || !(b * mult >= 1) || b * mult > 9e18)
                return usage_error("--max-memory wants a byte count such as 4000000, 512M or 2G, not '%s'", optarg);
            o->max_memory = (long long)(b * mult);
            break;
        }
        case O_PROFILE: o->profile = 1; break;
        case O_PLACEMENT: o->placement = 1; break;
        case O_RETUNE: o->retune = 1; break;
        case O_NOFALLBACK: o->no_fallback = 1; break;
        case O_JSON: o->json = 1; break;
        case O_NOFUSE: o->no_fuse = 1; break;
        case O_LIST: o->list_backends = 1; break;
        case O_VERSION: printf("dlrun %s (plugin ABI %d.%d)\n", dl_version(), DL_ABI_MAJOR, DL_ABI_MINOR); return -1;
        case 'h': fputs(usage, stdout); return -1;
        case ':': return usage_error("%s needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (o->list_backends) return 0;
    if (optind >= argc) return usage_error("%s", "no model given");
    if (argc - optind > 1) return usage_error("one model at a time; extra argument '%s'", argv[optind + 1]);
    o->model = argv[optind];
    return 0;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seeded input: uniform in [-1, 1) from a xorshift stream. */
static void fill_random(float *x, size_t n, unsigned long long seed) {
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
    }
}

/* "NAME=FILE" where NAME is one of names[0..n): returns the index and sets *file; else -1 with
 * *file = arg (a plain path, which may itself contain '='). */
static int split_named(const char *arg, const char *const *names, int n, const char **file) {
    *file = arg;
    const char *eq = strchr(arg, '=');
    if (!eq) return -1;
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == (size_t)(eq - arg) && !strncmp(arg, names[i], (size_t)(eq - arg))) {
            *file = eq + 1;
            return i;
        }
    return -1;
}

static void shape_text(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++) u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

/* Fills input i of the session from its --input file, or from the seed. */
static int load_input(const char *file, const char *name, const dl_tensor *want, unsigned long long seed, float **buf) {
    int64_t numel = dl_tensor_numel(want);
    if (!file) {
        *buf = malloc((size_t)numel * sizeof **buf);
        if (!*buf) return EXIT_RUNTIME;
        fill_random(*buf, (size_t)numel, seed);
        return 0;
    }
    int64_t shape[8];
    int ndim = 0;
    dl_error err;
    dl_status st = dl_npy_read(file, buf, shape, &ndim, &err);
    if (st != DL_OK) return fail(st, &err);
    int ok = ndim == want->ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] == want->shape[i];
    if (!ok) {
        char a[128], b[128];
        shape_text(shape, ndim, a, sizeof a);
        shape_text(want->shape, want->ndim, b, sizeof b);
        fprintf(stderr, "dlrun: %s: shape %s does not match the model's input '%s' %s%s\n", file, a, name, b,
                ndim == want->ndim && shape[0] != want->shape[0] ? " (use --batch to change the batch)" : "");
        free(*buf);
        *buf = NULL;
        return EXIT_USAGE;
    }
    return 0;
}

/* Matches --input arguments to the model's inputs: NAME=FILE, or a plain FILE for a model with
 * one input. files[i] is NULL for inputs left to the seed. */
static int match_inputs(const cli_options *o, const dl_session *s, const char **files) {
    int n = dl_session_input_count(s);
    const char *names[64];
    for (int i = 0; i < n && i < 64; i++) {
        names[i] = dl_session_input_name(s, i);
        files[i] = NULL;
    }
    for (int a = 0; a < o->n_inputs; a++) {
        const char *file;
        int i = split_named(o->inputs[a], names, n, &file);
        if (i < 0 && n == 1) i = 0;
        if (i < 0) {
            char list[512] = "";
            for (int k = 0; k < n; k++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", names[k]);
            fprintf(stderr, "dlrun: --input %s: the model has %d inputs (%s); use --input NAME=FILE\n", o->inputs[a], n, list);
            return EXIT_USAGE;
        }
        if (files[i]) {
            fprintf(stderr, "dlrun: input '%s' is given twice\n", names[i]);
            return EXIT_USAGE;
        }
        files[i] = file;
    }
    return 0;
}

/* Writes each --output: a plain FILE takes the first output, NAME=FILE the one named. */
static int write_outputs(const cli_options *o, const dl_session *s) {
    int n = dl_session_output_count(s);
    const char *names[64];
    for (int i = 0; i < n && i < 64; i++) names[i] = dl_session_output_name(s, i);
    for (int a = 0; a < o->n_outputs; a++) {
        const char *file;
        int i = split_named(o->outputs[a], names, n, &file);
        if (i < 0) i = 0;
        const dl_tensor *y = dl_session_output(s, i);
        dl_error err;
        dl_status st = dl_npy_write(file, y->data, y->shape, y->ndim, &err);
        if (st != DL_OK) return fail(st, &err);
    }
    return 0;
}

/* A progress line on a terminal while placement times ops (never when stderr is a file). */
static void progress_line(void *user, int i, int n, const char *layer, const char *backend) {
    (void)user;
    fprintf(stderr, "\rplacement: timing op %d of %d (%.40s on %s)\033[K", i, n, layer, backend);
    if (i == n) fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

static int run_model(const cli_options *o, dl_context *ctx) {
    dl_error err = {{0}};
    dl_model *m = NULL;
    dl_session *s = NULL;
    float *bufs[64] = {0};
    dl_tensor ins[64];
    double *times = NULL;
    int rc = 0;
    dl_status st = dl_model_load(o->model, &m, &err);
    if (st != DL_OK) return fail(st, &err);
    if (dl_model_input_count(m) > 64) {
        fprintf(stderr, "dlrun: %s: more than 64 inputs\n", o->model);
        dl_model_free(m);
        return EXIT_USAGE;
    }
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = o->batch;
    so.seed = o->seed;
    so.weights_path = o->weights;
    so.backend = o->backend;
    so.precision = o->precision;
    so.no_fuse = o->no_fuse;
    so.max_memory = o->max_memory;
    so.retune = o->retune;
    so.no_fallback = o->no_fallback;
    if (isatty(STDERR_FILENO)) so.progress = progress_line;
    st = dl_session_create(ctx, m, &so, &s, &err);
    if (st != DL_OK) {
        rc = fail(st, &err);
        goto done;
    }
    dl_session_set_profiling(s, o->profile);
    const char *files[64];
    int nin = dl_session_input_count(s);
    rc = match_inputs(o, s, files);
    for (int i = 0; !rc && i < nin; i++) {
        rc = load_input(files[i], dl_session_input_name(s, i), dl_session_input(s, i), o->seed + (unsigned long long)i, &bufs[i]);
        ins[i] = *dl_session_input(s, i);
        ins[i].data = bufs[i];
    }
    if (rc) goto done;
    for (int i = 0; i < o->warmup; i++) {
        st = dl_session_run(s, ins, nin, &err);
        if (st != DL_OK) {
            rc = fail(st, &err);
            goto done;
        }
    }
    dl_session_reset_profile(s);
    times = malloc((size_t)o->iterations * sizeof *times);
    if (!times) {
        rc = EXIT_RUNTIME;
        goto done;
    }
    for (int i = 0; i < o->iterations; i++) {
        double t0 = now_ms();
        st = dl_session_run(s, ins, nin, &err);
        times[i] = now_ms() - t0;
        if (st != DL_OK) {
            rc = fail(st, &err);
            goto done;
        }
    }
    qsort(times, (size_t)o->iterations, sizeof *times, cmp_double);
    cli_timing t = {o->iterations % 2 ? times[o->iterations / 2]
                                      : 0.5 * (times[o->iterations / 2 - 1] + times[o->iterations / 2]),
                    times[0], times[o->iterations - 1], o->iterations, ins[0].shape[0]};
    rc = write_outputs(o, s);
    if (rc) goto done;
    if (o->json) cli_print_json(o, m, s, &t);
    else cli_print_text(o, m, s, &t);
done:
    free(times);
    for (int i = 0; i < 64; i++) free(bufs[i]);
    dl_session_free(s);
    dl_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "check")) return cli_check_main(argc - 1, argv + 1, 0);
    if (argc > 1 && !strcmp(argv[1], "test-ops")) return cli_check_main(argc - 1, argv + 1, 1);
    cli_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    dl_context_options co = {sizeof co, o.threads, o.device, NULL, 0};
    dl_context *ctx = NULL;
    dl_error err = {{0}};
    dl_status st = dl_context_create(&co, &ctx, &err);
    if (st != DL_OK) return fail(st, &err);
    if (o.list_backends) cli_print_backends(ctx, o.json);
    else rc = run_model(&o, ctx);
    dl_context_free(ctx);
    return rc;
}
