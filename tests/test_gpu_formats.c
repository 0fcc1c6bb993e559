/* test_gpu_formats.c — what the GPU plugins decide about stored formats (ABI 1.3: f16/bf16, NHWC)
 * without a GPU and without linking CUDA: the NCHW <-> NHWC index math and the KRSC filter reorder,
 * the host halves of the staged converting copies (against core/ops/tensor_convert.c), what
 * supports_convert takes, which dtypes and layouts each op of the cuda plugin accepts (ABI 1.4's
 * kinds included), and (where the cudnn plugin is built: its headers are needed for the enums) the
 * cudnn plugin's supports(), preferred layout, the cuDNN / cuBLASLt enums it picks, and its
 * convolution search's decisions (which result and math type, fused or not, the scratch pattern,
 * the finiteness check and the output sample), and the choices both keep in the host's timing
 * cache (choice_store.c: keys, and the codes read back). The plugins' own source files are compiled
 * into this test (tests/CMakeLists.txt). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choice_store.h"
#include "cuda_formats.h"
#include "gpu_storage.h"
#include "op_table.h"
#include "tensor_convert.h"
#include "test_util.h"
#if DLRUN_TEST_CUDNN_FORMATS
#include "cudnn_formats.h"
#endif

/* ---- tensors and ops ---- */

typedef struct spec {
    int64_t shape[8], strides[8];
} spec;

/* t over s: dtype d, shape from the list (nd dims), channels-last strides when cl */
static dl_tensor tensor(spec *s, dl_dtype d, int cl, int nd, const int64_t *shape) {
    memcpy(s->shape, shape, (size_t)nd * sizeof *shape);
    if (cl) dl_channels_last_strides(s->shape, s->strides);
    return (dl_tensor){NULL, {DL_DEVICE_CUDA, 0}, nd, d, s->shape, cl ? s->strides : NULL, 0};
}

typedef struct opb {
    dl_op_attrs a;
    spec s[6];
    dl_tensor in[5], out;
    dl_op op;
} opb;

static void attrs(dl_op_attrs *a) {
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->stride[0] = a->stride[1] = a->dilation[0] = a->dilation[1] = a->groups = 1;
    a->count_include_pad = 1;
    a->epsilon = 1e-5f;
    a->clip_min = -INFINITY;
    a->clip_max = INFINITY;
    a->axis = 1;
}

/* An op of kind with n inputs; the tensors are set with set_in / set_out. */
static dl_op *op_of(opb *b, int kind, int n, int precision) {
    memset(b, 0, sizeof *b);
    attrs(&b->a);
    b->op = (dl_op){sizeof b->op, kind, "t", &b->a, n, b->in, 1, &b->out, precision};
    return &b->op;
}
#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((int64_t[]){__VA_ARGS__})
static void set_in(opb *b, int i, dl_dtype d, int cl, int nd, const int64_t *shape) {
    b->in[i] = tensor(&b->s[i], d, cl, nd, shape);
}
static void set_out(opb *b, dl_dtype d, int cl, int nd, const int64_t *shape) {
    b->out = tensor(&b->s[5], d, cl, nd, shape);
}

/* A 3x3 pad-1 conv [2,8,5,7] -> [2,16,5,7] with bias, all tensors of dtype d, activations in
 * channels-last when cl. */
static dl_op *conv_op(opb *b, dl_dtype d, int cl, int precision) {
    dl_op *op = op_of(b, DL_OP_CONV2D, 3, precision);
    b->a.kernel[0] = b->a.kernel[1] = 3;
    b->a.pad_begin[0] = b->a.pad_begin[1] = b->a.pad_end[0] = b->a.pad_end[1] = 1;
    set_in(b, 0, d, cl, SHAPE(2, 8, 5, 7));
    set_in(b, 1, d, 0, SHAPE(16, 8, 3, 3));
    set_in(b, 2, d, 0, SHAPE(16));
    set_out(b, d, cl, SHAPE(2, 16, 5, 7));
    return op;
}

/* A 2x2 stride-2 pool [2,8,6,6] -> [2,8,3,3] (global: [2,8,1,1]). */
static dl_op *pool_op(opb *b, int kind, dl_dtype d, int cl, int precision) {
    dl_op *op = op_of(b, kind, 1, precision);
    b->a.kernel[0] = b->a.kernel[1] = b->a.stride[0] = b->a.stride[1] = 2;
    set_in(b, 0, d, cl, SHAPE(2, 8, 6, 6));
    if (kind == DL_OP_GLOBAL_AVGPOOL) set_out(b, d, cl, SHAPE(2, 8, 1, 1));
    else set_out(b, d, cl, SHAPE(2, 8, 3, 3));
    return op;
}

/* A unary elementwise op on [2,3,4,5]. */
static dl_op *unary_op(opb *b, int kind, dl_dtype d, int cl, int precision) {
    dl_op *op = op_of(b, kind, 1, precision);
    set_in(b, 0, d, cl, SHAPE(2, 3, 4, 5));
    set_out(b, d, cl, SHAPE(2, 3, 4, 5));
    return op;
}

/* A same-shape add of [2,3,4,5] tensors, each operand's dtype and layout given. */
static dl_op *add_op(opb *b, dl_dtype da, int cla, dl_dtype db, int clb, int cly) {
    dl_op *op = op_of(b, DL_OP_ADD, 2, DL_PRECISION_F16);
    set_in(b, 0, da, cla, SHAPE(2, 3, 4, 5));
    set_in(b, 1, db, clb, SHAPE(2, 3, 4, 5));
    set_out(b, da, cly, SHAPE(2, 3, 4, 5));
    return op;
}

/* Batchnorm on [2,6,3,3], all of dtype d. */
static dl_op *bn_op(opb *b, dl_dtype d, int cl) {
    dl_op *op = op_of(b, DL_OP_BATCHNORM, 5, DL_PRECISION_F16);
    set_in(b, 0, d, cl, SHAPE(2, 6, 3, 3));
    for (int i = 1; i < 5; i++) set_in(b, i, d, 0, SHAPE(6));
    set_out(b, d, cl, SHAPE(2, 6, 3, 3));
    return op;
}

/* A linear [4,10] -> [4,6] with bias. */
static dl_op *linear_op(opb *b, dl_dtype d, int precision) {
    dl_op *op = op_of(b, DL_OP_LINEAR, 3, precision);
    set_in(b, 0, d, 0, SHAPE(4, 10));
    set_in(b, 1, d, 0, SHAPE(6, 10));
    set_in(b, 2, d, 0, SHAPE(6));
    set_out(b, d, 0, SHAPE(4, 6));
    return op;
}

/* op (built above) with a residual add fused into it (ABI 1.8): one more input, last, of the
 * output's shape, dtype d and layout (channels-last when cl). */
static dl_op *with_residual(opb *b, dl_dtype d, int cl) {
    int i = b->op.n_inputs++;
    set_in(b, i, d, cl, b->out.ndim, b->out.shape);
    b->a.residual = 1;
    return &b->op;
}

static void expect_ok(int (*check)(const dl_op *, dl_error *), const dl_op *op, const char *what) {
    dl_error why = {{0}};
    cr_expect(check(op, &why), "%s: refused: %s", what, why.msg);
}
static void expect_no(int (*check)(const dl_op *, dl_error *), const dl_op *op, const char *reason, const char *what) {
    dl_error why = {{0}};
    cr_expect_not(check(op, &why), "%s: accepted, should be refused (%s)", what, reason);
    cr_expect(strstr(why.msg, reason), "%s: reason '%s' lacks '%s'", what, why.msg, reason);
}

static const dl_dtype dtypes[3] = {{DL_DTYPE_FLOAT, 32, 1}, {DL_DTYPE_FLOAT, 16, 1}, {DL_DTYPE_BFLOAT, 16, 1}};

/* ---- index math ---- */

Test(gpu_storage, layout_index_maps_are_inverse_and_match_the_host_conversion) {
    int64_t shape[4] = {3, 5, 4, 7}, c = 5, hw = 28, n = 3 * 5 * 4 * 7;
    for (int64_t i = 0; i < n; i++) {
        cr_assert_eq(dl_gpu_cl_to_rm(dl_gpu_rm_to_cl(i, c, hw), c, hw), i);
        cr_assert_eq(dl_gpu_rm_to_cl(dl_gpu_cl_to_rm(i, c, hw), c, hw), i);
    }
    /* element (b, k, y, x) sits at b*CHW + k*HW + y*W + x row-major, b*CHW + (y*W + x)*C + k channels-last */
    for (int64_t b = 0; b < 3; b++)
        for (int64_t k = 0; k < 5; k++)
            for (int64_t p = 0; p < hw; p++)
                cr_assert_eq(dl_gpu_rm_to_cl(b * c * hw + k * hw + p, c, hw), b * c * hw + p * c + k);
    dl_gpu_xform x;
    cr_assert(dl_gpu_xform_init(&x, shape, 4, DL_LAYOUT_CHANNELS_LAST, DL_LAYOUT_ROW_MAJOR));
    cr_expect_eq(x.relayout, DL_GPU_TO_CHANNELS_LAST);
    cr_expect_eq(x.n, n);
    for (int64_t j = 0; j < n; j++) cr_assert_eq(dl_gpu_dst_of(&x, dl_gpu_src_of(&x, j)), j);
    cr_assert(dl_gpu_xform_init(&x, shape, 4, DL_LAYOUT_ROW_MAJOR, DL_LAYOUT_ROW_MAJOR));
    cr_expect_eq(x.relayout, DL_GPU_SAME_ORDER);
    cr_expect_eq(dl_gpu_src_of(&x, 17), 17);
    cr_expect_not(dl_gpu_xform_init(&x, shape, 3, DL_LAYOUT_CHANNELS_LAST, DL_LAYOUT_ROW_MAJOR), "3-D channels-last");
    cr_expect_not(dl_gpu_xform_init(&x, shape, 4, DL_LAYOUT_OTHER, DL_LAYOUT_ROW_MAJOR), "strided");
}

Test(gpu_storage, filter_reorder_to_krsc) {
    int64_t ws[4] = {6, 4, 3, 2}; /* O, I, KH, KW */
    int64_t n = 6 * 4 * 3 * 2;
    dl_gpu_xform x;
    dl_gpu_filter_krsc(&x, ws);
    cr_assert_eq(x.n, n);
    /* KRSC [o][r][s][c] = OIHW [o][c][r][s]: gather each KRSC element from its OIHW index */
    for (int64_t o = 0; o < 6; o++)
        for (int64_t r = 0; r < 3; r++)
            for (int64_t s = 0; s < 2; s++)
                for (int64_t ci = 0; ci < 4; ci++) {
                    int64_t krsc = ((o * 3 + r) * 2 + s) * 4 + ci, oihw = ((o * 4 + ci) * 3 + r) * 2 + s;
                    cr_assert_eq(dl_gpu_src_of(&x, krsc), oihw, "o %ld r %ld s %ld c %ld", (long)o, (long)r, (long)s,
                                 (long)ci);
                }
}

/* ---- converting copies: plan and host halves ---- */

/* fills n elements of type d with values from a seed (f32 values rounded to d) */
static void *values(dl_dtype d, int64_t n, uint64_t seed) {
    float *f = malloc((size_t)n * sizeof *f);
    tu_fill_uniform(f, (size_t)n, seed, -70000.0f, 70000.0f); /* some overflow f16 */
    f[0] = NAN, f[1] = INFINITY, f[2] = -0.0f, f[3] = 1e-6f;  /* f16 subnormal */
    void *out = malloc((size_t)n * dl_dtype_size(d));
    dl_convert_elements(out, d, f, DL_F32, n);
    free(f);
    return out;
}

/* The staged upload and download of every dtype and layout pair, in chunks of odd sizes, give
 * what dl_convert_host gives. */
Test(gpu_storage, staged_halves_match_the_host_conversion) {
    int64_t shape[4] = {2, 7, 3, 5}, n = 2 * 7 * 3 * 5;
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 3; si++)
            for (int dcl = 0; dcl < 2; dcl++)
                for (int scl = 0; scl < 2; scl++) {
                    spec ds, ss;
                    dl_tensor dst = tensor(&ds, dtypes[di], dcl, 4, shape),
                              src = tensor(&ss, dtypes[si], scl, 4, shape);
                    src.data = values(dtypes[si], n, (uint64_t)(di * 31 + si * 7 + dcl * 3 + scl));
                    size_t db = (size_t)n * dl_dtype_size(dtypes[di]);
                    void *want = malloc(db), *up = malloc(db), *down = malloc(db), *chunk = malloc(db);
                    dst.data = want;
                    cr_assert(dl_convert_host(&dst, &src));
                    dl_gpu_convert_plan p;
                    dl_error why = {{0}};
                    cr_assert(dl_gpu_convert_plan_of(&dst, &src, DL_COPY_HOST_TO_DEVICE, &p, &why), "%s", why.msg);
                    int64_t step = 11;                         /* elements per staging chunk */
                    for (int64_t lo = 0; lo < n; lo += step) { /* upload: dst-order chunks, gathered */
                        int64_t cnt = n - lo < step ? n - lo : step;
                        dl_gpu_gather_host(chunk, src.data, &p, lo, cnt);
                        memcpy((char *)up + lo * (int64_t)dl_dtype_size(dtypes[di]), chunk,
                               (size_t)cnt * dl_dtype_size(dtypes[di]));
                    }
                    for (int64_t lo = 0; lo < n; lo += step) { /* download: src-order chunks, scattered */
                        int64_t cnt = n - lo < step ? n - lo : step;
                        dl_gpu_scatter_host(down, (const char *)src.data + lo * (int64_t)dl_dtype_size(dtypes[si]), &p,
                                            lo, cnt);
                    }
                    cr_expect_eq(memcmp(up, want, db), 0, "upload %s%s <- %s%s", dl_dtype_name(dtypes[di]),
                                 dcl ? " NHWC" : "", dl_dtype_name(dtypes[si]), scl ? " NHWC" : "");
                    cr_expect_eq(memcmp(down, want, db), 0, "download %s%s <- %s%s", dl_dtype_name(dtypes[di]),
                                 dcl ? " NHWC" : "", dl_dtype_name(dtypes[si]), scl ? " NHWC" : "");
                    free(src.data), free(want), free(up), free(down), free(chunk);
                }
}

Test(gpu_storage, supports_convert_takes_float_dtypes_and_two_layouts) {
    spec a, b;
    int64_t s4[4] = {1, 3, 2, 2}, s4b[4] = {1, 3, 2, 3};
    dl_tensor d = tensor(&a, DL_F16, 1, 4, s4), s = tensor(&b, DL_F32, 0, 4, s4);
    dl_error why = {{0}};
    for (int kind = 0; kind < 3; kind++) cr_expect(dl_gpu_convert_plan_of(&d, &s, kind, NULL, &why), "%s", why.msg);
    cr_expect_not(dl_gpu_convert_plan_of(&d, &s, 7, NULL, &why));
    s.dtype = (dl_dtype){DL_DTYPE_INT, 32, 1};
    cr_expect_not(dl_gpu_convert_plan_of(&d, &s, DL_COPY_HOST_TO_DEVICE, NULL, &why));
    cr_expect(strstr(why.msg, "f32, f16 and bf16 only"), "%s", why.msg);
    s = tensor(&b, DL_F32, 0, 4, s4b);
    cr_expect_not(dl_gpu_convert_plan_of(&d, &s, DL_COPY_HOST_TO_DEVICE, NULL, &why));
    cr_expect(strstr(why.msg, "shapes differ"), "%s", why.msg);
    s = tensor(&b, DL_F32, 0, 4, s4);
    b.strides[0] = 99, b.strides[1] = 1, b.strides[2] = 1, b.strides[3] = 1; /* strided: not a dlrun layout */
    s.strides = b.strides;
    cr_expect_not(dl_gpu_convert_plan_of(&d, &s, DL_COPY_HOST_TO_DEVICE, NULL, &why));
    cr_expect(strstr(why.msg, "strided"), "%s", why.msg);
}

/* ---- the cuda plugin ---- */

static int cu_check(const dl_op *op, dl_error *why) { return cu_op_check(op, NULL, NULL, why); }

Test(cuda_formats, simple_kernels_take_16_bit_storage_gemms_f32_only) {
    opb b;
    for (int i = 0; i < 3; i++) {
        expect_ok(cu_check, unary_op(&b, DL_OP_RELU, dtypes[i], 0, DL_PRECISION_F16), "relu");
        expect_ok(cu_check, unary_op(&b, DL_OP_SIGMOID, dtypes[i], 1, DL_PRECISION_F16), "sigmoid NHWC");
        expect_ok(cu_check, pool_op(&b, DL_OP_MAXPOOL2D, dtypes[i], 0, DL_PRECISION_F16), "maxpool");
        expect_ok(cu_check, pool_op(&b, DL_OP_GLOBAL_AVGPOOL, dtypes[i], 0, DL_PRECISION_F16), "global avgpool");
        expect_ok(cu_check, bn_op(&b, dtypes[i], 1), "batchnorm NHWC");
        expect_ok(cu_check, add_op(&b, dtypes[i], 1, dtypes[i], 1, 1), "add NHWC");
    }
    dl_gpu_type t;
    dl_layout l;
    dl_error why;
    cr_expect(cu_op_check(bn_op(&b, DL_BF16, 1), &t, &l, &why), "%s", why.msg);
    cr_expect_eq(t, DL_GPU_BF16);
    cr_expect_eq(l, DL_LAYOUT_CHANNELS_LAST);
    expect_ok(cu_check, conv_op(&b, DL_F32, 0, DL_PRECISION_F16), "f32 conv at f16 precision");
    expect_no(cu_check, conv_op(&b, DL_F16, 0, DL_PRECISION_F16), "GEMM takes f32 only, not f16", "f16 conv");
    expect_no(cu_check, linear_op(&b, DL_BF16, DL_PRECISION_BF16), "GEMM takes f32 only, not bf16", "bf16 linear");
    expect_no(cu_check, conv_op(&b, DL_F32, 1, DL_PRECISION_F16), "layout", "NHWC conv");
    expect_no(cu_check, pool_op(&b, DL_OP_MAXPOOL2D, DL_F16, 1, DL_PRECISION_F16), "channels-last", "NHWC pool");
    expect_no(cu_check, add_op(&b, DL_F16, 0, DL_F32, 0, 0), "mixed dtypes", "f16 + f32");
    expect_no(cu_check, add_op(&b, DL_F16, 1, DL_F16, 0, 1), "one layout per op", "NHWC + NCHW");
    dl_op *op = bn_op(&b, DL_F16, 1);
    b.in[1] = tensor(&b.s[1], DL_F32, 0, SHAPE(6));
    expect_no(cu_check, op, "mixed dtypes", "f16 batchnorm with f32 parameters");
    /* broadcasting add: row-major only */
    op = op_of(&b, DL_OP_ADD, 2, DL_PRECISION_F16);
    set_in(&b, 0, DL_F16, 1, SHAPE(2, 3, 4, 5));
    set_in(&b, 1, DL_F16, 1, SHAPE(1, 3, 1, 1));
    set_out(&b, DL_F16, 1, SHAPE(2, 3, 4, 5));
    expect_no(cu_check, op, "broadcasting takes row-major", "NHWC broadcast add");
    set_in(&b, 0, DL_F16, 0, SHAPE(2, 3, 4, 5));
    set_in(&b, 1, DL_F16, 0, SHAPE(1, 3, 1, 1));
    set_out(&b, DL_F16, 0, SHAPE(2, 3, 4, 5));
    expect_ok(cu_check, op, "f16 broadcast add");
    cr_expect(cu_takes_channels_last(DL_OP_BATCHNORM, 0));
    cr_expect_not(cu_takes_channels_last(DL_OP_SOFTMAX, 0));
}

/* A residual add fused into a GEMM (ABI 1.8): every GEMM's epilogue adds it, so conv2d and linear
 * take one of the output's storage; another kind, or a residual unlike the output, is refused. */
Test(cuda_formats, gemms_take_a_fused_residual_of_the_outputs_storage) {
    opb b;
    conv_op(&b, DL_F32, 0, DL_PRECISION_TF32);
    expect_ok(cu_check, with_residual(&b, DL_F32, 0), "f32 conv + residual");
    linear_op(&b, DL_F32, DL_PRECISION_TF32);
    expect_ok(cu_check, with_residual(&b, DL_F32, 0), "f32 linear + residual");
    dl_op *op = conv_op(&b, DL_F32, 0, DL_PRECISION_F32);
    b.op.n_inputs = 2; /* no bias: the residual is the third input */
    expect_ok(cu_check, with_residual(&b, DL_F32, 0), "conv without bias + residual");
    conv_op(&b, DL_F32, 0, DL_PRECISION_F32);
    expect_no(cu_check, with_residual(&b, DL_F16, 0), "takes f32 only", "f16 residual of an f32 conv");
    conv_op(&b, DL_F32, 0, DL_PRECISION_F32);
    with_residual(&b, DL_F32, 0);
    b.s[3].shape[3] = 6;
    expect_no(cu_check, op, "differs from the output", "residual of another shape");
    unary_op(&b, DL_OP_SIGMOID, DL_F32, 0, DL_PRECISION_F32);
    expect_no(cu_check, with_residual(&b, DL_F32, 0), "cannot be fused into", "sigmoid + residual");
}

/* A transpose [2,3,4,5] -> [2,4,5,3] and a reduce_mean over H and W -> [2,3,1,1] (keepdims). */
static dl_op *transpose_op(opb *b, dl_dtype d, int cl) {
    dl_op *op = op_of(b, DL_OP_TRANSPOSE, 1, DL_PRECISION_F16);
    memcpy(b->a.perm, (int32_t[]){0, 2, 3, 1}, 4 * sizeof(int32_t));
    set_in(b, 0, d, cl, SHAPE(2, 3, 4, 5));
    set_out(b, d, cl, SHAPE(2, 4, 5, 3));
    return op;
}
static dl_op *reduce_op(opb *b, dl_dtype d, int cl) {
    dl_op *op = op_of(b, DL_OP_REDUCE_MEAN, 1, DL_PRECISION_F16);
    b->a.n_axes = 2, b->a.axes[0] = 2, b->a.axes[1] = 3, b->a.keepdims = 1;
    set_in(b, 0, d, cl, SHAPE(2, 3, 4, 5));
    set_out(b, d, cl, SHAPE(2, 3, 1, 1));
    return op;
}

Test(cuda_formats, abi_1_4_kinds_channels_last_only_where_order_does_not_matter) {
    opb b;
    for (int i = 0; i < 3; i++) {
        expect_ok(cu_check, unary_op(&b, DL_OP_GELU, dtypes[i], 1, DL_PRECISION_F16), "gelu NHWC");
        expect_ok(cu_check, unary_op(&b, DL_OP_SOFTPLUS, dtypes[i], 0, DL_PRECISION_F16), "softplus");
        add_op(&b, dtypes[i], 1, dtypes[i], 1, 1)->kind = DL_OP_MUL;
        expect_ok(cu_check, &b.op, "same-shape mul NHWC");
        expect_ok(cu_check, transpose_op(&b, dtypes[i], 0), "transpose");
        expect_ok(cu_check, reduce_op(&b, dtypes[i], 0), "reduce_mean");
    }
    expect_no(cu_check, transpose_op(&b, DL_F16, 1), "channels-last", "NHWC transpose");
    expect_no(cu_check, reduce_op(&b, DL_F16, 1), "channels-last", "NHWC reduce_mean");
    dl_op *op = op_of(&b, DL_OP_MAX, 2, DL_PRECISION_F16);
    set_in(&b, 0, DL_F16, 1, SHAPE(2, 3, 4, 5));
    set_in(&b, 1, DL_F16, 1, SHAPE(1, 3, 1, 1));
    set_out(&b, DL_F16, 1, SHAPE(2, 3, 4, 5));
    expect_no(cu_check, op, "max: broadcasting takes row-major", "NHWC broadcast max");
    cr_expect(cu_takes_channels_last(DL_OP_HARD_SWISH, 0) && cu_takes_channels_last(DL_OP_POW, 0));
    cr_expect(!cu_takes_channels_last(DL_OP_SLICE, 0) && !cu_takes_channels_last(DL_OP_LAYER_NORM, 0) &&
              !cu_takes_channels_last(DL_OP_RESIZE, 0) && !cu_takes_channels_last(DL_OP_PAD, 0));
    cr_expect(cu_is_binary(DL_OP_ADD) && cu_is_binary(DL_OP_MAX) && !cu_is_binary(DL_OP_SQRT));
}

/* DLRUN_CUDA_NHWC (CU_CHECK_NHWC): conv2d and the pools take channels-last too, in every storage
 * type the tensor-core tiles take; the rest of the rules stay. */
static int cu_check_nhwc(const dl_op *op, dl_error *why) {
    return cu_op_check_sw(op, CU_CHECK_GEMM16 | CU_CHECK_NHWC, NULL, NULL, why);
}
Test(cuda_formats, nhwc_switch_takes_channels_last_convs_and_pools) {
    opb b;
    for (int i = 0; i < 3; i++) {
        expect_ok(cu_check_nhwc, conv_op(&b, dtypes[i], 1, DL_PRECISION_BF16), "NHWC conv");
        expect_ok(cu_check_nhwc, conv_op(&b, dtypes[i], 0, DL_PRECISION_BF16), "NCHW conv");
        expect_ok(cu_check_nhwc, pool_op(&b, DL_OP_MAXPOOL2D, dtypes[i], 1, DL_PRECISION_BF16), "NHWC maxpool");
        expect_ok(cu_check_nhwc, pool_op(&b, DL_OP_AVGPOOL2D, dtypes[i], 1, DL_PRECISION_BF16), "NHWC avgpool");
        expect_ok(cu_check_nhwc, pool_op(&b, DL_OP_GLOBAL_AVGPOOL, dtypes[i], 1, DL_PRECISION_BF16), "NHWC gap");
    }
    dl_layout l;
    dl_error why;
    cr_expect(
        cu_op_check_sw(conv_op(&b, DL_BF16, 1, DL_PRECISION_BF16), CU_CHECK_GEMM16 | CU_CHECK_NHWC, NULL, &l, &why),
        "%s", why.msg);
    cr_expect_eq(l, DL_LAYOUT_CHANNELS_LAST);
    expect_no(cu_check_nhwc, transpose_op(&b, DL_F16, 1), "channels-last", "NHWC transpose");
    cr_expect(cu_takes_channels_last(DL_OP_CONV2D, 1) && cu_takes_channels_last(DL_OP_AVGPOOL2D, 1));
    cr_expect(!cu_takes_channels_last(DL_OP_CONV2D, 0) && !cu_takes_channels_last(DL_OP_LINEAR, 1));
    cr_expect(!cu_takes_channels_last(DL_OP_SOFTMAX, 1) && !cu_takes_channels_last(DL_OP_CONCAT, 1));
}

/* ---- choices kept in the host's timing cache (choice_store.c) ---- */

/* A host store of a few entries, as the core's timing cache answers: get gives what put kept. */
typedef struct fake_store {
    char key[8][DL_GPU_CHOICE_KEY_LEN];
    double value[8];
    int n, gets, puts;
} fake_store;
static int store_get(void *ctx, const char *key, double *v) {
    fake_store *f = ctx;
    f->gets++;
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->key[i], key)) return *v = f->value[i], 1;
    return 0;
}
static void store_put(void *ctx, const char *key, double v) {
    fake_store *f = ctx;
    int i = 0;
    f->puts++;
    while (i < f->n && strcmp(f->key[i], key)) i++;
    if (i == f->n && f->n < 8) f->n++;
    if (i < 8) snprintf(f->key[i], sizeof f->key[i], "%s", key), f->value[i] = v;
}
static void log_nothing(void *ctx, int level, const char *msg) { (void)ctx, (void)level, (void)msg; }
static dl_host host_with(fake_store *f) {
    memset(f, 0, sizeof *f);
    return (dl_host){DL_ABI_VERSION, sizeof(dl_host), f, 1, 0, log_nothing, store_get, store_put};
}

Test(choice_store, keys_tell_apart_everything_a_timed_choice_depends_on) {
    enum { VARIANTS = 16 };
    char keys[VARIANTS][DL_GPU_CHOICE_KEY_LEN];
    opb b;
    for (int v = 0; v < VARIANTS; v++) {
        dl_op *op = conv_op(&b, v == 1 ? DL_BF16 : DL_F32, v == 2, v == 3 ? DL_PRECISION_F32 : DL_PRECISION_TF32);
        switch (v) {
        case 4: b.s[0].shape[0] = 3, b.s[5].shape[0] = 3; break; /* the batch */
        case 5: b.s[0].shape[3] = 8, b.s[5].shape[3] = 8; break; /* the width */
        case 6: b.a.stride[1] = 2, b.s[5].shape[3] = 4; break;
        case 7: b.a.pad_end[0] = 0; break;
        case 8: b.a.dilation[0] = 2; break;
        case 9: b.a.groups = 2, b.s[1].shape[1] = 4; break;
        case 10: b.a.activation = DL_ACT_RELU; break;
        case 11: op = with_residual(&b, DL_F32, 0); break;
        case 12: op->n_inputs = 2; break; /* no bias */
        case 13: b.a.kernel[1] = 1, b.s[1].shape[3] = 1; break;
        case 14: op->kind = DL_OP_LINEAR; break;
        default: break;
        }
        cr_assert(dl_gpu_choice_key(keys[v], sizeof keys[v], v == 15 ? "conv plan v2" : "conv plan v1", op, "staged=0"),
                  "variant %d fits", v);
        for (int u = 0; u < v; u++) cr_expect_str_neq(keys[u], keys[v], "variants %d and %d share a key", u, v);
    }
    char again[DL_GPU_CHOICE_KEY_LEN], other[DL_GPU_CHOICE_KEY_LEN];
    dl_op *op = conv_op(&b, DL_F32, 0, DL_PRECISION_TF32);
    cr_assert(dl_gpu_choice_key(again, sizeof again, "conv plan v1", op, "staged=0"));
    cr_expect_str_eq(again, keys[0], "the same op and settings: the same key");
    cr_assert(dl_gpu_choice_key(other, sizeof other, "conv plan v1", op, "staged=1"));
    cr_expect_str_neq(other, keys[0], "the plugin's part counts");
    cr_expect(strstr(keys[0], "in=2.32.1[2x8x5x7],2.32.1[16x8x3x3],2.32.1[16];out=2.32.1[2x16x5x7]") != NULL, "%s",
              keys[0]);
    cr_expect(strstr(keys[2], "in=2.32.1c[2x8x5x7]") != NULL, "channels-last is marked: %s", keys[2]);
}

Test(choice_store, a_key_that_does_not_fit_is_no_key) {
    opb b;
    dl_op *op = conv_op(&b, DL_F32, 0, DL_PRECISION_TF32);
    char key[DL_GPU_CHOICE_KEY_LEN], small[40];
    cr_assert(dl_gpu_choice_key(key, sizeof key, "gemm v1", op, "x"));
    size_t need = strlen(key);
    char *exact = malloc(need + 1);
    cr_expect(dl_gpu_choice_key(exact, need + 1, "gemm v1", op, "x"), "the key and its end fit exactly");
    cr_expect(!dl_gpu_choice_key(exact, need, "gemm v1", op, "x") && !exact[0], "one byte short: no key");
    free(exact);
    cr_expect(!dl_gpu_choice_key(small, sizeof small, "gemm v1", op, "x") && !small[0]);
    /* a key cut short is never looked up nor kept */
    fake_store f;
    dl_host h = host_with(&f);
    int code = 7;
    dl_gpu_choice_put(&h, small, 3);
    cr_expect(!dl_gpu_choice_get(&h, small, &code) && code == 7);
    cr_expect_eq(f.gets + f.puts, 0, "the store is not asked");
}

Test(choice_store, codes_go_through_the_hosts_store_and_edited_values_are_not_read) {
    fake_store f;
    dl_host h = host_with(&f);
    int code = -1;
    cr_expect(!dl_gpu_choice_get(&h, "k", &code), "nothing kept yet");
    dl_gpu_choice_put(&h, "k", 37);
    cr_expect(dl_gpu_choice_get(&h, "k", &code) && code == 37);
    dl_gpu_choice_put(&h, "k", 0);
    cr_expect(dl_gpu_choice_get(&h, "k", &code) && code == 0, "replaced, and 0 is a code");
    const double edited[] = {-1, 2.5, NAN, INFINITY, DL_GPU_CHOICE_MAX + 1.0, 1e300};
    for (size_t i = 0; i < sizeof edited / sizeof *edited; i++) {
        f.value[0] = edited[i], code = 5;
        cr_expect(!dl_gpu_choice_get(&h, "k", &code) && code == 5, "value %g is no code", edited[i]);
    }
    int puts = f.puts;
    dl_gpu_choice_put(&h, "k", -1);
    dl_gpu_choice_put(&h, "k", DL_GPU_CHOICE_MAX + 1);
    cr_expect_eq(f.puts, puts, "no code out of range is kept");
    /* a host without the store (before ABI 1.12), or with one half of it: nothing asked */
    dl_host old = h;
    old.struct_size = (uint32_t)offsetof(dl_host, cache_get);
    dl_host half = h;
    half.cache_put = NULL;
    int gets = f.gets;
    puts = f.puts;
    cr_expect(!dl_gpu_choice_get(&old, "k", &code) && !dl_gpu_choice_get(&half, "k", &code));
    cr_expect(!dl_gpu_choice_get(NULL, "k", &code));
    dl_gpu_choice_put(&old, "k", 1);
    dl_gpu_choice_put(&half, "k", 1);
    dl_gpu_choice_put(NULL, "k", 1);
    cr_expect(f.gets == gets && f.puts == puts);
}

/* ---- the cudnn plugin ---- */

#if DLRUN_TEST_CUDNN_FORMATS
Test(cudnn_formats, accepts_16_bit_and_nhwc_where_it_runs_them) {
    opb b;
    for (int i = 0; i < 3; i++)
        for (int cl = 0; cl < 2; cl++) {
            expect_ok(dn_op_check, conv_op(&b, dtypes[i], cl, DL_PRECISION_F16), "conv");
            expect_ok(dn_op_check, pool_op(&b, DL_OP_MAXPOOL2D, dtypes[i], cl, DL_PRECISION_F16), "maxpool");
            expect_ok(dn_op_check, pool_op(&b, DL_OP_AVGPOOL2D, dtypes[i], cl, DL_PRECISION_F16), "avgpool");
            expect_ok(dn_op_check, unary_op(&b, DL_OP_RELU, dtypes[i], cl, DL_PRECISION_F16), "relu");
            expect_ok(dn_op_check, bn_op(&b, dtypes[i], cl), "batchnorm");
            expect_ok(dn_op_check, add_op(&b, dtypes[i], cl, dtypes[i], cl, cl), "add");
        }
    expect_ok(dn_op_check, linear_op(&b, DL_BF16, DL_PRECISION_BF16), "bf16 linear");
    expect_ok(dn_op_check, unary_op(&b, DL_OP_SOFTMAX, DL_F16, 0, DL_PRECISION_F16), "f16 softmax");
    expect_no(dn_op_check, unary_op(&b, DL_OP_SOFTMAX, DL_F16, 1, DL_PRECISION_F16), "channels-last", "NHWC softmax");
    expect_no(dn_op_check, unary_op(&b, DL_OP_LEAKY_RELU, DL_F16, 0, DL_PRECISION_F16), "no leaky relu", "leaky");
    expect_no(dn_op_check, add_op(&b, DL_F16, 0, DL_BF16, 0, 0), "mixed dtypes", "f16 + bf16");
    expect_no(dn_op_check, add_op(&b, DL_F16, 1, DL_F16, 1, 0), "one layout per op", "NHWC + NHWC -> NCHW");
    dl_op *op = conv_op(&b, DL_F16, 1, DL_PRECISION_F16);
    b.in[1] = tensor(&b.s[1], DL_F16, 1, SHAPE(16, 8, 3, 3));
    expect_no(dn_op_check, op, "weights are taken row-major", "channels-last filter");
    op = conv_op(&b, DL_F16, 0, DL_PRECISION_F16);
    b.a.pad_end[0] = 0;
    b.s[5].shape[2] = 4;
    expect_no(dn_op_check, op, "pad symmetrically", "asymmetric padding");
}

/* A residual add fused into a conv (cuDNN's z input, or cudnnAddTensor) or a linear (cuBLASLt's C
 * with beta = 1), in every dtype and layout the op takes; it must match the output. */
Test(cudnn_formats, convs_and_linears_take_a_fused_residual) {
    opb b;
    for (int i = 0; i < 3; i++) {
        for (int cl = 0; cl < 2; cl++) {
            conv_op(&b, dtypes[i], cl, DL_PRECISION_F16);
            expect_ok(dn_op_check, with_residual(&b, dtypes[i], cl), "conv + residual");
        }
        linear_op(&b, dtypes[i], DL_PRECISION_F16);
        expect_ok(dn_op_check, with_residual(&b, dtypes[i], 0), "linear + residual");
    }
    conv_op(&b, DL_F16, 1, DL_PRECISION_F16);
    expect_no(dn_op_check, with_residual(&b, DL_F16, 0), "differs from the output", "NCHW residual of an NHWC conv");
    unary_op(&b, DL_OP_RELU, DL_F16, 0, DL_PRECISION_F16);
    expect_no(dn_op_check, with_residual(&b, DL_F16, 0), "cannot be fused into", "relu + residual");
}

Test(cudnn_formats, prefers_nhwc_for_16_bit_convolutions_and_pools) {
    opb b;
    cr_expect_eq(dn_preferred_layout(conv_op(&b, DL_F32, 0, DL_PRECISION_F16)), DL_LAYOUT_CHANNELS_LAST);
    cr_expect_eq(dn_preferred_layout(conv_op(&b, DL_F32, 0, DL_PRECISION_BF16)), DL_LAYOUT_CHANNELS_LAST);
    cr_expect_eq(dn_preferred_layout(conv_op(&b, DL_F32, 0, DL_PRECISION_F32)), DL_LAYOUT_ROW_MAJOR);
    cr_expect_eq(dn_preferred_layout(conv_op(&b, DL_F32, 0, DL_PRECISION_TF32)), DL_LAYOUT_ROW_MAJOR);
    cr_expect_eq(dn_preferred_layout(pool_op(&b, DL_OP_MAXPOOL2D, DL_F32, 0, DL_PRECISION_F16)),
                 DL_LAYOUT_CHANNELS_LAST);
    cr_expect_eq(dn_preferred_layout(unary_op(&b, DL_OP_RELU, DL_F32, 0, DL_PRECISION_BF16)), DL_LAYOUT_CHANNELS_LAST);
    cr_expect_eq(dn_preferred_layout(unary_op(&b, DL_OP_SOFTMAX, DL_F32, 0, DL_PRECISION_F16)), DL_LAYOUT_ROW_MAJOR);
    cr_expect_eq(dn_preferred_layout(linear_op(&b, DL_F32, DL_PRECISION_F16)), DL_LAYOUT_ROW_MAJOR);
}

Test(cudnn_formats, cudnn_and_cublaslt_enums) {
    cr_expect_eq(dn_data_type(DL_F32), CUDNN_DATA_FLOAT);
    cr_expect_eq(dn_data_type(DL_F16), CUDNN_DATA_HALF);
    cr_expect_eq(dn_data_type(DL_BF16), CUDNN_DATA_BFLOAT16);
    cr_expect_eq((int)dn_data_type((dl_dtype){DL_DTYPE_INT, 8, 1}), -1);
    spec s;
    int64_t sh[4] = {1, 3, 4, 4};
    dl_tensor nchw = tensor(&s, DL_F16, 0, 4, sh);
    cr_expect_eq(dn_tensor_format(&nchw), CUDNN_TENSOR_NCHW);
    dl_tensor nhwc = tensor(&s, DL_F16, 1, 4, sh);
    cr_expect_eq(dn_tensor_format(&nhwc), CUDNN_TENSOR_NHWC);
    cr_expect_eq(dn_conv_math(DL_PRECISION_F32, DL_F32), CUDNN_FMA_MATH);
    cr_expect_eq(dn_conv_math(DL_PRECISION_TF32, DL_F32), CUDNN_TENSOR_OP_MATH);
    cr_expect_eq(dn_conv_math(DL_PRECISION_F16, DL_F16), CUDNN_TENSOR_OP_MATH);
    cr_expect_eq(dn_conv_math(DL_PRECISION_F32, DL_BF16), CUDNN_TENSOR_OP_MATH);
    cr_expect_not(dn_conv_algo_ok(DL_PRECISION_F32, DL_F32, CUDNN_TENSOR_OP_MATH));
    cr_expect(dn_conv_algo_ok(DL_PRECISION_F32, DL_F32, CUDNN_FMA_MATH));
    cr_expect(dn_conv_algo_ok(DL_PRECISION_BF16, DL_BF16, CUDNN_TENSOR_OP_MATH));
    cr_expect_eq(dn_lt_type(DL_F32), CUDA_R_32F);
    cr_expect_eq(dn_lt_type(DL_F16), CUDA_R_16F);
    cr_expect_eq(dn_lt_type(DL_BF16), CUDA_R_16BF);
    cr_expect_eq(dn_lt_compute(DL_PRECISION_F32, DL_F32), CUBLAS_COMPUTE_32F);
    cr_expect_eq(dn_lt_compute(DL_PRECISION_TF32, DL_F32), CUBLAS_COMPUTE_32F_FAST_TF32);
    cr_expect_eq(dn_lt_compute(DL_PRECISION_F16, DL_F32), CUBLAS_COMPUTE_32F_FAST_TF32);
    cr_expect_eq(dn_lt_compute(DL_PRECISION_F16, DL_F16), CUBLAS_COMPUTE_32F);
    cr_expect_eq(dn_lt_compute(DL_PRECISION_BF16, DL_BF16), CUBLAS_COMPUTE_32F);
}

/* ---- the cudnn plugin's convolution search (conv.c's decisions) ---- */

Test(cudnn_formats, math_types_searched_and_run) {
    /* f32 at f32 precision: FMA and DEFAULT results only, and always run with FMA (DEFAULT would
     * let cuDNN use TF32 on Ampere and later) */
    cr_expect(dn_conv_algo_ok(DL_PRECISION_F32, DL_F32, CUDNN_DEFAULT_MATH));
    cr_expect_not(dn_conv_algo_ok(DL_PRECISION_F32, DL_F32, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_F32, DL_F32, CUDNN_DEFAULT_MATH), CUDNN_FMA_MATH);
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_F32, DL_F32, CUDNN_FMA_MATH), CUDNN_FMA_MATH);
    /* elsewhere: the math the search measured, but never down-conversion (not asked for) */
    cr_expect(dn_conv_algo_ok(DL_PRECISION_TF32, DL_F32, CUDNN_TENSOR_OP_MATH));
    cr_expect(dn_conv_algo_ok(DL_PRECISION_TF32, DL_F32, CUDNN_FMA_MATH));
    cr_expect_not(dn_conv_algo_ok(DL_PRECISION_TF32, DL_F32, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
    cr_expect_not(dn_conv_algo_ok(DL_PRECISION_F16, DL_F16, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_TF32, DL_F32, CUDNN_TENSOR_OP_MATH), CUDNN_TENSOR_OP_MATH);
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_TF32, DL_F32, CUDNN_FMA_MATH), CUDNN_FMA_MATH);
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_F16, DL_F16, CUDNN_DEFAULT_MATH), CUDNN_DEFAULT_MATH);
    cr_expect_eq(dn_conv_run_math(DL_PRECISION_F32, DL_BF16, CUDNN_TENSOR_OP_MATH), CUDNN_TENSOR_OP_MATH);
    cr_expect_str_eq(dn_math_name(CUDNN_FMA_MATH), "FMA");
    cr_expect_str_eq(dn_math_name(CUDNN_TENSOR_OP_MATH), "TENSOR_OP");
    cr_expect_str_eq(dn_math_name(99), "?");
}

Test(cudnn_formats, search_results_picked_fastest_usable_first) {
    cudnnConvolutionFwdAlgoPerf_t perf[5];
    memset(perf, 0, sizeof perf);
    struct {
        cudnnConvolutionFwdAlgo_t algo;
        cudnnStatus_t status;
        cudnnMathType_t math;
    } r[5] = {{CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_STATUS_NOT_SUPPORTED, CUDNN_FMA_MATH},
              {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_STATUS_SUCCESS, CUDNN_TENSOR_OP_MATH},
              {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_FMA_MATH},
              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_TENSOR_OP_MATH},
              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, CUDNN_DEFAULT_MATH}};
    for (int i = 0; i < 5; i++) {
        perf[i].algo = r[i].algo;
        perf[i].status = r[i].status;
        perf[i].mathType = r[i].math;
        perf[i].time = (float)(i + 1);
    }
    int any = -1, precomp = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    cr_expect_eq(dn_conv_pick(perf, 5, DL_PRECISION_F32, DL_F32, any), 2, "exact: the first that ran without TF32");
    cr_expect_eq(dn_conv_pick(perf, 5, DL_PRECISION_F32, DL_F32, precomp), 4);
    cr_expect_eq(dn_conv_pick(perf, 5, DL_PRECISION_TF32, DL_F32, any), 1, "tf32: the first that ran");
    cr_expect_eq(dn_conv_pick(perf, 5, DL_PRECISION_TF32, DL_F32, precomp), 3);
    cr_expect_eq(dn_conv_pick(perf, 5, DL_PRECISION_BF16, DL_BF16, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT), -1);
    cr_expect_eq(dn_conv_pick(perf, 1, DL_PRECISION_TF32, DL_F32, any), -1, "only one that did not run");
    cr_expect_eq(dn_conv_pick(perf, 0, DL_PRECISION_TF32, DL_F32, any), -1);
    cr_expect_str_eq(dn_conv_algo_name(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM), "IMPLICIT_PRECOMP_GEMM");
    cr_expect_str_eq(dn_conv_algo_name(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED), "WINOGRAD_NONFUSED");
    cr_expect_str_eq(dn_conv_algo_name(CUDNN_CONVOLUTION_FWD_ALGO_COUNT), "?");
}

/* DLRUN_CUDNN_SEARCH: find (the default) or heuristic, anything else refused by name; the
 * heuristic's answers too big for the workspace offered are passed over. */
Test(cudnn_formats, search_switch_and_the_heuristics_workspace_limit) {
    int mode = -1;
    char why[120] = "";
    cr_expect(dn_search_parse(NULL, &mode, why, sizeof why) && mode == DN_SEARCH_FIND);
    cr_expect(dn_search_parse("", &mode, why, sizeof why) && mode == DN_SEARCH_FIND);
    cr_expect(dn_search_parse("find", &mode, why, sizeof why) && mode == DN_SEARCH_FIND);
    cr_expect(dn_search_parse("heuristic", &mode, why, sizeof why) && mode == DN_SEARCH_HEURISTIC);
    cr_expect_not(dn_search_parse("fast", &mode, why, sizeof why));
    cr_expect(strstr(why, "DLRUN_CUDNN_SEARCH is \"fast\": it takes find or heuristic"), "%s", why);
    cudnnConvolutionFwdAlgoPerf_t perf[3];
    memset(perf, 0, sizeof perf);
    const size_t mem[3] = {(size_t)2 << 30, 4096, 0};
    for (int i = 0; i < 3; i++) {
        perf[i].algo = (cudnnConvolutionFwdAlgo_t)(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD + i % 2);
        perf[i].status = CUDNN_STATUS_SUCCESS;
        perf[i].mathType = CUDNN_FMA_MATH;
        perf[i].memory = mem[i];
    }
    dn_conv_drop_oversized(perf, 3, (size_t)1 << 30);
    cr_expect_eq(perf[0].status, CUDNN_STATUS_NOT_SUPPORTED, "2 GiB past a 1 GiB cap");
    cr_expect_eq(perf[1].status, CUDNN_STATUS_SUCCESS);
    cr_expect_eq(dn_conv_pick(perf, 3, DL_PRECISION_F32, DL_F32, -1), 1, "the first that fits");
    dn_conv_drop_oversized(perf, 3, 0);
    cr_expect_eq(dn_conv_pick(perf, 3, DL_PRECISION_F32, DL_F32, -1), 2, "only the one needing no workspace");
}

Test(cudnn_formats, a_conv_with_bias_keeps_the_fastest_measured_way) {
    /* conv + add, fused PRECOMP_GEMM, fused with the searched algorithm */
    const int fused[3] = {0, 1, 1};
    cr_expect_eq(dn_conv_fastest((double[]){0.6, 0.5, 0.7}, fused, 3), 1);
    cr_expect_eq(dn_conv_fastest((double[]){0.4, 0.5, 0.7}, fused, 3), 0, "the fused call is not always faster");
    cr_expect_eq(dn_conv_fastest((double[]){0.6, 0.6, 0.9}, fused, 3), 1, "a tie: one call rather than two");
    cr_expect_eq(dn_conv_fastest((double[]){0.6, -1, 0.3}, fused, 3), 2,
                 "PRECOMP_GEMM failed or gave non-finite values");
    cr_expect_eq(dn_conv_fastest((double[]){-1, 0.5}, fused, 2), 1, "conv + add did not run");
    cr_expect_eq(dn_conv_fastest((double[]){-1, -1, -1}, fused, 3), -1);
    float t[5] = {0.5f, 0.1f, 9.0f, 0.3f, 0.2f};
    cr_expect_float_eq(dn_median(t, 5), 0.3f, 0, "a slow outlier does not move the median");
    float one = 2.0f;
    cr_expect_float_eq(dn_median(&one, 1), 2.0f, 0);
}

Test(cudnn_formats, scratch_pattern_is_nonzero_finite_and_exact_in_every_type) {
    enum { N = 8192 };
    static float f[N];
    static uint16_t h[N], b[N];
    dn_fill_pattern(f, N, DL_GPU_F32);
    dn_fill_pattern(h, N, DL_GPU_F16);
    dn_fill_pattern(b, N, DL_GPU_BF16);
    int nonzero = 0, negative = 0, distinct[256] = {0};
    for (int i = 0; i < N; i++) {
        cr_assert(f[i] >= -0.5f && f[i] < 0.5f, "element %d: %g", i, (double)f[i]);
        cr_assert_eq(f[i] * 256.0f, floorf(f[i] * 256.0f), "element %d is a multiple of 1/256", i);
        cr_assert_eq(dl_f16_to_f32(h[i]), f[i], "f16 element %d holds the value exactly", i);
        cr_assert_eq(dl_bf16_to_f32(b[i]), f[i], "bf16 element %d holds the value exactly", i);
        nonzero += f[i] != 0.0f;
        negative += f[i] < 0.0f;
        distinct[(int)(f[i] * 256.0f) + 128] = 1;
    }
    int values = 0;
    for (int i = 0; i < 256; i++) values += distinct[i];
    cr_expect_gt(nonzero, N * 9 / 10);
    cr_expect(negative > N / 3 && negative < N * 2 / 3, "%d negative of %d", negative, N);
    cr_expect_gt(values, 200, "%d distinct values", values);
    cr_expect(dn_all_finite(f, N, DL_GPU_F32) && dn_all_finite(h, N, DL_GPU_F16) && dn_all_finite(b, N, DL_GPU_BF16));
}

Test(cudnn_formats, finiteness_check_sees_nan_infinity_and_the_poisons) {
    uint32_t f[4] = {0x3f800000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u}; /* 1, +-FLT_MAX, a subnormal */
    cr_expect(dn_all_finite(f, 4, DL_GPU_F32));
    const uint32_t bad32[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fa5a5a5u /* DL_POISON */,
                              0xffffffffu /* conv_tried's 0xff fill */};
    for (size_t i = 0; i < sizeof bad32 / sizeof *bad32; i++) {
        f[3] = bad32[i];
        cr_expect_not(dn_all_finite(f, 4, DL_GPU_F32), "0x%08x", bad32[i]);
        cr_expect(dn_all_finite(f, 3, DL_GPU_F32), "only the first n elements are looked at");
    }
    uint16_t h[3] = {0x3c00u, 0x7bffu, 0xfbffu}; /* f16: 1, +-65504 */
    uint16_t b[3] = {0x3f80u, 0x7f7fu, 0xff7fu}; /* bf16: 1, +-max */
    cr_expect(dn_all_finite(h, 3, DL_GPU_F16));
    cr_expect(dn_all_finite(b, 3, DL_GPU_BF16));
    const uint16_t bad16[] = {0x7fa5u /* DL_POISON16's half */, 0xffffu /* the 0xff fill */};
    for (size_t i = 0; i < 2; i++) {
        h[1] = b[1] = bad16[i];
        cr_expect_not(dn_all_finite(h, 3, DL_GPU_F16), "f16 0x%04x", bad16[i]);
        cr_expect_not(dn_all_finite(b, 3, DL_GPU_BF16), "bf16 0x%04x", bad16[i]);
    }
    h[1] = 0x7c00u; /* f16's infinity, but bf16's 2^121: the storage type decides */
    b[1] = 0x7c00u;
    cr_expect_not(dn_all_finite(h, 3, DL_GPU_F16));
    cr_expect(dn_all_finite(b, 3, DL_GPU_BF16));
    b[1] = 0x7f80u;
    cr_expect_not(dn_all_finite(b, 3, DL_GPU_BF16));
}

Test(cudnn_formats, output_sample_covers_small_outputs_and_spreads_over_large_ones) {
    size_t off[DN_SAMPLE_SPANS], len[DN_SAMPLE_SPANS];
    cr_expect_eq(dn_sample_spans(100, 4, off, len), 1);
    cr_expect(off[0] == 0 && len[0] == 100, "a small output is copied whole");
    size_t cap = DN_SAMPLE_SPANS * DN_SAMPLE_SPAN;
    cr_expect_eq(dn_sample_spans(cap, 2, off, len), 1);
    cr_expect_eq(len[0], cap);
    const size_t big[] = {cap + 2, (size_t)32 * 64 * 224 * 224 * 4, ((size_t)5 << 30) + 6};
    for (int b = 0; b < 3; b++)
        for (size_t es = 2; es <= 4; es += 2) {
            if (big[b] % es) continue;
            int n = dn_sample_spans(big[b], es, off, len);
            cr_assert_eq(n, DN_SAMPLE_SPANS);
            cr_expect_eq(off[0], 0, "the first byte is looked at");
            cr_expect_eq(off[n - 1] + len[n - 1], big[b], "and the last");
            for (int i = 0; i < n; i++) {
                cr_expect_eq(len[i], DN_SAMPLE_SPAN);
                cr_expect_eq(off[i] % es, 0, "span %d starts on an element", i);
                cr_expect_leq(off[i] + len[i], big[b]);
                if (i) cr_expect_gt(off[i], off[i - 1], "spread, in order");
            }
        }
}
Test(cudnn_formats, conv_plans_kept_read_back_and_edited_ones_refused) {
    const int algos[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING};
    int a, m, f, seen[512] = {0};
    for (size_t i = 0; i < sizeof algos / sizeof *algos; i++)
        for (int fused = 0; fused < 2; fused++) {
            /* what prepare keeps: tf32 tensor-op math, with a bias and relu (any algorithm fused) */
            int code = dn_conv_plan_code(algos[i], CUDNN_TENSOR_OP_MATH, fused);
            cr_assert(code >= 0 && code < 512);
            cr_expect(!seen[code]++, "codes are apart");
            cr_expect(dn_conv_plan_of(code, DL_PRECISION_TF32, DL_F32, 1, 1, &a, &m, &f));
            cr_expect(a == algos[i] && m == CUDNN_TENSOR_OP_MATH && f == fused);
            /* f32 precision runs FMA only: a tensor-op plan read back there is refused */
            cr_expect(!dn_conv_plan_of(code, DL_PRECISION_F32, DL_F32, 1, 1, &a, &m, &f));
            int fma = dn_conv_plan_code(algos[i], CUDNN_FMA_MATH, fused);
            cr_expect(dn_conv_plan_of(fma, DL_PRECISION_F32, DL_F32, 1, 1, &a, &m, &f) && m == CUDNN_FMA_MATH);
            cr_expect(!dn_conv_plan_of(dn_conv_plan_code(algos[i], CUDNN_DEFAULT_MATH, fused), DL_PRECISION_F32, DL_F32,
                                       1, 1, &a, &m, &f),
                      "f32 precision never runs DEFAULT math (it may take TF32)");
            cr_expect(dn_conv_plan_of(dn_conv_plan_code(algos[i], CUDNN_TENSOR_OP_MATH, fused), DL_PRECISION_F32,
                                      DL_BF16, 1, 1, &a, &m, &f),
                      "bf16 data runs tensor-op math at any precision");
            /* the fused call needs a bias, and without relu runs on IMPLICIT_PRECOMP_GEMM only */
            cr_expect_eq(dn_conv_plan_of(code, DL_PRECISION_TF32, DL_F32, 0, 1, &a, &m, &f), !fused);
            cr_expect_eq(dn_conv_plan_of(code, DL_PRECISION_TF32, DL_F32, 1, 0, &a, &m, &f),
                         !fused || algos[i] == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
        }
    /* codes no plan has: an unknown algorithm, down-conversion math, an unknown math, out of range */
    cr_expect(!dn_conv_plan_of(dn_conv_plan_code(CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_TENSOR_OP_MATH, 0),
                               DL_PRECISION_TF32, DL_F32, 1, 1, &a, &m, &f));
    cr_expect(!dn_conv_plan_of(dn_conv_plan_code(0, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, 0), DL_PRECISION_TF32,
                               DL_F32, 1, 1, &a, &m, &f));
    cr_expect(!dn_conv_plan_of(dn_conv_plan_code(0, 5, 0), DL_PRECISION_TF32, DL_F32, 1, 1, &a, &m, &f));
    cr_expect(!dn_conv_plan_of(-1, DL_PRECISION_TF32, DL_F32, 1, 1, &a, &m, &f));
    cr_expect(!dn_conv_plan_of(512, DL_PRECISION_TF32, DL_F32, 1, 1, &a, &m, &f));
}
#endif
