/* dlrun/plugin.h — the operator ABI: the one header a backend plugin compiles against.
 *
 * A plugin is a shared object that exports one symbol, `dl_plugin_init` (see DL_PLUGIN_ENTRY).
 * The host (libdlrun) calls it with a dl_host table; the plugin returns a dl_backend table that it
 * owns. Rules that keep old plugins working (as SQLite's VFS and ggml's backends do):
 *   - the two tables, dl_host and dl_backend, start with the ABI version their side was built
 *     with and their size; each side checks the other's before anything else (dl_plugin_host_ok,
 *     DL_BACKEND_HAS). The structs the host passes per call, dl_op and dl_op_attrs, start with
 *     their size only: their version is the host's (dl_host.abi_version);
 *   - structs only grow by appending members; a member the reader's struct_size does not cover
 *     is treated as absent (DL_BACKEND_HAS, DL_HOST_HAS; attributes past struct_size are 0);
 *   - members marked "optional" may be NULL and the host checks before calling;
 *   - every member and op kind says the ABI version that added it, "(1.1)";
 *   - a plugin of another MAJOR version is refused with a one-line reason, never called.
 * Lifetimes: the dl_op given to supports() and prepare(), its attributes, tensor arrays and
 * shapes are valid only during that call (copy what a kernel keeps). The weight data prepare()
 * is given (inputs whose data is not NULL) stays valid and unchanged until that kernel is
 * released. The tensors given to run() are valid during the call; their data until the queued
 * work is complete (synchronize).
 * Threads: the host may call one backend's members from several threads at once (sessions
 * running in parallel share a loaded plugin), so every member must be safe under concurrent
 * calls; one dl_kernel is never in two calls at once (its run and release come from one session,
 * one call at a time). A plugin serializes internally what it shares (a library handle, a
 * staging buffer).
 * Tensors are described DLPack-style (dl_tensor has DLTensor's exact layout), so a plugin can hand
 * them to any DLPack consumer. The header includes only C standard headers.
 * Storage (1.3): a plugin of ABI 1.3 or later may be shown f16 and bf16 tensors and 4-D activations
 * in channels-last order (NHWC in memory, see dl_layout); it accepts or refuses them in supports().
 * An older plugin is only ever shown f32 row-major tensors.
 * docs/plugins.md walks through writing a plugin; plugins/example is a complete minimal one. */
#ifndef DLRUN_PLUGIN_H
#define DLRUN_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------------ */

#define DL_ABI_MAJOR 1
#define DL_ABI_MINOR 14
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
typedef const struct dl_backend *(*dl_plugin_init_fn)(const struct dl_host *host, struct dl_error *err);

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
#define DL_I64 ((dl_dtype){DL_DTYPE_INT, 64, 1}) /* (1.4) gather's indices */

/* Same layout as DLPack's DLTensor. Tensors are dense; byte_offset is always 0. The shape is always
 * the logical one (a conv's input is [N,C,H,W] whatever its memory order); strides NULL means
 * row-major (NCHW). From ABI 1.3 a 4-D activation may carry channels-last strides
 * {H*W*C, 1, W*C, C} (NHWC in memory, PyTorch's channels_last); dl_tensor_layout tells which. */
typedef struct dl_tensor {
    void *data; /* NULL where only the shape is known (supports, prepare) */
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;     /* always NULL from dlrun: compact row-major */
    uint64_t byte_offset; /* always 0 from dlrun */
} dl_tensor;

/* Memory orders of a tensor (1.3). */
typedef enum dl_layout {
    DL_LAYOUT_ROW_MAJOR = 0,     /* strides NULL: dense row-major (NCHW for a 4-D activation) */
    DL_LAYOUT_CHANNELS_LAST = 1, /* 4-D only: strides {H*W*C, 1, W*C, C}, NHWC in memory */
    DL_LAYOUT_OTHER = -1,        /* any other strides: dlrun never passes these */
    DL_LAYOUT_AS_INPUT = 2       /* (1.9) only as preferred_layout's answer: see there */
} dl_layout;

/* ---- operators ----------------------------------------------------------------------------- */

/* Op kinds. Append only: values never change. Inputs of each op in order, and its output:
 *   CONV2D (1.0)      x[N,C,H,W], weight[OC, C/groups, KH, KW], bias[OC] (optional)
 *                     cross-correlation                                      -> [N,OC,OH,OW]
 *   RELU (1.0)        x                  y = max(x, 0)                       -> x's shape
 *   MAXPOOL2D (1.0)   x[N,C,H,W]         (1.2: attrs.dilation may exceed 1)  -> [N,C,OH,OW]
 *   AVGPOOL2D (1.0)   x[N,C,H,W]                                             -> [N,C,OH,OW]
 *   GLOBAL_AVGPOOL (1.0) x[N,C,H,W]                                          -> [N,C,1,1]
 *   LINEAR (1.0)      x[N,IN], weight[OUT,IN], bias[OUT] (optional)  y = x W^T + b -> [N,OUT]
 *   FLATTEN (1.0)     x                  dims from attrs.axis on merged      -> 2-D
 *   DROPOUT (1.0)     x                  identity at inference               -> x's shape
 *   SOFTMAX (1.0)     x                  along attrs.axis                    -> x's shape
 *   ADD (1.0)         a, b               same shapes (1.2: numpy broadcasting) -> broadcast shape
 *   CONCAT (1.0)      x0, x1, ...        joined along attrs.axis             -> joined
 *   BATCHNORM (1.0)   x[N,C,...], gamma[C], beta[C], mean[C], var[C]
 *                     y = gamma (x - mean) / sqrt(var + epsilon) + beta      -> x's shape
 *   LEAKY_RELU (1.1)  x                  y = x >= 0 ? x : alpha * x          -> x's shape
 *   SIGMOID (1.1)     x                  y = 1 / (1 + exp(-x))               -> x's shape
 *   CLIP (1.1)        x                  y = min(max(x, clip_min), clip_max) -> x's shape
 *   MATMUL (1.2)      a[..., M, K], b[..., K, N], c (optional)
 *                     y = alpha * op(a) op(b) + beta * c, op() transposing the last two dims when
 *                     trans_a / trans_b; leading dims broadcast as numpy's matmul; c broadcasts
 *                     to y                                                  -> [..., M, N]
 *   RESHAPE (1.2)     x                  the same elements in row-major order -> any shape
 *   MUL, SUB, DIV, POW, MIN, MAX (1.4) a, b  a*b, a-b, a/b, a^b, min(a,b), max(a,b), numpy
 *                     broadcasting as ADD                                   -> broadcast shape
 *   SQRT, EXP, LOG, TANH, ERF, NEG (-x), ABS, RECIPROCAL (1/x) (1.4) x       -> x's shape
 *   HARD_SIGMOID (1.4) x                 y = max(0, min(1, alpha * x + beta)) -> x's shape
 *   HARD_SWISH (1.4)  x                  y = x * min(max(x + 3, 0), 6) / 6   -> x's shape
 *   SILU (1.4)        x                  y = x / (1 + exp(-x))               -> x's shape
 *   GELU (1.4)        x                  y = x * Phi(x) (erf), or the tanh form (attrs.mode) -> x's shape
 *   SOFTPLUS (1.4)    x                  y = log(1 + exp(x))                 -> x's shape
 *   TRANSPOSE (1.4)   x                  output dim d is input dim attrs.perm[d] -> permuted
 *   SLICE (1.4)       x                  along attrs.axes[i] (i < n_axes): elements starts[i],
 *                     starts[i] + steps[i], ... before ends[i], ONNX Slice rules (negative
 *                     values count from the end, clamped)                   -> sliced shape
 *   PAD (1.4)         x                  pads_before[d], pads_after[d] added to each dim,
 *                     filled per attrs.mode (dl_pad_mode) with attrs.value   -> padded shape
 *   REDUCE_MEAN, REDUCE_SUM, REDUCE_MAX, REDUCE_MIN (1.4) x  over attrs.axes[0..n_axes) (all
 *                     dims when n_axes is 0), kept as size 1 when keepdims   -> reduced shape
 *   LAYER_NORM (1.4)  x, weight, bias (shaped as x's dims from attrs.axis on)
 *                     y = (x - mean) / sqrt(var + epsilon) * weight + bias over those dims
 *                                                                            -> x's shape
 *   RESIZE (1.4)      x[N,C,H,W]         H, W resampled to the output's (attrs.mode:
 *                     dl_resize_mode, attrs.coord, attrs.nearest)           -> [N,C,OH,OW]
 *   LOG_SOFTMAX (1.4) x                  log(softmax) along attrs.axis        -> x's shape
 *   GROUP_NORM (1.4)  x[N,C,...], weight[C], bias[C]: channels split into attrs.groups groups,
 *                     each (n, group) normalised over its channels and positions (biased
 *                     variance, epsilon), then y = x_hat * weight[c] + bias[c] -> x's shape
 *   GATHER (1.4)      data, indices (DL_I64, any shape; negative counts from the end): along
 *                     attrs.axis, y[..., i..., ...] = data[..., indices[i...], ...] (ONNX Gather,
 *                     an embedding lookup)       -> data[:axis] + indices + data[axis+1:]
 *                     The one op with an integer input: every other tensor is floating point.
 *   CONV_TRANSPOSE2D (1.4) x[N,C,H,W], weight[C, OC/groups, KH, KW], bias[OC] (optional): the
 *                     gradient of CONV2D with these attributes (PyTorch's ConvTranspose2d): OH =
 *                     (H - 1) stride - pad_begin - pad_end + dilation (KH - 1) + output_padding + 1
 *                                                                           -> [N,OC,OH,OW]
 *   CONV3D (1.7)      x[N,C,D,H,W], weight[OC, C/groups, KD, KH, KW], bias[OC] (optional): as
 *                     CONV2D with a depth dimension, attributes in kernel3, stride3, pad_begin3,
 *                     pad_end3 and dilation3 ([depth, height, width])    -> [N,OC,OD,OH,OW]
 *   CHANNEL_SHUFFLE (1.11) x[N,C,...]  the channels as attrs.groups groups of C/groups, dealt out
 *                     in turn: y[:, j * groups + i] = x[:, i * (C / groups) + j] (ShuffleNet's
 *                     reshape to [N, groups, C/groups, ...], transpose of dims 1 and 2, reshape
 *                     back)                                                   -> x's shape
 * Output sizes of the window ops follow PyTorch: OH = floor((H + pad_begin + pad_end -
 * dilation * (KH - 1) - 1) / stride) + 1, rounded up instead with ceil_mode (pools only, where
 * the last window must start inside the input or its top/left padding). */
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
    DL_OP_LEAKY_RELU = 12,       /* 1.1 */
    DL_OP_SIGMOID = 13,          /* 1.1 */
    DL_OP_CLIP = 14,             /* 1.1 */
    DL_OP_MATMUL = 15,           /* 1.2 */
    DL_OP_RESHAPE = 16,          /* 1.2 */
    DL_OP_MUL = 17,              /* 1.4 */
    DL_OP_SUB = 18,              /* 1.4 */
    DL_OP_DIV = 19,              /* 1.4 */
    DL_OP_POW = 20,              /* 1.4 */
    DL_OP_MIN = 21,              /* 1.4 */
    DL_OP_MAX = 22,              /* 1.4 */
    DL_OP_SQRT = 23,             /* 1.4 */
    DL_OP_EXP = 24,              /* 1.4 */
    DL_OP_LOG = 25,              /* 1.4 */
    DL_OP_TANH = 26,             /* 1.4 */
    DL_OP_ERF = 27,              /* 1.4 */
    DL_OP_NEG = 28,              /* 1.4 */
    DL_OP_ABS = 29,              /* 1.4 */
    DL_OP_RECIPROCAL = 30,       /* 1.4 */
    DL_OP_HARD_SIGMOID = 31,     /* 1.4 */
    DL_OP_HARD_SWISH = 32,       /* 1.4 */
    DL_OP_SILU = 33,             /* 1.4 */
    DL_OP_GELU = 34,             /* 1.4 */
    DL_OP_SOFTPLUS = 35,         /* 1.4 */
    DL_OP_TRANSPOSE = 36,        /* 1.4 */
    DL_OP_SLICE = 37,            /* 1.4 */
    DL_OP_PAD = 38,              /* 1.4 */
    DL_OP_REDUCE_MEAN = 39,      /* 1.4 */
    DL_OP_REDUCE_SUM = 40,       /* 1.4 */
    DL_OP_REDUCE_MAX = 41,       /* 1.4 */
    DL_OP_REDUCE_MIN = 42,       /* 1.4 */
    DL_OP_LAYER_NORM = 43,       /* 1.4 */
    DL_OP_RESIZE = 44,           /* 1.4 */
    DL_OP_LOG_SOFTMAX = 45,      /* 1.4 */
    DL_OP_GROUP_NORM = 46,       /* 1.4 */
    DL_OP_GATHER = 47,           /* 1.4 */
    DL_OP_CONV_TRANSPOSE2D = 48, /* 1.4 */
    DL_OP_CONV3D = 49,           /* 1.7 */
    DL_OP_CHANNEL_SHUFFLE = 50   /* 1.11 */
} dl_op_kind;

/* How many kinds each version defines: kinds below the count exist in that version. */
#define DL_OP_COUNT_V1_0 12
#define DL_OP_COUNT_V1_1 15
#define DL_OP_COUNT_V1_2 17
#define DL_OP_COUNT_V1_3 17 /* 1.3 added storage dtypes and layouts, no kinds */
#define DL_OP_COUNT_V1_4 49
#define DL_OP_COUNT_V1_5 49           /* 1.5 added fused clip, leaky relu and sigmoid, no kinds */
#define DL_OP_COUNT_V1_6 49           /* 1.6 added timing events, no kinds */
#define DL_OP_COUNT_V1_7 50           /* 1.7 added conv3d; 1.8 to 1.10 no kinds */
#define DL_OP_COUNT_V1_11 51          /* 1.11 added channel_shuffle; 1.12 to 1.14 no kinds */
#define DL_OP_COUNT DL_OP_COUNT_V1_11 /* kinds in this version of the header */

/* Activation applied to an op's output after the op itself (a fused epilogue, 1.0). */
typedef enum dl_activation {
    DL_ACT_NONE = 0,
    DL_ACT_RELU = 1,
    DL_ACT_SILU = 2,       /* (1.4) x * sigmoid(x), as the SILU op */
    DL_ACT_HARD_SWISH = 3, /* (1.4) as the HARD_SWISH op */
    DL_ACT_GELU = 4,       /* (1.4) as the GELU op with DL_GELU_ERF */
    DL_ACT_GELU_TANH = 5,  /* (1.4) as the GELU op with DL_GELU_TANH */
    DL_ACT_CLIP = 6,       /* (1.5) as the CLIP op, bounds in attrs.clip_min and attrs.clip_max (relu6) */
    DL_ACT_LEAKY_RELU = 7, /* (1.5) as the LEAKY_RELU op, slope in attrs.alpha */
    DL_ACT_SIGMOID = 8     /* (1.5) as the SIGMOID op */
} dl_activation;

/* attrs.mode of PAD, GELU and RESIZE (1.4); RESIZE's attrs.coord and attrs.nearest as ONNX
 * Resize's coordinate_transformation_mode and nearest_mode. */
typedef enum dl_pad_mode { DL_PAD_CONSTANT = 0, DL_PAD_REFLECT = 1, DL_PAD_EDGE = 2 } dl_pad_mode;
typedef enum dl_gelu_mode { DL_GELU_ERF = 0, DL_GELU_TANH = 1 } dl_gelu_mode;
typedef enum dl_resize_mode { DL_RESIZE_NEAREST = 0, DL_RESIZE_LINEAR = 1 } dl_resize_mode;
typedef enum dl_resize_coord {
    DL_COORD_HALF_PIXEL = 0,         /* x_in = (x_out + 0.5) / scale - 0.5 */
    DL_COORD_PYTORCH_HALF_PIXEL = 1, /* the same, but 0 where the output size is 1 */
    DL_COORD_ALIGN_CORNERS = 2,      /* x_in = x_out (in - 1) / (out - 1), 0 where out is 1 */
    DL_COORD_ASYMMETRIC = 3          /* x_in = x_out / scale */
} dl_resize_coord;
typedef enum dl_resize_nearest {
    DL_NEAREST_ROUND_PREFER_FLOOR = 0,
    DL_NEAREST_ROUND_PREFER_CEIL = 1,
    DL_NEAREST_FLOOR = 2,
    DL_NEAREST_CEIL = 3
} dl_resize_nearest;

/* Compute precision a session asks for (1.0). F32 is exact IEEE float; the others allow tensor
 * cores: it says how much rounding inside an op is acceptable, and a backend may always compute
 * more exactly than asked. From ABI 1.3, with F16 or BF16 the host also stores the op's tensors
 * in that dtype where the backend's supports() accepts them (the dtypes are in the tensors);
 * before 1.3, and wherever a backend refuses, tensors are f32. */
typedef enum dl_precision {
    DL_PRECISION_F32 = 0,
    DL_PRECISION_TF32 = 1,
    DL_PRECISION_F16 = 2,
    DL_PRECISION_BF16 = 3
} dl_precision;

/* Attributes of all ops in one flat struct, starting with its size (its version is the host's).
 * Each member says which ops read it; an op ignores the others. Members past struct_size (an
 * older host) are absent; the host never shows a plugin an op whose members it lacks. */
typedef struct dl_op_attrs {
    uint32_t struct_size;      /* (1.0) sizeof(dl_op_attrs) in the host's build */
    int32_t kernel[2];         /* (1.0) conv2d, pools: [kh, kw] */
    int32_t stride[2];         /* (1.0) conv2d, pools: [sh, sw] */
    int32_t pad_begin[2];      /* (1.0) conv2d, pools: padding before [top, left] */
    int32_t pad_end[2];        /* (1.0) conv2d, pools: padding after [bottom, right] */
    int32_t dilation[2];       /* (1.0) conv2d; (1.2) maxpool2d too: [dh, dw] */
    int32_t groups;            /* (1.0) conv2d; (1.4) group_norm, conv_transpose2d; (1.7) conv3d */
    int32_t ceil_mode;         /* (1.0) pools: 1 rounds the output size up (PyTorch/ONNX ceil_mode) */
    int32_t count_include_pad; /* (1.0) avgpool2d: 1 divides by the full window, pads included */
    int32_t axis;              /* (1.0) flatten, softmax, concat; (1.4) layer_norm, log_softmax, gather: >= 0 */
    float epsilon;             /* (1.0) batchnorm; (1.4) layer_norm, group_norm */
    int32_t activation;        /* (1.0) dl_activation fused after conv2d, linear, add, batchnorm; (1.7) conv3d */
    float alpha;               /* (1.1) the op's scalar coefficient, as ONNX names it:
                                  leaky_relu: slope for x < 0 (ONNX LeakyRelu alpha);
                                  (1.2) matmul: scale of op(a) op(b) (ONNX Gemm alpha);
                                  (1.4) hard_sigmoid: slope */
    float clip_min;            /* (1.1) clip: lower bound (-INFINITY: none) */
    float clip_max;            /* (1.1) clip: upper bound (+INFINITY: none) */
    float beta;                /* (1.2) matmul: scale of c (ONNX Gemm beta); (1.4) hard_sigmoid: offset */
    int32_t trans_a;           /* (1.2) matmul: 1 uses a's last two dims transposed */
    int32_t trans_b;           /* (1.2) matmul: 1 uses b's last two dims transposed */
    int32_t n_axes;            /* (1.4) slice, reduce_*: entries of axes[] used (reduce_*: 0 = all) */
    int32_t axes[8];           /* (1.4) slice, reduce_*: dims, negative counting from the end */
    int32_t keepdims;          /* (1.4) reduce_*: 1 keeps each reduced dim as size 1 */
    int32_t perm[8];           /* (1.4) transpose: output dim d is input dim perm[d], d < ndim */
    int64_t starts[8];         /* (1.4) slice: per axes[i], ONNX Slice's rules (negative counts */
    int64_t ends[8];           /*       from the end; out-of-range values are clamped) */
    int64_t steps[8];          /*       non-zero; negative walks backwards */
    int64_t pads_before[8];    /* (1.4) pad: elements added before each dim (>= 0) */
    int64_t pads_after[8];     /* (1.4) pad: elements added after each dim (>= 0) */
    int32_t mode;              /* (1.4) pad: dl_pad_mode; gelu: dl_gelu_mode; resize: dl_resize_mode */
    float value;               /* (1.4) pad: the fill of DL_PAD_CONSTANT */
    int32_t coord;             /* (1.4) resize: dl_resize_coord */
    int32_t nearest;           /* (1.4) resize: dl_resize_nearest (mode nearest) */
    int32_t output_padding[2]; /* (1.4) conv_transpose2d: added to the output's [bottom, right] */
    int32_t kernel3[3];        /* (1.7) conv3d: [kd, kh, kw] */
    int32_t stride3[3];        /* (1.7) conv3d: [sd, sh, sw] */
    int32_t pad_begin3[3];     /* (1.7) conv3d: padding before [front, top, left] */
    int32_t pad_end3[3];       /* (1.7) conv3d: padding after [back, bottom, right] */
    int32_t dilation3[3];      /* (1.7) conv3d: [dd, dh, dw] */
    int32_t pad_1_7;           /* (1.8) the tail padding of the 1.7 struct, made a member so that
                                  `residual` lies past a 1.7 host's struct_size; never read */
    int32_t residual;          /* (1.8) conv2d, linear: 1 = the op's last input is a tensor of the
                                  output's shape, dtype and layout, added to the result after the
                                  bias and before the fused activation: y = act(op(x) + b + r)
                                  (a residual connection's add fused into the op before it; the
                                  bias, if any, is then the input before it). Never an alias of
                                  the output, unless the kernel's kernel_in_place
                                  (1.10) names it. 0 on a host older than 1.8. */
} dl_op_attrs;

/* One operator instance as the host shows it to a backend, starting with its size (its version
 * is the host's). Valid during the supports() or prepare() call it is given to. */
typedef struct dl_op {
    uint32_t struct_size;     /* (1.0) sizeof(dl_op) in the host's build */
    int32_t kind;             /* (1.0) dl_op_kind */
    const char *name;         /* (1.0) the layer's name in the model, for messages */
    const dl_op_attrs *attrs; /* (1.0) */
    int32_t n_inputs;         /* (1.0) */
    const dl_tensor *inputs;  /* (1.0) shapes and dtypes; at prepare, weights (constants) carry
                                 data in the backend's domain, activations have data NULL */
    int32_t n_outputs;        /* (1.0) always 1 so far */
    const dl_tensor *outputs; /* (1.0) shapes and dtypes, data NULL */
    int32_t precision;        /* (1.0) dl_precision the session asks for */
} dl_op;

/* ---- host services given to plugins ------------------------------------------------------- */

enum { DL_LOG_ERROR = 0, DL_LOG_WARN = 1, DL_LOG_INFO = 2, DL_LOG_DEBUG = 3 };

typedef struct dl_host {
    uint32_t abi_version; /* (1.0) DL_ABI_VERSION of the host */
    uint32_t struct_size; /* (1.0) sizeof(dl_host) in the host's build */
    void *ctx;            /* (1.0) passed back to the callbacks */
    int32_t n_threads;    /* (1.0) threads a CPU backend may use (>= 1) */
    int32_t device_index; /* (1.0) GPU ordinal the user asked for (--device), 0 by default */
    /* (1.0) Log a line through the host (optional to call; never NULL; thread-safe). */
    void (*log)(void *ctx, int level, const char *msg);
    /* (1.12) Optional (check DL_HOST_HAS), both or neither: a store of numbers a plugin measured,
     * kept across processes in the host's timing cache file, so that a choice timed at prepare
     * (an algorithm, a tile size) is timed once per machine, not once per process. Keys are the
     * plugin's own strings (at most DL_HOST_KEY_LEN bytes; put in everything the choice depends
     * on: shapes, attributes, threads, settings); the host keeps each plugin's apart and adds the
     * plugin's build and description, so a rebuilt or upgraded plugin starts afresh. Values are
     * finite and >= 0 (others are not kept). cache_get: 1 and *value where the key is kept, else
     * 0; always 0 during dl_plugin_init and while the session being created asked to measure
     * again (--retune). cache_put keeps (or replaces) it; the host writes the file after each
     * session is created. Thread-safe. The file is the user's and may have been edited: check a
     * value read back is a choice you offer before using it. Only the table the host gave
     * dl_plugin_init answers for the plugin; it stays valid until destroy. */
    int (*cache_get)(void *ctx, const char *key, double *value);
    void (*cache_put)(void *ctx, const char *key, double value);
} dl_host;
#define DL_HOST_KEY_LEN 512

/* ---- the backend table a plugin returns ---------------------------------------------------- */

typedef struct dl_kernel dl_kernel; /* a prepared op, owned by the backend */

/* Copy directions relative to the backend's memory domain. */
typedef enum dl_copy_kind {
    DL_COPY_HOST_TO_DEVICE = 0,
    DL_COPY_DEVICE_TO_HOST = 1,
    DL_COPY_DEVICE_TO_DEVICE = 2
} dl_copy_kind;

typedef struct dl_backend {
    uint32_t abi_version;    /* (1.0) DL_ABI_VERSION the plugin was built with: checked first */
    uint32_t struct_size;    /* (1.0) sizeof(dl_backend) in the plugin's build */
    const char *name;        /* (1.0) short unique name: "cpu", "cuda", "cudnn" */
    const char *description; /* (1.0) one line: device, library versions, threads */
    dl_device device;        /* (1.0) the memory domain its kernels read and write */
    void *self;              /* (1.0) the plugin's state, first argument of every member */

    /* (1.0) Release everything the plugin owns, the table included. Called once, last. */
    void (*destroy)(void *self);

    /* (1.0) Memory in the backend's domain. alloc returns storage aligned to at least 64 bytes. */
    dl_status (*alloc)(void *self, size_t bytes, void **ptr, dl_error *err);
    void (*free)(void *self, void *ptr);
    /* (1.0) Copy bytes; for HOST_TO_DEVICE `src` is host memory, for DEVICE_TO_HOST `dst` is.
     * Complete when it returns (or ordered before any later run/copy and finished by
     * synchronize). */
    dl_status (*copy)(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err);

    /* (1.0) 1 if the backend can run exactly this op (kind, attributes, shapes, dtypes,
     * precision), else 0 with the reason in `why`. Must be exact: claiming an op and failing
     * later is a bug. The host shows a plugin only kinds and attribute meanings of the ABI
     * minor version the plugin declares. */
    int (*supports)(void *self, const dl_op *op, dl_error *why);

    /* (1.0) Prepare a kernel for op: choose an algorithm, state the scratch space it needs. */
    dl_status (*prepare)(void *self, const dl_op *op, dl_kernel **kernel, size_t *workspace_bytes, dl_error *err);
    /* (1.0) Run a prepared kernel. inputs/outputs have the op's shapes, with data in the
     * backend's domain; workspace has the size prepare asked for (NULL if 0). Outputs never
     * alias inputs, except outputs[0].data == inputs[0].data for an op supports_in_place
     * accepted, and outputs[0].data == inputs[i].data for the i kernel_in_place answered. */
    dl_status (*run)(void *self, dl_kernel *kernel, const dl_tensor *inputs, const dl_tensor *outputs, void *workspace,
                     dl_error *err);
    /* (1.0) Free a prepared kernel. */
    void (*release)(void *self, dl_kernel *kernel);

    /* (1.0) Optional: wait until all work queued on the backend has finished (asynchronous
     * backends). */
    dl_status (*synchronize)(void *self, dl_error *err);

    /* (1.1) Optional: 1 if run() is correct with outputs[0].data == inputs[0].data for this op
     * (an elementwise op overwriting its input), which lets the host's memory plan reuse the
     * input's storage when that input dies here. NULL or 0: never in place (but see
     * kernel_in_place, 1.10). */
    int (*supports_in_place)(void *self, const dl_op *op);
    /* (1.1) Optional: free and total bytes of the backend's memory domain, so the host can
     * refuse a batch that cannot fit before running anything. */
    dl_status (*memory_info)(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err);

    /* (1.3) Optional: the layout (dl_layout) this backend prefers for op's 4-D activations and
     * output, e.g. DL_LAYOUT_CHANNELS_LAST where its fastest convolutions read NHWC. The host then
     * asks supports() with that layout first and keeps row-major if refused. From 1.9 there are
     * three answers: DL_LAYOUT_CHANNELS_LAST; DL_LAYOUT_ROW_MAJOR, row-major even where the op's
     * input is channels-last already (the host converts it first); DL_LAYOUT_AS_INPUT, the layout
     * the op's first 4-D activation input already has in this domain (an op as fast in either, a
     * relu between two NHWC convs). NULL, and DL_LAYOUT_ROW_MAJOR from a plugin built before 1.9,
     * mean DL_LAYOUT_AS_INPUT. */
    int (*preferred_layout)(void *self, const dl_op *op);
    /* (1.3) Optional: 1 if convert() can copy src to dst in this direction (their data NULL),
     * changing dtype and/or layout on the way; 0 and the host converts in host memory instead.
     * dst and src have the same shape. */
    int (*supports_convert)(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind);
    /* (1.3) Optional (with supports_convert): a copy that converts, as copy() does for bytes:
     * for HOST_TO_DEVICE src is in host memory, for DEVICE_TO_HOST dst is; DEVICE_TO_DEVICE
     * converts within the backend's domain. Ordered and completed as copy() is. */
    dl_status (*convert)(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err);

    /* (1.6) Optional, all three or none: timing events on the backend's queue, so that a trace
     * (dl_session_write_trace) times each op on the device rather than by the host's clock around an
     * asynchronous launch. The host never synchronizes between recording and reading them.
     * (1.6) Record a timing event on the queue now, after the work queued so far. *event NULL: a
     * new event (the plugin allocates it); else the host's earlier event from this member, whose
     * previous record has completed (the host synchronized since), recorded again. */
    dl_status (*event_record)(void *self, void **event, dl_error *err);
    /* (1.6) After synchronize: the milliseconds between two recorded events (end after start). */
    dl_status (*event_elapsed)(void *self, void *start, void *end, double *ms, dl_error *err);
    /* (1.6) Free an event event_record made. */
    void (*event_release)(void *self, void *event);

    /* (1.10) Optional: which input of a prepared kernel its output may overwrite, or -1 for none:
     * run() is then correct with outputs[0].data == inputs[i].data. The host passes them so
     * where that input dies at this op, has the output's place and size, and is no other input
     * of the op. For a kernel that reads an input only where and before it writes it: a conv
     * adding a fused residual (attrs.residual) in its epilogue answers the residual's index, and
     * saves a buffer and the residual's copy. Asked for every op; absent, or -1, and
     * supports_in_place decides (input 0 of an elementwise op). */
    int (*kernel_in_place)(void *self, const dl_kernel *kernel, const dl_op *op);

    /* (1.13) Optional, both or neither: host memory this backend's copies move fastest (a CUDA
     * plugin's page-locked memory, which its DMA reads and writes where it is, without staging).
     * The host asks for it for the buffers a caller fills before a run's uploads
     * (dl_session_input_buffer), at least 64-byte aligned; host_free releases it, before destroy.
     * A copy() or convert() whose host side lies in such a block may take the fast way; any other
     * host memory must still work. */
    dl_status (*host_alloc)(void *self, size_t bytes, void **ptr, dl_error *err);
    void (*host_free)(void *self, void *ptr);

    /* (1.14) Optional, both or neither, and only beside the 1.6 events: ordering between the
     * queues of backends that share a device, without the host waiting. Two backends of one memory
     * domain whose queue_family strings are equal (not NULL) can wait for each other's events: the
     * host hands the device from one to the other by recording an event on the first
     * (event_record) and having the second wait for it (event_wait), where it would otherwise
     * synchronize the first. The family names the queue system and the device, so that equal
     * strings mean one can wait for the other's events: the CUDA plugins say "cuda-events
     * GPU-<uuid>". For a backend with event_wait the host may record an event again before its
     * previous record completed, once every event_wait on that record was called (a CUDA event's
     * rule: a wait already queued keeps waiting for the record it was queued after). */
    const char *queue_family;
    /* (1.14) Make this backend's queue wait, on the device, until the work queued before the latest
     * record of `event` is done; the host does not wait. `event` comes from event_record of a
     * backend of the same queue_family (maybe another plugin) and stays that backend's. */
    dl_status (*event_wait)(void *self, void *event, dl_error *err);
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

/* The layout a tensor's strides describe (1.3): row-major, channels-last or other. */
static inline dl_layout dl_tensor_layout(const dl_tensor *t) {
    if (!t->strides) return DL_LAYOUT_ROW_MAJOR;
    if (t->ndim != 4) return DL_LAYOUT_OTHER;
    const int64_t *s = t->shape, *st = t->strides;
    if (st[1] == 1 && st[3] == s[1] && st[2] == s[3] * s[1] && st[0] == s[2] * s[3] * s[1])
        return DL_LAYOUT_CHANNELS_LAST;
    return DL_LAYOUT_OTHER;
}
/* Fills strides[4] for a channels-last tensor of logical shape [N,C,H,W]. */
static inline void dl_channels_last_strides(const int64_t *shape, int64_t *strides) {
    strides[1] = 1;
    strides[3] = shape[1];
    strides[2] = shape[3] * shape[1];
    strides[0] = shape[2] * shape[3] * shape[1];
}

/* Scalar conversions between f32 and the 16-bit floats (1.3), rounding to nearest even as
 * hardware does; NaN stays NaN, overflow becomes infinity. */
static inline float dl_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t dl_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float dl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13); /* infinity, NaN */
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else { /* subnormal: m * 2^-24, normalised */ e = 113;
        while (!(m & 0x400u)) m <<= 1, e--;
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t dl_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: infinity */
    if (a >= 0x38800000u) {                                  /* a normal f16 */
        uint32_t r = a - 0x38000000u;                        /* exponent rebiased from 127 to 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign; /* below half the smallest subnormal */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

/* Does a table cover member `m` and set it (append-only ABI: members past struct_size are
 * absent)? The host asks it of a backend before calling an optional or newer member; a plugin of
 * the host table. */
#define DL_TABLE_HAS(type, t, m) ((t)->struct_size >= offsetof(type, m) + sizeof((t)->m) && (t)->m != NULL)
#define DL_BACKEND_HAS(be, m) DL_TABLE_HAS(dl_backend, be, m)
#define DL_HOST_HAS(host, m) DL_TABLE_HAS(dl_host, host, m)

/* For a plugin's dl_plugin_init: 1 if the host speaks this header's major ABI version with a
 * complete table, else 0 with the reason in err (return NULL then). */
static inline int dl_plugin_host_ok(const dl_host *host, dl_error *err) {
    if (!host) return dl_fail(err, DL_E_UNSUPPORTED, "no host table"), 0;
    if (DL_ABI_MAJOR_OF(host->abi_version) != DL_ABI_MAJOR)
        return dl_fail(err, DL_E_UNSUPPORTED, "host speaks plugin ABI %u.%u, this plugin %u.%u",
                       (unsigned)DL_ABI_MAJOR_OF(host->abi_version), (unsigned)DL_ABI_MINOR_OF(host->abi_version),
                       (unsigned)DL_ABI_MAJOR, (unsigned)DL_ABI_MINOR),
               0;
    if (!DL_HOST_HAS(host, log))
        return dl_fail(err, DL_E_UNSUPPORTED, "host table of %u bytes is incomplete", (unsigned)host->struct_size), 0;
    return 1;
}

#ifdef __cplusplus
}
#endif
#endif /* DLRUN_PLUGIN_H */
