/* test_cuda_params.c — the host half of the cuda plugin's elementwise, movement, reduction,
 * conv_transpose2d and conv3d kernels, without a GPU and without linking CUDA: the launch
 * parameters plugins/cuda/cuda_params.c builds at prepare (merged dimensions, broadcast strides,
 * transpose and slice strides and base, pad sources, kept and reduced dimensions of a reduction,
 * gather's rows and bad indices) with the per-element index math of cuda_params.h, which the
 * kernels call as they are, against naive loops over coordinates; the resize, conv_transpose2d and
 * conv3d kernels' bodies, replayed on the host, against naive loops and the CPU plugin run through
 * the plugin ABI; and the formats the plugin's supports() takes for gather (int64 indices beside
 * f16/bf16 data), conv_transpose2d and conv3d (one storage type, row-major, relu only). The
 * plugin's cuda_params.c and cuda_formats.c are compiled into this test (tests/CMakeLists.txt).
 * What the kernels do with these numbers on a GPU is checked by `dlrun test-ops --backend cuda`
 * in the GPU round. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_formats.h"
#include "cuda_params.h"
#include "op_check.h"
#include "test_util.h"

/* ---- ops ---- */

typedef struct opb {
    dl_op_attrs a;
    int64_t xs[8], bs[8], ys[8];
    dl_tensor in[2], out;
    dl_op op;
    dl_op_geom g;
} opb;

/* An op of kind on input x (and b where n_in is 2); the attributes are set by the caller before
 * finish() infers the output shape with the op table's row and fills the geometry. */
static void start(opb *o, int kind, int xnd, const int64_t *xs) {
    memset(o, 0, sizeof *o);
    o->a.struct_size = sizeof o->a;
    memcpy(o->xs, xs, (size_t)xnd * sizeof *xs);
    o->in[0] = (dl_tensor){NULL, {DL_DEVICE_CUDA, 0}, xnd, DL_F32, o->xs, NULL, 0};
    o->out = (dl_tensor){NULL, {DL_DEVICE_CUDA, 0}, 0, DL_F32, o->ys, NULL, 0};
    o->op = (dl_op){sizeof o->op, kind, "t", &o->a, 1, o->in, 1, &o->out, DL_PRECISION_F32};
}
static void second(opb *o, int bnd, const int64_t *bs) {
    memcpy(o->bs, bs, (size_t)bnd * sizeof *bs);
    o->in[1] = (dl_tensor){NULL, {DL_DEVICE_CUDA, 0}, bnd, DL_F32, o->bs, NULL, 0};
    o->op.n_inputs = 2;
}
static void finish(opb *o) {
    dl_shape y;
    dl_error why = {{0}};
    cr_assert(dl_op_def_of(o->op.kind)->infer(&o->op, NULL, &y, &why), "infer: %s", why.msg);
    o->out.ndim = y.ndim;
    memcpy(o->ys, y.d, sizeof o->ys);
    cr_assert(dl_op_check(&o->op, &why), "%s", why.msg);
    cr_assert(dl_op_geom_init(&o->g, &o->op));
}
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((int64_t[]){__VA_ARGS__})

static int64_t numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}
/* the row-major coordinates of index i over s[0..nd) */
static void coords_of(int64_t i, int nd, const int64_t *s, int64_t *c) {
    for (int d = nd - 1; d >= 0; d--) c[d] = i % s[d], i /= s[d];
}
/* the row-major index of coordinates c over s[0..nd) */
static int64_t index_of(const int64_t *c, int nd, const int64_t *s) {
    int64_t i = 0;
    for (int d = 0; d < nd; d++) i = i * s[d] + c[d];
    return i;
}

/* ---- merging dimensions ---- */

Test(cuda_params, merged_dimensions_keep_every_offset) {
    /* shapes with size-1 dims and strides that merge, partly merge or not at all */
    static const struct {
        int nd;
        int64_t s[6], a[6], b[6];
    } cases[] = {
        {4, {2, 3, 4, 5}, {60, 20, 5, 1}, {0, 1, 0, 0}},         {4, {2, 3, 4, 5}, {60, 20, 5, 1}, {60, 20, 5, 1}},
        {5, {1, 3, 1, 4, 1}, {12, 4, 4, 1, 1}, {0, 0, 0, 0, 0}}, {3, {3, 5, 7}, {1, 3, 15}, {35, 7, 1}},
        {4, {2, 1, 6, 2}, {-24, 7, 2, 1}, {12, 0, 2, 1}},        {2, {1, 1}, {5, 3}, {1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t s[8] = {0}, a[8] = {0}, b[8] = {0};
        memcpy(s, cases[c].s, sizeof cases[c].s), memcpy(a, cases[c].a, sizeof cases[c].a);
        memcpy(b, cases[c].b, sizeof cases[c].b);
        int nd = dl_merge_dims(cases[c].nd, s, (int64_t *const[]){a, b}, 2);
        cr_assert(nd >= 1 && nd <= cases[c].nd, "case %zu: rank %d", c, nd);
        cr_expect_eq(numel(nd, s), numel(cases[c].nd, cases[c].s), "case %zu", c);
        for (int64_t i = 0; i < numel(nd, s); i++) {
            cr_assert_eq(dlk_offset(nd, s, a, i), dlk_offset(cases[c].nd, cases[c].s, cases[c].a, i), "case %zu i %lld",
                         c, (long long)i);
            cr_assert_eq(dlk_offset(nd, s, b, i), dlk_offset(cases[c].nd, cases[c].s, cases[c].b, i), "case %zu i %lld",
                         c, (long long)i);
        }
    }
    int64_t s[8] = {4, 5}, a[8] = {5, 1};
    cr_expect_eq(dl_merge_dims(2, s, (int64_t *const[]){a}, 1), 1, "a contiguous shape is one dimension");
    cr_expect_eq(s[0], 20);
}

/* ---- binary broadcasting ---- */

static void check_bcast(int an, const int64_t *as, int bn, const int64_t *bs) {
    opb o;
    start(&o, DL_OP_MUL, an, as);
    second(&o, bn, bs);
    finish(&o);
    dlk_binary_p p;
    cr_assert(cu_binary_params(&o.g, &p));
    cr_expect_eq(p.kind, DLK_MUL);
    int64_t n = o.g.numel, c[8], ca[8], cb[8];
    cr_assert(p.bcast);
    for (int64_t i = 0; i < n; i++) { /* numpy: each operand's coordinate is 0 where its size is 1 */
        coords_of(i, o.g.ynd, o.ys, c);
        for (int d = 0; d < an; d++) ca[d] = as[d] == 1 ? 0 : c[o.g.ynd - an + d];
        for (int d = 0; d < bn; d++) cb[d] = bs[d] == 1 ? 0 : c[o.g.ynd - bn + d];
        cr_assert_eq(dlk_offset(p.bc.nd, p.bc.ys, p.bc.sa, i), index_of(ca, an, as), "a at %lld", (long long)i);
        cr_assert_eq(dlk_offset(p.bc.nd, p.bc.ys, p.bc.sb, i), index_of(cb, bn, bs), "b at %lld", (long long)i);
    }
    dl_op_geom_free(&o.g);
}

Test(cuda_params, binary_broadcast_offsets) {
    check_bcast(DIMS(3, 7, 5, 3), DIMS(7, 1, 1));
    check_bcast(DIMS(2, 1, 5), DIMS(3, 1));
    check_bcast(DIMS(4, 9), DIMS(1));
    check_bcast(DIMS(1, 6, 1, 4), DIMS(5, 1, 1, 4, 1));
    opb o;
    start(&o, DL_OP_ADD, DIMS(3, 4));
    second(&o, DIMS(3, 4));
    finish(&o);
    dlk_binary_p p;
    cr_assert(cu_binary_params(&o.g, &p));
    cr_expect(p.kind == DLK_ADD && !p.bcast, "same shapes run flat");
    dl_op_geom_free(&o.g);
    start(&o, DL_OP_SQRT, DIMS(3, 4));
    finish(&o);
    cr_expect_not(cu_binary_params(&o.g, &p));
    dlk_unary_p u;
    cr_expect(cu_unary_params(&o.g, &u) && u.kind == DLK_SQRT);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, unary_kinds_and_their_parameters) {
    opb o;
    start(&o, DL_OP_HARD_SIGMOID, DIMS(3, 4));
    o.a.alpha = 0.25f, o.a.beta = 0.75f;
    finish(&o);
    dlk_unary_p u;
    cr_assert(cu_unary_params(&o.g, &u));
    cr_expect(u.kind == DLK_HARD_SIGMOID && u.a == 0.25f && u.b == 0.75f);
    dl_op_geom_free(&o.g);
    start(&o, DL_OP_GELU, DIMS(3, 4));
    o.a.mode = DL_GELU_TANH;
    finish(&o);
    cr_assert(cu_unary_params(&o.g, &u));
    cr_expect_eq(u.kind, DLK_GELU_TANH);
    dl_op_geom_free(&o.g);
    for (int k = DL_OP_SQRT; k <= DL_OP_SOFTPLUS; k++) {
        start(&o, k, DIMS(2, 3));
        o.a.alpha = 0.2f, o.a.beta = 0.5f;
        finish(&o);
        cr_expect(cu_unary_params(&o.g, &u), "%s", dl_op_kind_name(k));
        dl_op_geom_free(&o.g);
    }
}

/* ---- transpose and slice ---- */

static void check_transpose(int nd, const int64_t *xs, const int *perm) {
    opb o;
    start(&o, DL_OP_TRANSPOSE, nd, xs);
    for (int d = 0; d < nd; d++) o.a.perm[d] = perm[d];
    finish(&o);
    dlk_gather_p p;
    cu_transpose_params(&o.g, &p);
    int64_t c[8], xc[8];
    for (int64_t i = 0; i < o.g.numel; i++) {
        coords_of(i, nd, o.ys, c);
        for (int d = 0; d < nd; d++) xc[perm[d]] = c[d];
        cr_assert_eq(p.base + dlk_offset(p.nd, p.ys, p.st, i), index_of(xc, nd, xs), "at %lld", (long long)i);
    }
    dl_op_geom_free(&o.g);
}

/* channel_shuffle: output channel j * groups + i reads input channel i * (C / groups) + j */
static void check_channel_shuffle(int nd, const int64_t *xs, int groups) {
    opb o;
    start(&o, DL_OP_CHANNEL_SHUFFLE, nd, xs);
    o.a.groups = groups;
    finish(&o);
    dlk_gather_p p;
    cu_channel_shuffle_params(&o.g, &p);
    const int64_t per = xs[1] / groups;
    int64_t c[8];
    for (int64_t i = 0; i < o.g.numel; i++) {
        coords_of(i, nd, o.ys, c);
        c[1] = c[1] % groups * per + c[1] / groups;
        cr_assert_eq(p.base + dlk_offset(p.nd, p.ys, p.st, i), index_of(c, nd, xs), "at %lld", (long long)i);
    }
    dl_op_geom_free(&o.g);
}

Test(cuda_params, channel_shuffle_offsets) {
    check_channel_shuffle(DIMS(2, 6, 5, 7), 2);
    check_channel_shuffle(DIMS(1, 116, 3, 4), 2);
    check_channel_shuffle(DIMS(3, 21, 3, 5), 3);
    check_channel_shuffle(DIMS(2, 12, 11), 4);
    check_channel_shuffle(DIMS(2, 5, 3), 5);
}

Test(cuda_params, transpose_offsets) {
    check_transpose(DIMS(2, 3, 5, 7), (int[]){0, 2, 3, 1});
    check_transpose(DIMS(3, 5, 7), (int[]){2, 1, 0});
    check_transpose(DIMS(2, 7, 3, 5), (int[]){0, 2, 1, 3});
    check_transpose(DIMS(1, 4, 1, 3, 2), (int[]){4, 2, 0, 3, 1});
    check_transpose(DIMS(6, 5), (int[]){0, 1});
}

/* The indices ONNX Slice takes along a dimension of size n, enumerated (not computed): *count. */
static void slice_indices(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *idx, int64_t *count) {
    if (start < 0) start += n;
    if (end < 0) end += n;
    *count = 0;
    if (step > 0) {
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < 0 ? 0 : end > n ? n : end;
        for (int64_t i = start; i < end; i += step) idx[(*count)++] = i;
    } else {
        start = start < 0 ? 0 : start > n - 1 ? n - 1 : start;
        end = end < -1 ? -1 : end > n - 1 ? n - 1 : end;
        for (int64_t i = start; i > end; i += step) idx[(*count)++] = i;
    }
}

/* axes[i], starts[i], ends[i], steps[i] for i < na */
static void check_slice(int nd, const int64_t *xs, int na, const int *axes, const int64_t *starts, const int64_t *ends,
                        const int64_t *steps) {
    opb o;
    start(&o, DL_OP_SLICE, nd, xs);
    o.a.n_axes = na;
    for (int i = 0; i < na; i++) o.a.axes[i] = axes[i], o.a.starts[i] = starts[i], o.a.ends[i] = ends[i];
    for (int i = 0; i < 8; i++) o.a.steps[i] = i < na ? steps[i] : 1;
    finish(&o);
    dlk_gather_p p;
    cu_slice_params(&o.g, &p);
    int64_t idx[8][64], cnt[8], c[8], xc[8];
    for (int d = 0; d < nd; d++) { /* every index of an unsliced dimension */
        cnt[d] = xs[d];
        for (int64_t i = 0; i < xs[d]; i++) idx[d][i] = i;
    }
    for (int i = 0; i < na; i++) {
        int d = axes[i] < 0 ? axes[i] + nd : axes[i];
        slice_indices(xs[d], starts[i], ends[i], steps[i], idx[d], &cnt[d]);
    }
    for (int d = 0; d < nd; d++) cr_assert_eq(o.ys[d], cnt[d], "dim %d", d);
    for (int64_t i = 0; i < o.g.numel; i++) {
        coords_of(i, nd, o.ys, c);
        for (int d = 0; d < nd; d++) xc[d] = idx[d][c[d]];
        cr_assert_eq(p.base + dlk_offset(p.nd, p.ys, p.st, i), index_of(xc, nd, xs), "at %lld", (long long)i);
    }
    dl_op_geom_free(&o.g);
}

Test(cuda_params, slice_offsets) {
    /* the op table's test-ops cases, then clamping, negative indices and steps on every dimension */
    check_slice(DIMS(2, 3, 9, 7), 2, (int[]){2, 3}, (int64_t[]){1, 0}, (int64_t[]){8, -1}, (int64_t[]){1, 1});
    check_slice(DIMS(3, 11, 5), 2, (int[]){1, -1}, (int64_t[]){1, 0}, (int64_t[]){100, 5}, (int64_t[]){3, 2});
    check_slice(DIMS(4, 13), 1, (int[]){1}, (int64_t[]){-1}, (int64_t[]){-100}, (int64_t[]){-2});
    check_slice(DIMS(5, 6, 7), 3, (int[]){0, 1, 2}, (int64_t[]){-2, 100, 0}, (int64_t[]){-6, -100, 7},
                (int64_t[]){-1, -3, 7});
    check_slice(DIMS(6, 1, 8), 1, (int[]){0}, (int64_t[]){INT64_MIN}, (int64_t[]){INT64_MAX}, (int64_t[]){2});
}

/* ---- pad ---- */

/* The input index of padded position o along a dimension of size n, `before` in front, built the
 * way the modes are described: a row of every padded position, or -1 for the fill. */
static int64_t pad_naive(int64_t o, int64_t before, int64_t n, int mode) {
    int64_t row[64], len = 0;
    for (int64_t k = before; k > 0; k--) /* in front: mirrored without the edge, the edge, or fill */
        row[len++] = mode == DL_PAD_REFLECT ? k : mode == DL_PAD_EDGE ? 0 : -1;
    for (int64_t k = 0; k < n; k++) row[len++] = k;
    for (int64_t k = 1; len < 64; k++) /* behind, as far as the row goes (reflect pads are below n) */
        row[len++] = mode == DL_PAD_REFLECT ? n - 1 - k : mode == DL_PAD_EDGE ? n - 1 : -1;
    return row[o];
}

static void check_pad(int nd, const int64_t *xs, const int64_t *pads, int mode) {
    opb o;
    start(&o, DL_OP_PAD, nd, xs);
    for (int d = 0; d < nd; d++) o.a.pads_before[d] = pads[d], o.a.pads_after[d] = pads[nd + d];
    o.a.mode = mode, o.a.value = 0.5f;
    finish(&o);
    dlk_pad_p p;
    cu_pad_params(&o.g, &p);
    cr_expect_eq(p.value, 0.5f);
    int64_t c[8], xc[8];
    for (int64_t i = 0; i < o.g.numel; i++) {
        coords_of(i, nd, o.ys, c);
        int64_t want = 0;
        for (int d = 0; d < nd && want >= 0; d++) want = (xc[d] = pad_naive(c[d], pads[d], xs[d], mode)) < 0 ? -1 : 0;
        if (want == 0) want = index_of(xc, nd, xs);
        cr_assert_eq(dlk_pad_source(&p, i), want, "mode %d at %lld", mode, (long long)i);
    }
    dl_op_geom_free(&o.g);
}

Test(cuda_params, pad_sources) {
    check_pad(DIMS(2, 3, 5, 7), (int64_t[]){0, 0, 1, 2, 0, 0, 3, 1}, DL_PAD_CONSTANT);
    check_pad(DIMS(2, 3, 5, 7), (int64_t[]){0, 1, 2, 3, 0, 0, 4, 1}, DL_PAD_REFLECT);
    check_pad(DIMS(3, 11), (int64_t[]){1, 5, 2, 0}, DL_PAD_EDGE);
    check_pad(DIMS(3, 4, 5), (int64_t[]){2, 3, 4, 2, 3, 4}, DL_PAD_REFLECT);
    check_pad(DIMS(1, 2, 3), (int64_t[]){3, 1, 4, 2, 5, 6}, DL_PAD_EDGE);
    check_pad(DIMS(4), (int64_t[]){2, 3}, DL_PAD_CONSTANT);
}

/* ---- reductions ---- */

/* axes[0..na) of x, keepdims; sums each output from the parameters the kernels get (in double, in
 * their order) against sums over every input element by its dropped coordinates. */
static void check_reduce(int kind, int nd, const int64_t *xs, int na, const int *axes, int keepdims) {
    opb o;
    start(&o, kind, nd, xs);
    o.a.n_axes = na, o.a.keepdims = keepdims;
    for (int i = 0; i < na; i++) o.a.axes[i] = axes[i];
    finish(&o);
    dlk_reduce_p p;
    cu_reduce_params(&o.g, &p);
    int64_t n = numel(nd, xs), ny = o.g.numel, c[8];
    cr_assert_eq(p.kept, ny);
    cr_assert_eq(p.kept * p.count, n);
    int red[8] = {0};
    for (int i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + nd : axes[i]] = 1;
    if (na == 0)
        for (int d = 0; d < nd; d++) red[d] = 1;
    cr_expect_eq(p.inner_reduced, red[nd - 1] && xs[nd - 1] > 1);
    cr_expect(p.threads >= 32 && p.threads <= 256 && p.threads % 32 == 0);
    float *x = malloc((size_t)n * sizeof *x);
    double *want = calloc((size_t)ny, sizeof *want), *seen = calloc((size_t)ny, sizeof *seen);
    tu_fill_uniform(x, (size_t)n, 7, -1, 1);
    for (int64_t i = 0; i < n; i++) { /* output index: the kept coordinates, row-major */
        coords_of(i, nd, xs, c);
        int64_t o_i = 0;
        for (int d = 0; d < nd; d++)
            if (!red[d]) o_i = o_i * xs[d] + c[d];
        want[o_i] += x[i];
        seen[o_i]++;
    }
    for (int64_t oi = 0; oi < ny; oi++) {
        const float *base = x + dlk_offset(p.nk, p.ks, p.kst, oi);
        double got = 0;
        for (int64_t q = 0; q < p.count; q++) got += base[dlk_offset(p.nr, p.rs, p.rst, q)];
        cr_assert_eq(seen[oi], (double)p.count);
        cr_assert(fabs(got - want[oi]) <= 1e-12 * (1 + fabs(want[oi])), "output %lld: %g, want %g", (long long)oi, got,
                  want[oi]);
    }
    free(x), free(want), free(seen);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, reduction_dimensions) {
    /* the op table's cases, then gaps between reduced dimensions, size-1 dims, negative axes */
    check_reduce(DL_OP_REDUCE_MEAN, DIMS(2, 5, 7, 9), 2, (int[]){2, 3}, 1);
    check_reduce(DL_OP_REDUCE_SUM, DIMS(3, 7, 5, 3), 1, (int[]){1}, 0);
    check_reduce(DL_OP_REDUCE_MAX, DIMS(4, 3, 101), 1, (int[]){-1}, 1);
    check_reduce(DL_OP_REDUCE_MIN, DIMS(3, 5, 7), 0, NULL, 0);
    check_reduce(DL_OP_REDUCE_SUM, DIMS(2, 3, 4, 5, 6), 3, (int[]){0, 2, 4}, 1);
    check_reduce(DL_OP_REDUCE_SUM, DIMS(2, 1, 4, 1, 6), 2, (int[]){-4, 3}, 0);
    check_reduce(DL_OP_REDUCE_MEAN, DIMS(5, 4, 3), 2, (int[]){1, 0}, 0);
    dlk_reduce_p p;
    opb o;
    start(&o, DL_OP_REDUCE_MAX, DIMS(3, 4));
    o.a.n_axes = 1, o.a.axes[0] = 1;
    finish(&o);
    cu_reduce_params(&o.g, &p);
    cr_expect(p.how == DLK_REDUCE_MAX && p.inner_reduced && p.threads == 32);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, layer_norm_rows_and_block_sizes) {
    opb o;
    start(&o, DL_OP_LAYER_NORM, DIMS(3, 5, 7, 9));
    o.a.axis = 2, o.a.epsilon = 1e-3f;
    second(&o, DIMS(7, 9));                         /* the weight */
    dl_tensor in3[3] = {o.in[0], o.in[1], o.in[1]}; /* and the bias, of the same shape */
    o.op.inputs = in3, o.op.n_inputs = 3;
    finish(&o);
    dlk_layer_norm_p p;
    cu_layer_norm_params(&o.g, &p);
    cr_expect(p.rows == 15 && p.inner == 63 && p.eps == 1e-3f && p.threads == 64, "%lld %lld %d", (long long)p.rows,
              (long long)p.inner, p.threads);
    dl_op_geom_free(&o.g);
    cr_expect_eq(cu_block_threads(0), 32);
    cr_expect_eq(cu_block_threads(33), 64);
    cr_expect_eq(cu_block_threads(100000), 256);
}

/* group_norm: one row per (image, group); element i of row r is channel (r % groups) * per + i /
 * spatial, which the kernel reads its weight and bias by: checked against a naive walk. */
Test(cuda_params, group_norm_rows_and_channels) {
    opb o;
    start(&o, DL_OP_GROUP_NORM, DIMS(2, 6, 5, 7));
    o.a.groups = 3, o.a.epsilon = 1e-4f;
    second(&o, DIMS(6));
    dl_tensor in3[3] = {o.in[0], o.in[1], o.in[1]};
    o.op.inputs = in3, o.op.n_inputs = 3;
    finish(&o);
    dlk_group_norm_p p;
    cu_group_norm_params(&o.g, &p);
    cr_expect(p.rows == 6 && p.inner == 70 && p.spatial == 35 && p.groups == 3 && p.per_group == 2 && p.eps == 1e-4f &&
                  p.threads == 96,
              "%lld %lld %lld %d", (long long)p.rows, (long long)p.inner, (long long)p.spatial, p.threads);
    for (int64_t r = 0; r < p.rows; r++) /* the row's elements are channels g * per .. (g + 1) * per - 1 */
        for (int64_t i = 0; i < p.inner; i++) {
            int64_t flat = r * p.inner + i, ch = flat / 35 % 6;
            cr_assert_eq((r % p.groups) * p.per_group + i / p.spatial, ch, "row %lld element %lld", (long long)r,
                         (long long)i);
        }
    dl_op_geom_free(&o.g);
}

/* ---- resize: the kernel's math on the host against the CPU plugin ---- */

static const dl_backend *cpu_backend(void) {
    static const dl_backend *be;
    dl_error err = {{0}};
    if (!be) be = tu_load_backend(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", 1, &err);
    cr_assert(be, "loading the cpu plugin: %s", err.msg);
    return be;
}

/* resize_k's body for element i (plugins/cuda/ops/movement.cu), in f32 on the host */
static float resize_at(const dlk_resize_p *p, const float *x, int64_t i) {
    int64_t ox = i % p->ow, oy = i / p->ow % p->oh;
    const float *plane = x + i / (p->ow * p->oh) * p->h * p->w;
    double cy = dl_resample_source(oy, p->h, p->oh, p->coord), cx = dl_resample_source(ox, p->w, p->ow, p->coord);
    if (p->mode != DL_RESIZE_LINEAR)
        return plane[dl_resample_nearest(cy, p->h, p->nearest) * p->w + dl_resample_nearest(cx, p->w, p->nearest)];
    int64_t y0, y1, x0, x1;
    float wy, wx;
    dl_resample_taps(cy, p->h, &y0, &y1, &wy);
    dl_resample_taps(cx, p->w, &x0, &x1, &wx);
    const float *r0 = plane + y0 * p->w, *r1 = plane + y1 * p->w;
    float top = r0[x0] + (r0[x1] - r0[x0]) * wx, bottom = r1[x0] + (r1[x1] - r1[x0]) * wx;
    return top + (bottom - top) * wy;
}

static void check_resize(const int64_t *xs, int64_t oh, int64_t ow, int mode, int coord, int nearest) {
    opb o;
    start(&o, DL_OP_RESIZE, 4, xs);
    o.a.mode = mode, o.a.coord = coord, o.a.nearest = nearest;
    o.out.ndim = 4;
    memcpy(o.ys, xs, 4 * sizeof *xs);
    o.ys[2] = oh, o.ys[3] = ow; /* a backend sees the size in the output */
    finish(&o);
    dlk_resize_p p;
    cu_resize_params(&o.g, &p);
    int64_t n = numel(4, xs), ny = o.g.numel;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)ny * sizeof *y);
    tu_fill_uniform(x, (size_t)n, 11, -1, 1);
    const dl_backend *be = cpu_backend();
    dl_error err = {{0}};
    dl_kernel *k = NULL;
    size_t ws = 0;
    o.in[0].device = o.out.device = be->device;
    cr_assert(be->supports(be->self, &o.op, &err), "%s", err.msg);
    cr_assert_eq(be->prepare(be->self, &o.op, &k, &ws, &err), DL_OK, "%s", err.msg);
    void *w = ws ? malloc(ws) : NULL;
    o.in[0].data = x, o.out.data = y;
    cr_assert_eq(be->run(be->self, k, o.in, &o.out, w, &err), DL_OK, "%s", err.msg);
    for (int64_t i = 0; i < ny; i++) {
        float got = resize_at(&p, x, i);
        cr_assert(fabsf(got - y[i]) <= 1e-6f, "mode %d coord %d nearest %d at %lld: %g, cpu %g", mode, coord, nearest,
                  (long long)i, got, y[i]);
    }
    be->release(be->self, k);
    free(w), free(x), free(y);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, resize_matches_the_cpu_plugin) {
    const int64_t a[4] = {2, 3, 5, 7}, b[4] = {1, 2, 6, 5}, c[4] = {1, 3, 13, 11}, d[4] = {1, 1, 4, 1};
    for (int coord = DL_COORD_HALF_PIXEL; coord <= DL_COORD_ASYMMETRIC; coord++) {
        for (int nm = DL_NEAREST_ROUND_PREFER_FLOOR; nm <= DL_NEAREST_CEIL; nm++) {
            check_resize(a, 10, 14, DL_RESIZE_NEAREST, coord, nm);
            check_resize(c, 5, 4, DL_RESIZE_NEAREST, coord, nm);
        }
        check_resize(a, 11, 9, DL_RESIZE_LINEAR, coord, 0);
        check_resize(b, 9, 13, DL_RESIZE_LINEAR, coord, 0);
        check_resize(c, 5, 4, DL_RESIZE_LINEAR, coord, 0);
        check_resize(d, 1, 3, DL_RESIZE_LINEAR, coord, 0);
    }
}

/* ---- gather ---- */

/* gather along `axis` of x by indices of shape is[0..ind) holding idx: every output element's
 * source against the coordinates ONNX Gather names, negative indices counted from the end. */
static void check_gather(int nd, const int64_t *xs, int ind, const int64_t *is, const int64_t *idx, int axis) {
    opb o;
    start(&o, DL_OP_GATHER, nd, xs);
    second(&o, ind, is);
    o.in[1].dtype = DL_I64;
    o.a.axis = axis;
    finish(&o);
    dlk_take_p p;
    cu_gather_params(&o.g, &p);
    cr_assert_eq(p.numel, o.g.numel, "one thread per output element");
    cr_assert_eq(p.outer * p.n * p.inner, numel(nd, xs));
    cr_assert_eq(p.m, numel(ind, is));
    int64_t c[8], xc[8];
    for (int64_t i = 0; i < o.g.numel; i++) {
        coords_of(i, o.g.ynd, o.ys, c);
        int64_t k = idx[index_of(c + axis, ind, is)], at = -1;
        for (int d = 0; d < nd; d++) xc[d] = d < axis ? c[d] : d > axis ? c[d - 1 + ind] : k < 0 ? k + xs[axis] : k;
        cr_assert_eq(dlk_take_source(&p, idx, i, &at), index_of(xc, nd, xs), "axis %d at %lld", axis, (long long)i);
        cr_assert_eq(idx[at], k);
    }
    dl_op_geom_free(&o.g);
}

Test(cuda_params, gather_sources) {
    /* the op table's cases (embedding, axis 1, last axis), then 2-D indices in the middle, 1-D data */
    check_gather(DIMS(11, 7), DIMS(2, 5), (int64_t[]){0, 10, -1, -11, 3, 5, 7, -4, 2, 9}, 0);
    check_gather(DIMS(3, 9, 5), DIMS(4), (int64_t[]){8, -9, 0, 4}, 1);
    check_gather(DIMS(2, 3, 6), DIMS(3, 2), (int64_t[]){5, -6, 0, -1, 3, 2}, 2);
    check_gather(DIMS(3, 5, 2, 7), DIMS(2, 3), (int64_t[]){4, -5, 1, 1, -2, 0}, 1);
    check_gather(DIMS(13), DIMS(3), (int64_t[]){12, -13, 6}, 0);
    check_gather(DIMS(1, 1, 3), DIMS(1), (int64_t[]){-3}, 2);
}

Test(cuda_params, gather_refuses_indices_out_of_range) {
    opb o;
    start(&o, DL_OP_GATHER, DIMS(3, 5, 4));
    second(&o, DIMS(6));
    o.in[1].dtype = DL_I64;
    o.a.axis = 1;
    finish(&o);
    dlk_take_p p;
    cu_gather_params(&o.g, &p);
    const int64_t idx[6] = {4, 5, -5, -6, INT64_MAX, INT64_MIN}; /* valid: [-5, 5) */
    const int valid[6] = {1, 0, 1, 0, 0, 0};
    for (int64_t i = 0; i < p.numel; i++) {
        int64_t at = -1, src = dlk_take_source(&p, idx, i, &at);
        cr_assert_eq(at, i / 4 % 6, "the index's position at %lld", (long long)i);
        if (!valid[at]) cr_assert_eq(src, -1, "index %lld at %lld", (long long)idx[at], (long long)i);
        else cr_assert(src >= 0 && src < 60, "index %lld: %lld", (long long)idx[at], (long long)src);
    }
    dl_op_geom_free(&o.g);
}

/* supports()'s formats: gather's indices stay int64 beside f16/bf16 data; conv_transpose2d takes
 * one storage type for all its tensors (not the GEMMs' f32 only); both row-major only. */
Test(cuda_params, gather_and_conv_transpose_formats) {
    static const dl_dtype types[3] = {{DL_DTYPE_FLOAT, 32, 1}, {DL_DTYPE_FLOAT, 16, 1}, {DL_DTYPE_BFLOAT, 16, 1}};
    static const dl_gpu_type want[3] = {DL_GPU_F32, DL_GPU_F16, DL_GPU_BF16};
    dl_error why = {{0}};
    for (int t = 0; t < 3; t++) {
        opb o;
        start(&o, DL_OP_GATHER, DIMS(11, 7));
        second(&o, DIMS(2, 5));
        o.in[1].dtype = DL_I64;
        finish(&o);
        o.in[0].dtype = o.out.dtype = types[t];
        dl_gpu_type got = DL_GPU_NOTYPE;
        cr_expect(cu_op_check(&o.op, &got, NULL, &why), "gather %d: %s", t, why.msg);
        cr_expect_eq(got, want[t]);
        o.in[1].dtype = types[t]; /* float indices: refused */
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why));
        dl_op_geom_free(&o.g);

        start(&o, DL_OP_CONV_TRANSPOSE2D, DIMS(1, 6, 7, 5));
        second(&o, DIMS(6, 4, 2, 2));
        o.a.kernel[0] = o.a.kernel[1] = o.a.stride[0] = o.a.stride[1] = 2;
        o.a.dilation[0] = o.a.dilation[1] = o.a.groups = 1;
        finish(&o);
        o.in[0].dtype = o.in[1].dtype = o.out.dtype = types[t];
        cr_expect(cu_op_check(&o.op, &got, NULL, &why), "conv_transpose2d %d: %s", t, why.msg);
        cr_expect_eq(got, want[t]);
        int64_t cl[4] = {7 * 5 * 6, 1, 5 * 6, 6};
        o.in[0].strides = cl; /* channels-last input: refused */
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why));
        dl_op_geom_free(&o.g);
    }
}

/* ---- conv_transpose2d: the kernel's body on the host against naive loops and the CPU plugin ---- */

typedef struct deconv_case {
    int64_t xs[4];
    int64_t oc;
    int kh, kw, sh, sw, pt, pl, pb, pr, oph, opw, dh, dw, groups, bias, relu;
} deconv_case;

/* deconv_k's body for element i (plugins/cuda/ops/conv_transpose.cu), in f32 on the host */
static float deconv_at(const dlk_deconv_p *p, const float *x, const float *w, const float *b, int64_t i) {
    const int64_t ox = i % p->ow, oy = i / p->ow % p->oh, oc = i / (p->ow * p->oh) % p->oc,
                  img = i / (p->ow * p->oh * p->oc);
    const int64_t g = oc / p->ocg, o = oc % p->ocg, plane = p->h * p->w, taps = (int64_t)p->kh * p->kw;
    const float *xg = x + (img * p->c + g * p->cg) * plane, *wg = w + (g * p->cg * p->ocg + o) * taps;
    float acc = 0.f;
    for (int ty = 0; ty < p->kh; ty++) {
        int64_t iy, ix;
        if (!dlk_deconv_src(oy, ty, p->sh, p->ph, p->dh, p->h, &iy)) continue;
        for (int tx = 0; tx < p->kw; tx++) {
            if (!dlk_deconv_src(ox, tx, p->sw, p->pw, p->dw, p->w, &ix)) continue;
            for (int64_t ci = 0; ci < p->cg; ci++)
                acc = fmaf(xg[ci * plane + iy * p->w + ix], wg[ci * p->ocg * taps + ty * p->kw + tx], acc);
        }
    }
    if (b) acc += b[oc];
    return p->relu && acc < 0.f ? 0.f : acc;
}

/* The definition, scattered: every input pixel times every tap added where it lands, in double. */
static void deconv_naive(const deconv_case *c, const int64_t *ys, const float *x, const float *w, const float *b,
                         double *y) {
    const int64_t n = c->xs[0], ch = c->xs[1], h = c->xs[2], wd = c->xs[3], cg = ch / c->groups,
                  ocg = c->oc / c->groups;
    for (int64_t i = 0; i < numel(4, ys); i++) y[i] = b ? b[i / (ys[2] * ys[3]) % c->oc] : 0;
    for (int64_t im = 0; im < n; im++)
        for (int64_t ci = 0; ci < ch; ci++)
            for (int64_t o = 0; o < ocg; o++)
                for (int64_t iy = 0; iy < h; iy++)
                    for (int64_t ix = 0; ix < wd; ix++)
                        for (int ty = 0; ty < c->kh; ty++)
                            for (int tx = 0; tx < c->kw; tx++) {
                                int64_t oy = iy * c->sh - c->pt + ty * c->dh, ox = ix * c->sw - c->pl + tx * c->dw;
                                if (oy < 0 || oy >= ys[2] || ox < 0 || ox >= ys[3]) continue;
                                int64_t oc = ci / cg * ocg + o;
                                y[((im * c->oc + oc) * ys[2] + oy) * ys[3] + ox] +=
                                    (double)x[((im * ch + ci) * h + iy) * wd + ix] *
                                    w[((ci * ocg + o) * c->kh + ty) * c->kw + tx];
                            }
    if (c->relu)
        for (int64_t i = 0; i < numel(4, ys); i++) y[i] = y[i] < 0 ? 0 : y[i];
}

/* Runs o's op (inputs `in`) on the cpu plugin: the weight w and bias b (NULL: none) given at
 * prepare as a model's constants, x at run, the result in y. */
static void run_on_cpu(opb *o, dl_tensor *in, float *x, float *w, float *b, float *y) {
    const dl_backend *be = cpu_backend();
    dl_error err = {{0}};
    dl_kernel *k = NULL;
    size_t wsb = 0;
    for (int i = 0; i < o->op.n_inputs; i++) in[i].device = be->device;
    o->out.device = be->device;
    in[1].data = w;
    if (b) in[2].data = b;
    cr_assert(be->supports(be->self, &o->op, &err), "%s", err.msg);
    cr_assert_eq(be->prepare(be->self, &o->op, &k, &wsb, &err), DL_OK, "%s", err.msg);
    void *scratch = wsb ? malloc(wsb) : NULL;
    in[0].data = x, o->out.data = y;
    cr_assert_eq(be->run(be->self, k, in, &o->out, scratch, &err), DL_OK, "%s", err.msg);
    be->release(be->self, k);
    free(scratch);
}

static void check_deconv(const deconv_case *c) {
    opb o;
    const int64_t ws[4] = {c->xs[1], c->oc / c->groups, c->kh, c->kw};
    int64_t bs[1] = {c->oc};
    start(&o, DL_OP_CONV_TRANSPOSE2D, 4, c->xs);
    second(&o, 4, ws);
    dl_tensor in3[3] = {o.in[0], o.in[1], {NULL, {DL_DEVICE_CUDA, 0}, 1, DL_F32, bs, NULL, 0}};
    dl_tensor *in = c->bias ? in3 : o.in; /* o.op's inputs, which this test fills in */
    o.op.inputs = in, o.op.n_inputs = c->bias ? 3 : 2;
    dl_op_attrs *a = &o.a;
    a->kernel[0] = c->kh, a->kernel[1] = c->kw, a->stride[0] = c->sh, a->stride[1] = c->sw;
    a->pad_begin[0] = c->pt, a->pad_begin[1] = c->pl, a->pad_end[0] = c->pb, a->pad_end[1] = c->pr;
    a->output_padding[0] = c->oph, a->output_padding[1] = c->opw;
    a->dilation[0] = c->dh, a->dilation[1] = c->dw, a->groups = c->groups;
    a->activation = c->relu ? DL_ACT_RELU : DL_ACT_NONE;
    finish(&o);
    for (int i = 0; i < 2; i++) /* PyTorch's output size */
        cr_assert_eq(o.ys[2 + i], (c->xs[2 + i] - 1) * (i ? c->sw : c->sh) - (i ? c->pl + c->pr : c->pt + c->pb) +
                                      (i ? c->dw : c->dh) * ((i ? c->kw : c->kh) - 1) + (i ? c->opw : c->oph) + 1);
    dlk_deconv_p p;
    cu_conv_transpose2d_params(&o.g, &p);
    cr_assert_eq(p.numel, o.g.numel, "one thread per output element");
    cr_assert(p.cg * c->groups == c->xs[1] && p.ocg * c->groups == c->oc && p.relu == c->relu);
    const int64_t nx = numel(4, c->xs), nw = numel(4, ws), ny = o.g.numel;
    float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w), *b = malloc(sizeof(float) * c->oc),
          *y = malloc((size_t)ny * sizeof *y);
    double *want = malloc((size_t)ny * sizeof *want);
    tu_fill_uniform(x, (size_t)nx, 3, -1, 1), tu_fill_uniform(w, (size_t)nw, 5, -1, 1);
    tu_fill_uniform(b, (size_t)c->oc, 9, -1, 1);
    deconv_naive(c, o.ys, x, w, c->bias ? b : NULL, want);
    run_on_cpu(&o, in, x, w, c->bias ? b : NULL, y);
    for (int64_t i = 0; i < ny; i++) {
        float got = deconv_at(&p, x, w, c->bias ? b : NULL, i);
        cr_assert(fabs(got - want[i]) <= 1e-5 * (1 + fabs(want[i])), "at %lld: %g, want %g", (long long)i, got,
                  want[i]);
        cr_assert(fabsf(got - y[i]) <= 1e-5f * (1 + fabsf(y[i])), "at %lld: %g, cpu %g", (long long)i, got, y[i]);
    }
    free(x), free(w), free(b), free(y), free(want);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, conv_transpose2d_matches_naive_and_the_cpu_plugin) {
    static const deconv_case cases[] = {
        /* xs, oc, kh kw, sh sw, pads t l b r, output_padding, dilation, groups, bias, relu */
        {{1, 6, 7, 5}, 4, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0}, /* the op table's cases */
        {{2, 5, 6, 7}, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
        {{1, 6, 5, 5}, 9, 3, 2, 1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 3, 1, 0},
        {{1, 4, 9, 8}, 5, 4, 4, 2, 3, 1, 2, 0, 1, 0, 0, 1, 1, 1, 0, 0},
        {{3, 4, 5, 3}, 6, 3, 5, 3, 2, 2, 0, 1, 3, 2, 1, 2, 3, 2, 1, 1}, /* everything odd at once, relu */
        {{2, 3, 4, 6}, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 3, 0, 1}, /* depthwise 1x1 */
        {{1, 2, 3, 3}, 7, 5, 3, 4, 1, 4, 1, 2, 0, 3, 0, 1, 2, 1, 1, 0}, /* padding past the input */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_deconv(&cases[i]);
}

/* ---- conv3d: the kernel's body on the host against naive loops and the CPU plugin ---- */

typedef struct conv3d_case {
    int64_t xs[5];
    int64_t oc;
    int k[3], s[3], pb[3], pe[3], dil[3]; /* [depth, height, width] */
    int groups, bias, relu;
} conv3d_case;

/* conv3d_k's body for element i (plugins/cuda/ops/conv3d.cu), in f32 on the host */
static float conv3d_at(const dlk_conv3d_p *p, const float *x, const float *w, const float *b, int64_t i) {
    const int64_t ox = i % p->ow, oy = i / p->ow % p->oh, oz = i / (p->ow * p->oh) % p->od,
                  oc = i / (p->ow * p->oh * p->od) % p->oc, img = i / (p->ow * p->oh * p->od * p->oc);
    const int64_t g = oc / p->ocg, vol = p->d * p->h * p->w, taps = (int64_t)p->kd * p->kh * p->kw;
    const float *xg = x + (img * p->c + g * p->cg) * vol, *wo = w + oc * p->cg * taps;
    float acc = 0.f;
    for (int tz = 0; tz < p->kd; tz++) {
        int64_t iz, iy, ix;
        if (!dlk_conv_src(oz, tz, p->sd, p->pd, p->dd, p->d, &iz)) continue;
        for (int ty = 0; ty < p->kh; ty++) {
            if (!dlk_conv_src(oy, ty, p->sh, p->ph, p->dh, p->h, &iy)) continue;
            for (int tx = 0; tx < p->kw; tx++) {
                if (!dlk_conv_src(ox, tx, p->sw, p->pw, p->dw, p->w, &ix)) continue;
                for (int64_t ci = 0; ci < p->cg; ci++)
                    acc = fmaf(xg[ci * vol + (iz * p->h + iy) * p->w + ix],
                               wo[ci * taps + (tz * p->kh + ty) * p->kw + tx], acc);
            }
        }
    }
    if (b) acc += b[oc];
    return p->relu && acc < 0.f ? 0.f : acc;
}

/* The definition, in double: each output element sums its group's channels over the whole window,
 * the window's positions in the zero padding read as zeros. */
static void conv3d_naive(const conv3d_case *c, const int64_t *ys, const float *x, const float *w, const float *b,
                         double *y) {
    const int64_t *xs = c->xs, cg = xs[1] / c->groups, ocg = c->oc / c->groups;
    int64_t e = 0, o[3], t[3], in[3];
    for (int64_t im = 0; im < xs[0]; im++)
        for (int64_t oc = 0; oc < c->oc; oc++)
            for (o[0] = 0; o[0] < ys[2]; o[0]++)
                for (o[1] = 0; o[1] < ys[3]; o[1]++)
                    for (o[2] = 0; o[2] < ys[4]; o[2]++, e++) {
                        double s = b ? b[oc] : 0;
                        for (int64_t ci = 0; ci < cg; ci++)
                            for (t[0] = 0; t[0] < c->k[0]; t[0]++)
                                for (t[1] = 0; t[1] < c->k[1]; t[1]++)
                                    for (t[2] = 0; t[2] < c->k[2]; t[2]++) {
                                        int inside = 1;
                                        for (int d = 0; d < 3; d++) {
                                            in[d] = o[d] * c->s[d] - c->pb[d] + t[d] * c->dil[d];
                                            inside &= in[d] >= 0 && in[d] < xs[2 + d];
                                        }
                                        if (!inside) continue;
                                        const int64_t xi =
                                            (((im * xs[1] + oc / ocg * cg + ci) * xs[2] + in[0]) * xs[3] + in[1]) *
                                                xs[4] +
                                            in[2];
                                        const int64_t wi =
                                            (((oc * cg + ci) * c->k[0] + t[0]) * c->k[1] + t[1]) * c->k[2] + t[2];
                                        s += (double)x[xi] * w[wi];
                                    }
                        y[e] = c->relu && s < 0 ? 0 : s;
                    }
}

static void check_conv3d(const conv3d_case *c) {
    opb o;
    const int64_t ws[5] = {c->oc, c->xs[1] / c->groups, c->k[0], c->k[1], c->k[2]};
    int64_t bs[1] = {c->oc};
    start(&o, DL_OP_CONV3D, 5, c->xs);
    second(&o, 5, ws);
    dl_tensor in3[3] = {o.in[0], o.in[1], {NULL, {DL_DEVICE_CUDA, 0}, 1, DL_F32, bs, NULL, 0}};
    dl_tensor *in = c->bias ? in3 : o.in; /* o.op's inputs, which this test fills in */
    o.op.inputs = in, o.op.n_inputs = c->bias ? 3 : 2;
    dl_op_attrs *a = &o.a;
    for (int d = 0; d < 3; d++) {
        a->kernel3[d] = c->k[d], a->stride3[d] = c->s[d], a->pad_begin3[d] = c->pb[d], a->pad_end3[d] = c->pe[d];
        a->dilation3[d] = c->dil[d];
    }
    a->groups = c->groups, a->activation = c->relu ? DL_ACT_RELU : DL_ACT_NONE;
    finish(&o);
    for (int d = 0; d < 3; d++) /* PyTorch's output size */
        cr_assert_eq(o.ys[2 + d], (c->xs[2 + d] + c->pb[d] + c->pe[d] - c->dil[d] * (c->k[d] - 1) - 1) / c->s[d] + 1);
    dlk_conv3d_p p;
    cu_conv3d_params(&o.g, &p);
    cr_assert_eq(p.numel, o.g.numel, "one thread per output element");
    cr_assert(p.cg * c->groups == c->xs[1] && p.ocg * c->groups == c->oc && p.relu == c->relu);
    cr_assert(p.c == c->xs[1] && p.d == c->xs[2] && p.h == c->xs[3] && p.w == c->xs[4] && p.oc == c->oc &&
              p.od == o.ys[2] && p.oh == o.ys[3] && p.ow == o.ys[4]);
    const int64_t nx = numel(5, c->xs), nw = numel(5, ws), ny = o.g.numel;
    float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w), *b = malloc(sizeof(float) * c->oc),
          *y = malloc((size_t)ny * sizeof *y);
    double *want = malloc((size_t)ny * sizeof *want);
    tu_fill_uniform(x, (size_t)nx, 3, -1, 1), tu_fill_uniform(w, (size_t)nw, 5, -1, 1);
    tu_fill_uniform(b, (size_t)c->oc, 9, -1, 1);
    conv3d_naive(c, o.ys, x, w, c->bias ? b : NULL, want);
    run_on_cpu(&o, in, x, w, c->bias ? b : NULL, y);
    int clipped = 0;
    for (int64_t i = 0; i < ny; i++) {
        float got = conv3d_at(&p, x, w, c->bias ? b : NULL, i);
        clipped += c->relu && got == 0.f;
        cr_assert(fabs(got - want[i]) <= 1e-5 * (1 + fabs(want[i])), "at %lld: %g, want %g", (long long)i, got,
                  want[i]);
        cr_assert(fabsf(got - y[i]) <= 1e-5f * (1 + fabsf(y[i])), "at %lld: %g, cpu %g", (long long)i, got, y[i]);
    }
    if (c->relu)
        cr_assert(clipped > 0 && clipped < ny, "relu clips some outputs, not all (%d of %lld)", clipped, (long long)ny);
    free(x), free(w), free(b), free(y), free(want);
    dl_op_geom_free(&o.g);
}

Test(cuda_params, conv3d_matches_naive_and_the_cpu_plugin) {
    static const conv3d_case cases[] = {
        /* xs, oc, kernel, stride, pads before, pads after, dilation, groups, bias, relu ([d, h, w]) */
        {{1, 3, 5, 9, 7}, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, 1, 0}, /* the op table's */
        {{2, 3, 6, 13, 11}, 4, {3, 7, 7}, {1, 2, 2}, {1, 3, 3}, {1, 3, 3}, {1, 1, 1}, 1, 1, 0},
        {{1, 6, 4, 7, 9}, 7, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, 0, 0},
        {{1, 5, 9, 5, 6}, 3, {3, 1, 1}, {2, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1, 1, 0},
        {{1, 6, 7, 8, 7}, 9, {2, 3, 2}, {1, 1, 1}, {1, 0, 2}, {0, 1, 1}, {2, 1, 2}, 3, 1, 0},
        /* everything odd at once: groups of 2 in and 3 out, strides, dilations, asymmetric pads, relu */
        {{3, 4, 5, 7, 6}, 6, {3, 2, 3}, {2, 3, 1}, {2, 0, 1}, {0, 2, 3}, {1, 2, 2}, 2, 1, 1},
        {{2, 4, 5, 6, 5}, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 4, 1, 1}, /* depthwise */
        /* padding past the input: whole depth slices and rows of taps in the padding, no bias */
        {{1, 2, 2, 3, 3}, 3, {3, 5, 3}, {1, 1, 2}, {2, 2, 0}, {1, 2, 3}, {1, 1, 1}, 1, 0, 1},
        /* dilated taps spanning the whole input: one output element */
        {{1, 3, 3, 4, 5}, 2, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {2, 3, 4}, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv3d(&cases[i]);
}

/* supports()'s formats for conv3d, as for conv_transpose2d: one storage type for all its tensors
 * (f32, f16 or bf16, not the GEMMs' f32 only), row-major only (a 5-D tensor has no channels-last
 * layout the plugin takes), and relu the only fused activation. */
Test(cuda_params, conv3d_formats) {
    static const dl_dtype types[3] = {{DL_DTYPE_FLOAT, 32, 1}, {DL_DTYPE_FLOAT, 16, 1}, {DL_DTYPE_BFLOAT, 16, 1}};
    static const dl_gpu_type want[3] = {DL_GPU_F32, DL_GPU_F16, DL_GPU_BF16};
    dl_error why = {{0}};
    for (int t = 0; t < 3; t++) {
        opb o;
        start(&o, DL_OP_CONV3D, DIMS(1, 4, 5, 6, 7));
        second(&o, DIMS(4, 2, 3, 3, 3));
        for (int d = 0; d < 3; d++)
            o.a.kernel3[d] = 3, o.a.stride3[d] = o.a.dilation3[d] = o.a.pad_begin3[d] = o.a.pad_end3[d] = 1;
        o.a.groups = 2, o.a.activation = DL_ACT_RELU;
        finish(&o);
        o.in[0].dtype = o.in[1].dtype = o.out.dtype = types[t];
        dl_gpu_type got = DL_GPU_NOTYPE;
        dl_layout layout = DL_LAYOUT_OTHER;
        cr_expect(cu_op_check(&o.op, &got, &layout, &why), "conv3d %d: %s", t, why.msg);
        cr_expect_eq(got, want[t]);
        cr_expect_eq(layout, DL_LAYOUT_ROW_MAJOR);
        o.a.activation = DL_ACT_SIGMOID; /* the cpu plugin fuses it; this plugin's kernel relu only */
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why), "conv3d %d with a fused sigmoid", t);
        cr_expect(strstr(why.msg, "fused activation"), "%s", why.msg);
        o.a.activation = DL_ACT_NONE;
        cr_expect(cu_op_check(&o.op, NULL, NULL, &why), "conv3d %d without an activation: %s", t, why.msg);
        o.in[1].dtype = types[(t + 1) % 3]; /* the weight in another dtype: refused */
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why), "conv3d %d with mixed dtypes", t);
        cr_expect(strstr(why.msg, "mixed dtypes"), "%s", why.msg);
        o.in[1].dtype = types[t];
        /* a channels-last (NDHWC) input: refused */
        int64_t cl[5] = {5 * 6 * 7 * 4, 1, 6 * 7 * 4, 7 * 4, 4};
        o.in[0].strides = cl;
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why), "conv3d %d with an NDHWC input", t);
        cr_expect(strstr(why.msg, "layout"), "%s", why.msg);
        o.in[0].strides = NULL;
        o.out.strides = cl; /* and a channels-last output (y is [1, 4, 5, 6, 7] too) */
        cr_expect_not(cu_op_check(&o.op, NULL, NULL, &why), "conv3d %d with an NDHWC output", t);
        cr_expect(strstr(why.msg, "layout"), "%s", why.msg);
        dl_op_geom_free(&o.g);
    }
}
