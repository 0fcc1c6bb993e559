/* op_table.h — the op table: one row per op kind with everything dlrun knows about the op (its
 * name, YAML attributes and defaults, inputs and weights, shape inference, FLOPs, elementwise /
 * in place, fusable activation, the ABI version that added it, check thresholds, test-ops cases).
 *
 * Compiled into libdlrun and into every in-tree plugin (plugins link nothing of the core), so the
 * host's shape inference and a plugin's exact supports() check run the same function per op: what
 * the host infers, the plugins accept. docs/adding-an-op.md lists what a new op touches. */
#ifndef DLRUN_OP_TABLE_H
#define DLRUN_OP_TABLE_H
#include <stddef.h>

#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_MAX_DIMS 8

/* A tensor shape: ndim sizes, row-major. */
typedef struct dl_shape {
    int32_t ndim;
    int64_t d[DL_MAX_DIMS];
} dl_shape;

/* A list of integers as a layer gives it (`perm: [0, 2, 1]`): n of them. */
#define DL_MAX_INTS 16
typedef struct dl_ints {
    int32_t n;
    int64_t v[DL_MAX_INTS];
} dl_ints;

/* What a layer declares: the ABI's attributes plus what only the model format knows. */
typedef struct dl_op_params {
    dl_op_attrs attrs; /* what a backend is shown */
    int32_t units;     /* conv2d `filters`, linear `units`: the first weight's leading size */
    int32_t has_bias;  /* conv2d, linear `bias`: the optional weight exists */
    dl_shape reshape;  /* reshape `shape`: sizes, 0 (the input's size there) or one -1 */
    /* Integer lists as given, before the row's `complete` moves them into attrs and shape
     * inference checks them against the input's rank: */
    dl_ints perm;                      /* transpose */
    dl_ints axes, starts, ends, steps; /* slice; axes also reduce_* */
    dl_ints pads;                      /* pad: 2 * rank */
    dl_ints size;                      /* resize: [oh, ow] */
} dl_op_params;

/* ---- the parts of a row ---- */

typedef enum dl_attr_type {
    DL_ATTR_INT,      /* an integer in [lo, hi] */
    DL_ATTR_PAIR,     /* an integer or [h, w], each >= lo; an int32_t[2] */
    DL_ATTR_PADDING,  /* 1, 2 or 4 integers >= 0: all sides, [h, w] or [top, left, bottom, right] */
    DL_ATTR_TRIPLE,   /* an integer or [d, h, w], each >= lo; an int32_t[3] */
    DL_ATTR_PADDING3, /* 1, 3 or 6 integers >= 0: all sides, [d, h, w] or [front, top, left, back,
                         bottom, right]; an int32_t[6] (pad_begin3 then pad_end3) */
    DL_ATTR_BOOL,     /* true or false; an int32_t */
    DL_ATTR_FLOAT,    /* a finite number in [lo, hi], bounds excluded per DL_ATTR_OPEN_*; a float */
    DL_ATTR_DIMS,     /* 1 to 8 sizes, each >= 0 or one -1; a dl_shape */
    DL_ATTR_INTS,     /* 0 to hi integers, each >= lo; a dl_ints */
    DL_ATTR_ENUM      /* one of the names in `choices`; its index as an int32_t */
} dl_attr_type;

enum {
    DL_ATTR_REQUIRED = 1, /* the layer must give it */
    DL_ATTR_OPEN_LO = 2,  /* float: lo itself is not allowed */
    DL_ATTR_OPEN_HI = 4,  /* float: hi itself is not allowed */
    DL_ATTR_IGNORED = 8   /* read and checked, stored nowhere (dropout's rate at inference) */
};

#define DL_ATTR_AT(member) ((uint16_t)offsetof(dl_op_params, member))

/* One YAML key of a layer. */
typedef struct dl_attr_def {
    const char *key;            /* as written in YAML */
    uint8_t type;               /* dl_attr_type */
    uint8_t flags;              /* DL_ATTR_* */
    uint16_t offset;            /* where it goes in dl_op_params (DL_ATTR_AT) */
    double lo, hi;              /* bounds (INT, FLOAT; lo for PAIR) */
    double def;                 /* default when absent (every int of a PAIR or PADDING takes it) */
    const char *what;           /* its name in messages, if not the key ("dropout rate") */
    const char *const *choices; /* ENUM: the names, NULL-terminated; def is the default's index */
} dl_attr_def;

/* How a seeded weight is drawn, as PyTorch initialises the parameter. */
typedef enum dl_init {
    DL_INIT_KAIMING_UNIFORM = 0, /* conv/linear weight: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    DL_INIT_FAN_IN_UNIFORM = 1,  /* conv/linear bias: same bound from the layer weight's fan-in */
    DL_INIT_ONES = 2,            /* batchnorm weight (gamma), running_var */
    DL_INIT_ZEROS = 3,           /* batchnorm bias (beta), running_mean */
    DL_INIT_UNIFORM = 4          /* a model constant (`constants:`): U(-1, 1) */
} dl_init;

/* A weight a layer owns, named "<layer>.<suffix>", after its activation inputs. */
typedef struct dl_weight_def {
    const char *suffix;
    uint8_t init;     /* dl_init */
    uint8_t optional; /* present only when params.has_bias */
} dl_weight_def;

/* A `dlrun test-ops` case: random inputs of the given shapes through one layer. */
typedef struct dl_op_case {
    const char *name;
    const char *inputs; /* YAML list of the activation inputs' shapes: "[[1, 3, 11, 13]]" */
    const char *attrs;  /* YAML flow-mapping body of the layer's attributes ("" for none) */
    float scale;        /* activations drawn from U(-scale, scale) */
    float lo;           /* when not 0: from U(lo, scale) instead (sqrt and log want positive x) */
    int residual;       /* 1: run with a residual add and a relu fused (attrs.residual, ABI 1.8),
                           the residual drawn as the activations are */
} dl_op_case;

/* What shape inference knows beyond the op: the layer (model side only) and input names. */
typedef struct dl_infer_ctx {
    const dl_op_params *params; /* the layer's, or NULL in a plugin (only the op is known) */
    const char *const *names;   /* each input's value name for messages, or NULL */
} dl_infer_ctx;

enum {
    DL_OPF_ELEMENTWISE = 1, /* output element i depends on input 0's element i only, and has its
                               size: a kernel reading element i before writing it runs in place */
    DL_OPF_FUSES_RELU = 2,  /* accepts activation = DL_ACT_RELU (a relu fused after it); from ABI
                               1.4 the other activations too, where the backend says so */
    DL_OPF_AXIS = 4,        /* attrs.axis is stored non-negative once the input's rank is known */
    DL_OPF_RESIDUAL = 8     /* accepts attrs.residual (ABI 1.8): a residual add fused after it */
};

typedef struct dl_op_def {
    const char *name;             /* in YAML and messages */
    uint32_t abi_minor;           /* the ABI 1.x that added the kind */
    uint32_t flags;               /* DL_OPF_* */
    int min_inputs, max_inputs;   /* activation inputs a layer names */
    const dl_weight_def *weights; /* the layer's own weights, ending with {0}; NULL: none */
    const dl_attr_def *attrs;     /* YAML keys besides name, op, inputs, backend, ending with {0} */
    double nmse[4];               /* `dlrun check` threshold on NMSE per dl_precision */
    const dl_op_case *cases;      /* test-ops cases, ending with {0} */
    /* Optional: defaults that depend on what was given (`given`: bit i set = attrs[i] given). */
    void (*complete)(dl_op_params *p, uint32_t given);
    /* Optional: checks across keys; 0 with a message and the key to point at. */
    int (*validate)(const dl_op_params *p, const char **key, char *msg, size_t len);
    /* Optional: the shapes of the layer's weights (in weights order, present ones only) from its
     * parameters and its first input's shape. */
    void (*weight_shapes)(const dl_op_params *p, const dl_shape *x, dl_shape *w);
    /* The output shape from the op's input shapes and attributes; 0 with the reason otherwise.
     * Checks everything a kernel relies on. cx may be NULL. */
    int (*infer)(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why);
    /* Floating-point operations of one run (a multiply-add counts 2), for GFLOP/s. */
    double (*flops)(const dl_op *op);
    /* Optional: the ABI minor this instance needs when above abi_minor (attribute meanings added
     * later, e.g. maxpool dilation in 1.2). */
    uint32_t (*abi_minor_of)(const dl_op *op);
    /* Activation inputs that hold integers (bit i: input i is DL_I64: gather's indices); every
     * other tensor is floating point. */
    uint32_t int_inputs;
    /* Optional: attributes that follow from the first input's rank (transpose's default perm),
     * set once the model's shapes are known; infer sees them unresolved before that. */
    void (*resolve)(dl_op_params *p, int rank);
} dl_op_def;

/* Check thresholds (f32, tf32, f16, bf16) of the three kinds of op. docs/check.md explains them. */
#define DL_NMSE_GEMM \
    { 1e-8, 1e-5, 1e-4, 1e-3 } /* long dot products: conv, linear, matmul */
#define DL_NMSE_EXACT \
    { 1e-12, 1e-12, 1e-6, 1e-4 } /* exact in f32: only narrower storage rounds */
#define DL_NMSE_ROUNDING \
    { 1e-10, 1e-10, 1e-6, 1e-4 } /* sums and transcendental functions */

/* ---- the table ---- */

/* The row of a kind, or NULL for a kind this build does not know. */
const dl_op_def *dl_op_def_of(int kind);
/* The kind with this YAML name, or -1. */
int dl_op_kind_from_name(const char *name);
/* "conv2d", or "unknown". */
const char *dl_op_kind_name(int kind);
/* "conv2d, relu, ..." for messages. */
void dl_op_names(char *buf, size_t len);
/* How many weights a layer of this row owns with these parameters (optional ones when has_bias). */
int dl_op_weight_count(const dl_op_def *d, const dl_op_params *p);
/* Bytes of dl_op_attrs that ABI 1.minor defines. */
size_t dl_op_attrs_size(uint32_t minor);
/* The ABI minor version an op instance needs. */
uint32_t dl_op_min_minor(const dl_op *op);
/* Threshold of `dlrun check` for a kind at a precision. */
double dl_op_nmse(int kind, int precision);
/* Parameters before any YAML key is read: the ABI's neutral attributes (stride 1, ...). */
void dl_op_params_default(dl_op_params *p);

/* ---- shapes: helpers the rows share ---- */

void dl_shape_of(const dl_tensor *t, dl_shape *s);
int dl_shape_eq(const dl_shape *a, const dl_tensor *t);
int64_t dl_shape_numel(const dl_shape *s);
/* The most elements one tensor may have (docs/model-format.md, "Limits"; at most 2^37 bytes in
 * any dtype): a shape past it is bad input. It keeps every size computed from a shape (bytes,
 * strides, offsets, sums of tensors) far from overflowing 64 bits; a model that needs more memory
 * than the machine has is refused later, by the memory plan. */
#define DL_MAX_TENSOR_ELEMENTS ((int64_t)1 << 34)
/* Elements of the dims d[0..ndim) into *n with checked multiplication: 1 if every dim is >= 0 and
 * the count is at most DL_MAX_TENSOR_ELEMENTS, else 0 (and *n = -1): never overflows. */
int dl_dims_numel(const int64_t *d, int ndim, int64_t *n);
/* "[1, 3, 224, 224]" */
void dl_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);
/* Output size of a conv/pool window along one axis (PyTorch's rule); < 1 if it does not fit. */
int64_t dl_window_out(int64_t in, int k, int s, int pb, int pe, int d, int ceil_mode);
/* ONNX Slice along a dimension of size n: the number of elements taken (0: none), and in
 * *first the index of the first one; later ones are step apart. Negative start/end count from the
 * end; out-of-range values are clamped; step 0 takes none. */
int64_t dl_slice_dim(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first);
/* axis (negative counts from the end) as a dimension in [0, ndim), or -1 when out of range. */
int dl_axis_norm(int64_t axis, int ndim);
/* numpy broadcasting of a and b (aligned at the last dimension) into y; 0 if they do not. */
int dl_broadcast(const int64_t *as, int an, const int64_t *bs, int bn, dl_shape *y);
/* 1 if t broadcasts (numpy rules, aligned at the last dimension) to y's shape */
int dl_broadcasts_to(const dl_tensor *t, const dl_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
