/* test_cpu_ops_v14.c — the CPU kernels of the ABI 1.4 ops against naive loops in double on random
 * inputs with odd sizes: the broadcasting arithmetic (mul, sub, div, pow, min, max), the functions
 * of one element, transpose, slice, pad, resize, the reductions and layer_norm. Each test runs in
 * f32 and in every storage format (OP_TEST, tests/support/op_harness.h). Also NaN going through
 * the elementwise ops, log_softmax, group_norm, fused activations in the epilogues, and supports()
 * refusing what the rows refuse; gather with int64 indices, out-of-range ones refused at run;
 * conv_transpose2d against a scatter through the kernel. */
#define _GNU_SOURCE
#include "op_harness.h"
#include "op_table.h"

/* Row-major strides of a test tensor. */
static void strides(const tt *t, int64_t *st) {
    int64_t s = 1;
    for (int d = t->nd - 1; d >= 0; d--) st[d] = s, s *= t->shape[d];
}

/* ---- binary ---- */

static double binary_ref(dl_op_kind k, double a, double b) {
    switch (k) {
    case DL_OP_MUL: return a * b;
    case DL_OP_SUB: return a - b;
    case DL_OP_DIV: return a / b;
    case DL_OP_POW: return pow(a, b);
    case DL_OP_MIN: return a < b ? a : b;
    default: return a > b ? a : b;
    }
}

static void check_binary(dl_op_kind kind, tt a, tt b, tt y) {
    dl_op_attrs at;
    attrs(&at);
    tt in[2] = {a, b};
    run_op(kind, &at, in, 2, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8];
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        ref[i] = binary_ref(kind, a.data[bcast_index(&a, y.nd, c)], b.data[bcast_index(&b, y.nd, c)]);
    }
    expect_close(&y, ref, 1e-12, "binary op");
    free(ref), free(a.data), free(b.data), free(y.data);
}

OP_TEST(binary_broadcasting) {
    const dl_op_kind kinds[] = {DL_OP_MUL, DL_OP_SUB, DL_OP_DIV, DL_OP_POW, DL_OP_MIN, DL_OP_MAX};
    for (int t = 0; t < 6; t++) {
        float lo = kinds[t] == DL_OP_DIV || kinds[t] == DL_OP_POW ? 0.25f : -2; /* positive divisors and bases */
        check_binary(kinds[t], MAKE(lo, 2, 3, 7, 5, 3), MAKE(lo, 2, 3, 7, 5, 3), MAKE(0, 1, 3, 7, 5, 3));
        check_binary(kinds[t], MAKE(lo, 2, 3, 7, 5, 3), MAKE(lo, 2, 7, 1, 1), MAKE(0, 1, 3, 7, 5, 3));
        check_binary(kinds[t], MAKE(lo, 2, 2, 1, 5), MAKE(lo, 2, 3, 1), MAKE(0, 1, 2, 3, 5));
        check_binary(kinds[t], MAKE(lo, 2, 1), MAKE(lo, 2, 4, 9), MAKE(0, 1, 4, 9)); /* scalar first */
        check_binary(kinds[t], MAKE(lo, 2, 5, 11), MAKE(lo, 2, 1), MAKE(0, 1, 5, 11));
        /* rows of merged dimensions: b one value per row (squeeze-excitation's scale), a one per
         * row, and rows that alternate between the two */
        check_binary(kinds[t], MAKE(lo, 2, 2, 7, 5, 3), MAKE(lo, 2, 2, 7, 1, 1), MAKE(0, 1, 2, 7, 5, 3));
        check_binary(kinds[t], MAKE(lo, 2, 1, 7, 1, 1), MAKE(lo, 2, 3, 7, 5, 3), MAKE(0, 1, 3, 7, 5, 3));
        check_binary(kinds[t], MAKE(lo, 2, 3, 1, 5), MAKE(lo, 2, 4, 1), MAKE(0, 1, 3, 4, 5));
    }
}

/* ---- one element ---- */

static double unary_ref(dl_op_kind k, double x, const dl_op_attrs *a) {
    switch (k) {
    case DL_OP_SQRT: return sqrt(x);
    case DL_OP_EXP: return exp(x);
    case DL_OP_LOG: return log(x);
    case DL_OP_TANH: return tanh(x);
    case DL_OP_ERF: return erf(x);
    case DL_OP_NEG: return -x;
    case DL_OP_ABS: return fabs(x);
    case DL_OP_RECIPROCAL: return 1 / x;
    case DL_OP_HARD_SIGMOID: return fmax(0, fmin(1, a->alpha * x + a->beta));
    case DL_OP_HARD_SWISH: return x * fmax(0, fmin(6, x + 3)) / 6;
    case DL_OP_SILU: return x / (1 + exp(-x));
    case DL_OP_SOFTPLUS: return log(1 + exp(x)); /* exp(x) stays finite in double for |x| < 700 */
    case DL_OP_CLIP: return fmax(a->clip_min, fmin(a->clip_max, x));
    case DL_OP_LEAKY_RELU: return x >= 0 ? x : a->alpha * x;
    case DL_OP_SIGMOID: return 1 / (1 + exp(-x));
    default:
        return a->mode == DL_GELU_TANH ? 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                                       : 0.5 * x * (1 + erf(x / sqrt(2)));
    }
}

static void check_unary_fn(dl_op_kind kind, float lo, float hi, int how, const char *what) {
    dl_op_attrs a;
    attrs(&a);
    a.alpha = 1.0f / 6, a.beta = 0.5f, a.mode = how;
    tt x = MAKE(lo, hi, 3, 5, 7, 11), y = MAKE(0, 1, 3, 5, 7, 11);
    run_op(kind, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t i = 0; i < y.n; i++) ref[i] = unary_ref(kind, x.data[i], &a);
    expect_close(&y, ref, 1e-12, what);
    free(ref), free(x.data), free(y.data);
}

OP_TEST(unary_functions) {
    check_unary_fn(DL_OP_SQRT, 1e-3f, 9, 0, "sqrt");
    check_unary_fn(DL_OP_EXP, -10, 10, 0, "exp");
    check_unary_fn(DL_OP_LOG, 1e-3f, 9, 0, "log");
    check_unary_fn(DL_OP_TANH, -6, 6, 0, "tanh");
    check_unary_fn(DL_OP_ERF, -3, 3, 0, "erf");
    check_unary_fn(DL_OP_NEG, -2, 2, 0, "neg");
    check_unary_fn(DL_OP_ABS, -2, 2, 0, "abs");
    check_unary_fn(DL_OP_RECIPROCAL, 0.25f, 4, 0, "reciprocal");
    check_unary_fn(DL_OP_HARD_SIGMOID, -5, 5, 0, "hard_sigmoid");
    check_unary_fn(DL_OP_HARD_SWISH, -5, 5, 0, "hard_swish");
    check_unary_fn(DL_OP_SILU, -9, 9, 0, "silu");
    check_unary_fn(DL_OP_SOFTPLUS, -30, 30, 0, "softplus");
    check_unary_fn(DL_OP_GELU, -5, 5, DL_GELU_ERF, "gelu");
    check_unary_fn(DL_OP_GELU, -5, 5, DL_GELU_TANH, "gelu tanh form");
}

/* NaN in, NaN out, for every elementwise op of 1.4 (clamps and min/max must not swallow it). */
Test(cpu_ops, nan_goes_through_elementwise_ops) {
    load();
    for (int kind = DL_OP_MUL; kind <= DL_OP_SOFTPLUS; kind++) {
        dl_op_attrs a;
        attrs(&a);
        a.alpha = 0.2f, a.beta = 0.5f;
        int binary = kind <= DL_OP_MAX;
        tt in[2] = {MAKE(0.5f, 1, 2, 7), MAKE(0.5f, 1, 2, 7)}, y = MAKE(0, 1, 2, 7);
        in[0].data[3] = NAN;
        run_op((dl_op_kind)kind, &a, in, binary ? 2 : 1, &y);
        cr_expect(isnan(y.data[3]), "%s: NaN in gives %g", dl_op_kind_name(kind), y.data[3]);
        cr_expect(!isnan(y.data[2]), "kind %d: NaN spread to a neighbour", kind);
        free(in[0].data), free(in[1].data), free(y.data);
    }
}

/* ---- transpose and slice ---- */

static void check_transpose(tt x, const int32_t *perm) {
    dl_op_attrs a;
    attrs(&a);
    int64_t ys[8];
    for (int d = 0; d < x.nd; d++) a.perm[d] = perm[d], ys[d] = x.shape[perm[d]];
    tt y = make(x.nd, ys, 0, 1);
    run_op(DL_OP_TRANSPOSE, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8], xst[8];
    strides(&x, xst);
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        int64_t off = 0;
        for (int d = 0; d < y.nd; d++) off += c[d] * xst[perm[d]];
        ref[i] = x.data[off];
    }
    expect_close(&y, ref, 0, "transpose");
    free(ref), free(x.data), free(y.data);
}

OP_TEST(transpose_permutations) {
    check_transpose(MAKE(-1, 1, 2, 3, 5, 7), (int32_t[]){0, 2, 3, 1});
    check_transpose(MAKE(-1, 1, 2, 3, 5, 7), (int32_t[]){0, 3, 1, 2});
    check_transpose(MAKE(-1, 1, 2, 7, 3, 5), (int32_t[]){0, 2, 1, 3}); /* attention heads */
    check_transpose(MAKE(-1, 1, 3, 5, 7), (int32_t[]){2, 1, 0});
    check_transpose(MAKE(-1, 1, 13, 17), (int32_t[]){1, 0});
    check_transpose(MAKE(-1, 1, 2, 3, 1, 5, 2), (int32_t[]){4, 0, 3, 2, 1});
}

/* channel_shuffle as ShuffleNet writes it: x viewed as [N, groups, C/groups, rest], its dims 1 and
 * 2 swapped, each element scattered to its place in that transposed view. */
static void check_channel_shuffle(tt x, int groups) {
    dl_op_attrs a;
    attrs(&a);
    a.groups = groups;
    tt y = make(x.nd, x.shape, 0, 1);
    run_op(DL_OP_CHANNEL_SHUFFLE, &a, &x, 1, &y);
    const int64_t per = x.shape[1] / groups, rest = x.n / x.shape[0] / x.shape[1];
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t n = 0; n < x.shape[0]; n++)
        for (int64_t i = 0; i < groups; i++)
            for (int64_t j = 0; j < per; j++)
                for (int64_t r = 0; r < rest; r++)
                    ref[((n * per + j) * groups + i) * rest + r] = x.data[((n * groups + i) * per + j) * rest + r];
    expect_close(&y, ref, 0, "channel_shuffle");
    free(ref), free(x.data), free(y.data);
}

OP_TEST(channel_shuffle_groups) {
    check_channel_shuffle(MAKE(-1, 1, 2, 6, 5, 7), 2);
    check_channel_shuffle(MAKE(-1, 1, 3, 21, 3, 5), 3);
    check_channel_shuffle(MAKE(-1, 1, 1, 116, 7, 9), 2); /* ShuffleNetV2's stage 2 */
    check_channel_shuffle(MAKE(-1, 1, 2, 12, 11), 4);    /* 3-D */
    check_channel_shuffle(MAKE(-1, 1, 2, 5, 3, 3), 5);   /* one channel a group: the identity */
}

/* The indices ONNX Slice takes along a dimension of size n, listed by walking: an independent
 * reading of the spec (clamp, then step while inside). Returns how many. */
static int64_t slice_walk(int64_t n, int64_t s, int64_t e, int64_t k, int64_t *idx) {
    if (s < 0) s += n;
    if (e < 0) e += n;
    int64_t cnt = 0;
    if (k > 0) {
        s = s < 0 ? 0 : s > n ? n : s, e = e < 0 ? 0 : e > n ? n : e;
        for (int64_t i = s; i < e; i += k) idx[cnt++] = i;
    } else {
        s = s < 0 ? 0 : s > n - 1 ? n - 1 : s, e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
        for (int64_t i = s; i > e; i += k) idx[cnt++] = i;
    }
    return cnt;
}

typedef struct slice_spec {
    int n;
    int32_t axes[4];
    int64_t starts[4], ends[4], steps[4];
} slice_spec;

static void check_slice(tt x, slice_spec sp) {
    dl_op_attrs a;
    attrs(&a);
    a.n_axes = sp.n;
    int64_t idx[8][64], cnt[8], ys[8];
    for (int d = 0; d < x.nd; d++) {
        cnt[d] = x.shape[d];
        for (int64_t i = 0; i < x.shape[d]; i++) idx[d][i] = i;
    }
    for (int i = 0; i < sp.n; i++) {
        a.axes[i] = sp.axes[i], a.starts[i] = sp.starts[i], a.ends[i] = sp.ends[i], a.steps[i] = sp.steps[i];
        int d = sp.axes[i] < 0 ? sp.axes[i] + x.nd : sp.axes[i];
        cnt[d] = slice_walk(x.shape[d], sp.starts[i], sp.ends[i], sp.steps[i], idx[d]);
    }
    for (int d = 0; d < x.nd; d++) ys[d] = cnt[d];
    tt y = make(x.nd, ys, 0, 1);
    run_op(DL_OP_SLICE, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8], xst[8];
    strides(&x, xst);
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        int64_t off = 0;
        for (int d = 0; d < y.nd; d++) off += idx[d][c[d]] * xst[d];
        ref[i] = x.data[off];
    }
    expect_close(&y, ref, 0, "slice");
    free(ref), free(x.data), free(y.data);
}

OP_TEST(slice_steps_negatives_and_clamping) {
    check_slice(MAKE(-1, 1, 2, 3, 9, 7), (slice_spec){2, {2, 3}, {1, 0}, {8, -1}, {1, 1}});
    check_slice(MAKE(-1, 1, 3, 11, 5), (slice_spec){2, {1, -1}, {1, 0}, {100, 5}, {3, 2}});
    check_slice(MAKE(-1, 1, 4, 13), (slice_spec){1, {1}, {-1}, {-100}, {-2}});
    check_slice(MAKE(-1, 1, 4, 13), (slice_spec){1, {-1}, {INT64_MAX}, {INT64_MIN}, {-1}}); /* reversed */
    check_slice(MAKE(-1, 1, 5, 3, 7), (slice_spec){3, {0, 1, 2}, {-3, 1, 2}, {INT64_MAX, 2, -2}, {2, 1, 1}});
    check_slice(MAKE(-1, 1, 2, 3, 9, 7), (slice_spec){1, {2}, {-2}, {9}, {5}});   /* one element */
    check_slice(MAKE(-1, 1, 3, 5), (slice_spec){1, {1}, {0}, {5}, {INT64_MAX}});  /* a huge step: one */
    check_slice(MAKE(-1, 1, 3, 5), (slice_spec){1, {1}, {4}, {-9}, {INT64_MIN}}); /* and backwards */
    check_slice(MAKE(-1, 1, 2, 7, 5, 3), (slice_spec){1, {1}, {2}, {6}, {1}});    /* channels: ShuffleNet's split */
    check_slice(MAKE(-1, 1, 3, 8, 5, 4), (slice_spec){3, {-3, 0, 3}, {1, 1, -1}, {8, 3, -5}, {2, 1, -1}});
}

/* ---- pad ---- */

/* Where output coordinate o reads along a dimension of size n with b added before: an
 * independent reading (reflect folds back and forth until inside), or -1 for the constant. */
static int64_t pad_at(int64_t o, int64_t b, int64_t n, int how) {
    int64_t i = o - b;
    if (how == DL_PAD_CONSTANT) return i >= 0 && i < n ? i : -1;
    if (how == DL_PAD_EDGE) return i < 0 ? 0 : i >= n ? n - 1 : i;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
}

static void check_pad(tt x, const int64_t *before, const int64_t *after, int how, float value) {
    dl_op_attrs a;
    attrs(&a);
    a.mode = how, a.value = value;
    int64_t ys[8];
    for (int d = 0; d < x.nd; d++) {
        a.pads_before[d] = before[d], a.pads_after[d] = after[d];
        ys[d] = x.shape[d] + before[d] + after[d];
    }
    tt y = make(x.nd, ys, 0, 1);
    run_op(DL_OP_PAD, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8], xst[8];
    strides(&x, xst);
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        int64_t off = 0;
        for (int d = 0; d < y.nd && off >= 0; d++) {
            int64_t j = pad_at(c[d], before[d], x.shape[d], how);
            off = j < 0 ? -1 : off + j * xst[d];
        }
        ref[i] = off < 0 ? value : x.data[off];
    }
    expect_close(&y, ref, 0,
                 how == DL_PAD_CONSTANT  ? "pad constant"
                 : how == DL_PAD_REFLECT ? "pad reflect"
                                         : "pad edge");
    free(ref), free(x.data), free(y.data);
}

OP_TEST(pad_modes) {
    check_pad(MAKE(-1, 1, 2, 3, 5, 7), (int64_t[]){0, 0, 1, 2}, (int64_t[]){0, 0, 3, 1}, DL_PAD_CONSTANT, 0.5f);
    check_pad(MAKE(-1, 1, 2, 3, 5, 7), (int64_t[]){0, 1, 2, 3}, (int64_t[]){1, 0, 4, 6}, DL_PAD_REFLECT, 0);
    check_pad(MAKE(-1, 1, 3, 11), (int64_t[]){1, 5}, (int64_t[]){2, 0}, DL_PAD_EDGE, 0);
    check_pad(MAKE(-1, 1, 2, 3, 5, 7), (int64_t[]){1, 0, 0, 0}, (int64_t[]){0, 2, 0, 0}, DL_PAD_CONSTANT, -1);
    check_pad(MAKE(-1, 1, 7), (int64_t[]){9}, (int64_t[]){4}, DL_PAD_EDGE, 0);
}

/* ---- resize ---- */

static double source_of(int64_t o, int64_t in, int64_t out, int coord) {
    double scale = (double)out / in;
    if (coord == DL_COORD_ALIGN_CORNERS) return out == 1 ? 0 : o * (in - 1.0) / (out - 1.0);
    if (coord == DL_COORD_ASYMMETRIC) return o / scale;
    if (coord == DL_COORD_PYTORCH_HALF_PIXEL && out == 1) return 0;
    return (o + 0.5) / scale - 0.5;
}

static int64_t nearest_of(double c, int64_t n, int how) {
    double r = how == DL_NEAREST_FLOOR               ? floor(c)
               : how == DL_NEAREST_CEIL              ? ceil(c)
               : how == DL_NEAREST_ROUND_PREFER_CEIL ? floor(c + 0.5)
                                                     : ceil(c - 0.5);
    return r < 0 ? 0 : r > n - 1 ? n - 1 : (int64_t)r;
}

static double linear_of(const float *plane, int64_t h, int64_t w, double cy, double cx) {
    cy = fmin(fmax(cy, 0), h - 1.0), cx = fmin(fmax(cx, 0), w - 1.0);
    int64_t y0 = (int64_t)floor(cy), x0 = (int64_t)floor(cx);
    int64_t y1 = y0 + 1 < h ? y0 + 1 : h - 1, x1 = x0 + 1 < w ? x0 + 1 : w - 1;
    double fy = cy - y0, fx = cx - x0;
    return (1 - fy) * ((1 - fx) * plane[y0 * w + x0] + fx * plane[y0 * w + x1]) +
           fy * ((1 - fx) * plane[y1 * w + x0] + fx * plane[y1 * w + x1]);
}

static void check_resize(tt x, int64_t oh, int64_t ow, int how, int coord, int nearest) {
    dl_op_attrs a;
    attrs(&a);
    a.mode = how, a.coord = coord, a.nearest = nearest;
    tt y = MAKE(0, 1, x.shape[0], x.shape[1], oh, ow);
    run_op(DL_OP_RESIZE, &a, &x, 1, &y);
    const int64_t h = x.shape[2], w = x.shape[3];
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t i = 0; i < y.n; i++) {
        int64_t ox = i % ow, oy = i / ow % oh, p = i / (ow * oh);
        const float *plane = x.data + p * h * w;
        double cy = source_of(oy, h, oh, coord), cx = source_of(ox, w, ow, coord);
        ref[i] = how == DL_RESIZE_LINEAR ? linear_of(plane, h, w, cy, cx)
                                         : plane[nearest_of(cy, h, nearest) * w + nearest_of(cx, w, nearest)];
    }
    char what[96];
    snprintf(what, sizeof what, "resize %lldx%lld -> %lldx%lld mode %d coord %d nearest %d", (long long)h, (long long)w,
             (long long)oh, (long long)ow, how, coord, nearest);
    expect_close(&y, ref, 1e-12, what);
    free(ref), free(x.data), free(y.data);
}

OP_TEST(resize_modes) {
    for (int coord = 0; coord < 4; coord++)
        for (int nearest = 0; nearest < 4; nearest++) {
            check_resize(MAKE(-1, 1, 2, 3, 5, 7), 10, 14, DL_RESIZE_NEAREST, coord, nearest);
            check_resize(MAKE(-1, 1, 1, 2, 6, 9), 4, 5, DL_RESIZE_NEAREST, coord, nearest);
        }
    for (int coord = 0; coord < 4; coord++) {
        check_resize(MAKE(-1, 1, 2, 3, 5, 7), 11, 9, DL_RESIZE_LINEAR, coord, 0);
        check_resize(MAKE(-1, 1, 1, 3, 13, 11), 5, 4, DL_RESIZE_LINEAR, coord, 0);
        check_resize(MAKE(-1, 1, 1, 2, 4, 3), 1, 7, DL_RESIZE_LINEAR, coord, 0);
    }
}

/* ---- reductions and layer_norm ---- */

static void check_reduce(dl_op_kind kind, tt x, int n_axes, const int32_t *axes, int keepdims) {
    dl_op_attrs a;
    attrs(&a);
    a.n_axes = n_axes, a.keepdims = keepdims;
    int red[8] = {0};
    for (int i = 0; i < n_axes; i++) a.axes[i] = axes[i], red[axes[i] < 0 ? axes[i] + x.nd : axes[i]] = 1;
    if (!n_axes)
        for (int d = 0; d < x.nd; d++) red[d] = 1;
    int64_t ys[8], cnt = 1;
    int ynd = 0;
    for (int d = 0; d < x.nd; d++) {
        if (!red[d]) ys[ynd++] = x.shape[d];
        else if (keepdims) ys[ynd++] = 1;
        if (red[d]) cnt *= x.shape[d];
    }
    if (!ynd) ys[ynd++] = 1;
    tt y = make(ynd, ys, 0, 1);
    run_op(kind, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t i = 0; i < y.n; i++)
        ref[i] = kind == DL_OP_REDUCE_MAX ? -INFINITY : kind == DL_OP_REDUCE_MIN ? INFINITY : 0;
    int64_t c[8];
    for (int64_t i = 0; i < x.n; i++) { /* each input element into its output */
        coords(&x, i, c);
        int64_t o = 0;
        for (int d = 0; d < x.nd; d++)
            if (!red[d]) o = o * x.shape[d] + c[d];
        double v = x.data[i];
        ref[o] = kind == DL_OP_REDUCE_MAX ? fmax(ref[o], v) : kind == DL_OP_REDUCE_MIN ? fmin(ref[o], v) : ref[o] + v;
    }
    if (kind == DL_OP_REDUCE_MEAN)
        for (int64_t i = 0; i < y.n; i++) ref[i] /= (double)cnt;
    expect_close(&y, ref, 1e-12, dl_op_kind_name(kind));
    free(ref), free(x.data), free(y.data);
}

OP_TEST(reductions) {
    for (int kind = DL_OP_REDUCE_MEAN; kind <= DL_OP_REDUCE_MIN; kind++) {
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 2, 5, 7, 9), 2, (int32_t[]){2, 3}, 1);
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 3, 7, 5, 3), 1, (int32_t[]){1}, 0);
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 4, 3, 101), 1, (int32_t[]){-1}, 1);
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 3, 5, 7), 0, NULL, 0);
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 3, 5, 7, 2), 2, (int32_t[]){3, 0}, 0);
        check_reduce((dl_op_kind)kind, MAKE(-1, 1, 6, 5, 7), 2, (int32_t[]){0, 2}, 1);
    }
}

static void check_layer_norm(tt x, int axis, float eps) {
    dl_op_attrs a;
    attrs(&a);
    a.axis = axis, a.epsilon = eps;
    int64_t inner = 1;
    for (int d = axis; d < x.nd; d++) inner *= x.shape[d];
    tt in[3] = {x, make(x.nd - axis, x.shape + axis, 0.5f, 1.5f), make(x.nd - axis, x.shape + axis, -0.5f, 0.5f)};
    tt y = make(x.nd, x.shape, 0, 1);
    run_op(DL_OP_LAYER_NORM, &a, in, 3, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t r = 0; r < x.n / inner; r++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; i++) mean += x.data[r * inner + i];
        mean /= inner;
        for (int64_t i = 0; i < inner; i++) var += pow(x.data[r * inner + i] - mean, 2);
        var /= inner;
        for (int64_t i = 0; i < inner; i++)
            ref[r * inner + i] = (x.data[r * inner + i] - mean) / sqrt(var + eps) * in[1].data[i] + in[2].data[i];
    }
    expect_close(&y, ref, 1e-12, "layer_norm");
    free(ref), free(x.data), free(in[1].data), free(in[2].data), free(y.data);
}

OP_TEST(layer_norm_axes) {
    check_layer_norm(MAKE(-3, 3, 2, 7, 97), 2, 1e-5f);
    check_layer_norm(MAKE(-3, 3, 3, 5, 7, 9), 2, 1e-3f);
    check_layer_norm(MAKE(-3, 3, 4, 13), 1, 1e-5f);
    check_layer_norm(MAKE(-3, 3, 2, 3, 5, 7), 1, 1e-5f); /* everything past the batch */
}

/* ---- supports() follows the rows ---- */

static void expect_refused(dl_op_kind kind, const dl_op_attrs *a, int64_t *xs, int xnd, int64_t *ys, int ynd,
                           const char *want) {
    load();
    dl_tensor x = {NULL, {DL_DEVICE_CPU, 0}, xnd, {DL_DTYPE_FLOAT, 32, 1}, xs, NULL, 0};
    dl_tensor y = {NULL, {DL_DEVICE_CPU, 0}, ynd, {DL_DTYPE_FLOAT, 32, 1}, ys, NULL, 0};
    dl_op op = {sizeof op, kind, "t", a, 1, &x, 1, &y, DL_PRECISION_F32};
    dl_error err = {{0}};
    cr_expect(!be->supports(be->self, &op, &err), "%s: accepted", want);
    cr_expect(strstr(err.msg, want), "expected '%s' in: %s", want, err.msg);
}

Test(cpu_ops, v14_supports_refuses_with_reasons) {
    dl_op_attrs a;
    attrs(&a);
    a.perm[0] = 0, a.perm[1] = 0;
    expect_refused(DL_OP_TRANSPOSE, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 2}, 2, "not a permutation");
    attrs(&a);
    a.n_axes = 1, a.axes[0] = 2, a.starts[0] = 0, a.ends[0] = 1, a.steps[0] = 1;
    expect_refused(DL_OP_SLICE, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 1}, 2, "out of range");
    a.axes[0] = 1, a.steps[0] = 0;
    expect_refused(DL_OP_SLICE, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 1}, 2, "step 0");
    a.steps[0] = 1, a.starts[0] = 3;
    expect_refused(DL_OP_SLICE, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 1}, 2, "takes no element");
    attrs(&a);
    a.mode = DL_PAD_REFLECT, a.pads_before[1] = 3;
    expect_refused(DL_OP_PAD, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 6}, 2, "below its size");
    a.mode = 7;
    expect_refused(DL_OP_PAD, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 6}, 2, "mode 7");
    attrs(&a);
    a.n_axes = 2, a.axes[0] = 1, a.axes[1] = -1;
    expect_refused(DL_OP_REDUCE_SUM, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2}, 1, "repeated");
    attrs(&a);
    a.mode = 2;
    expect_refused(DL_OP_GELU, &a, (int64_t[]){2, 3}, 2, (int64_t[]){2, 3}, 2, "gelu mode 2");
    attrs(&a);
    expect_refused(DL_OP_RESIZE, &a, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 3, 8}, 3, "4-D");
    a.perm[0] = 1, a.perm[1] = 0; /* empty and 0-D tensors: refused before any kernel sees them */
    expect_refused(DL_OP_TRANSPOSE, &a, (int64_t[]){0, 2}, 2, (int64_t[]){2, 0}, 2, "an empty tensor");
    attrs(&a);
    a.mode = DL_PAD_EDGE, a.pads_before[1] = 1;
    expect_refused(DL_OP_PAD, &a, (int64_t[]){2, 0}, 2, (int64_t[]){2, 1}, 2, "an empty tensor");
    expect_refused(DL_OP_PAD, &a, (int64_t[]){2}, 0, (int64_t[]){2}, 0, "rank 0");
}

/* ---- log_softmax and group_norm ---- */

static void check_log_softmax(tt x, int axis, const char *what) {
    dl_op_attrs a;
    attrs(&a);
    a.axis = axis;
    tt y = make(x.nd, x.shape, 0, 1);
    run_op(DL_OP_LOG_SOFTMAX, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8], st[8];
    strides(&x, st);
    for (int64_t i = 0; i < x.n; i++) { /* log of the sum of exp over the axis, the naive way in double */
        coords(&x, i, c);
        int64_t first = i - c[axis] * st[axis];
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < x.shape[axis]; j++) m = fmax(m, x.data[first + j * st[axis]]);
        for (int64_t j = 0; j < x.shape[axis]; j++) s += exp(x.data[first + j * st[axis]] - m);
        ref[i] = x.data[i] - m - log(s);
    }
    expect_close(&y, ref, 1e-12, what);
    free(ref), free(x.data), free(y.data);
}

OP_TEST(log_softmax_axes) {
    check_log_softmax(MAKE(-3, 3, 3, 5, 4, 7), 1, "log_softmax axis 1");
    check_log_softmax(MAKE(-3, 3, 4, 1000), 1, "log_softmax last");
    check_log_softmax(MAKE(-1000, 1000, 2, 37), 1, "log_softmax large values");
}

static void check_group_norm(tt x, int groups) {
    dl_op_attrs a;
    attrs(&a);
    a.groups = groups, a.epsilon = 1e-5f;
    const int64_t c = x.shape[1], per = c / groups, spatial = x.n / (x.shape[0] * c);
    tt in[3] = {x, MAKE(0.5f, 1.5f, c), MAKE(-0.5f, 0.5f, c)};
    tt y = make(x.nd, x.shape, 0, 1);
    run_op(DL_OP_GROUP_NORM, &a, in, 3, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t n = 0; n < x.shape[0]; n++)
        for (int g = 0; g < groups; g++) {
            double mean = 0, var = 0;
            int64_t cnt = per * spatial;
            for (int64_t ch = g * per; ch < (g + 1) * per; ch++)
                for (int64_t p = 0; p < spatial; p++) mean += x.data[(n * c + ch) * spatial + p];
            mean /= cnt;
            for (int64_t ch = g * per; ch < (g + 1) * per; ch++)
                for (int64_t p = 0; p < spatial; p++) var += pow(x.data[(n * c + ch) * spatial + p] - mean, 2);
            var /= cnt;
            for (int64_t ch = g * per; ch < (g + 1) * per; ch++)
                for (int64_t p = 0; p < spatial; p++) {
                    int64_t i = (n * c + ch) * spatial + p;
                    ref[i] = (x.data[i] - mean) / sqrt(var + 1e-5f) * in[1].data[ch] + in[2].data[ch];
                }
        }
    expect_close(&y, ref, 1e-12, groups == c ? "instance norm" : "group_norm");
    free(ref), free(x.data), free(in[1].data), free(in[2].data), free(y.data);
}

OP_TEST(group_norm_groups) {
    check_group_norm(MAKE(-3, 3, 2, 6, 5, 7), 3);
    check_group_norm(MAKE(-3, 3, 2, 5, 9), 5);
    check_group_norm(MAKE(-3, 3, 3, 4, 3, 5), 1);
}

/* ---- fused activations (ABI 1.4, 1.5): add, batchnorm and linear apply each in their epilogue ---- */

/* the bounds and slope the fused clip and leaky relu are given */
#define FUSED_CLIP_MIN -0.5f
#define FUSED_CLIP_MAX 1.5f
#define FUSED_ALPHA 0.1f

static double act_ref(int act, double v) {
    dl_op_attrs a;
    attrs(&a);
    a.clip_min = FUSED_CLIP_MIN, a.clip_max = FUSED_CLIP_MAX, a.alpha = FUSED_ALPHA;
    switch (act) {
    case DL_ACT_RELU: return v < 0 ? 0 : v;
    case DL_ACT_CLIP: return unary_ref(DL_OP_CLIP, v, &a);
    case DL_ACT_LEAKY_RELU: return unary_ref(DL_OP_LEAKY_RELU, v, &a);
    case DL_ACT_SIGMOID: return unary_ref(DL_OP_SIGMOID, v, &a);
    case DL_ACT_SILU: return unary_ref(DL_OP_SILU, v, &a);
    case DL_ACT_HARD_SWISH: return unary_ref(DL_OP_HARD_SWISH, v, &a);
    case DL_ACT_GELU: return unary_ref(DL_OP_GELU, v, &a);
    default: a.mode = DL_GELU_TANH; return unary_ref(DL_OP_GELU, v, &a);
    }
}

OP_TEST(fused_activations_in_epilogues) {
    for (int act = DL_ACT_RELU; act <= DL_ACT_SIGMOID; act++) {
        dl_op_attrs a;
        attrs(&a);
        a.activation = act;
        a.clip_min = FUSED_CLIP_MIN, a.clip_max = FUSED_CLIP_MAX, a.alpha = FUSED_ALPHA;
        /* add, broadcasting */
        tt in[2] = {MAKE(-4, 4, 3, 7, 5, 3), MAKE(-4, 4, 7, 1, 1)}, y = MAKE(0, 1, 3, 7, 5, 3);
        run_op(DL_OP_ADD, &a, in, 2, &y);
        double *ref = malloc((size_t)y.n * sizeof *ref);
        int64_t c[8];
        for (int64_t i = 0; i < y.n; i++) {
            coords(&y, i, c);
            ref[i] =
                act_ref(act, (double)in[0].data[bcast_index(&in[0], 4, c)] + in[1].data[bcast_index(&in[1], 4, c)]);
        }
        expect_close(&y, ref, 1e-12, "add + activation");
        /* batchnorm: x * s + t per channel */
        tt bn[5] = {MAKE(-4, 4, 2, 5, 3, 7), MAKE(0.5f, 1.5f, 5), MAKE(-1, 1, 5), MAKE(-1, 1, 5), MAKE(0.5f, 1.5f, 5)};
        tt yb = MAKE(0, 1, 2, 5, 3, 7);
        run_op(DL_OP_BATCHNORM, &a, bn, 5, &yb);
        double *rb = malloc((size_t)yb.n * sizeof *rb);
        for (int64_t i = 0; i < yb.n; i++) {
            int64_t ch = i / 21 % 5;
            double s = bn[1].data[ch] / sqrt(bn[4].data[ch] + (double)a.epsilon);
            rb[i] = act_ref(act, (bn[0].data[i] - bn[3].data[ch]) * s + bn[2].data[ch]);
        }
        expect_close(&yb, rb, 1e-12, "batchnorm + activation");
        /* linear */
        tt li[3] = {MAKE(-1, 1, 3, 17), MAKE(-0.5f, 0.5f, 11, 17), MAKE(-1, 1, 11)}, yl = MAKE(0, 1, 3, 11);
        run_op(DL_OP_LINEAR, &a, li, 3, &yl);
        double rl[33];
        for (int r = 0; r < 3; r++)
            for (int o = 0; o < 11; o++) {
                double sum = li[2].data[o];
                for (int j = 0; j < 17; j++) sum += (double)li[0].data[r * 17 + j] * li[1].data[o * 17 + j];
                rl[r * 11 + o] = act_ref(act, sum);
            }
        expect_close(&yl, rl, 1e-10, "linear + activation");
        free(ref), free(rb), free(y.data), free(yb.data), free(yl.data);
        for (int i = 0; i < 2; i++) free(in[i].data);
        for (int i = 0; i < 5; i++) free(bn[i].data);
        for (int i = 0; i < 3; i++) free(li[i].data);
    }
}

/* ---- gather: int64 indices (negative from the end), checked against their dimension ---- */

static void check_gather(tt x, tt idx, int axis) {
    dl_op_attrs a;
    attrs(&a);
    a.axis = axis;
    int64_t ys[8];
    int ynd = 0;
    for (int d = 0; d < axis; d++) ys[ynd++] = x.shape[d];
    for (int d = 0; d < idx.nd; d++) ys[ynd++] = idx.shape[d];
    for (int d = axis + 1; d < x.nd; d++) ys[ynd++] = x.shape[d];
    for (int64_t i = 0; i < idx.n; i++) /* whole indices in [-n, n) */
        idx.data[i] = floorf(idx.data[i] * (float)x.shape[axis]);
    tt in[2] = {x, idx}, y = make(ynd, ys, 0, 1);
    run_op(DL_OP_GATHER, &a, in, 2, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8], xst[8];
    strides(&x, xst);
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        int64_t k = 0, off = 0; /* the index's position among idx's elements, then the data offset */
        for (int d = 0; d < idx.nd; d++) k = k * idx.shape[d] + c[axis + d];
        int64_t at = (int64_t)idx.data[k];
        if (at < 0) at += x.shape[axis];
        for (int d = 0; d < axis; d++) off += c[d] * xst[d];
        off += at * xst[axis];
        for (int d = axis + 1; d < x.nd; d++) off += c[d - 1 + idx.nd] * xst[d];
        ref[i] = x.data[off];
    }
    expect_close(&y, ref, 0, "gather");
    free(ref), free(x.data), free(idx.data), free(y.data);
}

OP_TEST(gather_axes) {
    check_gather(MAKE(-1, 1, 11, 7), MAKE(-1, 1, 2, 5), 0); /* an embedding: [vocab, d] by [batch, seq] */
    check_gather(MAKE(-1, 1, 3, 9, 5), MAKE(-1, 1, 4), 1);
    check_gather(MAKE(-1, 1, 2, 3, 6), MAKE(-1, 1, 3, 2), 2);
    check_gather(MAKE(-1, 1, 2, 3, 5, 7), MAKE(-1, 1, 1, 3), 1);
}

Test(cpu_ops, gather_refuses_an_index_out_of_range) {
    load();
    dl_op_attrs a;
    attrs(&a);
    int64_t xs[2] = {5, 3}, is[1] = {4}, ys[2] = {4, 3};
    float data[15] = {0}, out[12];
    int64_t idx[4] = {0, 4, -5, 5};
    dl_tensor in[2] = {{NULL, {DL_DEVICE_CPU, 0}, 2, DL_F32, xs, NULL, 0},
                       {NULL, {DL_DEVICE_CPU, 0}, 1, DL_I64, is, NULL, 0}};
    dl_tensor y = {NULL, {DL_DEVICE_CPU, 0}, 2, DL_F32, ys, NULL, 0};
    dl_op op = {sizeof op, DL_OP_GATHER, "g", &a, 2, in, 1, &y, DL_PRECISION_F32};
    dl_error err = {{0}};
    dl_kernel *k = NULL;
    size_t ws = 0;
    cr_assert_eq(be->prepare(be->self, &op, &k, &ws, &err), DL_OK, "%s", err.msg);
    in[0].data = data, in[1].data = idx, y.data = out;
    cr_expect_neq(be->run(be->self, k, in, &y, NULL, &err), DL_OK, "index 5 of a dimension of 5 accepted");
    cr_expect(strstr(err.msg, "index 5 (at 3) is out of range for a dimension of size 5"), "%s", err.msg);
    idx[3] = -5;
    cr_expect_eq(be->run(be->self, k, in, &y, NULL, &err), DL_OK, "%s", err.msg);
    be->release(be->self, k);
    in[1].dtype = DL_F32; /* float indices: refused */
    cr_expect(!be->supports(be->self, &op, &err));
    cr_expect(strstr(err.msg, "input 2 is f32, not int64"), "%s", err.msg);
}

/* gelu's erf is a rational approximation (cpu_erf_fast, plugins/cpu/activate.h): on a dense grid
 * across its range, its clamp, the tails and NaN, each value within 3e-7 |x| of the exact one. */
Test(cpu_ops, gelu_is_accurate_everywhere) {
    const int n = 200001;
    tt x = MAKE(0, 1, 1, n), y = MAKE(0, 1, 1, n);
    for (int i = 0; i < n; i++) x.data[i] = -6.0f + 12.0f * (float)i / (float)(n - 1);
    x.data[0] = NAN, x.data[1] = INFINITY, x.data[2] = -INFINITY, x.data[3] = 4.0f * (float)M_SQRT2;
    dl_op_attrs a;
    attrs(&a);
    run_op(DL_OP_GELU, &a, &x, 1, &y);
    cr_expect(isnan(y.data[0]) && y.data[1] == INFINITY && (y.data[2] == 0 || isnan(y.data[2])), "tails: %g %g %g",
              y.data[0], y.data[1], y.data[2]);
    double worst = 0;
    int at = 3;
    for (int i = 3; i < n; i++) {
        double v = x.data[i], want = 0.5 * v * (1 + erf(v / sqrt(2)));
        double e = fabs(y.data[i] - want) / (fabs(v) + 1e-30);
        if (e > worst) worst = e, at = i;
    }
    cr_expect(worst <= 3e-7, "gelu off by %.3g |x| at x = %.9g", worst, x.data[at]);
    free(x.data), free(y.data);
}

/* ---- conv_transpose2d: every input pixel scattered through the kernel, in double ---- */

static double act_ref_or_none(int act, double v) { return act == DL_ACT_NONE ? v : act_ref(act, v); }

typedef struct deconv_case {
    int n, c, h, w, oc, kh, kw, sh, sw, pt, pl, pb, pr, oph, opw, dh, dw, groups, bias, act;
} deconv_case;

static void check_deconv(deconv_case d) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = d.kh, a.kernel[1] = d.kw, a.stride[0] = d.sh, a.stride[1] = d.sw;
    a.pad_begin[0] = d.pt, a.pad_begin[1] = d.pl, a.pad_end[0] = d.pb, a.pad_end[1] = d.pr;
    a.output_padding[0] = d.oph, a.output_padding[1] = d.opw, a.dilation[0] = d.dh, a.dilation[1] = d.dw;
    a.groups = d.groups, a.activation = d.act;
    const int oh = (d.h - 1) * d.sh - d.pt - d.pb + d.dh * (d.kh - 1) + d.oph + 1;
    const int ow = (d.w - 1) * d.sw - d.pl - d.pr + d.dw * (d.kw - 1) + d.opw + 1;
    const int cg = d.c / d.groups, ocg = d.oc / d.groups;
    tt in[3] = {MAKE(-1, 1, d.n, d.c, d.h, d.w), MAKE(-0.5f, 0.5f, d.c, ocg, d.kh, d.kw), MAKE(-1, 1, d.oc)};
    tt y = MAKE(0, 1, d.n, d.oc, oh, ow);
    run_op(DL_OP_CONV_TRANSPOSE2D, &a, in, d.bias ? 3 : 2, &y);
    double *ref = calloc((size_t)y.n, sizeof *ref);
    for (int i = 0; i < d.n; i++)
        for (int ci = 0; ci < d.c; ci++)
            for (int iy = 0; iy < d.h; iy++)
                for (int ix = 0; ix < d.w; ix++) {
                    double v = in[0].data[((i * d.c + ci) * d.h + iy) * d.w + ix];
                    int gi = ci / cg;
                    for (int o = 0; o < ocg; o++)
                        for (int ty = 0; ty < d.kh; ty++)
                            for (int tx = 0; tx < d.kw; tx++) {
                                int oy = iy * d.sh - d.pt + ty * d.dh, ox = ix * d.sw - d.pl + tx * d.dw;
                                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                                ref[((i * d.oc + gi * ocg + o) * oh + oy) * ow + ox] +=
                                    v * in[1].data[((ci * ocg + o) * d.kh + ty) * d.kw + tx];
                            }
                }
    for (int64_t e = 0; e < y.n; e++)
        ref[e] = act_ref_or_none(d.act, ref[e] + (d.bias ? in[2].data[e / (oh * ow) % d.oc] : 0));
    char what[96];
    snprintf(what, sizeof what, "conv_transpose2d c%d oc%d k%dx%d s%d,%d g%d act%d", d.c, d.oc, d.kh, d.kw, d.sh, d.sw,
             d.groups, d.act);
    expect_close(&y, ref, 1e-10, what);
    free(ref), free(y.data);
    for (int i = 0; i < 3; i++) free(in[i].data);
}

OP_TEST(conv_transpose2d_cases) {
    check_deconv((deconv_case){1, 6, 7, 5, 4, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, DL_ACT_NONE});
    check_deconv((deconv_case){2, 5, 6, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, DL_ACT_RELU});
    check_deconv((deconv_case){1, 6, 5, 5, 9, 3, 2, 1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 3, 1, DL_ACT_NONE});
    check_deconv((deconv_case){1, 4, 9, 8, 5, 4, 4, 2, 3, 1, 2, 0, 1, 1, 2, 1, 1, 1, 0, DL_ACT_SILU});
    check_deconv((deconv_case){2, 8, 4, 3, 8, 3, 3, 3, 1, 2, 0, 2, 0, 2, 0, 1, 2, 8, 1, DL_ACT_NONE}); /* depthwise */
}

/* A transposed convolution whose GEMM result would pass 2^50 bytes (its size overflows 64 bits if
 * counted in integers) is refused at prepare, not given a wrapped-around workspace. */
Test(cpu_ops, conv_transpose2d_refuses_a_workspace_past_any_memory) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = a.kernel[1] = 1 << 12;
    int64_t xs[4] = {1, 1, 1 << 20, 1 << 20}, ws[4] = {1, 1, 1 << 12, 1 << 12},
            ys[4] = {1, 1, (1 << 20) + (1 << 12) - 1, (1 << 20) + (1 << 12) - 1};
    expect_workspace_refused(DL_OP_CONV_TRANSPOSE2D, &a, 4, xs, ws, ys);
}
