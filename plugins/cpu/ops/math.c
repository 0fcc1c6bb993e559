/* math.c — the CPU kernels of the elementwise arithmetic: add (with its fused relu), mul, sub,
 * div, pow, min, max with numpy broadcasting, and the functions of one element (sqrt, exp, log,
 * tanh, erf, neg, abs, reciprocal, hard_sigmoid, hard_swish, silu, gelu, softplus). NaN goes
 * through every one of them, as in PyTorch. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

static int64_t count(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* y = EXPR(a, b) over the broadcast shape: equal shapes and a scalar b run flat; otherwise y is
 * walked row by row along its last dimension after dl_merge_dims (y [1, C, H, W] = a * b [1, C, 1, 1]
 * is C rows of H*W, b's stride 0 along them), each operand with its own strides, 0 where it
 * repeats, the row's loop written out for the unit and zero strides so that it vectorises. */
#define BINARY_ROW(EXPR, LA, LB)                        \
    for (int64_t j = 0; j < len; j++) {                 \
        const float a = pa[j * (LA)], b = pb[j * (LB)]; \
        py[j] = (EXPR);                                 \
    }
/* Row r of the merged broadcast, its loop written out for each pair of strides along it: 1 where
 * the operand has y's last merged extent, 0 where it repeats (both 0 would make that extent 1,
 * and dl_merge_dims drops those) */
#define BINARY_ROW_AT(EXPR, r)                                                                                  \
    {                                                                                                           \
        const float *pa = A + dl_bcast_offset(r, nd - 1, ys, sa), *pb = B + dl_bcast_offset(r, nd - 1, ys, sb); \
        float *py = y + (r)*len;                                                                                \
        if (la == 1 && lb == 1) BINARY_ROW(EXPR, 1, 1)                                                          \
        else if (la == 1) BINARY_ROW(EXPR, 1, 0)                                                                \
        else BINARY_ROW(EXPR, 0, 1)                                                                             \
    }
#define BINARY_BODY(EXPR)                                                             \
    const float *A = in[0].data, *B = in[1].data;                                     \
    const dl_op_geom *g = &k->g;                                                      \
    const int64_t na = count(g->xnd, g->xs), nb = count(g->bnd, g->bs), n = g->numel; \
    if (na == n && nb == n) {                                                         \
        CPU_FOR(n, i, n, const float a = A[i]; const float b = B[i]; y[i] = (EXPR);); \
        return;                                                                       \
    }                                                                                 \
    if (na == n && nb == 1) {                                                         \
        const float b = B[0];                                                         \
        CPU_FOR(n, i, n, const float a = A[i]; y[i] = (EXPR););                       \
        return;                                                                       \
    }                                                                                 \
    int64_t ys[8], sa[8], sb[8];                                                      \
    memcpy(ys, g->ys, sizeof ys);                                                     \
    dl_bcast_strides(g->xnd, g->xs, g->ynd, g->ys, sa);                               \
    dl_bcast_strides(g->bnd, g->bs, g->ynd, g->ys, sb);                               \
    const int nd = dl_merge_dims(g->ynd, ys, (int64_t *const[]){sa, sb}, 2);          \
    const int64_t len = ys[nd - 1], rows = n / len, la = sa[nd - 1], lb = sb[nd - 1]; \
    CPU_FOR(n, r, rows, BINARY_ROW_AT(EXPR, r));

/* add with its fused activation: a loop of its own for each common one, where the constant
 * activation inlines (no switch per element) and, for relu, clip and silu, the loop vectorises */
void cpu_add(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws;
    const dl_op_attrs at = k->g.a; /* a local copy: clip's bounds and leaky relu's slope in registers */
    switch (at.activation) {
    case DL_ACT_NONE: {
        BINARY_BODY(a + b)
    } break;
    case DL_ACT_RELU: {
        BINARY_BODY(cpu_activate(a + b, DL_ACT_RELU, &at))
    } break;
    case DL_ACT_CLIP: {
        BINARY_BODY(cpu_activate(a + b, DL_ACT_CLIP, &at))
    } break;
    case DL_ACT_GELU: {
        BINARY_BODY(cpu_activate(a + b, DL_ACT_GELU, &at))
    } break;
    case DL_ACT_SILU: {
        BINARY_BODY(cpu_activate(a + b, DL_ACT_SILU, &at))
    } break;
    default: {
        BINARY_BODY(cpu_activate(a + b, at.activation, &at))
    }
    }
}

/* min and max propagate NaN (fminf/fmaxf would drop it; max: cpu_max_nan) */
static inline float min_nan(float a, float b) { return a < b || isnan(a) ? a : b; }

#define BINARY_KERNEL(name, EXPR)                                                  \
    void cpu_##name(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) { \
        (void)ws;                                                                  \
        BINARY_BODY(EXPR)                                                          \
    }

BINARY_KERNEL(mul, a *b)
BINARY_KERNEL(sub, a - b)
BINARY_KERNEL(div, a / b)
BINARY_KERNEL(pow, powf(a, b))
BINARY_KERNEL(min, min_nan(a, b))
BINARY_KERNEL(max, cpu_max_nan(a, b))

/* ---- one element ---- */

/* clamp to [lo, hi] keeping NaN */
static inline float clamp_nan(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

#define UNARY_KERNEL(name, EXPR)                                                   \
    void cpu_##name(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) { \
        const float *X = in[0].data;                                               \
        const dl_op_attrs *at = &k->g.a;                                           \
        const int64_t n = k->g.numel;                                              \
        (void)ws, (void)at;                                                        \
        CPU_FOR(n, i, n, const float x = X[i]; y[i] = (EXPR););                    \
    }

UNARY_KERNEL(sqrt, sqrtf(x))
UNARY_KERNEL(exp, expf(x))
UNARY_KERNEL(log, logf(x))
UNARY_KERNEL(tanh, tanhf(x))
UNARY_KERNEL(erf, erff(x))
UNARY_KERNEL(neg, -x)
UNARY_KERNEL(abs, fabsf(x))
UNARY_KERNEL(reciprocal, 1.0f / x)
UNARY_KERNEL(hard_sigmoid, clamp_nan(at->alpha *x + at->beta, 0.0f, 1.0f))
/* the ops that are also fused activations: one formula for both (activate.h) */
UNARY_KERNEL(hard_swish, cpu_activate(x, DL_ACT_HARD_SWISH, at))
UNARY_KERNEL(silu, cpu_activate(x, DL_ACT_SILU, at))
UNARY_KERNEL(gelu, cpu_activate(x, at->mode == DL_GELU_TANH ? DL_ACT_GELU_TANH : DL_ACT_GELU, at))
UNARY_KERNEL(softplus, fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)))) /* NaN: log1pf(NaN) */
