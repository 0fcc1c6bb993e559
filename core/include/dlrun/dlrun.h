/* dlrun/dlrun.h — the embedding API: load backends, load a model, run it, read profiles.
 *
 * Everything the `dlrun` CLI does goes through these calls. Typical use:
 *
 *     dl_context *ctx; dl_model *m; dl_session *s; dl_error err;
 *     dl_context_create(NULL, &ctx, &err);              // finds and loads backend plugins
 *     dl_model_load("models/vgg.yaml", &m, &err);       // parse YAML, infer shapes
 *     dl_session_create(ctx, m, NULL, &s, &err);        // bind weights, place ops, prepare kernels
 *     dl_session_run(s, &input, 1, &err);               // input: host f32 dl_tensor
 *     const dl_tensor *y = dl_session_output(s, 0);     // host f32, owned by the session
 *
 * Every call that can fail returns a dl_status and fills a one-line reason into a dl_error.
 *
 * Threads. A loaded model is read-only and a context's backends serve many sessions, so:
 *   - dl_session_create, dl_session_run, dl_session_free and the dl_session_* readers may be
 *     called from any number of threads at once, on sessions of the same or different models
 *     and contexts, at different batch sizes and backends — as long as no two threads use the
 *     same dl_session at the same time (a session is one thread's at a time);
 *   - dl_model_* readers, dl_context_plugin*, dl_check_threshold, dl_version and
 *     dl_status_name may be called concurrently with anything but the object's free;
 *   - dl_context_create / dl_context_free and dl_model_load / dl_model_free are not
 *     concurrent with other use of that object: create it, share it, free it after every
 *     session made from it is freed;
 *   - dl_check_model and dl_test_ops create their own sessions and follow the same rules.
 * Sessions that time ops for placement share the timing cache file; writes are atomic (a
 * rename), so concurrent sessions may each remeasure, never corrupt it. */
#ifndef DLRUN_DLRUN_H
#define DLRUN_DLRUN_H

#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLRUN_BUILDING_LIB)
#define DL_API __attribute__((visibility("default")))
#else
#define DL_API
#endif

DL_API const char *dl_version(void);
DL_API const char *dl_status_name(dl_status s);

/* ---- context: the plugin registry ---------------------------------------------------------- */

typedef struct dl_context dl_context;

typedef struct dl_context_options {
    uint32_t struct_size;    /* sizeof(dl_context_options) */
    int32_t n_threads;       /* CPU threads for plugins; 0 = all cores */
    int32_t device_index;    /* GPU ordinal for GPU plugins; default 0 */
    const char *plugin_path; /* extra colon-separated folders or .so files, searched first */
    int32_t no_default_path; /* 1: skip the folder beside libdlrun (tests) */
} dl_context_options;

/* Loads every plugin found in: plugin_path, $DLRUN_PLUGIN_PATH (colon-separated), then the
 * `dlrun/` folder beside libdlrun. A plugin that fails to load is kept in the list with its
 * reason; that is not an error. */
DL_API dl_status dl_context_create(const dl_context_options *opt, dl_context **out, dl_error *err);
DL_API void dl_context_free(dl_context *ctx);

typedef struct dl_plugin_info {
    const char *name;         /* backend name ("cpu"), or the file's stem when it did not load */
    const char *path;         /* the shared object */
    int32_t loaded;           /* 1 if usable */
    const char *description;  /* loaded: the backend's one-line description */
    const char *reason;       /* not loaded: why, one line */
    dl_device device;         /* loaded: its memory domain */
    const char *queue_family; /* loaded, ABI 1.14: backends with the same one hand their device over
                                 by events, without a host wait ("cuda-events GPU-<uuid>"); NULL: none */
} dl_plugin_info;

DL_API int dl_context_plugin_count(const dl_context *ctx);
DL_API const dl_plugin_info *dl_context_plugin(const dl_context *ctx, int i);

/* ---- model ---------------------------------------------------------------------------------- */

typedef struct dl_model dl_model;

/* Reads a YAML model (docs/model-format.md) and infers its shapes. */
DL_API dl_status dl_model_load(const char *path, dl_model **out, dl_error *err);
DL_API void dl_model_free(dl_model *m);
DL_API const char *dl_model_name(const dl_model *m);
DL_API int dl_model_layer_count(const dl_model *m);
DL_API int dl_model_input_count(const dl_model *m);
/* Name and shape of model input i as declared (batch from the file). */
DL_API const char *dl_model_input(const dl_model *m, int i, int *ndim, const int64_t **shape);
DL_API const char *dl_model_weights_path(const dl_model *m);

/* ---- session: a model bound to weights and backends, ready to run --------------------------- */

typedef struct dl_session dl_session;

/* The largest batch a session runs at, from a model file or from dl_session_options.batch. */
#define DL_MAX_BATCH (1 << 20)

/* The memory layout of 4-D activations (dl_session_options.layout, dl_check_options.layout;
 * docs/layout.md). Channels-last is NHWC in memory (ABI 1.3's strides); a backend still accepts or
 * refuses each op in it, and the host transposes where two ops' layouts differ. */
typedef enum dl_layout_mode {
    DL_LAYOUT_MODE_AUTO = 0, /* measured: of each backend's own preferred_layout and channels-last
                                asked at every conv on the backends in host memory, the plan whose
                                ops and copies placement times cheaper (docs/layout.md) */
    DL_LAYOUT_MODE_NCHW = 1, /* row-major everywhere, whatever a backend prefers */
    DL_LAYOUT_MODE_NHWC = 2  /* channels-last asked at every conv on every backend; the other ops
                                follow their input where they can */
} dl_layout_mode;

typedef struct dl_session_options {
    uint32_t struct_size;       /* sizeof(dl_session_options) */
    int64_t batch;              /* 0: the batch the model file declares */
    uint64_t seed;              /* seeded weights when the model has no weights file */
    const char *weights_path;   /* overrides the model's `weights:` */
    const char *backend;        /* run every op on this backend (error if it cannot), or NULL */
    int32_t precision;          /* dl_precision */
    int32_t no_fuse;            /* 1: no activation fused into the op before it, no batchnorm folded into a conv,
                                   no concat elided (every op its own step) */
    int64_t max_memory;         /* > 0: bytes any one memory domain may use (else what it has) */
    const char *prefer_backend; /* place ops on this backend where it supports them (dlrun check) */
    int32_t keep_activations;   /* 1: no buffer reuse, every activation readable after a run */
    int32_t retune;             /* 1: ignore the timing cache (and plugins' entries), measure again (and store) */
    int32_t no_fallback;        /* 1: a pinned layer its backend cannot run, or an op no device
                                   backend can run while one is loaded, is an error */
    /* Called before each op is timed for placement (a progress line), or NULL. */
    void (*progress)(void *user, int op_index, int n_ops, const char *layer, const char *backend);
    void *progress_user;
    /* 1: the caller holds its own host copy of every input while the session runs (as the CLI
     * does): counted with the session's memory against max_memory and the free memory, so that a
     * plan that fits does not fail later in the caller. */
    int32_t reserve_inputs;
    int32_t trace;  /* 1: record a timeline: session creation phases, and every step of every run
                       (dl_session_write_trace) */
    int32_t layout; /* dl_layout_mode (default DL_LAYOUT_MODE_AUTO) */
    /* Images a run takes at once (docs/micro-batch.md): 0, auto: where the batch is over 1, every
     * input and output has it as its first dimension, all ops run on the host and a run takes 5 ms
     * or more, the batch is also run in parts of half, a quarter ... as long as that measures
     * faster and gives the same outputs, and the fastest kept; n: parts of n images (n must divide
     * the batch; the batch or more: at once). A batch run in parts is one plan of n images run
     * batch / n times over consecutive images of the caller's inputs and outputs. */
    int64_t micro_batch;
    /* Parts of the batch a run takes at the same time, each on a thread of its own (its share of
     * the context's threads: threads / parts_at_once, at least 1) with its own copy of the plan
     * (docs/micro-batch.md). 0, auto: with micro_batch auto, parts of 1, one a thread, are also
     * measured against the fastest plan and kept if faster; with micro_batch n, one at a time.
     * 1: one at a time, never measured. k >= 2 (at most the threads): with micro_batch n, k at
     * a time; with auto, k is what is measured. */
    int32_t parts_at_once;
} dl_session_options;

DL_API void dl_session_options_init(dl_session_options *o);
/* Infers shapes at the session's batch, binds weights, places each op on a backend, allocates
 * memory and prepares kernels. The model must outlive the session; it is only read, so any
 * number of sessions of one model may exist and run at once (see Threads above). */
DL_API dl_status dl_session_create(dl_context *ctx, dl_model *m, const dl_session_options *opt, dl_session **out,
                                   dl_error *err);
DL_API void dl_session_free(dl_session *s);

/* Input i as the session expects it (host, f32 or int64, batch applied); data is NULL. */
DL_API const dl_tensor *dl_session_input(const dl_session *s, int i);
DL_API int dl_session_input_count(const dl_session *s);
/* For an int64 input: one past the largest valid index, the smallest size along the axis of the
 * gathers it indexes (a vocabulary's size for token ids); 0 for an f32 input. */
DL_API int64_t dl_session_input_bound(const dl_session *s, int i);
DL_API const char *dl_session_input_name(const dl_session *s, int i);
/* A host buffer of input i's bytes (dl_session_input's shape and dtype), owned by the session, from
 * which a run's uploads to a GPU go fastest: memory from the backend whose copy takes the input to
 * its device (page-locked, for the CUDA plugins: the DMA reads it where it is, with no staging
 * copy), or plain host memory where the input goes to no such backend. Fill it and pass it as
 * inputs[i].data to dl_session_run; any other host memory works too. Made at the first call, kept
 * until dl_session_free; the same pointer at every call. NULL if i is no input or memory is out. */
DL_API void *dl_session_input_buffer(dl_session *s, int i);
/* Runs the model. inputs[i] must be dense tensors with dl_session_input(s, i)'s shape and dtype (f32,
 * or int64 for an input declared `dtype: int64`: token ids for gather), in host memory, or in the
 * memory of a device a backend of the session works in (a CUDA pointer on the session's GPU, as a
 * PyTorch CUDA tensor gives through DLPack): that input is then copied on the device into the
 * buffers the ops there read, and only downloaded where an op on the host reads it too. A device
 * input's data must be ready when this is called (its producer's stream synchronized). Every
 * input's memory must stay valid and unchanged until this returns: a host input that only uploads
 * read is read where it is, during the run, not copied at its start. */
DL_API dl_status dl_session_run(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err);
DL_API int dl_session_output_count(const dl_session *s);
/* Output i after the last run: host f32, owned by the session, valid until the next run. */
DL_API const dl_tensor *dl_session_output(const dl_session *s, int i);
DL_API const char *dl_session_output_name(const dl_session *s, int i);
/* What the session asked of its backends for 4-D activations, dl_session_options.layout resolved
 * for its model, in words: "nchw", "nhwc at every conv", "nhwc at every conv on the host (auto:
 * 35.64 ms measured, against 40.38 ms for each backend's own)" (the plans' sums of ops timed one at
 * a time decided), "nhwc at every conv on the host (auto: 8.86 ms a run, against 10.29 ms for each
 * backend's own; op by op 7.11 and 7.98)" (both plans ran end to end: their sums were close), "each
 * backend's own (auto: 117.25 ms measured, against 143.25 ms for nhwc at every conv on the host)" or
 * "each backend's own (auto: no conv on the host)". docs/layout.md. */
DL_API const char *dl_session_layout(const dl_session *s);
/* How the session runs its batch, in words: "8 at once", "8 in 4 parts of 2 (auto: 12.01 ms a run,
 * against 14.89 ms at once; parts of 4 13.52)", "8 in 4 parts of 2 (asked)", "8 at once (auto: 14.9
 * ms a run, against 15.2 ms in parts of 4)", "8 at once (auto: ...)" with the reason none was tried.
 * A session in parts reports its steps as they run, at the part's shapes, each step's time summed
 * over a run's parts and its flops counted for the whole batch (dl_session_micro_batch: the part's
 * images). */
DL_API const char *dl_session_batching(const dl_session *s);
/* Images per part of a run: the batch where it runs at once. */
DL_API int64_t dl_session_micro_batch(const dl_session *s);

/* ---- per-step record: where each op ran and how long it took -------------------------------- */

/* ELIDED: a concat whose inputs were written straight into its output (their buffers are slices of
 * it), or a transpose whose input's memory is its output (channels-last [N, C, H, W] read as
 * row-major [N, H, W, C], or back: docs/layout.md), so it moves nothing and does not run; off with
 * no_fuse. */
typedef enum dl_step_kind { DL_STEP_OP = 0, DL_STEP_COPY = 1, DL_STEP_FUSED = 2, DL_STEP_ELIDED = 3 } dl_step_kind;

typedef struct dl_step_info {
    int32_t kind;        /* dl_step_kind; FUSED: an op folded into the previous one */
    const char *layer;   /* layer name (copies: the tensor's name) */
    const char *op;      /* "conv2d", ...; copies: "copy", or "cast", "transpose", "copy+cast", ...
                            where the storage format changes */
    const char *backend; /* where it ran; copies: "host->cuda", "host f32->cuda bf16" etc.; fused:
                            the op it joined */
    int32_t ndim;        /* output shape */
    const int64_t *shape;
    double flops;    /* floating-point operations per run */
    double bytes;    /* copies: bytes moved */
    double last_ms;  /* time of the last run */
    double total_ms; /* sum over runs since the last reset */
    int64_t runs;
} dl_step_info;

/* ---- placement: where each op runs and why ------------------------------------------------- */

typedef struct dl_placement_candidate {
    const char *backend;
    double ms;       /* measured (or cached) time of the op there; < 0: not supported */
    int32_t cached;  /* 1: the time came from the timing cache */
    const char *why; /* not supported: the backend's reason */
} dl_placement_candidate;

typedef struct dl_placement_info {
    const char *layer, *op;
    const char *chosen; /* backend it runs on ("fused" relus: their producer's) */
    int32_t n_candidates;
    const dl_placement_candidate *candidates;
    const char *storage; /* its tensors' storage there: "f32", "bf16", "f16 nhwc" (--precision) */
} dl_placement_info;

DL_API int dl_session_placement_count(const dl_session *s);
DL_API void dl_session_placement(const dl_session *s, int i, dl_placement_info *info);
/* How many op timings placement measured now, took from the cache, and the cache file. */
DL_API void dl_session_placement_stats(const dl_session *s, int *timed, int *cached, const char **cache_path);
/* Ops placement timed with the caches emptied before each run, as they run in a model whose
 * weights exceed the last-level cache (an op whose weights are 1/32 of it or more:
 * docs/placement.md), and the two sizes it compared, in bytes. */
DL_API void dl_session_placement_cold(const dl_session *s, int *cold_ops, uint64_t *cache_bytes,
                                      uint64_t *weight_bytes);

/* ---- memory plan: one arena per memory domain ------------------------------------------------ */

typedef struct dl_memory_info {
    const char *domain;         /* "host", or the device backend's name */
    uint64_t peak_bytes;        /* the planned arena: activations and scratch */
    uint64_t naive_bytes;       /* every buffer on its own, no reuse */
    uint64_t lower_bound_bytes; /* the largest total of bytes live at any one step */
    uint64_t weight_bytes;      /* weights this domain holds beside its arena: copied there, and for
                                   the host the seeded, copied and folded ones (a file's are mapped) */
} dl_memory_info;

DL_API int dl_session_memory_count(const dl_session *s);
DL_API void dl_session_memory(const dl_session *s, int i, dl_memory_info *info);

DL_API int dl_session_step_count(const dl_session *s);
DL_API void dl_session_step(const dl_session *s, int i, dl_step_info *info);
/* The op step i runs, as its backend sees it (plugin.h): kind, attributes, input and output
 * tensors with data in the backend's memory domain once memory is planned; NULL for a copy or a
 * fused step (an elided concat gives its op: its inputs' data lie inside its output's). *constant (if not NULL) gets
 * one flag per input: 1 for a weight, which the backend was given at prepare. Valid while the session lives; the
 * tensors' contents are those of the last run (with keep_activations, every step's inputs and output stay readable
 * after it). */
DL_API const dl_op *dl_session_step_op(const dl_session *s, int i, const unsigned char **constant);
DL_API void dl_session_reset_profile(dl_session *s);
/* 1 to time each step (synchronizing asynchronous backends after each); 0 to time only runs. */
DL_API void dl_session_set_profiling(dl_session *s, int on);

/* The last run in three phases, by the host's monotonic clock, each ending with every backend
 * concerned synchronized: inputs (the inputs copied in, and the copies before the first op:
 * uploads to a GPU), compute (from the first op queued until every backend has finished the last
 * op: a GPU's device time plus whatever launch gaps the host leaves) and outputs (the copies after
 * the last op: downloads). A copy between ops counts as compute. */
typedef struct dl_run_times {
    double inputs_ms, compute_ms, outputs_ms;
} dl_run_times;
DL_API void dl_session_last_run_times(const dl_session *s, dl_run_times *t);
/* The last run's hand-overs between backends sharing a device (the cuda and cudnn plugins on one
 * GPU): how many times the device passed from one's queue to the other's by an event the second
 * waited for on the device (ABI 1.14), and how many by the host synchronizing the first (a
 * backend without such events, or DLRUN_HANDOVER=sync). docs/placement.md. */
DL_API void dl_session_last_run_handovers(const dl_session *s, int *by_event, int *by_sync);

/* ---- trace: a Chrome trace-event timeline ------------------------------------------------- */

/* The most runs a trace keeps: the last DL_TRACE_MAX_RUNS runs, fewer where the model has so many
 * steps that they would pass DL_TRACE_MAX_EVENTS step events; older runs are dropped and counted. */
#define DL_TRACE_MAX_RUNS 100
#define DL_TRACE_MAX_EVENTS 1000000

/* Writes the timeline of a session created with trace = 1 as Chrome trace-event JSON (opens in
 * https://ui.perfetto.dev or chrome://tracing; docs/trace.md): one track for the session's creation
 * phases and its runs, one per backend that ran ops, one for copies; an event per step of each run
 * kept, timed by device events where the backend has them (ABI 1.6), else by the host's clock.
 * DL_E_INVALID if the session was created without trace, DL_E_IO if the file cannot be written. */
DL_API dl_status dl_session_write_trace(const dl_session *s, const char *path, dl_error *err);
/* The number of events dl_session_write_trace would write now (0 without trace). */
DL_API int64_t dl_session_trace_event_count(const dl_session *s);

/* ---- cross-checking against the CPU reference (dlrun check, dlrun test-ops) ---------------- */

typedef enum dl_check_result { DL_CHECK_PASS = 0, DL_CHECK_FAIL = 1, DL_CHECK_UNSUPPORTED = 2 } dl_check_result;

/* One op case on one backend, compared with the CPU reference. Strings live until the callback
 * returns. */
typedef struct dl_check_row {
    const char *layer; /* layer name (check) or case name (test-ops); "(end to end)" for the model */
    const char *op;    /* op kind, "model" for the end-to-end row */
    const char *backend;
    const char *shape;                        /* output shape, "[1, 64, 224, 224]" */
    int32_t result;                           /* dl_check_result */
    double max_abs, max_rel, nmse, threshold; /* errors against the reference; threshold on nmse */
    const char *detail;                       /* FAIL: the first mismatch or broken guard; UNSUPPORTED: the reason */
    double ms, gflops, gbps;                  /* perf mode: median time, rates (0 if not applicable) */
    const char *storage;                      /* how the backend stored the op's tensors: "f32", "bf16", "f16 nhwc" */
    const char *reference;                    /* what it was compared with: "cpu f32", or "cpu bf16" (same storage) */
} dl_check_row;

typedef void (*dl_check_fn)(void *user, const dl_check_row *row);

typedef struct dl_check_options {
    uint32_t struct_size;
    const char *const *backends; /* backends to check; NULL: every loaded backend but cpu
                                    (cpu itself if it is the only one) */
    int32_t n_backends;
    int32_t precision;  /* dl_precision asked of the backends checked */
    uint64_t seed;      /* inputs are drawn from it; print it so a run can be replayed */
    const char *op;     /* test-ops: only this op kind ("conv2d"), or NULL */
    int32_t perf;       /* test-ops: also time each case */
    int32_t iterations; /* perf: timed runs per case (default 10) */
    int32_t layout;     /* dl_layout_mode asked of the backends checked; the reference is always
                           row-major (NCHW) */
} dl_check_options;

typedef struct dl_check_summary {
    int32_t passed, failed, unsupported;
} dl_check_summary;

/* Runs the model on the CPU reference keeping every activation, then runs each op on each checked
 * backend with exactly the inputs the reference op saw, and the whole model placed on that
 * backend wherever it can run; calls fn once per row. Returns DL_OK when it could check (a
 * failing comparison is a row, not an error). */
DL_API dl_status dl_check_model(dl_context *ctx, dl_model *m, const dl_check_options *opt, dl_check_fn fn, void *user,
                                dl_check_summary *sum, dl_error *err);
/* The built-in table of op cases (odd sizes, strides, padding, dilation, groups, batch > 1), each
 * on each checked backend against the CPU reference, with fresh random inputs from the seed. */
DL_API dl_status dl_test_ops(dl_context *ctx, const dl_check_options *opt, dl_check_fn fn, void *user,
                             dl_check_summary *sum, dl_error *err);
/* The NMSE threshold used for an op kind at a precision (docs/check.md). */
DL_API double dl_check_threshold(int op_kind, int precision);

/* ---- NumPy .npy files ----------------------------------------------------------------------- */

/* Reads an .npy file (f32, f64, f16, i32, i64, u8 converted to f32, C order). *data is malloc'd;
 * shape must have room for 8 dims. */
DL_API dl_status dl_npy_read(const char *path, float **data, int64_t *shape, int *ndim, dl_error *err);
/* The same for an int64 input (token ids): int64, int32 or uint8 data, exact. */
DL_API dl_status dl_npy_read_int64(const char *path, int64_t **data, int64_t *shape, int *ndim, dl_error *err);
DL_API dl_status dl_npy_write(const char *path, const float *data, const int64_t *shape, int ndim, dl_error *err);

/* ---- images and labels ---------------------------------------------------------------------- */

/* How many class names the model's `labels:` gives (one per class of its first output, checked
 * at load); 0 when it has none. */
DL_API int dl_model_label_count(const dl_model *m);
/* Class i's name, or NULL when i is out of range (or the model has no labels). */
DL_API const char *dl_model_label(const dl_model *m, int i);
/* Reads an image file (PNG, JPEG, BMP, PNM; docs/images.md) for model input `input`, which must be
 * 4-D f32 [N, C, H, W] with C 1 or 3: converts it to gray, RGB or BGR, resizes, centre-crops and
 * normalizes it as the model's `preprocess:` says (by default: resized to H x W, pixels / 255).
 * *data is malloc'd [1, C, H, W] f32 (free it with dl_free); shape needs room for 8 dims. A
 * corrupt, truncated or too large image (over 16384 pixels a side or 2^26 in all) is DL_E_INVALID
 * with one line saying why; nothing is allocated for it. Thread-safe: the model is only read. */
DL_API dl_status dl_image_load(const dl_model *m, int input, const char *path, float **data, int64_t *shape, int *ndim,
                               dl_error *err);
/* Frees memory libdlrun returned (dl_npy_read, dl_npy_read_int64, dl_image_load). */
DL_API void dl_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* DLRUN_DLRUN_H */
