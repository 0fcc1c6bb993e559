/* session.h — internals shared by the session modules. A session is built in stages, each
 * producing its own part of the session from the read-only model and the earlier parts:
 *
 *   shapes at its batch (shape.c) -> weights (weights.c) -> batchnorm folding (fuse.c)
 *   -> placement (placement.c) -> activation fusion (fuse.c) -> storage formats (storage.c)
 *   -> steps, copies and casts (session.c) -> concats elided (concat_elide.c) -> kernels prepared
 *   -> memory plan (session_plan.c)
 *   -> (--micro-batch auto: sessions of parts of the batch built and timed against it; the fastest
 *      that agrees kept, micro_batch.c)
 *   -> run (a session in parts: its plan run once a part)
 * A value may be stored in several places: a place is a memory domain plus a storage format
 * (dtype and layout). Place 0 is host memory in f32 row-major, where model inputs arrive and
 * outputs leave; a step of kind COPY moves and/or converts a value from one place to another.
 */
#ifndef DLRUN_SESSION_H
#define DLRUN_SESSION_H
#include "context.h"
#include "graph.h"
#include "handover.h"
#include "oprun.h"
#include "trace.h"
#include "weights.h"

struct dl_model {
    dl_graph *g; /* read-only once loaded: sessions share it */
};

#define DL_MAX_DOMAINS 8
_Static_assert(DL_MAX_DOMAINS == DL_HANDOVER_DOMAINS, "handover.h keeps a run's queues per domain");
#define DL_MAX_PLACES 24
/* s->buf's entry for value v in place p: its storage there, or NULL */
#define BUF(s, v, p) ((s)->buf[(size_t)(v)*DL_MAX_PLACES + (size_t)(p)])

/* A memory domain in use by the session; domain 0 is always host memory (owned by the core). */
typedef struct dl_domain {
    dl_device device;
    const dl_backend *be; /* allocates and copies for this domain; NULL for the host */
} dl_domain;

/* Where a value is stored: a memory domain and a format. */
typedef struct dl_store {
    int dom;
    dl_format fmt;
} dl_store;

/* How a COPY step moves a value between places (storage.c). */
typedef enum dl_xfer {
    DL_XFER_COPY = 0,    /* same format, another domain: the backends' copy() */
    DL_XFER_HOST = 1,    /* both in host memory: converted by the host */
    DL_XFER_BACKEND = 2, /* the device backend's convert(): a copy that converts */
    DL_XFER_VIA_HOST = 3 /* copied into host memory, converted there, copied out */
} dl_xfer;

typedef struct dl_step {
    dl_step_kind kind;
    int node;             /* OP / FUSED: node index; COPY: -1 */
    int value;            /* COPY: value index moved */
    const dl_backend *be; /* OP: where it runs */
    int place;            /* OP: where its activations live; COPY: destination place */
    int dom;              /* the place's domain */
    int src_place;        /* COPY: source place */
    int src_dom;          /* COPY: source domain */
    dl_xfer xfer;         /* COPY: how */
    void *staging;        /* COPY through host memory: the source's format there */
    void *staging2;       /* DL_XFER_VIA_HOST: the destination's format there */
    size_t bytes;         /* COPY: bytes written at the destination */
    int ws_slot;          /* OP: memory-plan slot of its workspace, or -1 */
    void *ws;             /* OP: its workspace inside the domain's arena */
    dl_kernel *kernel;
    dl_op op;
    dl_op_attrs attrs;       /* the node's attributes plus fusion */
    dl_tensor *in;           /* op.n_inputs tensors with data in the domain */
    int64_t *strides;        /* 4 per tensor (inputs, then output) for channels-last ones */
    unsigned char *constant; /* per input: 1 for a weight (given to the backend at prepare) */
    dl_tensor out;
    size_t workspace;
    char *label;      /* COPY: "host->cuda bf16"; FUSED: "into <layer>" */
    const char *what; /* COPY: "copy", "cast", "transpose", "copy+cast", ... */
    double flops;
    double last_ms, total_ms;
    int64_t runs;
} dl_step;

/* A buffer the memory plan places: value `value`'s storage in place `place`, or an op's workspace
 * (value -1). Steps are indices into the session's steps; -1 is "before the run", n_steps "after". */
typedef struct dl_slot {
    int value, place;
    size_t size;
    int first, last;
    int share; /* slot whose storage this one takes over in place, or -1 */
    size_t offset;
    int within;       /* a slice of this (later) slot: an elided concat's input inside its output; or -1 */
    size_t within_at; /* ... at this byte offset in it */
    int unused;       /* 1: none of the steps the session runs touches it (a session with its first layers
                         in parts, and that part's session, once trimmed: batch_prefix.c); no storage */
} dl_slot;

/* What the plan gives one domain. */
typedef struct dl_domain_memory {
    void *arena;
    size_t peak, naive, lower_bound;
    size_t weights; /* bytes of weights copied into this domain (0 for host: mapped) */
} dl_domain_memory;

/* Fusion's product (fuse.c): batchnorms folded into convs before placement, relus fused into
 * the op before them after it. */
typedef struct dl_fusion {
    dl_op_attrs *attrs;   /* node -> attributes as run (the model's, plus a fused activation) */
    int *into;            /* node -> node it was folded or fused into, or -1 */
    int *extra_input;     /* node -> value appended to its inputs (the bias a folded batchnorm gave
                             a conv that had none), or -1 */
    int *residual;        /* node -> value appended after that (attrs.residual: a fused add's other
                             operand), or -1 */
    int *via;             /* fused node -> its input whose storage its output shares (0, or the
                             operand a fused add takes from its conv) */
    const float **weight; /* value -> host weights folding computed (NULL: the bound ones) */
    float **owned;        /* what folding allocated */
    int n_owned, cap_owned;
    size_t owned_bytes; /* the bytes of owned, counted against the host's memory */
} dl_fusion;

/* Placement's record of one node's candidates. */
typedef struct dl_node_choice {
    int n;
    dl_placement_candidate cand[16];
} dl_node_choice;

/* Placement's product (placement.c): where each node runs, and what was measured. */
typedef struct dl_placement {
    const dl_backend **be;  /* node -> backend */
    dl_node_choice *choice; /* node -> candidates */
    int timed, cached;      /* op timings measured now / taken from the cache */
    double cost_ms;         /* the chosen plan's cost: its ops' times (those timed) and its copies */
    int any_cl;             /* some candidate takes some op channels-last */
    int failed_timings;     /* ops of one candidate that failed when timed only to cost the plan */
    int cold;               /* ops timed with their weights out of cache (placement.c: cold_bytes) */
    size_t llc, weights;    /* the last-level cache and the model's weights, bytes, as cold compared them */
    char *cache_path;
    /* per device domain whose transfers were measured: the backend there with the cheapest ones,
     * which allocates the domain's memory and runs its copies (placement prices them so) */
    const dl_backend *copier[DL_MAX_DOMAINS];
    int n_copiers;
} dl_placement;

struct dl_session {
    dl_context *ctx;
    const dl_graph *g; /* the model's, read only */
    dl_session_options opt;
    dl_shape *shape; /* value -> its shape at this session's batch */
    dl_weights *weights;
    dl_fusion fuse;
    dl_placement place;
    dl_domain doms[DL_MAX_DOMAINS];
    int n_doms;
    dl_store places[DL_MAX_PLACES];
    char place_name[DL_MAX_PLACES][24]; /* "f32", "bf16 nhwc", ... */
    int n_places;
    void **buf;            /* buf[value * DL_MAX_PLACES + place]: the value's storage there */
    unsigned char *owned;  /* same index: 1 if the session allocated it */
    int *alias;            /* value -> value whose storage it shares (fused relu), or itself */
    int *node_dom;         /* node -> domain it runs in */
    int *node_place;       /* node -> place of its activations (storage.c) */
    int *view_in;          /* node -> place its input is read in where the node is a layout view
                              (layout_view.c: that input's place differs from node_place), or -1 */
    int casts;             /* COPY steps that convert (dtype or layout) */
    int layout_ask;        /* dl_layout_ask: opt.layout resolved for this model (dl_session_layout_ask,
                              then dl_session_place for auto) */
    int depthwise;         /* depthwise convs in the model (check's op-by-op rows under auto) */
    int forced_ask;        /* 1 + the dl_layout_ask this session takes in place of auto's choice (its twin
                              under auto's runs of both plans, session.c); 0: none */
    int other_ask;         /* after auto's placement: 1 + the plan not kept, where both could be placed
                              and differ; 0: none */
    double plan_ms[2];     /* their costs as placement measured them, op by op: kept, other */
    char layout_desc[192]; /* the same in words (dl_session_layout) */
    dl_step *steps;
    int n_steps, cap_steps;
    dl_slot *slots; /* planned buffers */
    int n_slots, cap_slots;
    int *slot_of; /* value * DL_MAX_PLACES + place -> slot index + 1 (0: none) */
    dl_domain_memory mem[DL_MAX_DOMAINS];
    dl_tensor *inputs;            /* descriptors of model inputs (host) */
    const void **in_dev;          /* during a run, per model input: its data in device memory, or NULL (host) */
    int *in_dom;                  /* ... and that memory's domain (session_inputs.c) */
    int n_dev_in;                 /* how many inputs of the run are in device memory */
    const void **in_src;          /* during a run, per model input: the caller's host data, where only
                                     transfers from its host place read it (they read it there), or NULL */
    int n_src_in;                 /* how many inputs of the run are read so */
    uint8_t *in_host_mask;        /* per model input: bit d > 0, a device input in domain d is also read on
                                     the host; bit 0, a host input is read from its host buffer (by a host
                                     op, as a model output, or through a view), so it is copied there */
    void **in_buf;                /* per model input: dl_session_input_buffer's memory, or NULL (none yet) */
    const dl_backend **in_buf_be; /* ... and the backend whose host_alloc gave it (NULL: malloc'd) */
    dl_tensor *outputs;           /* model outputs (host), data in buf[...][0] */
    int profiling;
    int first_op, last_op; /* steps: the first and last op (n_steps and -1 if none); phases */
    dl_run_times last_run; /* the last run's phases (dl_session_last_run_times) */
    dl_trace *trace;       /* with opt.trace: the timeline (trace.c), else NULL */
    dl_trace *prof_trace;  /* profiling without opt.trace: a trace of its own, for device events */
    dl_handover handover;  /* events handing a device between its backends' queues (handover.c) */
    /* A batch run in parts (micro_batch.c): this plan runs `parts` times a run, each on the next
     * images of the caller's batch; the caller sees whole_in and whole_out (parts 0 or 1: none) */
    int64_t parts;
    dl_tensor *whole_in, *whole_out; /* at the whole batch; whole_out's data owned */
    int64_t *whole_dims;             /* their shapes */
    dl_tensor *part_in;              /* during a run: one part's inputs */
    double *part_ms;                 /* during a run: each step's time summed over the parts */
    /* Parts run at once (micro_batch.c): n_sibs sessions of the same plan run parts beside this
     * one, each on a thread of its own; own_ctx, their plugins at their share of the threads
     * (dl_context_host_twin), is this session's: freed after it and its siblings */
    struct dl_session **sibs;
    int n_sibs;
    struct dl_part_workers *workers; /* the siblings' threads (part_workers.c) */
    dl_context *own_ctx;
    char batch_desc[640]; /* dl_session_batching */
    int *node_step;       /* node -> the first step built for it (its copies first); [n_nodes]: the end of
                             the nodes' steps (the outputs' copies follow) */
    /* The first layers in parts (batch_prefix.c): `prefix`, a session of prefix_parts-th of the
     * batch, runs its steps [0, prefix_steps) on each part, up to node prefix_cut, whose output is
     * the one value crossing it; each part's copy of it (prefix_value in prefix place prefix_at)
     * goes into this session's (cut_value in place cut_at) at the part's offset; then this
     * session runs its steps from first_step. NULL: none. */
    struct dl_session *prefix;
    int prepare_to_node;   /* a prefix's own session: only the steps of nodes up to this one have kernels
                              (dl_session_create_prefix); -1: every step's */
    int prepare_from_node; /* steps of nodes before this one left unprepared (a choice of parts or a
                              prefix cached: dl_micro_batch_prepare_from); 0: none */
    int64_t prefix_parts;
    int prefix_cut, prefix_steps, prefix_value, prefix_at, first_step, cut_value, cut_at;
};

/* ---- session.c ---- */
/* A session of m; forced_ask: 1 + the layout ask it takes whatever opt.layout says (auto's twin),
 * 0: none. The whole of dl_session_create but the batch in parts. */
dl_status dl_session_create_as(dl_context *ctx, dl_model *m, const dl_session_options *opt, int forced_ask,
                               dl_session **out, dl_error *err);
/* The same for a batch's first layers in parts (batch_prefix.c): only the steps of nodes up to
 * last_node are prepared (and may run). */
dl_status dl_session_create_prefix(dl_context *ctx, dl_model *m, const dl_session_options *opt, int forced_ask,
                                   int last_node, dl_session **out, dl_error *err);
/* Plans the memory again (the slots changed) into new arenas and points the steps there; where
 * they cannot be had, the old arenas stay, their buffers where they were (the slots' offsets are
 * then the new plan's: the caller restores them). */
dl_status dl_session_replan(dl_session *s, dl_error *err);
/* Prepares the kernels left unprepared (prepare_from_node) and plans the memory again with their
 * workspaces; DL_OK at once where there are none. */
dl_status dl_session_prepare_rest(dl_session *s, dl_error *err);
/* One run of the session's own plan (dl_session_run without parts). */
dl_status dl_session_run_plan(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err);
/* Its steps [from, to) only; inputs NULL: none taken (a run after a prefix, batch_prefix.c). */
dl_status dl_session_run_steps(dl_session *s, const dl_tensor *inputs, int n_inputs, int from, int to, dl_error *err);
/* Inputs of s's shapes (dl_session_input), f32 ones uniform in [-1, 1) from a stream seeded by
 * each input's name, int64 ones 0; NULL when out of memory. Free with dl_session_free_inputs. */
dl_tensor *dl_session_seeded_inputs(const dl_session *s, dl_error *err);
void dl_session_free_inputs(const dl_session *s, dl_tensor *in);
/* s and t run in turn on the same seeded inputs at s's input shapes (2 untimed rounds, then
 * `rounds` rounds alternating their order, and more while their timed runs together have taken
 * under DL_RUN_BOTH_BUDGET_MS, at most DL_RUN_BOTH_MAX_ROUNDS), each turn two runs in a row of
 * which the second is timed (as a model's repeated runs find the caches); their median times in
 * ms[0] and ms[1]; their steps' times cleared afterwards. s == t with a prefix (batch_prefix.c):
 * s without it, then with it. */
#define DL_RUN_BOTH_MAX_ROUNDS 15
#define DL_RUN_BOTH_BUDGET_MS 400.0
dl_status dl_session_run_both(dl_session *s, dl_session *t, int rounds, double ms[2], dl_error *err);
/* The same, and each step's mean time a run into step_ms[0] (s's n_steps) and step_ms[1] (t's)
 * where not NULL, before they are cleared. */
dl_status dl_session_run_both_steps(dl_session *s, dl_session *t, int rounds, double ms[2], double *const step_ms[2],
                                    dl_error *err);
/* Bytes of value v at the session's shapes. */
size_t dl_session_value_bytes(const dl_session *s, int v);
/* DL_E_NOMEM: "model 'm' at batch N needs <at_least>NEED of <domain d> memory (parts), but <what>
 * allows AVAIL[; hint]" */
dl_status dl_session_refuse(const dl_session *s, int d, const char *at_least, size_t need, size_t avail,
                            const char *what, const char *parts, const char *hint, dl_error *err);
/* Host f32 data of weight v as this session runs it: folded, else bound (an f16/bf16 weight is
 * converted then, once); NULL when out of memory. */
const float *dl_session_weight(const dl_session *s, int v);
/* The same in the dtype it is stored in (the weights file's, f32 once folded): no conversion. */
const void *dl_session_weight_stored(const dl_session *s, int v, dl_dtype *dtype);
/* The values node `node` takes as inputs in this session: its own, then the extra input fusion
 * gave it, if any. Returns the count (at most the node's n_inputs + 1). */
int dl_session_node_inputs(const dl_session *s, int node, int *ins);
/* The dl_op view of node n in this session, with the given attributes (`in` needs room for the
 * node's inputs + 1). */
void dl_session_op_view(const dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op, dl_tensor *in,
                        dl_tensor *out);
dl_status dl_session_alloc(dl_session *s, int dom, size_t bytes, void **p, dl_error *err);
int dl_session_root(const dl_session *s, int value);
/* The place where value v is produced: its producer's (or, fused, the op it joined), 0 (host f32)
 * for a model input. */
int dl_session_home(const dl_session *s, int v);
/* The place node i reads its input j in: node_place[i], or for a layout view's input view_in[i]. */
int dl_session_input_place(const dl_session *s, int node, int j);
void dl_format_bytes(double bytes, char *buf, size_t len);

/* ---- fuse.c ---- */
/* Folds each batchnorm into the conv2d before it where that conv's output feeds only the
 * batchnorm and all their parameters are constants: the conv's weights become session-owned
 * scaled copies, the batchnorm a fused step. Off with no_fuse. Fills s->fuse. */
dl_status dl_fold_batchnorm(dl_session *s, dl_error *err);
/* After placement: each residual add (y = a + r, a from a conv2d or linear whose backend, in
 * the add's memory domain, accepts it: ABI 1.8), then each activation (relu; from ABI 1.4 silu,
 * hard_swish, gelu...) whose input comes only from a conv2d, linear, add or batchnorm on the same
 * domain, which accepts the fused op, runs as that op's epilogue. Off with no_fuse. */
void dl_fuse_epilogues(dl_session *s);
/* Before that, for placement: the value a residual add after node p would give p once fused
 * (the graph allowing it; p's backend is asked later), or -1. Placement times p with it. */
int dl_fuse_residual_of(const dl_session *s, int p);
void dl_fusion_free(dl_fusion *f);

/* ---- placement.c ---- */
/* Chooses a backend for every node not folded away (measuring where needed) into s->place under
 * s->layout_ask; for DL_ASK_MEASURE (--layout auto), on a model with a conv a host backend may
 * run, two plans with every op timed, NHWC at every conv on the host and each backend's own
 * layout, of which the cheaper is kept (s->layout_ask, s->layout_desc). Reads the session's
 * shapes, weights and fusion. */
dl_status dl_session_place(dl_session *s, dl_error *err);
void dl_placement_free(dl_placement *p);
/* A hash of the session's plan: every placed node's timing key (op, shapes, backend and its build,
 * versions), the same for the same model, batch, options and plugins. */
uint64_t dl_session_plan_hash(const dl_session *s);
/* 1 if backends a and b share a memory domain: both on the host (the cpu and onednn plugins), or
 * the same device (the cuda and cudnn plugins on one GPU), so a tensor passes with no copy. */
int dl_same_domain(const dl_backend *a, const dl_backend *b);

/* ---- storage.c ---- */
/* Resolves s->opt.layout into s->layout_ask and counts s->depthwise (shapes known). */
void dl_session_layout_ask(dl_session *s);
/* After relu fusion: the storage format of each node's activations on its backend. With
 * --precision f16/bf16 a backend of ABI 1.3 is asked (supports()) for that dtype first, and for
 * channels-last where the host asks it (s->layout_ask) or its input already is; f32 row-major
 * otherwise. Fills
 * s->places and s->node_place. */
dl_status dl_choose_storage(dl_session *s, dl_error *err);
/* Node `node`'s inputs as this session gives them (dl_session_node_inputs): 1 for a weight. */
void dl_session_weight_flags(const dl_session *s, int node, unsigned char *is_weight);
/* 1 if backend be accepts node `node` with these attributes (ABI version and supports()) in some
 * storage format: the precision's dtype (channels-last first where the backend prefers it or the
 * input already is), then f32; the first accepted goes to *f (if not NULL). Else 0, with the
 * backend's reason for f32 row-major in why. dl_session_accepts is the same without *f. */
int dl_session_accepts_as(const dl_session *s, const dl_backend *be, int node, const dl_op_attrs *attrs, dl_format *f,
                          dl_error *why);
/* The same, with the op's input channels-last (input_cl) or not, whatever the places say:
 * placement times an op in the layout it would have after the ops before it. */
int dl_session_accepts_from(const dl_session *s, const struct dl_backend *be, int node, const dl_op_attrs *attrs,
                            int input_cl, dl_format *f, dl_error *why);
int dl_session_accepts(const dl_session *s, const dl_backend *be, int node, const dl_op_attrs *attrs, dl_error *why);
/* The place index for (dom, fmt), added if new; -1 when there are too many. */
int dl_place_index(dl_session *s, int dom, dl_format fmt);
/* The place value v really uses when asked for place p: weights and tensors that are not 4-D are
 * row-major whatever p's layout. */
int dl_place_of_value(dl_session *s, int v, int p);
/* Bytes of value v stored in place p. */
size_t dl_session_place_bytes(const dl_session *s, int v, int p);
/* A host view of value v in place p (data NULL; strides in strides[4] when channels-last). */
dl_tensor dl_place_view(const dl_session *s, int v, int p, int64_t *strides);
/* Plans a COPY step's transfer (st->xfer, staging) from its places; run by dl_step_transfer. */
dl_status dl_step_plan_transfer(dl_session *s, dl_step *st, dl_error *err);
dl_status dl_step_transfer(dl_session *s, const dl_step *st, dl_error *err);
/* The same, reading the value from src instead of its buffer in st's source place. */
dl_status dl_step_transfer_from(dl_session *s, const dl_step *st, const void *src, dl_error *err);
/* Stores weight v in place p, once, outside the plan: used where it is (host memory, same dtype),
 * else allocated there and converted / copied from its stored dtype (no f32 detour). */
dl_status dl_place_weight(dl_session *s, int v, int p, dl_error *err);
/* session_inputs.c. After the steps are built: for each input, the device domains where something
 * besides a plain upload reads it from host memory, and whether its host buffer is read at all
 * (in_host_mask). */
void dl_session_plan_inputs(dl_session *s);
/* Frees dl_session_input_buffer's memory (dl_session_free, before the context). */
void dl_session_free_input_buffers(dl_session *s);
/* Checks a run's inputs and copies host ones into their host buffers where something reads them
 * there (else their transfers read the caller's memory: in_src); a device input is remembered,
 * and downloaded only where in_host_mask says the host reads it. */
dl_status dl_session_take_inputs(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err);
/* For copy step st: 1 if it moves an input from where the caller gave it (a device input copied
 * on the device; a host input's transfer reading the caller's memory), *rc the status; 0 if the
 * step is an ordinary transfer. */
int dl_session_input_copy(dl_session *s, const dl_step *st, dl_status *rc, dl_error *err);
/* Copies n bytes from domain `from` to domain `to` (staging through host memory between two devices). */
dl_status dl_dom_copy(dl_session *s, int to, void *dst, int from, const void *src, size_t n, void *staging,
                      dl_error *err);
const char *dl_domain_name(const dl_session *s, int d);

/* ---- micro_batch.c ---- */
/* After a session of the whole batch is built (*sp): with opt.micro_batch 0 (auto), where it
 * qualifies, sessions of parts of the batch are built and run against it, and the fastest that
 * agrees with it replaces *sp (the loser freed); the choice is cached in the timing cache under a
 * hash of the whole batch's plan. Sets batch_desc. A part that cannot be built or run is not
 * taken; fails only where the whole batch's session, its first layers left unprepared for a
 * cached choice that cannot be had now, cannot prepare them (dl_session_prepare_rest). */
dl_status dl_session_auto_parts(dl_session **sp, dl_model *m, dl_error *err);
/* Before the whole batch's kernels are prepared, from auto's cached choice: the first node whose
 * kernels it needs (its nodes' count where parts of the batch will replace it; the node after the
 * cut where its first layers will run in parts); 0 (all) where nothing is cached, or the session
 * is not one auto chooses for. Whatever runs the whole session before that choice is made (auto's
 * runs of both layouts, the micro-batch trials) prepares the rest first (dl_session_prepare_rest). */
int dl_micro_batch_prepare_from(const dl_session *s);
/* Makes the session of a part, p (at batch n / parts), run the whole batch in `parts` parts. */
dl_status dl_session_make_parts(dl_session *p, int64_t parts, dl_error *err);
/* DL_OK if inputs are dense host tensors of want's shapes and dtypes (a whole batch's), else an
 * error saying the session runs `how` ("its batch in parts"). */
dl_status dl_session_check_host_inputs(const dl_session *s, const dl_tensor *want, const dl_tensor *inputs,
                                       int n_inputs, const char *how, dl_error *err);
/* The most parts a run takes at once (dl_session_options.parts_at_once) */
#define DL_PARTS_AT_ONCE_MAX 64
/* A session of the batch in `parts` parts (opt: a part's options: its batch and micro_batch, the
 * images of a part) that runs them `at_once` at a time, each on threads / at_once of ctx's threads
 * (at least 1): its plan built at_once times, on a context of ctx's host backends at that thread
 * count (dl_context_host_twin), which the session owns. */
dl_status dl_session_create_at_once(dl_context *ctx, dl_model *m, const dl_session_options *opt, int64_t parts,
                                    int at_once, dl_session **out, dl_error *err);
/* dl_session_run of a session in parts. */
dl_status dl_session_run_parts(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err);
void dl_session_parts_free(dl_session *s);

/* ---- batch_prefix.c ---- */
/* node -> the one activation that nodes up to it produce and later nodes read (the cut after it),
 * or -1 (none, several, a model input read later, or a model output); malloc'd, n_nodes entries. */
int *dl_prefix_cuts(const dl_graph *g);
/* Attaches p (a session of `parts`-th of w's batch) as w's prefix up to node cut: 0 and nothing
 * attached where the cut does not hold in both plans (fusion across it, the crossing value stored
 * in other formats or off the host). */
int dl_prefix_attach(dl_session *w, dl_session *p, int64_t parts, int cut, const int *cuts);
/* The cut (into *cut, -1 for none) that prices a run with the prefix lowest, and that price in ms:
 * p's steps before it (step_ms_p, a whole run's over the parts) plus w's after it (step_ms_w),
 * plus handing the value over; INFINITY where no cut holds. One pass over the model. */
double dl_prefix_best(const dl_session *w, const dl_session *p, const int *cuts, const double *step_ms_w,
                      const double *step_ms_p, int *cut);
/* dl_session_run of a session with a prefix. */
dl_status dl_session_run_prefixed(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err);
/* Once w keeps its prefix for good: each of the two sessions keeps only what the steps it runs
 * need (the prefix's up to the cut, w's after it): its memory planned again over those steps and
 * the other steps' kernels released. Nothing changes where the new plan cannot be allocated. From
 * then on w runs only with its prefix. */
dl_status dl_prefix_trim(dl_session *w, dl_error *err);

/* ---- concat_elide.c ---- */
/* After the steps are built, before the memory plan: each concat whose inputs can be written
 * straight into its output gets their slots as slices of its own (dl_slot.within) and becomes a
 * DL_STEP_ELIDED step. Off with no_fuse. */
void dl_elide_concats(dl_session *s);

/* ---- layout_view.c ---- */
/* Transposes that are views of a layout: channels-last [N, C, H, W] is row-major [N, H, W, C] in
 * memory (perm 0, 2, 3, 1), and back (perm 0, 3, 1, 2). */
enum { DL_VIEW_NONE = 0, DL_VIEW_TO_ROWS = 1, DL_VIEW_TO_CL = 2 };
/* Which of the two node i is (a 4-D float activation some op writes, transposed so), or NONE;
 * always NONE under no_fuse. */
int dl_layout_view_of(const dl_session *s, int i);
/* 1 if a plan under layout ask `ask` stores a TO_CL view's output channels-last: the asks that put
 * the host's convs channels-last. */
int dl_layout_view_ask(int ask);
/* After the steps are built, before concats are elided: each layout view's input becomes a slice
 * of its output (dl_slot.within) and its step DL_STEP_ELIDED. */
void dl_elide_views(dl_session *s);

/* ---- session_plan.c ---- */
/* The arena alignment of domain d's slots: 64 bytes in host memory, 256 in a device's. */
size_t dl_plan_align(int d);
/* Memory-plan slots: add one for value (or -1: a workspace) in place p, first written at step
 * `first`; find a value's slot (-1 if none); extend a slot's life to `step`. */
int dl_slot_add(dl_session *s, int value, int place, size_t size, int first);
int dl_slot_find(const dl_session *s, int value, int place);
void dl_slot_use(dl_session *s, int slot, int step);
/* Host memory held outside the arena and the weights placement copied: the seeded, copied and
 * folded weights (host_weights), plus the caller's copies of the inputs (host_held, with
 * reserve_inputs). */
size_t dl_session_host_weights(const dl_session *s);
/* The bytes domain d may use: --max-memory, or what the domain has free if less (0: unknown);
 * *what says which ("--max-memory" or "free memory"). */
size_t dl_session_budget(const dl_session *s, int d, const char **what);
size_t dl_session_host_held(const dl_session *s);
/* Before weights are drawn: refuses `seeded` more bytes of host memory (dl_weights_seeded_bytes)
 * when they and what is held already pass the budget (--max-memory or the free memory). */
dl_status dl_session_check_weights(const dl_session *s, size_t seeded, dl_error *err);
/* Plans every domain's arena (offsets only) and refuses one that does not fit: activations and
 * scratch, weights placed there, and for the host what dl_session_host_held counts. */
dl_status dl_session_check_memory(dl_session *s, dl_error *err);
/* Plans every domain's arena, refuses what does not fit, allocates and points buffers into it. */
dl_status dl_session_plan_memory(dl_session *s, dl_error *err);
/* session.c. After the plan: every step's tensors carry the data pointers the run needs. */
void dl_session_point_steps(dl_session *s);
#endif
