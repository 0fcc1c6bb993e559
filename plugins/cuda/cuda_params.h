/* cuda_params.h — the launch parameters of the cuda plugin's elementwise, movement, reduction,
 * conv_transpose2d and conv3d kernels (ABI 1.4 ops, conv3d of 1.7, and the unary/binary ones before
 * them), the builders that compute them once at prepare from the op's kind, attributes and shapes,
 * and the index math the kernels do per element with them. Plain C without CUDA headers (as
 * cuda_formats.h), so that tests/test_cuda_params.c checks the builders and the index math on the
 * host against naive loops; the index functions are DL_GPU_HD, the same code on the host and in the
 * kernels (ops/). kernels.h includes this header and declares the launchers that take these
 * structs. */
#ifndef DLRUN_CUDA_PARAMS_H
#define DLRUN_CUDA_PARAMS_H
#include <math.h>
#include <stdint.h>

#include "gpu_storage.h"
#include "op_check.h"
#include "resample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (ops/elementwise.cu) ---- */

typedef enum dlk_unary_kind {
    DLK_RELU,         /* y = x > 0 ? x : 0 */
    DLK_LEAKY_RELU,   /* y = x >= 0 ? x : a * x */
    DLK_SIGMOID,      /* y = 1 / (1 + exp(-x)), computed without overflow */
    DLK_CLIP,         /* y = min(max(x, a), b) */
    DLK_SQRT,         /* (1.4 from here) */
    DLK_EXP,          /* */
    DLK_LOG,          /* */
    DLK_TANH,         /* */
    DLK_ERF,          /* */
    DLK_NEG,          /* y = -x */
    DLK_ABS,          /* */
    DLK_RECIPROCAL,   /* y = 1 / x */
    DLK_HARD_SIGMOID, /* y = clamp(a * x + b, 0, 1), NaN kept */
    DLK_HARD_SWISH,   /* y = x * clamp(x + 3, 0, 6) / 6, NaN kept */
    DLK_SILU,         /* y = x * sigmoid(x) */
    DLK_GELU_ERF,     /* y = x / 2 * (1 + erf(x / sqrt(2))) */
    DLK_GELU_TANH,    /* y = x / 2 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    DLK_SOFTPLUS      /* y = max(x, 0) + log1p(exp(-|x|)): log(1 + exp(x)) without overflow */
} dlk_unary_kind;

typedef struct dlk_unary_p {
    dlk_unary_kind kind;
    float a, b; /* leaky relu: a = alpha; clip: a = min, b = max; hard sigmoid: a = alpha, b = beta */
} dlk_unary_p;

/* y's shape and each operand's strides over it (0 where the operand repeats), numpy broadcasting;
 * dimensions merged where both operands step through them as through one */
typedef struct dlk_bcast {
    int nd;
    int64_t ys[8], sa[8], sb[8];
} dlk_bcast;

/* y = a OP b; min and max propagate NaN (fminf/fmaxf would drop it), as the CPU plugin does */
typedef enum dlk_binary_kind { DLK_ADD, DLK_MUL, DLK_SUB, DLK_DIV, DLK_POW, DLK_MIN, DLK_MAX } dlk_binary_kind;

typedef struct dlk_binary_p {
    dlk_binary_kind kind;
    int bcast;    /* the operands broadcast: bc is used; else both have y's shape */
    dlk_bcast bc; /* the broadcast, when bcast */
} dlk_binary_p;

/* 1 and *p filled if g's kind runs on the unary kernel (relu ... softplus), else 0. */
int cu_unary_params(const dl_op_geom *g, dlk_unary_p *p);
/* 1 and *p filled if g's kind is binary (add, mul, sub, div, pow, min, max), else 0. */
int cu_binary_params(const dl_op_geom *g, dlk_binary_p *p);

/* ---- movement (ops/movement.cu) ---- */

/* A strided gather (transpose, slice): y[i] = x[base + sum over d of coord_d(i) * st[d]], i
 * row-major over ys[0..nd); dimensions merged where the input steps through them as through one,
 * size-1 dimensions dropped (nd >= 1). */
typedef struct dlk_gather_p {
    int nd;
    int64_t ys[8], st[8];
    int64_t base;
} dlk_gather_p;

/* Pad: y[i] = x[dlk_pad_source(p, i)], or value where that is -1 (constant mode). */
typedef struct dlk_pad_p {
    int nd, mode; /* mode: dl_pad_mode */
    float value;
    int64_t ys[8], xs[8], xst[8], before[8]; /* output and input sizes, input strides, pads before */
} dlk_pad_p;

/* Resize of the H and W of [N,C,H,W] (ONNX Resize's rules, as the CPU plugin's cpu_resize). */
typedef struct dlk_resize_p {
    int64_t planes;           /* n * c */
    int64_t h, w, oh, ow;     /* input and output planes */
    int mode, coord, nearest; /* dl_resize_mode, dl_resize_coord, dl_resize_nearest */
} dlk_resize_p;

/* gather (ONNX Gather, NumPy's take) along an axis: x viewed as [outer, n, inner]; the m int64
 * indices, each in [-n, n) (negative ones count from the end), pick along the axis: y is
 * [outer, m, inner], numel elements. */
typedef struct dlk_take_p {
    int64_t outer, n, inner, m;
    int64_t numel; /* outer * m * inner: one thread per element */
} dlk_take_p;

void cu_transpose_params(const dl_op_geom *g, dlk_gather_p *p);
void cu_slice_params(const dl_op_geom *g, dlk_gather_p *p);
/* channel_shuffle as a gather: y seen as [N, C/groups, groups, rest] reads x seen as [N, groups,
 * C/groups, rest] (ShuffleNet's transpose of dims 1 and 2), row-major */
void cu_channel_shuffle_params(const dl_op_geom *g, dlk_gather_p *p);
void cu_pad_params(const dl_op_geom *g, dlk_pad_p *p);
void cu_resize_params(const dl_op_geom *g, dlk_resize_p *p);
void cu_gather_params(const dl_op_geom *g, dlk_take_p *p);

/* ---- conv_transpose2d (ops/conv_transpose.cu) ---- */

/* PyTorch's ConvTranspose2d on x [n, c, h, w] with weight [c, ocg, kh, kw] (ocg = oc / groups
 * output channels per group, cg = c / groups input channels per group) into y [n, oc, oh, ow]:
 * input pixel (iy, ix) with tap (ty, tx) adds into output (iy * sh - ph + ty * dh, ix * sw - pw +
 * tx * dw). The kernel runs the other way: one thread per output element sums the (input, tap)
 * pairs that land on it (dlk_deconv_src), then adds the bias and applies relu. */
typedef struct dlk_deconv_p {
    int64_t c, h, w;    /* input (the images follow from numel) */
    int64_t oc, oh, ow; /* output */
    int64_t cg, ocg;    /* channels per group: input, output */
    int kh, kw, sh, sw; /* kernel, stride */
    int ph, pw, dh, dw; /* padding before (top, left: the end padding only shortens y), dilation */
    int relu;           /* relu fused after the bias */
    int64_t numel;      /* output elements: one thread each */
} dlk_deconv_p;

void cu_conv_transpose2d_params(const dl_op_geom *g, dlk_deconv_p *p);

/* ---- conv3d (ops/conv3d.cu, ABI 1.7) ---- */

/* PyTorch's Conv3d on x [n, c, d, h, w] with weight [oc, cg, kd, kh, kw] (cg = c / groups input
 * channels per group, ocg = oc / groups output channels per group) into y [n, oc, od, oh, ow]:
 * output (oz, oy, ox) with tap (tz, ty, tx) reads input (oz * sd - pd + tz * dd, oy * sh - ph +
 * ty * dh, ox * sw - pw + tx * dw), nothing where that is in the padding (dlk_conv_src). One
 * thread per output element sums its group's cg channels over every tap inside the input, then
 * adds the bias and applies relu. */
typedef struct dlk_conv3d_p {
    int64_t c, d, h, w;     /* input (the images follow from numel) */
    int64_t oc, od, oh, ow; /* output */
    int64_t cg, ocg;        /* channels per group: input, output */
    int kd, kh, kw;         /* kernel */
    int sd, sh, sw;         /* stride */
    int pd, ph, pw;         /* padding before (front, top, left: the end padding only shortens y) */
    int dd, dh, dw;         /* dilation */
    int relu;               /* relu fused after the bias */
    int64_t numel;          /* output elements: one thread each */
} dlk_conv3d_p;

void cu_conv3d_params(const dl_op_geom *g, dlk_conv3d_p *p);

/* ---- reductions and layer_norm (ops/reduce_norm.cu) ---- */

typedef enum dlk_reduce_kind { DLK_REDUCE_SUM, DLK_REDUCE_MEAN, DLK_REDUCE_MAX, DLK_REDUCE_MIN } dlk_reduce_kind;

/* Output o (row-major over the kept dimensions ks) combines the `count` input elements at
 * x + dlk_offset(nk, ks, kst, o) + dlk_offset(nr, rs, rst, q), q < count. Adjacent dimensions of
 * one group are merged where they can be (nk, nr >= 1: a group without dimensions is one of size
 * 1). */
typedef struct dlk_reduce_p {
    dlk_reduce_kind how;
    int nk, nr;
    int64_t ks[8], kst[8]; /* kept dimensions: sizes, input strides */
    int64_t rs[8], rst[8]; /* reduced dimensions: sizes, input strides */
    int64_t kept, count;   /* outputs; input elements per output */
    /* The input's last dimension is reduced: one block per output, its threads reading adjacent
     * elements (`threads` of them); else one thread per output, adjacent threads reading adjacent
     * elements. */
    int inner_reduced, threads;
} dlk_reduce_p;

/* layer_norm: rows of `inner` contiguous elements, each normalised by one block of `threads` */
typedef struct dlk_layer_norm_p {
    int64_t rows, inner;
    float eps;
    int threads;
} dlk_layer_norm_p;

void cu_reduce_params(const dl_op_geom *g, dlk_reduce_p *p);
void cu_layer_norm_params(const dl_op_geom *g, dlk_layer_norm_p *p);

/* group_norm (ABI 1.4): one row per (image, group) of per_group channels x spatial positions. */
typedef struct dlk_group_norm_p {
    int64_t rows, inner, spatial, groups, per_group;
    float eps;
    int threads;
} dlk_group_norm_p;
void cu_group_norm_params(const dl_op_geom *g, dlk_group_norm_p *p);

/* Threads of a block that reduces `work` elements: a multiple of 32 from 32 to 256. */
int cu_block_threads(int64_t work);

/* ---- index math, the same on the host and in the kernels ---- */

/* sum over d of coord_d(i) * st[d], i row-major over s[0..nd) */
DL_GPU_HD int64_t dlk_offset(int nd, const int64_t *s, const int64_t *st, int64_t i) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % s[d]) * st[d];
        i /= s[d];
    }
    return off;
}

/* Where output element i of a pad reads the input, or -1 for the fill (constant mode). */
DL_GPU_HD int64_t dlk_pad_source(const dlk_pad_p *p, int64_t i) {
    int64_t off = 0;
    for (int d = p->nd - 1; d >= 0; d--) {
        int64_t j = i % p->ys[d] - p->before[d], n = p->xs[d];
        i /= p->ys[d];
        if (j < 0 || j >= n) {
            if (p->mode == DL_PAD_EDGE) j = j < 0 ? 0 : n - 1;
            else if (p->mode == DL_PAD_REFLECT) j = j < 0 ? -j : 2 * (n - 1) - j; /* pads are below n */
            else return -1;
        }
        off += j * p->xst[d];
    }
    return off;
}

/* Where output element i of a gather reads x (an offset), or -1 when its index is outside
 * [-n, n); *at is the position of that index in idx either way. */
DL_GPU_HD int64_t dlk_take_source(const dlk_take_p *p, const int64_t *idx, int64_t i, int64_t *at) {
    const int64_t t = i % p->inner, r = i / p->inner, j = r % p->m, o = r / p->m;
    int64_t k = idx[j];
    *at = j;
    if (k < -p->n || k >= p->n) return -1;
    if (k < 0) k += p->n;
    return (o * p->n + k) * p->inner + t;
}

/* Along one axis of a transposed convolution: 1 and *src, the input position whose tap t adds into
 * output position o (o = src * stride - pad + t * dil, 0 <= src < in), or 0 when there is none. */
DL_GPU_HD int dlk_deconv_src(int64_t o, int t, int stride, int pad, int dil, int64_t in, int64_t *src) {
    const int64_t s = o + pad - (int64_t)t * dil;
    if (s < 0 || s % stride) return 0;
    *src = s / stride;
    return *src < in;
}

/* Along one axis of a convolution: 1 and *src, the input position that tap t of output position o
 * reads (src = o * stride - pad + t * dil), or 0 when that is in the padding (outside [0, in)). */
DL_GPU_HD int dlk_conv_src(int64_t o, int t, int stride, int pad, int dil, int64_t in, int64_t *src) {
    *src = o * stride - pad + (int64_t)t * dil;
    return *src >= 0 && *src < in;
}

/* resize's coordinates and taps: core/ops/resample.h, shared with the cpu plugin */

#ifdef __cplusplus
}
#endif
#endif
