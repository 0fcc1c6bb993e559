/* op_rows.h — what the family files of core/ops/ share while writing rows: failing with a reason,
 * naming inputs and shapes in messages, the common infer functions. Private to core/ops/. */
#ifndef DLRUN_OP_ROWS_H
#define DLRUN_OP_ROWS_H
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_table.h"

/* return dl_fail(...), 0 — for the int-returning checks */
#define DL_NO(why, ...) return (dl_fail(why, DL_E_UNSUPPORTED, __VA_ARGS__), 0)

/* Input i for a message: "'conv1' [1, 64, 56, 56]" with names, else "#2 [1, 64, 56, 56]". */
static inline const char *dl_in_str(const dl_op *op, const dl_infer_ctx *cx, int i, char *buf, size_t len) {
    char s[128];
    dl_shape_str(op->inputs[i].shape, op->inputs[i].ndim, s, sizeof s);
    if (cx && cx->names) snprintf(buf, len, "'%s' %s", cx->names[i], s);
    else snprintf(buf, len, "#%d %s", i + 1, s);
    return buf;
}

/* The shape of input i, as text. */
static inline const char *dl_shape_txt(const dl_tensor *t, char *buf, size_t len) {
    dl_shape_str(t->shape, t->ndim, buf, len);
    return buf;
}

/* y = the first input's shape (ops that keep it). */
int dl_infer_same(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why);
/* 1 if the first input has channels in dimension 1 that attrs.groups divides (group_norm,
 * channel_shuffle); else 0 with the reason. */
int dl_check_channel_groups(const dl_op *op, const dl_infer_ctx *cx, dl_error *why);
/* y = the numpy broadcast of the two inputs' shapes (add, mul, ...). */
int dl_infer_broadcast(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why);
/* 1 if t is the vector [n] */
int dl_is_vec(const dl_tensor *t, int64_t n);
/* FLOPs: one per output element, and none. */
double dl_flops_numel(const dl_op *op);
double dl_flops_none(const dl_op *op);
#endif
