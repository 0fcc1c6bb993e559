/* op_table.c — the op table's index (one line per kind; the rows live beside their functions in
 * this folder's family files) and the helpers every row shares: lookups, ABI versions, shapes. */
#include "op_table.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The rows, by kind. Adding an op: one line here, its row in a family file (docs/adding-an-op.md). */
/* clang-format off */
#define DL_OP_ROWS(X)                 \
    X(CONV2D, conv2d)                 \
    X(RELU, relu)                     \
    X(MAXPOOL2D, maxpool2d)           \
    X(AVGPOOL2D, avgpool2d)           \
    X(GLOBAL_AVGPOOL, global_avgpool) \
    X(LINEAR, linear)                 \
    X(FLATTEN, flatten)               \
    X(DROPOUT, dropout)               \
    X(SOFTMAX, softmax)               \
    X(ADD, add)                       \
    X(CONCAT, concat)                 \
    X(BATCHNORM, batchnorm)           \
    X(LEAKY_RELU, leaky_relu)         \
    X(SIGMOID, sigmoid)               \
    X(CLIP, clip)                     \
    X(MATMUL, matmul)                 \
    X(RESHAPE, reshape) \
    X(MUL, mul) \
    X(SUB, sub) \
    X(DIV, div) \
    X(POW, pow) \
    X(MIN, min) \
    X(MAX, max) \
    X(SQRT, sqrt) \
    X(EXP, exp) \
    X(LOG, log) \
    X(TANH, tanh) \
    X(ERF, erf) \
    X(NEG, neg) \
    X(ABS, abs) \
    X(RECIPROCAL, reciprocal) \
    X(HARD_SIGMOID, hard_sigmoid) \
    X(HARD_SWISH, hard_swish) \
    X(SILU, silu) \
    X(GELU, gelu) \
    X(SOFTPLUS, softplus) \
    X(TRANSPOSE, transpose) \
    X(SLICE, slice) \
    X(PAD, pad) \
    X(REDUCE_MEAN, reduce_mean) \
    X(REDUCE_SUM, reduce_sum) \
    X(REDUCE_MAX, reduce_max) \
    X(REDUCE_MIN, reduce_min) \
    X(LAYER_NORM, layer_norm) \
    X(RESIZE, resize) \
    X(LOG_SOFTMAX, log_softmax) \
    X(GROUP_NORM, group_norm) \
    X(GATHER, gather) \
    X(CONV_TRANSPOSE2D, conv_transpose2d) \
    X(CONV3D, conv3d) \
    X(CHANNEL_SHUFFLE, channel_shuffle)
/* clang-format on */

#define DECLARE(kind, name) extern const dl_op_def dl_op_row_##name;
DL_OP_ROWS(DECLARE)
#undef DECLARE

#define ENTRY(kind, name) [DL_OP_##kind] = &dl_op_row_##name,
static const dl_op_def *const rows[DL_OP_COUNT] = {DL_OP_ROWS(ENTRY)};
#undef ENTRY

const dl_op_def *dl_op_def_of(int kind) { return kind >= 0 && kind < DL_OP_COUNT ? rows[kind] : NULL; }

int dl_op_kind_from_name(const char *name) {
    for (int i = 0; i < DL_OP_COUNT; i++)
        if (rows[i] && strcmp(rows[i]->name, name) == 0) return i;
    return -1;
}

const char *dl_op_kind_name(int kind) {
    const dl_op_def *d = dl_op_def_of(kind);
    return d ? d->name : "unknown";
}

void dl_op_names(char *buf, size_t len) {
    size_t u = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < DL_OP_COUNT && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%s", i ? ", " : "", rows[i]->name);
}

int dl_op_weight_count(const dl_op_def *d, const dl_op_params *p) {
    int n = 0;
    for (const dl_weight_def *w = d->weights; w && w->suffix; w++) n += !w->optional || p->has_bias;
    return n;
}

size_t dl_op_attrs_size(uint32_t minor) {
    return minor == 0   ? offsetof(dl_op_attrs, alpha)
           : minor == 1 ? offsetof(dl_op_attrs, beta)
           : minor <= 3 ? offsetof(dl_op_attrs, n_axes)
           : minor <= 6 ? offsetof(dl_op_attrs, kernel3)
           : minor == 7 ? offsetof(dl_op_attrs, residual)
                        : sizeof(dl_op_attrs);
}

uint32_t dl_op_min_minor(const dl_op *op) {
    const dl_op_def *d = dl_op_def_of(op->kind);
    if (!d) return DL_ABI_MINOR + 1;
    uint32_t m = d->abi_minor_of ? d->abi_minor_of(op) : 0;
    if (op->attrs && op->attrs->activation > DL_ACT_RELU && m < 4) m = 4;      /* silu, gelu, ... fused: 1.4 */
    if (op->attrs && op->attrs->activation > DL_ACT_GELU_TANH && m < 5) m = 5; /* clip, leaky relu, sigmoid: 1.5 */
    if (op->attrs && op->attrs->struct_size > offsetof(dl_op_attrs, residual) && op->attrs->residual && m < 8)
        m = 8; /* a residual add fused: 1.8 */
    return m > d->abi_minor ? m : d->abi_minor;
}

double dl_op_nmse(int kind, int precision) {
    const dl_op_def *d = dl_op_def_of(kind);
    if (!d || precision < 0 || precision > DL_PRECISION_BF16) return 0;
    return d->nmse[precision];
}

void dl_op_params_default(dl_op_params *p) {
    memset(p, 0, sizeof *p);
    dl_op_attrs *a = &p->attrs;
    a->struct_size = sizeof *a;
    a->stride[0] = a->stride[1] = 1;
    a->dilation[0] = a->dilation[1] = 1;
    for (int i = 0; i < 3; i++) a->stride3[i] = a->dilation3[i] = 1;
    a->groups = 1;
    a->count_include_pad = 1;
    a->epsilon = 1e-5f;
    a->alpha = 0.01f;
    a->clip_min = -INFINITY;
    a->clip_max = INFINITY;
    a->axis = 1;
    a->beta = 1.0f;
}

/* ---- shapes ---- */

void dl_shape_of(const dl_tensor *t, dl_shape *s) {
    memset(s, 0, sizeof *s);
    s->ndim = t->ndim > DL_MAX_DIMS ? DL_MAX_DIMS : t->ndim;
    memcpy(s->d, t->shape, (size_t)s->ndim * sizeof *s->d);
}

int dl_shape_eq(const dl_shape *a, const dl_tensor *t) {
    if (a->ndim != t->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != t->shape[i]) return 0;
    return 1;
}

int64_t dl_shape_numel(const dl_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

int dl_dims_numel(const int64_t *d, int ndim, int64_t *n) {
    int64_t c = 1;
    *n = -1;
    for (int i = 0; i < ndim; i++) {
        if (d[i] < 0) return 0;
        if (d[i] == 0) c = 0; /* an empty tensor, whatever its other dims */
        else if (c && (__builtin_mul_overflow(c, d[i], &c) || c > DL_MAX_TENSOR_ELEMENTS)) {
            for (int j = i + 1; j < ndim; j++) /* a later zero still makes it empty */
                if (d[j] == 0) return *n = 0, 1;
            return 0;
        }
    }
    *n = c;
    return 1;
}

void dl_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    if (len == 0) return;
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

int64_t dl_window_out(int64_t in, int k, int s, int pb, int pe, int d, int ceil_mode) {
    int64_t span = in + pb + pe - (int64_t)d * (k - 1) - 1;
    if (span < 0 || s < 1) return 0;
    int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    /* With ceil_mode the last window must start inside the input or the left padding. */
    if (ceil_mode && (out - 1) * s >= in + pb) out--;
    return out;
}

int64_t dl_slice_dim(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first) {
    if (step == 0 || n < 1) return *first = 0, 0;
    if (start < 0) start += n; /* no overflow: n > 0 is added to a negative */
    if (end < 0) end += n;
    if (step > 0) {
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < 0 ? 0 : end > n ? n : end;
        *first = start;
        return end > start ? 1 + (end - start - 1) / step : 0; /* no overflow for any step */
    }
    start = start < 0 ? 0 : start > n - 1 ? n - 1 : start;
    end = end < -1 ? -1 : end > n - 1 ? n - 1 : end;
    *first = start;
    /* -step cannot overflow once step is below INT64_MIN's magnitude; the span is at most n */
    int64_t back = step == INT64_MIN ? INT64_MAX : -step;
    return start > end ? (start - end - 1) / back + 1 : 0;
}

int dl_axis_norm(int64_t axis, int ndim) {
    int64_t a = axis < 0 ? axis + ndim : axis;
    return a >= 0 && a < ndim ? (int)a : -1;
}

int dl_broadcast(const int64_t *as, int an, const int64_t *bs, int bn, dl_shape *y) {
    int n = an > bn ? an : bn;
    if (n > DL_MAX_DIMS) return 0;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - an ? 1 : as[i - (n - an)], db = i < n - bn ? 1 : bs[i - (n - bn)];
        if (da != db && da != 1 && db != 1) return 0;
        y->d[i] = da == 1 ? db : da;
    }
    y->ndim = n;
    return 1;
}

int dl_broadcasts_to(const dl_tensor *t, const dl_tensor *y) {
    if (t->ndim > y->ndim) return 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->shape[t->ndim - 1 - i];
        if (d != 1 && d != y->shape[y->ndim - 1 - i]) return 0;
    }
    return 1;
}
