/* resample.h — where resize reads its input, shared by the cpu and cuda plugins' kernels (host
 * and device code alike) so that both pick the same elements and weights: ONNX Resize's
 * coordinate transformations and nearest modes, and the taps of linear interpolation. In double. */
#ifndef DLRUN_RESAMPLE_H
#define DLRUN_RESAMPLE_H
#include <math.h>
#include <stdint.h>

#include "dlrun/plugin.h"

#ifdef __CUDACC__
#define DL_RESAMPLE_FN __host__ __device__ inline
#else
#define DL_RESAMPLE_FN static inline
#endif

/* The input coordinate output coordinate o maps to, out of `in` resized to `out`. */
DL_RESAMPLE_FN double dl_resample_source(int64_t o, int64_t in, int64_t out, int coord) {
    double scale = (double)out / (double)in;
    switch (coord) {
    case DL_COORD_ALIGN_CORNERS: return out == 1 ? 0.0 : (double)o * (double)(in - 1) / (double)(out - 1);
    case DL_COORD_ASYMMETRIC: return (double)o / scale;
    case DL_COORD_PYTORCH_HALF_PIXEL: return out == 1 ? 0.0 : ((double)o + 0.5) / scale - 0.5;
    default: return ((double)o + 0.5) / scale - 0.5;
    }
}

/* The nearest input index of coordinate c (ONNX's nearest_mode), inside [0, n). */
DL_RESAMPLE_FN int64_t dl_resample_nearest(double c, int64_t n, int mode) {
    double f = floor(c), i;
    switch (mode) {
    case DL_NEAREST_FLOOR: i = f; break;
    case DL_NEAREST_CEIL: i = ceil(c); break;
    case DL_NEAREST_ROUND_PREFER_CEIL: i = c - f >= 0.5 ? f + 1 : f; break;
    default: i = c - f > 0.5 ? f + 1 : f; break;
    }
    return i < 0 ? 0 : i > (double)(n - 1) ? n - 1 : (int64_t)i;
}

/* Linear interpolation taps of coordinate c: i0, i1 (inside [0, n)) and i1's weight. */
DL_RESAMPLE_FN void dl_resample_taps(double c, int64_t n, int64_t *i0, int64_t *i1, float *w) {
    if (c < 0) c = 0;
    if (c > (double)(n - 1)) c = (double)(n - 1);
    *i0 = (int64_t)c;
    *i1 = *i0 + 1 < n ? *i0 + 1 : n - 1;
    *w = (float)(c - (double)*i0);
}
#endif
