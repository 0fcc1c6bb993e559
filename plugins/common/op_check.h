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
/* 1 for the ops whose kernels read element i before writing element i (safe in place). */
int dl_op_is_elementwise(int kind);

/* What a prepared kernel keeps of its op, the same in every plugin: the op may not outlive
 * prepare, so attributes and shapes are copied. */
typedef struct dl_op_geom {
    dl_op_kind kind;
    dl_op_attrs a;
    int n_inputs, xnd, ynd;
    int64_t xs[8], ys[8]; /* first input's and output's shapes */
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
