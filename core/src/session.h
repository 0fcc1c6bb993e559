/* session.h — internals shared by the session modules: steps, memory domains, placement. */
#ifndef DLRUN_SESSION_H
#define DLRUN_SESSION_H
#include "context.h"
#include "graph.h"
#include "weights.h"

struct dl_model {
    dl_graph *g;
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
    dl_op_attrs attrs;    /* the node's attributes plus fusion */
    dl_tensor *in;        /* op.n_inputs tensors with data in the domain */
    dl_tensor out;
    size_t workspace;
    char *label;          /* COPY: "cpu->cuda"; FUSED: "into <layer>" */
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

/* Placement's record of one node's candidates (placement.c). */
typedef struct dl_node_choice {
    int n;
    dl_placement_candidate cand[16];
} dl_node_choice;

struct dl_session {
    dl_context *ctx;
    dl_model *model;
    dl_graph *g;
    dl_weights *weights;
    dl_session_options opt;
    dl_domain doms[DL_MAX_DOMAINS];
    int n_doms;
    void **buf;           /* buf[value * DL_MAX_DOMAINS + dom]: the value's storage there */
    unsigned char *owned; /* same index: 1 if the session allocated it */
    int *alias;           /* value -> value whose storage it shares (fused relu), or itself */
    int *node_dom;        /* node -> domain it runs in */
    dl_op_attrs *node_attrs; /* node -> attributes as run (graph's plus a fused activation) */
    int *fused_into;      /* node -> node it was folded into (a relu after conv), or -1 */
    int *extra_input;     /* node -> value appended to its inputs (the bias a folded batchnorm gave
                             a conv that had none), or -1 */
    float **folded;       /* host weights the session computed (folding), freed with it */
    int n_folded;
    const dl_backend **node_be;
    dl_step *steps;
    int n_steps, cap_steps;
    dl_slot *slots;       /* planned buffers */
    int n_slots, cap_slots;
    int *slot_of;         /* value * DL_MAX_DOMAINS + dom -> slot index + 1 (0: none) */
    dl_domain_memory mem[DL_MAX_DOMAINS];
    dl_tensor *inputs;    /* descriptors of model inputs (host) */
    dl_tensor *outputs;   /* model outputs (host), data in buf[...][0] */
    int profiling;
    dl_node_choice *choice; /* per node */
    int timed, cached;      /* op timings measured now / taken from the cache */
    char *cache_path;
};

/* Memory-plan slots (session_plan.c): add one for value (or -1: a workspace) in dom, first
 * written at step `first`; find a value's slot (-1 if none); extend a slot's life to `step`. */
int dl_slot_add(dl_session *s, int value, int dom, size_t size, int first);
int dl_slot_find(const dl_session *s, int value, int dom);
void dl_slot_use(dl_session *s, int slot, int step);
/* Plans every domain's arena, refuses what does not fit, allocates and points buffers into it. */
dl_status dl_session_plan_memory(dl_session *s, dl_error *err);
/* session.c helpers the planner uses. */
dl_status dl_session_alloc(dl_session *s, int dom, size_t bytes, void **p, dl_error *err);
int dl_session_root(const dl_session *s, int value);
void dl_format_bytes(double bytes, char *buf, size_t len);

/* Chooses a backend for every node (placement.c). Fills s->node_be and sets fused relus. */
dl_status dl_place(dl_session *s, dl_error *err);
/* The values node `node` takes as inputs in this session: its own, then extra_input if any.
 * Returns the count (at most the node's n_inputs + 1). */
int dl_session_node_inputs(const dl_session *s, int node, int *ins);
/* Folds each batchnorm into the conv2d before it where that conv's output feeds only the
 * batchnorm and all their parameters are constants (fold.c): the conv's weights become
 * session-owned scaled copies, the batchnorm a fused step. Off with no_fuse. */
dl_status dl_fold_batchnorm(dl_session *s, dl_error *err);
/* Builds the dl_op view of node n with the given attributes (tensors without data; `in` needs
 * room for the node's inputs + 1). */
void dl_session_op_view(dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op,
                        dl_tensor *in, dl_tensor *out);
#endif
