/* main.c — `dlrun`: parses arguments and drives the library (load plugins, model, session, run).
 * Exit status: 0 success, 1 runtime failure, 2 bad input or usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "options.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

static const char usage_head[] =
    "usage: dlrun MODEL.yaml [options]\n"
    "       dlrun check MODEL.yaml [--backend NAME]...   (each op against the CPU reference)\n"
    "       dlrun test-ops [--backend NAME] [--op NAME] [--mode test|perf]\n"
    "       dlrun compare MODEL.yaml --base DIR         (two builds' plugins timed in turn)\n"
    "       dlrun --list-backends | --version | --help\n"
    "\n"
    "Runs a model declared in YAML, each op on a backend plugin (cpu, cuda, cudnn).\n"
    "\n"
    "options:\n";
static const char usage_tail[] =
    "\n"
    "plugins are found beside libdlrun (lib/dlrun/) and in $DLRUN_PLUGIN_PATH (colon-separated).\n"
    "exit status: 0 success, 1 runtime failure, 2 bad input or usage.\n";

#define FIELD(member) CLI_FIELD(cli_options, member)
static const cli_opt run_opts[] = {
    {"backend", CLI_STRING, FIELD(backend), .value_name = "NAME",
     .help = "run every op on backend NAME (an op it cannot run is an error)"},
    {"batch", CLI_INT, FIELD(batch), .lo = 1, .hi = 1 << 20, .value_name = "N", .wants = "a positive integer",
     .help = "batch size (default: the model file's)"},
    {"input", CLI_LIST, FIELD(inputs), .count_at = offsetof(cli_options, n_inputs), .value_name = "[NAME=]FILE.npy",
     .help = "an input tensor; NAME= picks the model input (needed when it\n"
             "has several); inputs not given are seeded uniform in [-1, 1)"},
    {"image", CLI_LIST, FIELD(images), .count_at = offsetof(cli_options, n_images), .value_name = "[NAME=]FILE",
     .help = "an image (PNG, JPEG, BMP, PNM) for the model's image input,\n"
             "prepared as its `preprocess:` says; repeat it: N images\n"
             "are a batch of N (docs/images.md)"},
    {"output", CLI_LIST, FIELD(outputs), .count_at = offsetof(cli_options, n_outputs), .value_name = "[NAME=]FILE.npy",
     .help = "write the first output, or the one named (repeatable)"},
    {"weights", CLI_STRING, FIELD(weights), .value_name = "FILE",
     .help = "weights as .safetensors (default: the model's `weights:`, else\n"
             "seeded PyTorch-style initialisation)"},
    {"seed", CLI_SEED, FIELD(seed), .value_name = "N", .wants = "a non-negative integer",
     .help = "seed for random weights and input (default 1)"},
    {"iterations", CLI_INT, FIELD(iterations), .lo = 1, .hi = 1000000, .value_name = "N", .wants = "a positive integer",
     .help = "timed runs (default 1); reports median, min, max, images/s"},
    {"warmup", CLI_INT, FIELD(warmup), .lo = 0, .hi = 1000000, .value_name = "N", .wants = "a non-negative integer",
     .help = "untimed runs before timing (default 0)"},
    {"threads", CLI_INT, FIELD(threads), .lo = 1, .hi = 4096, .value_name = "N", .wants = "a positive integer",
     .help = "CPU threads (default: all cores)"},
    {"device", CLI_INT, FIELD(device), .lo = 0, .hi = 1024, .value_name = "N", .wants = "a GPU ordinal",
     .help = "GPU ordinal for GPU backends (default 0)"},
    {"precision", CLI_WORD, FIELD(precision), .words = cli_precision_words,
     .help = "arithmetic of the backends (default f32, exact);\n"
             "f16/bf16 also store tensors and weights in that\n"
             "dtype where a backend takes it (docs/storage.md)"},
    {"layout", CLI_WORD, FIELD(layout), .words = cli_layout_words, .help = CLI_LAYOUT_HELP},
    {"micro-batch", CLI_STRING, FIELD(micro_batch), .value_name = "auto|N",
     .help = "images a run takes at once (docs/micro-batch.md): auto\n"
             "(default): the batch, or parts of it measured faster; N: in\n"
             "parts of N images (N divides the batch)"},
    {"parts-at-once", CLI_STRING, FIELD(parts_at_once), .value_name = "auto|N",
     .help = "parts of the batch run at the same time, each on its\n"
             "share of the threads (docs/micro-batch.md): auto (default):\n"
             "measured under --micro-batch auto; N: N at a time (1: one)"},
    {"no-fuse", CLI_FLAG, FIELD(no_fuse),
     .help = "do not fuse relu into the op before it, fold\n"
             "batchnorm into the conv before it, or elide concats"},
    {"placement", CLI_FLAG, FIELD(placement),
     .help = "per op: each candidate backend's measured time, the choice, copies"},
    {"retune", CLI_FLAG, FIELD(retune),
     .help = "ignore the timing cache (and what plugins kept there) and measure again"},
    {"no-fallback", CLI_FLAG, FIELD(no_fallback),
     .help = "an op the requested or pinned backend cannot run is an error,\n"
             "not a fallback to another backend (or the CPU)"},
    {"max-memory", CLI_BYTES, FIELD(max_memory), .value_name = "BYTES",
     .wants = "a byte count such as 4000000, 512M or 2G",
     .help = "cap each memory domain (suffixes K, M, G); a plan that does not\n"
             "fit is refused before anything runs"},
    {"profile", CLI_FLAG, FIELD(profile),
     .help = "per-op table: layer, op, backend, shape, median time, GFLOP/s,\n"
             "share"},
    {"trace", CLI_STRING, FIELD(trace), .value_name = "FILE.json",
     .help = "write a Chrome trace of session creation and the runs\n"
             "(open in https://ui.perfetto.dev; docs/trace.md)"},
    {"json", CLI_FLAG, FIELD(json), .help = "print the report as JSON"},
    {"list-backends", CLI_FLAG, FIELD(list_backends), .help = "list plugins found, loaded or skipped with the reason"},
    {"version", CLI_STOP, FIELD(version), .help = "print the version"},
    {"help", CLI_HELP, .help = "this text"},
};
#undef FIELD

static const cli_command run_command = {"dlrun", usage_head, usage_tail, 22, CLI_TABLE(run_opts)};

static int exit_for(dl_status st) { return st == DL_E_INVALID || st == DL_E_IO ? EXIT_USAGE : EXIT_RUNTIME; }

static int fail(dl_status st, const dl_error *err) {
    fprintf(stderr, "dlrun: %s\n", err->msg);
    return exit_for(st);
}

static int parse_args(int argc, char **argv, cli_options *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->iterations = 1;
    int first;
    int rc = cli_parse(&run_command, NULL, argc, argv, o, &first);
    if (rc) return rc;
    if (o->version) {
        printf("dlrun %s (plugin ABI %d.%d)\n", dl_version(), DL_ABI_MAJOR, DL_ABI_MINOR);
        return -1;
    }
    if (o->list_backends) return 0;
    if (first >= argc) return cli_usage_error(&run_command, "no model given");
    if (argc - first > 1)
        return cli_usage_error(&run_command, "one model at a time; extra argument '%s'", argv[first + 1]);
    o->model = argv[first];
    if (o->micro_batch && strcmp(o->micro_batch, "auto") != 0) {
        char *end = NULL;
        errno = 0;
        o->micro_images = strtoll(o->micro_batch, &end, 10);
        if (errno || end == o->micro_batch || *end || o->micro_images < 1 || o->micro_images > (1 << 20))
            return cli_usage_error(&run_command, "--micro-batch wants auto or a positive integer, not '%s'",
                                   o->micro_batch);
    }
    if (o->parts_at_once && strcmp(o->parts_at_once, "auto") != 0) {
        char *end = NULL;
        errno = 0;
        const long long k = strtoll(o->parts_at_once, &end, 10);
        if (errno || end == o->parts_at_once || *end || k < 1 || k > 4096)
            return cli_usage_error(&run_command, "--parts-at-once wants auto or a positive integer, not '%s'",
                                   o->parts_at_once);
        o->parts_k = (int)k;
    }
    return 0;
}

double cli_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seeded input: uniform in [-1, 1) from a xorshift stream, as f32; or as int64 ids in [0, bound)
 * drawn from the same stream (ids != NULL). */
void cli_fill_random(float *x, int64_t *ids, int64_t bound, size_t n, unsigned long long seed) {
    unsigned long long s = seed * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float u = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
        if (ids) ids[i] = (int64_t)((u + 1) / 2 * (float)bound) % (bound ? bound : 1);
        else x[i] = u;
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
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

/* Fills input i of the session from its --input file, or from the seed: f32 uniform in [-1, 1),
 * int64 (token ids) uniform in [0, bound). */
static int load_input(const char *file, const char *name, const dl_tensor *want, int64_t bound, unsigned long long seed,
                      void **buf) {
    int64_t numel = dl_tensor_numel(want);
    int is_int = want->dtype.code == DL_DTYPE_INT;
    if (!file) {
        *buf = malloc((size_t)numel * (is_int ? sizeof(int64_t) : sizeof(float)) + 1);
        if (!*buf) {
            fprintf(stderr, "dlrun: out of memory for input '%s'\n", name);
            return EXIT_RUNTIME;
        }
        cli_fill_random(is_int ? NULL : *buf, is_int ? *buf : NULL, bound, (size_t)numel, seed);
        return 0;
    }
    int64_t shape[8];
    int ndim = 0;
    dl_error err;
    dl_status st = is_int ? dl_npy_read_int64(file, (int64_t **)buf, shape, &ndim, &err)
                          : dl_npy_read(file, (float **)buf, shape, &ndim, &err);
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

/* The input an --image or --input argument names: NAME=FILE, or a plain FILE for a model with one
 * input; -1 after printing why not. */
static int named_input(const char *opt, const char *arg, const char *const *names, int n, const char **file) {
    int i = split_named(arg, names, n, file);
    if (i >= 0 || n == 1) return i < 0 ? 0 : i;
    char list[512] = "";
    for (int k = 0; k < n; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", names[k]);
    fprintf(stderr, "dlrun: --%s %s: the model has %d inputs (%s); use --%s NAME=FILE\n", opt, arg, n, list, opt);
    return -1;
}

/* Reads each --image into the model input it names (NAME=FILE, or a plain FILE for a model with
 * one input): the images of one input, in the order given, are its batch, so N images make a
 * batch of N. bufs[i] gets input i's [N, C, H, W] data where images feed it, files[k] the file of
 * batch item k; *batch the N (0 without images). Every input given images takes the same N. */
static int read_images(const cli_options *o, const dl_model *m, void **bufs, const char **files, long long *batch) {
    int n = dl_model_input_count(m), which[256], count[64] = {0};
    const char *names[64], *paths[256];
    *batch = 0;
    for (int i = 0; i < n; i++) names[i] = dl_model_input(m, i, NULL, NULL);
    for (int a = 0; a < o->n_images; a++) {
        which[a] = named_input("image", o->images[a], names, n, &paths[a]);
        if (which[a] < 0) return EXIT_USAGE;
        count[which[a]]++;
    }
    for (int i = 0; i < n; i++) {
        if (!count[i]) continue;
        if (*batch && count[i] != *batch) {
            fprintf(stderr,
                    "dlrun: --image: %lld image%s for one input and %d for '%s'; each input takes one image per "
                    "batch item\n",
                    *batch, *batch == 1 ? "" : "s", count[i], names[i]);
            return EXIT_USAGE;
        }
        *batch = count[i];
    }
    if (*batch && o->batch && o->batch != *batch) {
        fprintf(stderr, "dlrun: --batch %lld with %lld image%s: N images make a batch of N (leave --batch out)\n",
                o->batch, *batch, *batch == 1 ? "" : "s");
        return EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        if (!count[i]) continue;
        size_t per = 0;
        for (int a = 0, k = 0; a < o->n_images; a++) {
            if (which[a] != i) continue;
            float *x = NULL;
            int64_t shape[8];
            int nd = 0;
            dl_error err;
            dl_status st = dl_image_load(m, i, paths[a], &x, shape, &nd, &err);
            if (st != DL_OK) return fail(st, &err);
            if (!bufs[i]) {
                per = (size_t)(shape[1] * shape[2] * shape[3]);
                bufs[i] = malloc((size_t)*batch * per * sizeof(float));
                if (!bufs[i]) {
                    dl_free(x);
                    fprintf(stderr, "dlrun: out of memory for %lld images\n", *batch);
                    return EXIT_RUNTIME;
                }
            }
            memcpy((float *)bufs[i] + (size_t)k * per, x, per * sizeof(float));
            dl_free(x);
            files[k++] = paths[a];
        }
    }
    return 0;
}

/* Matches --input arguments to the model's inputs: NAME=FILE, or a plain FILE for a model with
 * one input. files[i] is NULL for inputs left to the seed; imaged[i] is set for inputs --image
 * feeds, which --input may not name too. */
static int match_inputs(const cli_options *o, const dl_session *s, void *const *imaged, const char **files) {
    int n = dl_session_input_count(s);
    const char *names[64];
    for (int i = 0; i < n && i < 64; i++) {
        names[i] = dl_session_input_name(s, i);
        files[i] = NULL;
    }
    for (int a = 0; a < o->n_inputs; a++) {
        const char *file;
        int i = named_input("input", o->inputs[a], names, n, &file);
        if (i < 0) return EXIT_USAGE;
        if (files[i] || imaged[i]) {
            fprintf(stderr, "dlrun: input '%s' is given twice%s\n", names[i],
                    imaged[i] ? " (--input and --image)" : "");
            return EXIT_USAGE;
        }
        files[i] = file;
    }
    return 0;
}

/* Writes each --output: a plain FILE takes the first output, NAME=FILE the one named. */
static int write_outputs(const cli_options *o, const dl_session *s) {
    int n = dl_session_output_count(s), rc = 0;
    const char **names = malloc(((size_t)n + 1) * sizeof *names); /* a model may have any number */
    if (!names) return EXIT_RUNTIME;
    for (int i = 0; i < n; i++) names[i] = dl_session_output_name(s, i);
    for (int a = 0; !rc && a < o->n_outputs; a++) {
        const char *file;
        int i = split_named(o->outputs[a], names, n, &file);
        if (i < 0) i = 0;
        const dl_tensor *y = dl_session_output(s, i);
        dl_error err;
        dl_status st = dl_npy_write(file, y->data, y->shape, y->ndim, &err);
        if (st != DL_OK) rc = fail(st, &err);
    }
    free(names);
    return rc;
}

/* A progress line on a terminal while placement times ops (never when stderr is a file). */
static void progress_line(void *user, int i, int n, const char *layer, const char *backend) {
    (void)user;
    fprintf(stderr, "\rplacement: timing op %d of %d (%.40s on %s)\033[K", i, n, layer, backend);
    if (i == n) fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* --profile keeps at most this many op times (8 bytes each) to take each op's median from */
#define OP_SAMPLES (1 << 22)

static int run_model(const cli_options *o, dl_context *ctx) {
    dl_error err = {{0}};
    dl_model *m = NULL;
    dl_session *s = NULL;
    void *bufs[64] = {0};
    dl_tensor ins[64];
    double *times = NULL, *op_ms = NULL, *op_median = NULL;
    int rc = 0;
    dl_status st = dl_model_load(o->model, &m, &err);
    if (st != DL_OK) return fail(st, &err);
    if (dl_model_input_count(m) > 64) {
        fprintf(stderr, "dlrun: %s: more than 64 inputs\n", o->model);
        dl_model_free(m);
        return EXIT_USAGE;
    }
    const char *item_files[256] = {0};
    long long n_images = 0;
    rc = read_images(o, m, bufs, item_files, &n_images);
    if (rc) goto done;
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = n_images ? n_images : o->batch;
    so.seed = o->seed;
    so.weights_path = o->weights;
    so.backend = o->backend;
    so.precision = o->precision;
    so.no_fuse = o->no_fuse;
    so.layout = o->layout;
    so.micro_batch = o->micro_images;
    so.parts_at_once = o->parts_k;
    so.max_memory = o->max_memory;
    so.retune = o->retune;
    so.no_fallback = o->no_fallback;
    so.reserve_inputs = 1; /* bufs[] below: counted against --max-memory with the session */
    so.trace = o->trace != NULL;
    if (isatty(STDERR_FILENO)) so.progress = progress_line;
    st = dl_session_create(ctx, m, &so, &s, &err);
    if (st != DL_OK) {
        rc = fail(st, &err);
        goto done;
    }
    dl_session_set_profiling(s, o->profile);
    const char *files[64];
    int nin = dl_session_input_count(s);
    rc = match_inputs(o, s, bufs, files);
    for (int i = 0; !rc && i < nin; i++) {
        if (!bufs[i])
            rc = load_input(files[i], dl_session_input_name(s, i), dl_session_input(s, i), dl_session_input_bound(s, i),
                            o->seed + (unsigned long long)i, &bufs[i]);
        ins[i] = *dl_session_input(s, i);
        ins[i].data = bufs[i];
        /* into the session's buffer for it, which the upload to a GPU reads fastest (page-locked),
         * once, before any run */
        void *fast = rc ? NULL : dl_session_input_buffer(s, i);
        if (fast) {
            memcpy(fast, bufs[i], (size_t)dl_tensor_numel(&ins[i]) * dl_dtype_size(ins[i].dtype));
            free(bufs[i]);
            bufs[i] = NULL;
            ins[i].data = fast;
        }
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
    times = malloc(4 * (size_t)o->iterations * sizeof *times); /* run, inputs, compute, outputs */
    if (!times) {
        rc = EXIT_RUNTIME;
        goto done;
    }
    /* --profile: each op's time in each run, for its median; at most OP_SAMPLES in all, so a long
     * run keeps each op's last `keep` runs (without the memory: each op's mean, as before) */
    const int steps = o->profile ? dl_session_step_count(s) : 0;
    int keep = steps ? (o->iterations < OP_SAMPLES / steps ? o->iterations : OP_SAMPLES / steps) : 0;
    if (keep > 0 && (!(op_ms = malloc((size_t)keep * (size_t)steps * sizeof *op_ms)) ||
                     !(op_median = malloc((size_t)steps * sizeof *op_median))))
        keep = 0;
    for (int i = 0; i < o->iterations; i++) {
        double t0 = cli_now_ms();
        st = dl_session_run(s, ins, nin, &err);
        times[i] = cli_now_ms() - t0;
        if (st != DL_OK) {
            rc = fail(st, &err);
            goto done;
        }
        for (int k = 0; keep > 0 && k < steps; k++) {
            dl_step_info si;
            dl_session_step(s, k, &si);
            op_ms[(size_t)k * (size_t)keep + (size_t)(i % keep)] = si.last_ms;
        }
        dl_run_times ph;
        dl_session_last_run_times(s, &ph);
        times[o->iterations + i] = ph.inputs_ms;
        times[2 * o->iterations + i] = ph.compute_ms;
        times[3 * o->iterations + i] = ph.outputs_ms;
    }
    cli_timing t = {0};
    double *phase[4] = {&t.median_ms, &t.median.inputs_ms, &t.median.compute_ms, &t.median.outputs_ms};
    for (int q = 0; q < 4; q++) {
        double *v = times + (size_t)q * (size_t)o->iterations;
        int n = o->iterations;
        *phase[q] = cli_median(v, n); /* v sorted */
        if (q == 0) t.min_ms = v[0], t.max_ms = v[n - 1];
        if (q == 2) t.compute_min_ms = v[0], t.compute_max_ms = v[n - 1];
    }
    for (int k = 0; keep > 0 && k < steps; k++) op_median[k] = cli_median(op_ms + (size_t)k * (size_t)keep, keep);
    t.op_median_ms = keep > 0 ? op_median : NULL;
    t.op_median_runs = keep;
    t.runs = o->iterations;
    t.batch = ins[0].shape[0];
    t.gpu = dl_session_memory_count(s) > 1;
    t.images = n_images ? item_files : NULL;
    rc = write_outputs(o, s);
    if (!rc && o->trace && (st = dl_session_write_trace(s, o->trace, &err)) != DL_OK) rc = fail(st, &err);
    if (rc) goto done;
    if (o->json) cli_print_json(o, m, s, &t);
    else cli_print_text(o, m, s, &t);
    if (o->trace) /* a report line; on stderr beside --json, whose stdout is one JSON object */
        fprintf(o->json ? stderr : stdout,
                "trace: %s (%lld events; open in https://ui.perfetto.dev or chrome://tracing)\n", o->trace,
                (long long)dl_session_trace_event_count(s));
done:
    free(times);
    free(op_ms);
    free(op_median);
    for (int i = 0; i < 64; i++) free(bufs[i]);
    dl_session_free(s);
    dl_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "check")) return cli_check_main(argc - 1, argv + 1, 0);
    if (argc > 1 && !strcmp(argv[1], "test-ops")) return cli_check_main(argc - 1, argv + 1, 1);
    if (argc > 1 && !strcmp(argv[1], "compare")) return cli_compare_main(argc - 1, argv + 1);
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
