/* graph.h — the in-memory model: values (tensors) and nodes (ops) in execution order.
 *
 * Filled by the YAML reader (model_yaml.c), typed by shape inference (shape.c), given weight data
 * by weights.c, then placed and run by session.c. Nodes are stored in the order the model file
 * lists them, which the reader checks is a valid execution order (every input defined before use,
 * so no cycles). */
#ifndef DLRUN_GRAPH_H
#define DLRUN_GRAPH_H

#include "dlrun/plugin.h"

#define DL_MAX_DIMS 8

/* Where in the model file something was declared, for error messages. */
typedef struct dl_srcloc {
    int line; /* 1-based; 0 when unknown */
    int col;  /* 1-based */
} dl_srcloc;

typedef enum dl_value_kind {
    DL_VALUE_INPUT = 0,      /* a model input, fed by the user */
    DL_VALUE_ACTIVATION = 1, /* produced by a node */
    DL_VALUE_WEIGHT = 2      /* a constant parameter, bound from safetensors or seeded init */
} dl_value_kind;

typedef struct dl_value {
    char *name;       /* activations: the producing layer's name; weights: "layer.weight" etc. */
    dl_value_kind kind;
    int32_t ndim;
    int64_t shape[DL_MAX_DIMS];
    dl_dtype dtype;   /* f32 for every value in this version */
    int producer;     /* node index for activations, -1 otherwise */
    int fan_in;       /* weights: fan-in for Kaiming-uniform init (0 = not a conv/linear param) */
    int init;         /* weights: DL_INIT_* for seeded init */
    int constant;     /* a weight declared under `constants:`, which layers may name as an input */
    float *data;      /* weights: host f32 data once bound (owned by the weight store) */
    dl_srcloc loc;
} dl_value;

/* Seeded initialisation rules, as PyTorch initialises each parameter. */
enum {
    DL_INIT_KAIMING_UNIFORM = 0, /* conv/linear weight: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    DL_INIT_FAN_IN_UNIFORM = 1,  /* conv/linear bias: same bound from the weight's fan-in */
    DL_INIT_ONES = 2,            /* batchnorm weight (gamma), running_var */
    DL_INIT_ZEROS = 3,           /* batchnorm bias (beta), running_mean */
    DL_INIT_UNIFORM = 4          /* a model constant (`constants:`): U(-1, 1) */
};

#define DL_MAX_NODE_INPUTS 68 /* 64 activations (concat) + at most 4 weights */

typedef struct dl_node {
    char *name;          /* unique layer name */
    dl_op_kind kind;
    dl_op_attrs attrs;
    int out_channels;    /* conv2d `filters`, linear `units`; 0 otherwise */
    int has_bias;        /* conv2d, linear */
    int n_inputs;        /* activations first, then weights in the ABI's order */
    int *inputs;         /* value indices */
    int output;          /* value index of the node's single output */
    char *backend;       /* `backend:` pin from the YAML, or NULL */
    int reshape_nd;      /* reshape: the `shape:` as written (one -1 may stand for the rest) */
    int64_t reshape[DL_MAX_DIMS];
    dl_srcloc loc;       /* the layer's mapping in the file */
} dl_node;

typedef struct dl_graph {
    char *name;          /* `model:` */
    char *path;          /* the YAML file, as given */
    char *weights_path;  /* `weights:` resolved relative to the YAML file, or NULL */
    dl_value *values;
    int n_values, cap_values;
    dl_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs;         /* value indices of model inputs */
    int n_inputs;
    int *outputs;        /* value indices of model outputs */
    int n_outputs;
} dl_graph;

dl_graph *dl_graph_new(void);
void dl_graph_free(dl_graph *g);
/* Append a value / node; return its index, or -1 when out of memory. Strings are copied. */
int dl_graph_add_value(dl_graph *g, const char *name, dl_value_kind kind, dl_srcloc loc);
int dl_graph_add_node(dl_graph *g, const char *name, dl_op_kind kind, dl_srcloc loc);
/* Index of the value with this name, or -1. */
int dl_graph_find_value(const dl_graph *g, const char *name);
/* How many node inputs read value v; 1 if v is one of the model's outputs, else 0. */
int dl_graph_consumers(const dl_graph *g, int v);
int dl_graph_is_output(const dl_graph *g, int v);
/* Default attributes for an op kind (stride 1, dilation 1, groups 1, eps 1e-5, ...). */
void dl_attrs_default(dl_op_attrs *a, dl_op_kind kind);

/* Names of op kinds as written in the YAML ("conv2d"), and back (-1 if unknown). */
const char *dl_op_kind_name(dl_op_kind kind);
int dl_op_kind_from_name(const char *name);

/* "file:line:col: " prefix for messages about something declared at loc. */
void dl_graph_where(const dl_graph *g, dl_srcloc loc, char *buf, size_t len);

/* Infer every activation's and weight's shape for the given batch size (0 keeps the file's).
 * Errors name the layer, file, line and column. Implemented in shape.c. */
dl_status dl_graph_infer_shapes(dl_graph *g, int64_t batch, dl_error *err);

/* "[1, 3, 224, 224]" */
void dl_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);
int64_t dl_value_numel(const dl_value *v);

/* Floating-point operations of one node (multiply-add counts 2), for GFLOP/s in profiles. */
double dl_node_flops(const dl_graph *g, const dl_node *n);

#endif
