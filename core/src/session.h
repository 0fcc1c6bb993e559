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
    const dl_backend **node_be;
    dl_step *steps;
    int n_steps, cap_steps;
    void **workspace;     /* per domain: scratch for the ops placed there */
    size_t *workspace_size;
    dl_tensor *inputs;    /* descriptors of model inputs (host) */
    dl_tensor *outputs;   /* model outputs (host), data in buf[...][0] */
    int profiling;
};

/* Chooses a backend for every node (placement.c). Fills s->node_be and sets fused relus. */
dl_status dl_place(dl_session *s, dl_error *err);
/* Builds the dl_op view of node n with the given attributes (tensors without data). */
void dl_session_op_view(dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op,
                        dl_tensor *in, dl_tensor *out);
#endif
