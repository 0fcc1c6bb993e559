/* dlrun/plugin.h — the operator ABI: the one header a backend plugin compiles against.
 *
 * A plugin is a shared object that exports one symbol, `dl_plugin_init` (see DL_PLUGIN_ENTRY).
 * The host (libdlrun) calls it with a dl_host table; the plugin returns a dl_backend table that it
 * owns. Rules that keep old plugins working (as SQLite's VFS and ggml's backends do):
 *   - every struct starts with its version and size; the host checks them before anything else;
 *   - tables only grow by appending members; a member the reader's struct_size does not cover is
 *     treated as absent;
 *   - members marked "optional" may be NULL and the host checks before calling;
 *   - a plugin of another MAJOR version is refused with a one-line reason, never called.
 * Tensors are described DLPack-style (dl_tensor has DLTensor's exact layout), so a plugin can hand
 * them to any DLPack consumer. The header includes only C standard headers.
 * docs/plugins.md walks through writing a plugin; plugins/example is a complete minimal one. */
#ifndef DLRUN_PLUGIN_H
#define DLRUN_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------------ */

#define DL_ABI_MAJOR 1
#define DL_ABI_MINOR 2
#define DL_ABI_VERSION (((uint32_t)DL_ABI_MAJOR << 16) | (uint32_t)DL_ABI_MINOR)
#define DL_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define DL_ABI_MINOR_OF(v) ((uint32_t)(v)&0xffffu)

/* The entry symbol every plugin exports, and its type. It returns the plugin's backend table, or
 * NULL with a one-line reason in `err` (e.g. "no CUDA device"). The table stays valid until the
 * host calls its `destroy`. */
#define DL_PLUGIN_ENTRY "dl_plugin_init"
struct dl_host;
struct dl_backend;
struct dl_error;
typedef const struct dl_backend *(*dl_plugin_init_fn)(const struct dl_host *host,
                                                      struct dl_error *err);

#if defined(_WIN32)
#define DL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define DL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---- status and errors --------------------------------------------------------------------- */

typedef enum dl_status {
    DL_OK = 0,
    DL_E_INVALID = 1,     /* bad input: malformed model, weights or arguments (CLI exit 2)      */
    DL_E_UNSUPPORTED = 2, /* a backend cannot run this op / feature                            */
    DL_E_NOMEM = 3,       /* an allocation failed in some memory domain                        */
    DL_E_RUNTIME = 4,     /* a failure while running (driver error, kernel failure)            */
    DL_E_NODEVICE = 5,    /* the backend's device or library is missing                       */
    DL_E_IO = 6           /* a file could not be read or written                               */
} dl_status;

/* A one-line, human-readable reason. Functions that can fail take one and fill it on failure. */
#define DL_ERROR_LEN 512
typedef struct dl_error {
    char msg[DL_ERROR_LEN];
} dl_error;

/* Formats a reason into err (if err is not NULL) and returns status, for `return dl_fail(...)`. */
static inline dl_status dl_fail(dl_error *err, dl_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline dl_status dl_fail(dl_error *err, dl_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* ---- tensors (DLPack layout) --------------------------------------------------------------- */

/* Memory domains use DLPack's device codes. */
enum { DL_DEVICE_CPU = 1, DL_DEVICE_CUDA = 2, DL_DEVICE_CUDA_HOST = 3 };
typedef struct dl_device {
    int32_t device_type; /* DL_DEVICE_* */
    int32_t device_id;   /* e.g. the CUDA ordinal; 0 for the CPU */
} dl_device;

/* Element types use DLPack's codes: {code, bits, lanes}. */
enum { DL_DTYPE_INT = 0, DL_DTYPE_UINT = 1, DL_DTYPE_FLOAT = 2, DL_DTYPE_BFLOAT = 4 };
typedef struct dl_dtype {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;
#define DL_F32 ((dl_dtype){DL_DTYPE_FLOAT, 32, 1})
#define DL_F16 ((dl_dtype){DL_DTYPE_FLOAT, 16, 1})
#define DL_BF16 ((dl_dtype){DL_DTYPE_BFLOAT, 16, 1})

/* Same layout as DLPack's DLTensor. dlrun always passes dense row-major tensors: strides NULL,
 * byte_offset 0. Activations are NCHW unless an op says otherwise. */
typedef struct dl_tensor {
    void *data;           /* NULL where only the shape is known (supports, prepare) */
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;     /* always NULL from dlrun: compact row-major */
    uint64_t byte_offset; /* always 0 from dlrun */
} dl_tensor;

/* ---- operators ----------------------------------------------------------------------------- */

/* Op kinds. Append only: values never change. Inputs of each op, in order:
 *   CONV2D        x[N,C,H,W], weight[OC, C/groups, KH, KW], bias[OC] (optional)  -> [N,OC,OH,OW]
 *   RELU          x                                                             -> same shape
 *   MAXPOOL2D     x[N,C,H,W]          (ABI 1.2: attrs.dilation may exceed 1)    -> [N,C,OH,OW]
 *   AVGPOOL2D     x[N,C,H,W]                                                    -> [N,C,OH,OW]
 *   GLOBAL_AVGPOOL x[N,C,H,W]                                                   -> [N,C,1,1]
 *   LINEAR        x[N,IN], weight[OUT,IN], bias[OUT] (optional)    y = x W^T + b -> [N,OUT]
 *   FLATTEN       x                   (dims from attrs.axis on are merged)      -> 2-D
 *   DROPOUT       x                   (identity at inference)                   -> same shape
 *   SOFTMAX       x                   (along attrs.axis, already non-negative)  -> same shape
 *   ADD           a, b                (same shape; ABI 1.2: numpy broadcasting)  -> broadcast shape
 *   CONCAT        x0, x1, ...         (along attrs.axis)                        -> joined
 *   BATCHNORM     x[N,C,...], gamma[C], beta[C], mean[C], var[C]                -> same shape
 */
typedef enum dl_op_kind {
    DL_OP_CONV2D = 0,
    DL_OP_RELU = 1,
    DL_OP_MAXPOOL2D = 2,
    DL_OP_AVGPOOL2D = 3,
    DL_OP_GLOBAL_AVGPOOL = 4,
    DL_OP_LINEAR = 5,
    DL_OP_FLATTEN = 6,
    DL_OP_DROPOUT = 7,
    DL_OP_SOFTMAX = 8,
    DL_OP_ADD = 9,
    DL_OP_CONCAT = 10,
    DL_OP_BATCHNORM = 11,
    DL_OP_COUNT_V1 = 12, /* number of kinds in ABI 1.0 */
    /* ABI 1.1 */
    DL_OP_LEAKY_RELU = 12, /* x                y = x >= 0 ? x : alpha * x           -> same shape */
    DL_OP_SIGMOID = 13,    /* x                y = 1 / (1 + exp(-x))                 -> same shape */
    DL_OP_CLIP = 14,       /* x                y = min(max(x, clip_min), clip_max)   -> same shape */
    DL_OP_COUNT_V1_1 = 15, /* number of kinds in ABI 1.1 */
    /* ABI 1.2 */
    DL_OP_MATMUL = 15,  /* a[..., M, K], b[..., K, N], c (optional)
                           y = alpha * op(a) op(b) + beta * c, op() transposing the last two dims
                           when trans_a / trans_b; leading dims broadcast as numpy's matmul; c
                           broadcasts to y                                      -> [..., M, N] */
    DL_OP_RESHAPE = 16, /* x                 the same elements in row-major order -> any shape */
    DL_OP_COUNT = 17       /* number of kinds in this version of the header */
} dl_op_kind;

/* Activation applied to an op's output after the op itself (a fused epilogue). */
typedef enum dl_activation { DL_ACT_NONE = 0, DL_ACT_RELU = 1 } dl_activation;

/* Compute precision a session asks for. F32 is exact IEEE float; the others allow tensor cores. */
typedef enum dl_precision {
    DL_PRECISION_F32 = 0,
    DL_PRECISION_TF32 = 1,
    DL_PRECISION_F16 = 2,
    DL_PRECISION_BF16 = 3
} dl_precision;

/* Attributes of all ops in one flat struct; each op reads the members it documents. */
typedef struct dl_op_attrs {
    uint32_t struct_size;
    int32_t kernel[2];    /* conv2d, pools: [kh, kw] */
    int32_t stride[2];    /* conv2d, pools: [sh, sw] */
    int32_t pad_begin[2]; /* conv2d, pools: padding before [top, left] */
    int32_t pad_end[2];   /* conv2d, pools: padding after [bottom, right] */
    int32_t dilation[2];  /* conv2d, maxpool2d (ABI 1.2): [dh, dw] */
    int32_t groups;       /* conv2d */
    int32_t ceil_mode;    /* pools: 1 rounds the output size up (PyTorch/ONNX ceil_mode) */
    int32_t count_include_pad; /* avgpool2d: 1 divides by the full window, pads included */
    int32_t axis;         /* flatten, softmax, concat: a non-negative axis */
    float epsilon;        /* batchnorm */
    int32_t activation;   /* dl_activation fused after the op (conv2d, linear, add, batchnorm) */
    /* ABI 1.1 (present when struct_size covers them) */
    float alpha;          /* leaky_relu: slope for x < 0 */
    float clip_min;       /* clip: lower bound (-INFINITY: none) */
    float clip_max;       /* clip: upper bound (+INFINITY: none) */
    /* ABI 1.2 (present when struct_size covers them). `alpha` above is also matmul's scale of
     * a·b (1 by default for matmul), and `dilation` applies to maxpool2d as well as conv2d. */
    float beta;           /* matmul: scale of c */
    int32_t trans_a;      /* matmul: 1 uses a's last two dims transposed */
    int32_t trans_b;      /* matmul: 1 uses b's last two dims transposed */
} dl_op_attrs;

/* One operator instance as the host shows it to a backend. */
typedef struct dl_op {
    uint32_t struct_size;
    int32_t kind;          /* dl_op_kind */
    const char *name;      /* the layer's name in the model, for messages */
    const dl_op_attrs *attrs;
    int32_t n_inputs;
    const dl_tensor *inputs;  /* shapes and dtypes; at prepare, weights (constants) carry data in
                                 the backend's domain, activations have data NULL */
    int32_t n_outputs;        /* 1 in ABI 1.0 */
    const dl_tensor *outputs; /* shapes and dtypes, data NULL */
    int32_t precision;        /* dl_precision the session asks for */
} dl_op;

/* ---- host services given to plugins ------------------------------------------------------- */

enum { DL_LOG_ERROR = 0, DL_LOG_WARN = 1, DL_LOG_INFO = 2, DL_LOG_DEBUG = 3 };

typedef struct dl_host {
    uint32_t abi_version; /* DL_ABI_VERSION of the host */
    uint32_t struct_size;
    void *ctx;            /* passed back to the callbacks */
    int32_t n_threads;    /* threads a CPU backend may use (>= 1) */
    int32_t device_index; /* GPU ordinal the user asked for (--device), 0 by default */
    /* Log a line through the host (optional to call; never NULL). */
    void (*log)(void *ctx, int level, const char *msg);
} dl_host;

/* ---- the backend table a plugin returns ---------------------------------------------------- */

typedef struct dl_kernel dl_kernel; /* a prepared op, owned by the backend */

/* Copy directions relative to the backend's memory domain. */
typedef enum dl_copy_kind {
    DL_COPY_HOST_TO_DEVICE = 0,
    DL_COPY_DEVICE_TO_HOST = 1,
    DL_COPY_DEVICE_TO_DEVICE = 2
} dl_copy_kind;

typedef struct dl_backend {
    uint32_t abi_version; /* DL_ABI_VERSION the plugin was built with: checked first */
    uint32_t struct_size; /* sizeof(dl_backend) in the plugin's build */
    const char *name;     /* short unique name: "cpu", "cuda", "cudnn" */
    const char *description; /* one line: device, library versions, threads */
    dl_device device;     /* the memory domain its kernels read and write */
    void *self;           /* the plugin's state, first argument of every member */

    /* Release everything the plugin owns, the table included. */
    void (*destroy)(void *self);

    /* Memory in the backend's domain. alloc returns storage aligned to at least 64 bytes. */
    dl_status (*alloc)(void *self, size_t bytes, void **ptr, dl_error *err);
    void (*free)(void *self, void *ptr);
    /* Copy bytes; for HOST_TO_DEVICE `src` is host memory, for DEVICE_TO_HOST `dst` is. Complete
     * when it returns (or ordered before any later run/copy and finished by synchronize). */
    dl_status (*copy)(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind,
                      dl_error *err);

    /* 1 if the backend can run exactly this op (kind, attributes, shapes, dtypes, precision),
     * else 0 with the reason in `why`. Must be exact: claiming an op and failing later is a bug. */
    int (*supports)(void *self, const dl_op *op, dl_error *why);

    /* Prepare a kernel for op: choose an algorithm, state the scratch space it needs. */
    dl_status (*prepare)(void *self, const dl_op *op, dl_kernel **kernel, size_t *workspace_bytes,
                         dl_error *err);
    /* Run a prepared kernel. inputs/outputs have the op's shapes, with data in the backend's
     * domain; workspace has the size prepare asked for (NULL if 0). Outputs never alias inputs. */
    dl_status (*run)(void *self, dl_kernel *kernel, const dl_tensor *inputs,
                     const dl_tensor *outputs, void *workspace, dl_error *err);
    void (*release)(void *self, dl_kernel *kernel);

    /* Optional: wait until all work queued on the backend has finished (asynchronous backends). */
    dl_status (*synchronize)(void *self, dl_error *err);

    /* ---- ABI 1.1 ---- */
    /* Optional: 1 if run() is correct with outputs[0].data == inputs[0].data for this op (an
     * elementwise op overwriting its input), which lets the host's memory plan reuse the input's
     * storage when that input dies here. NULL or 0: never in place. */
    int (*supports_in_place)(void *self, const dl_op *op);
    /* Optional: free and total bytes of the backend's memory domain, so the host can refuse a
     * batch that cannot fit before running anything. */
    dl_status (*memory_info)(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err);
} dl_backend;

/* ---- small helpers (header-only, for plugins and host alike) ------------------------------- */

static inline int64_t dl_tensor_numel(const dl_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
static inline size_t dl_dtype_size(dl_dtype d) { return (size_t)(d.bits / 8) * d.lanes; }
static inline int dl_dtype_eq(dl_dtype a, dl_dtype b) {
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
static inline int dl_dtype_is_f32(dl_dtype d) { return dl_dtype_eq(d, DL_F32); }

#ifdef __cplusplus
}
#endif
#endif /* DLRUN_PLUGIN_H */
