/* kernels.h — launchers of the cuda plugin's own kernels (kernels.cu), callable from C. Each
 * returns 0, or the cudaError_t of the launch. All tensors are f32, NCHW, dense, on the device. */
#ifndef DLRUN_CUDA_KERNELS_H
#define DLRUN_CUDA_KERNELS_H
#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlk_conv {
    int n, c, h, w;          /* input */
    int oc, oh, ow;          /* output */
    int kh, kw, sh, sw, ph, pw, dh, dw, groups;
} dlk_conv;

enum { DLK_VARIANTS = 2 };   /* GEMM tile shapes: 0 = 64x64 (4x4 per thread), 1 = 32x32 (2x2) */

int dlk_conv2d(const dlk_conv *p, const float *x, const float *w, const float *b, float *y, int relu, int variant,
               cudaStream_t s);
int dlk_linear(int n, int in, int out, const float *x, const float *w, const float *b, float *y, int relu, int variant,
               cudaStream_t s);
int dlk_relu(const float *x, float *y, int64_t n, cudaStream_t s);
/* kind 0: leaky relu (p0 = alpha), 1: sigmoid, 2: clip (p0 = min, p1 = max) */
int dlk_unary(int kind, const float *x, float *y, int64_t n, float p0, float p1, cudaStream_t s);
int dlk_add(const float *a, const float *b, float *y, int64_t n, int relu, cudaStream_t s);
/* y's shape and each operand's strides over it (0 where the operand repeats), numpy broadcasting */
typedef struct dlk_bcast {
    int nd;
    int64_t ys[8], sa[8], sb[8];
} dlk_bcast;
int dlk_add_bcast(const float *a, const float *b, float *y, int64_t n, const dlk_bcast *bc, int relu, cudaStream_t s);
int dlk_batchnorm(const float *x, const float *gamma, const float *beta, const float *mean, const float *var, float eps,
                  float *y, int64_t planes, int c, int64_t inner, int relu, cudaStream_t s);
int dlk_maxpool(const float *x, float *y, int64_t planes, int h, int w, int oh, int ow, int kh, int kw, int sh, int sw,
                int pt, int pl, int dh, int dw, cudaStream_t s);
int dlk_avgpool(const float *x, float *y, int64_t planes, int h, int w, int oh, int ow, int kh, int kw, int sh, int sw,
                int pt, int pl, int pb, int pr, int count_include_pad, cudaStream_t s);
int dlk_global_avgpool(const float *x, float *y, int64_t planes, int64_t plane, cudaStream_t s);
int dlk_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, cudaStream_t s);
/* y[o * row + offset + i] = x[o * chunk + i] for o < outer, i < chunk: one input of a concat. */
int dlk_concat_part(const float *x, float *y, int64_t outer, int64_t chunk, int64_t row, int64_t offset, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
