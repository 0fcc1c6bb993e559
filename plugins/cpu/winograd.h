/* winograd.h — 3x3 stride-1 convolution by Winograd F(4x4, 3x3) on top of the plugin's cpu_gemm.
 *
 * Each 6x6 input tile is transformed (V = B^T d B), each filter once at prepare (U = G g G^T),
 * the 36 elementwise products become 36 GEMMs over channels, and each 6x6 result is transformed
 * back into a 4x4 output tile (Y = A^T M A). Multiplications drop 4x against direct or im2col
 * convolution (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015). The
 * tiles are processed in blocks so the transformed data stays a few MB. The transforms take a
 * vector of tiles at once (16 with AVX-512, else 8); U is packed once as cpu_gemm's A, V is written
 * straight in its packed-B layout, and M is laid out [filter][position][tile], so that each
 * filter's 36 rows lie together when they are transformed back.
 * On channels-last tensors the vectors hold channels instead: a tile's window is 36 pixels of
 * whole vectors, the products are M^T = V^T U^T (the tiles as cpu_gemm's A, written in its
 * packed layout by one 8 x 8 transpose per 6 tiles, position and 8 channels; U^T packed as its B),
 * and M [tile][position][filter] (each tile's 36 positions together) is transformed back a
 * vector of filters at a time, each output pixel's filters stored together as they lie in y. */
#ifndef DLRUN_CPU_WINOGRAD_H
#define DLRUN_CPU_WINOGRAD_H
#include <stddef.h>
#include <stdint.h>

#include "dlrun/plugin.h"

typedef struct cpu_winograd {
    int n, c, h, w, k;    /* input [n, c, h, w], k filters */
    int pad_t, pad_l;     /* padding before; padding after is implied by oh, ow */
    int oh, ow;           /* output size */
    int tiles_h, tiles_w; /* 4x4 output tiles per image */
    int64_t tiles;        /* n * tiles_h * tiles_w */
    int block;            /* tiles transformed per block */
    int cl;               /* 1: channels-last tensors (x [n, h, w, c], y [n, oh, ow, k]) */
    float *u;             /* transformed filters: 36 k x c matrices, each packed as cpu_gemm's A (as its B,
                           * transposed, when cl) */
} cpu_winograd;

/* 1 if a conv with these parameters can go through Winograd and is likely faster. */
int cpu_winograd_suits(int kh, int kw, int sh, int sw, int dh, int dw, int groups, int n, int c, int k, int oh, int ow);
/* Transforms the filters (weight [k, c, 3, 3]) for tensors in NCHW (cl 0) or NHWC (cl 1); returns
 * 0 when out of memory. */
int cpu_winograd_init(cpu_winograd *wg, int n, int c, int h, int w, int k, int pad_t, int pad_l, int oh, int ow,
                      const float *weight, int cl);
size_t cpu_winograd_workspace(const cpu_winograd *wg);
/* y[n, k, oh, ow] = conv(x) + bias (may be NULL) + res (a fused residual of y's shape; may be
 * NULL), then the conv's fused activation (a->activation, with its parameters from a); x, y and
 * res channels-last where wg->cl. */
void cpu_winograd_run(const cpu_winograd *wg, const float *x, const float *bias, const float *res, const dl_op_attrs *a,
                      float *y, float *workspace);
void cpu_winograd_free(cpu_winograd *wg);
#endif
