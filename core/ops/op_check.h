/* op_check.h — what the in-tree plugins share about ops: the exact supports() check from the op
 * table, the in-place rule, numpy broadcast indexing, and what a prepared kernel keeps. */
#ifndef DLRUN_OP_CHECK_H
#define DLRUN_OP_CHECK_H
#include "op_table.h"

#ifdef __cplusplus
extern "C" {
#endif
/* 1 if a dense f32 NCHW implementation of every op in the table can run op: its kind, attribute
 * version, input and output counts, dtypes, fused activation and every shape (the row's infer
 * must give the output's shape); else 0 with the reason. */
int dl_op_check(const dl_op *op, dl_error *why);
/* The same check, also accepting the storage formats in `formats` (ABI 1.3): f16 and bf16 tensors
 * and channels-last 4-D tensors, for a plugin that converts them. */
enum { DL_ACCEPT_F16 = 1, DL_ACCEPT_BF16 = 2, DL_ACCEPT_CHANNELS_LAST = 4 };
/* ... and fused activations past relu (ABI 1.4: silu, hard_swish, gelu; 1.5: clip, leaky relu,
 * sigmoid) on the rows that fuse relu, for a plugin whose kernels apply them all. */
enum { DL_ACCEPT_ACTIVATIONS = 8 };
/* ... and a residual add fused into the rows that take one (ABI 1.8, attrs.residual: the last
 * input, of the output's shape, dtype and layout), for a plugin whose kernels add it. */
enum { DL_ACCEPT_RESIDUAL = 16 };
/* The input index of op's fused residual (attrs.residual, on a host of ABI 1.8 or later), or 0 */
static inline int dl_op_residual(const dl_op *op) {
    return op->attrs && op->attrs->struct_size > offsetof(dl_op_attrs, residual) && op->attrs->residual
               ? op->n_inputs - 1
               : 0;
}
int dl_op_check_as(const dl_op *op, unsigned formats, dl_error *why);
/* 1 for the kinds the table marks elementwise (a kernel reading element i before writing it may
 * overwrite input 0). */
int dl_op_is_elementwise(int kind);
/* Broadcast indexing: st[d] is the step in t's elements along y's dimension d (0 where t
 * repeats); dl_bcast_offset maps the row-major index i over ys[0..nd) to t's offset. */
void dl_bcast_strides(int tnd, const int64_t *ts, int ynd, const int64_t *ys, int64_t *st);
int64_t dl_bcast_offset(int64_t i, int nd, const int64_t *ys, const int64_t *st);
/* Merges adjacent dimensions of the shape s[0..nd) that k stride arrays st[0..k) all step through
 * as through one (st[d] == st[d + 1] * s[d + 1]) and drops size-1 ones, in place; returns the new
 * rank (at least 1: a single dimension of size 1 with strides 0 when nothing is left). */
int dl_merge_dims(int nd, int64_t *s, int64_t *const *st, int k);

/* What a prepared kernel keeps of its op, the same in every plugin: the op may not outlive
 * prepare, so attributes and shapes are copied. */
typedef struct dl_op_geom {
    dl_op_kind kind;
    dl_op_attrs a;
    int n_inputs, xnd, ynd;
    int64_t xs[8], ys[8]; /* first input's and output's shapes */
    int bnd, cnd;         /* second and third inputs' ranks (0 when absent) */
    int64_t bs[8], cs[8]; /* and shapes: add's and matmul's other operands */
    int64_t numel;        /* output elements */
    int64_t *cat_len;     /* concat: each input's extent along the axis */
    int has_bias;         /* conv2d, linear, conv_transpose2d, conv3d */
    int residual;         /* conv2d, linear: the input index of a fused residual (a.residual), or 0: none */
} dl_op_geom;

/* Fills g from op; 0 when out of memory. dl_op_geom_free releases what it allocated. */
int dl_op_geom_init(dl_op_geom *g, const dl_op *op);
void dl_op_geom_free(dl_op_geom *g);
#ifdef __cplusplus
}
#endif
#endif
