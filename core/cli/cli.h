/* cli.h — the dlrun command line: parsed options and the report printers. */
#ifndef DLRUN_CLI_H
#define DLRUN_CLI_H
#include "dlrun/dlrun.h"

typedef struct cli_options {
    const char *model;
    const char *backend;
    const char *inputs[16]; /* --input FILE or NAME=FILE, as given */
    int n_inputs;
    const char *outputs[16]; /* --output FILE or NAME=FILE */
    int n_outputs;
    const char *images[256]; /* --image FILE or NAME=FILE, as given: N images make a batch of N */
    int n_images;
    const char *weights;
    long long batch;
    unsigned long long seed;
    int iterations;
    int warmup;
    int threads;
    int device;
    int precision;
    int layout;                /* dl_layout_mode */
    const char *micro_batch;   /* --micro-batch: "auto" or N, as given */
    long long micro_images;    /* ... parsed: 0 auto, else N */
    const char *parts_at_once; /* --parts-at-once: "auto" or N, as given */
    int parts_k;               /* ... parsed: 0 auto, else N */
    int profile;
    int json;
    int no_fuse;
    int list_backends;
    long long max_memory;
    int placement;
    int retune;
    int no_fallback;
    const char *trace; /* --trace FILE.json */
    int version;       /* --version: print it, nothing else */
} cli_options;

typedef struct cli_timing {
    double median_ms, min_ms, max_ms;
    int runs;
    long long batch;
    dl_run_times median; /* each phase's median over the runs (dl_session_last_run_times) */
    double compute_min_ms, compute_max_ms;
    int gpu;                    /* some memory domain is not the host's: the phases are worth showing */
    const char *const *images;  /* batch item k came from the image file images[k] (--image), or NULL */
    const double *op_median_ms; /* --profile: step k's median time over its last op_median_runs runs (NULL: none) */
    int op_median_runs;         /* the timed runs, or the last of them when there are very many */
} cli_timing;

/* Text report: summary line, placement, top-5, latency; and the per-op table with --profile. */
void cli_print_text(const cli_options *o, const dl_model *m, const dl_session *s, const cli_timing *t);
/* The same facts as one JSON object on stdout. */
void cli_print_json(const cli_options *o, const dl_model *m, const dl_session *s, const cli_timing *t);
void cli_print_backends(const dl_context *ctx, int json);
/* `dlrun check` (test_ops 0) and `dlrun test-ops` (1); argv[0] is the subcommand. */
int cli_check_main(int argc, char **argv, int test_ops);
/* `dlrun compare` (compare_cmd.c); argv[0] is the subcommand. */
int cli_compare_main(int argc, char **argv);

/* Shared by the commands (main.c): a monotonic clock in ms; qsort's order of doubles; the median
 * of v[0 .. n) (n > 0), sorting v; the seeded input of `dlrun MODEL`: uniform in [-1, 1) as f32,
 * or int64 ids in [0, bound) (ids non-NULL). */
double cli_now_ms(void);
int cli_cmp_double(const void *a, const void *b);
double cli_median(double *v, int n);
void cli_fill_random(float *x, int64_t *ids, int64_t bound, size_t n, unsigned long long seed);
#endif
