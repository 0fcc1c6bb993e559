/* npy.h — NumPy .npy files: read (f32, f64, f16, i32, i64 converted to f32) and write f32. */
#ifndef DLRUN_NPY_H
#define DLRUN_NPY_H
#include "dlrun/dlrun.h" /* dl_npy_read/write are public */
#include "graph.h"

/* On success *data is malloc'd f32 in C order, shape/ndim filled (ndim <= DL_MAX_DIMS). */
dl_status dl_npy_read(const char *path, float **data, int64_t *shape, int *ndim, dl_error *err);
dl_status dl_npy_write(const char *path, const float *data, const int64_t *shape, int ndim, dl_error *err);
#endif
