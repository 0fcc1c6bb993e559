/* graph.h — the in-memory model: values (tensors) and nodes (layers) in execution order.
 *
 * Built by the YAML reader (model_yaml.c), which infers every shape at the file's batch and then
 * never changes it again: a loaded model is read-only, so any number of sessions may share it.
 * Each session derives its own shapes (shape.c), weights, fusions and placement. Nodes are stored
 * in the order the model file lists them, which the reader checks is a valid execution order
 * (every input defined before use, so no cycles). What each op kind means is in core/ops/. */
#ifndef DLRUN_GRAPH_H
#define DLRUN_GRAPH_H

#include "dlrun/plugin.h"
#include "image.h"
#include "names.h"
#include "op_table.h"

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
    char *name; /* activations: the producing layer's name; weights: "layer.weight" etc. */
    dl_value_kind kind;
    dl_shape shape; /* at the model file's batch */
    dl_dtype dtype; /* f32 for every value in this version */
    int producer;   /* node index for activations, -1 otherwise */
    int fan_in;     /* weights: fan-in for Kaiming-uniform init (0 = not a conv/linear param) */
    int init;       /* weights: dl_init for seeded init */
    int constant;   /* a weight declared under `constants:`, which layers may name as an input */
    dl_srcloc loc;
} dl_value;

#define DL_MAX_NODE_INPUTS 68 /* 64 activations (concat) + at most 4 weights */
/* Inputs of an op as a session runs it: a node's, plus the bias a folded batchnorm gives a conv
 * and a fused residual (fuse.c). */
#define DL_MAX_OP_INPUTS (DL_MAX_NODE_INPUTS + 2)

typedef struct dl_node {
    char *name; /* unique layer name */
    dl_op_kind kind;
    dl_op_params params; /* attributes as declared (axis made non-negative) */
    int n_inputs;        /* activations first, then the layer's weights in the ABI's order */
    int *inputs;         /* value indices */
    int output;          /* value index of the node's single output */
    char *backend;       /* `backend:` pin from the YAML, or NULL */
    dl_srcloc loc;       /* the layer's mapping in the file */
} dl_node;

typedef struct dl_graph {
    char *name;         /* `model:` */
    char *path;         /* the YAML file, as given */
    char *weights_path; /* `weights:` resolved relative to the YAML file, or NULL */
    dl_value *values;
    int n_values, cap_values;
    dl_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs; /* value indices of model inputs */
    int n_inputs;
    int *outputs; /* value indices of model outputs */
    int n_outputs;
    dl_preprocess pre; /* `preprocess:` (all zero when absent: the defaults) */
    char **labels;     /* `labels:`: one class name per index of the first output's dimension 1 */
    int n_labels;      /* 0 when the model has none */
    /* Indexes, so that no look-up scans the model (a model may have 10^5 layers): */
    dl_names value_names;     /* value name -> its index, kept by dl_graph_add_value */
    int *reader_start;        /* dl_graph_index: value v is read by the node inputs listed in */
    int *reader_node;         /* reader_node[reader_start[v] .. reader_start[v + 1]) (node indices) */
    unsigned char *is_output; /* dl_graph_index: per value, 1 if it is one of the model's outputs */
} dl_graph;

dl_graph *dl_graph_new(void);
void dl_graph_free(dl_graph *g);
/* Append a value / node; return its index, or -1 when out of memory. Strings are copied. */
int dl_graph_add_value(dl_graph *g, const char *name, dl_value_kind kind, dl_srcloc loc);
int dl_graph_add_node(dl_graph *g, const char *name, dl_op_kind kind, dl_srcloc loc);
/* Index of the value with this name, or -1 (a hash look-up). */
int dl_graph_find_value(const dl_graph *g, const char *name);
/* Once the nodes, their inputs and the outputs are final: the per-value readers and output flags
 * that the two calls below read in constant time (without it they scan the graph). The YAML
 * reader calls it last; 0 when out of memory. */
int dl_graph_index(dl_graph *g);
/* How many node inputs read value v (a node reading it twice counts twice). */
int dl_graph_consumers(const dl_graph *g, int v);
/* 1 if v is one of the model's outputs, else 0. */
int dl_graph_is_output(const dl_graph *g, int v);

/* "file:line:col: " prefix for messages about something declared at loc. */
void dl_graph_where(const dl_graph *g, dl_srcloc loc, char *buf, size_t len);

/* Every value's shape for a batch size (0 keeps the file's), into shapes[n_values]: the model's
 * inputs at that batch, weights from their layers, each node's output from its row in the op
 * table. Writes nothing into g. Errors name the layer, file, line and column. (shape.c) */
dl_status dl_graph_infer(const dl_graph *g, int64_t batch, dl_shape *shapes, dl_error *err);

/* The dl_op a backend is shown for node n (nodeop.c): the node's inputs (ins[0..n_in), which may
 * differ from its own when fusion added one), shapes from `shapes`, host device, no data.
 * `in` needs room for n_in tensors. */
void dl_node_op(const dl_graph *g, int n, const int *ins, int n_in, const dl_shape *shapes, const dl_op_attrs *attrs,
                int precision, dl_op *op, dl_tensor *in, dl_tensor *out);
#endif
