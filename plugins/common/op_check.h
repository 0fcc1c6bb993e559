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
#ifdef __cplusplus
}
#endif
#endif
