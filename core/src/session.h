/* session.h — internals shared by the session modules. A session is built in stages, each
 * producing its own part of the session from the read-only model and the earlier parts:
 *
 *   shapes at its batch (shape.c) -> weights (weights.c) -> batchnorm folding (fuse.c)
 *   -> placement (placement.c) -> relu fusion (fuse.c) -> steps and copies (session.c)
 *   -> kernels prepared -> memory plan (session_plan.c) -> run
 */
#ifndef DLRUN_SESSION_H
#define DLRUN_SESSION_H
#include "context.h"
#include "graph.h"
#include "weights.h"

struct dl_model {
    dl_graph *g; /* read-only once loaded: sessions share it */
};

#define DL_MAX_DOMAINS 8
/* s->buf's entry for value v in domain d: its storage there, or NULL */
#define BUF(s, v, d) ((s)->buf[(size_t)(v)*DL_MAX_DOMAINS + (size_t)(d)])

/* A memory domain in use by the session; domain 0 is always host memory (owned by the core). */
typedef struct dl_domain {
    dl_device device;
    const dl_backend *be; /* allocates and copies for this domain; NULL for the host */
} dl_domain;

typedef struct dl_step {
    dl_step_kind kind;
    int node;             /* OP / FUSED: node index; COPY: -1 */
    int value;            /* COPY: value index moved */
    const dl_backend *be; /* OP: where it runs */
    int dom;              /* OP: the backend's domain; COPY: destination domain */
    int src_dom;          /* COPY: source domain */
    void *staging;        /* COPY between two devices: host staging buffer */
    size_t bytes;         /* COPY: bytes moved */
    int ws_slot;          /* OP: memory-plan slot of its workspace, or -1 */
    void *ws;             /* OP: its workspace inside the domain's arena */
    dl_kernel *kernel;
    dl_op op;
    dl_op_attrs attrs;       /* the node's attributes plus fusion */
    dl_tensor *in;           /* op.n_inputs tensors with data in the domain */
    unsigned char *constant; /* per input: 1 for a weight (given to the backend at prepare) */
    dl_tensor out;
    size_t workspace;
    char *label; /* COPY: "cpu->cuda"; FUSED: "into <layer>" */
    double flops;
    double last_ms, total_ms;
    int64_t runs;
} dl_step;

/* A buffer the memory plan places: value `value`'s storage in domain `dom`, or an op's workspace
 * (value -1). Steps are indices into the session's steps; -1 is "before the run", n_steps "after". */
typedef struct dl_slot {
    int value, dom;
    size_t size;
    int first, last;
    int share; /* slot whose storage this one takes over in place, or -1 */
    size_t offset;
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
    const float **weight; /* value -> host weights folding computed (NULL: the bound ones) */
    float **owned;        /* what folding allocated */
    int n_owned;
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
    char *cache_path;
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
    void **buf;           /* buf[value * DL_MAX_DOMAINS + dom]: the value's storage there */
    unsigned char *owned; /* same index: 1 if the session allocated it */
    int *alias;           /* value -> value whose storage it shares (fused relu), or itself */
    int *node_dom;        /* node -> domain it runs in */
    dl_step *steps;
    int n_steps, cap_steps;
    dl_slot *slots; /* planned buffers */
    int n_slots, cap_slots;
    int *slot_of; /* value * DL_MAX_DOMAINS + dom -> slot index + 1 (0: none) */
    dl_domain_memory mem[DL_MAX_DOMAINS];
    dl_tensor *inputs;  /* descriptors of model inputs (host) */
    dl_tensor *outputs; /* model outputs (host), data in buf[...][0] */
    int profiling;
};

/* ---- session.c ---- */
/* Bytes of value v at the session's shapes. */
size_t dl_session_value_bytes(const dl_session *s, int v);
/* Host data of weight v as this session runs it: folded, else bound. */
const float *dl_session_weight(const dl_session *s, int v);
/* The values node `node` takes as inputs in this session: its own, then the extra input fusion
 * gave it, if any. Returns the count (at most the node's n_inputs + 1). */
int dl_session_node_inputs(const dl_session *s, int node, int *ins);
/* The dl_op view of node n in this session, with the given attributes (`in` needs room for the
 * node's inputs + 1). */
void dl_session_op_view(const dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op, dl_tensor *in,
                        dl_tensor *out);
/* 1 if backend be accepts node `node` with these attributes (ABI version and supports()). */
int dl_session_accepts(const dl_session *s, const dl_backend *be, int node, const dl_op_attrs *attrs, dl_error *why);
dl_status dl_session_alloc(dl_session *s, int dom, size_t bytes, void **p, dl_error *err);
int dl_session_root(const dl_session *s, int value);
void dl_format_bytes(double bytes, char *buf, size_t len);

/* ---- fuse.c ---- */
/* Folds each batchnorm into the conv2d before it where that conv's output feeds only the
 * batchnorm and all their parameters are constants: the conv's weights become session-owned
 * scaled copies, the batchnorm a fused step. Off with no_fuse. Fills s->fuse. */
dl_status dl_fold_batchnorm(dl_session *s, dl_error *err);
/* After placement: each relu whose input comes only from a conv2d, linear, add or batchnorm on
 * the same backend, which accepts the fused op, runs as that op's epilogue. Off with no_fuse. */
void dl_fuse_relu(dl_session *s);
void dl_fusion_free(dl_fusion *f);

/* ---- placement.c ---- */
/* Chooses a backend for every node not folded away (measuring where needed) into *out; reads
 * the session's shapes, weights and fusion, writes nothing else. */
dl_status dl_place(const dl_session *s, dl_placement *out, dl_error *err);
void dl_placement_free(dl_placement *p);

/* ---- session_plan.c ---- */
/* Memory-plan slots: add one for value (or -1: a workspace) in dom, first written at step
 * `first`; find a value's slot (-1 if none); extend a slot's life to `step`. */
int dl_slot_add(dl_session *s, int value, int dom, size_t size, int first);
int dl_slot_find(const dl_session *s, int value, int dom);
void dl_slot_use(dl_session *s, int slot, int step);
/* Plans every domain's arena, refuses what does not fit, allocates and points buffers into it. */
dl_status dl_session_plan_memory(dl_session *s, dl_error *err);
#endif
