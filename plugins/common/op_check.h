/* op_check.h — exact op checks shared by the plugins' supports() (see op_check.c). */
#ifndef DLRUN_OP_CHECK_H
#define DLRUN_OP_CHECK_H
#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Output size of a conv/pool window along one axis (PyTorch's rule); < 1 if it does not fit. */
int64_t dl_window_out(int64_t in, int k, int s, int pb, int pe, int d, int ceil_mode);
/* 1 if a dense f32 NCHW implementation of every ABI 1.x op can run op, else 0 with the reason. */
int dl_op_check(const dl_op *op, dl_error *why);
/* 1 if t broadcasts (numpy rules, aligned at the last dimension) to y's shape */
int dl_broadcasts_to(const dl_tensor *t, const dl_tensor *y);
/* Broadcast indexing: st[d] is the step in t's elements along y's dimension d (0 where t
 * repeats); dl_bcast_offset maps the row-major index i over ys[0..nd) to t's offset. */
void dl_bcast_strides(int tnd, const int64_t *ts, int ynd, const int64_t *ys, int64_t *st);
int64_t dl_bcast_offset(int64_t i, int nd, const int64_t *ys, const int64_t *st);
/* 1 for the ops whose kernels read element i before writing element i (safe in place). */
int dl_op_is_elementwise(int kind);

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
    int has_bias;         /* conv2d, linear */
} dl_op_geom;

/* Fills g from op; 0 when out of memory. dl_op_geom_free releases what it allocated. */
int dl_op_geom_init(dl_op_geom *g, const dl_op *op);
void dl_op_geom_free(dl_op_geom *g);
#ifdef __cplusplus
}
#endif
#endif
