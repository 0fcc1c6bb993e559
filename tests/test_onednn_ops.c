/* test_onednn_ops.c — the onednn plugin against the cpu plugin, op by op: every op it claims, on
 * random inputs with odd sizes, driven through the plugin ABI as the host drives it (supports,
 * prepare with the weights, run with the workspace it asked for, output poisoned with NaN), and
 * compared by NMSE at the op table's f32 threshold; the ops that take channels-last tensors (conv,
 * pools, add, concat, batchnorm, eltwise) once more with their 4-D activations NHWC. Also:
 * supports() refuses, with a reason, what oneDNN would compute differently (16-bit storage,
 * channels-last for the other ops or mixed with row-major in one op, the averages and clips it
 * defines otherwise); eltwise ops run in place; values far out (exp, sigmoid, softplus ... of
 * -100 to 100) match the reference element by element. Skipped where the plugin is not built. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrun/plugin.h"
#include "op_table.h"
#include "test_util.h"

#define ONEDNN_SO DLRUN_PLUGIN_DIR "/libdlrun-onednn.so"

static const dl_backend *cpu, *odn;

static void load(void) {
    if (access(ONEDNN_SO, F_OK) != 0) cr_skip_test("the onednn plugin is not built (no oneDNN)");
    dl_error err = {{0}};
    if (!cpu) cpu = tu_load_backend(DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", 2, &err);
    cr_assert(cpu, "loading the cpu plugin: %s", err.msg);
    if (!odn) odn = tu_load_backend(ONEDNN_SO, 2, &err);
    cr_assert(odn, "loading the onednn plugin: %s", err.msg);
}

/* An op under test: its inputs (the last n_weights carry data at prepare) and attributes. */
typedef struct op_case {
    dl_op_kind kind;
    dl_op_attrs a;
    int n_in, n_weights;
    int nd[8];
    int64_t shape[8][8];
    float lo, hi; /* activations from U(lo, hi); weights from U(-0.5, 0.5), batchnorm's var positive */
} op_case;

static uint64_t seed = 7000;
static int misalign; /* check_as gives every input 4 bytes past a 64-byte aligned address */

/* The op table's defaults (a model file's), with matmul's scale 1 and axis 0 as the cases expect. */
static void attrs(dl_op_attrs *a) {
    dl_op_params p;
    dl_op_params_default(&p);
    *a = p.attrs;
    a->alpha = 1.0f, a->axis = 0;
}

static void set_shape(op_case *c, int i, int nd, const int64_t *s) {
    c->nd[i] = nd;
    memcpy(c->shape[i], s, (size_t)nd * sizeof *s);
}
#define SHAPE(c, i, ...) \
    set_shape(c, i, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* The op as the host shows it (data NULL), its output shape inferred by the op table (from the
 * inputs before a fused residual, which is the last). */
static dl_op describe(op_case *c, dl_tensor *in, dl_tensor *y, int64_t *yshape) {
    for (int i = 0; i < c->n_in; i++)
        in[i] = (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, c->nd[i], DL_F32, c->shape[i], NULL, 0};
    dl_op op = {sizeof op, c->kind, "t", &c->a, c->n_in, in, 1, y, DL_PRECISION_F32}, inner = op;
    dl_op_attrs plain = c->a;
    plain.residual = 0;
    inner.attrs = &plain;
    inner.n_inputs -= c->a.residual;
    dl_shape ys;
    dl_error why = {{0}};
    cr_assert(dl_op_def_of(c->kind)->infer(&inner, NULL, &ys, &why), "bad test case: %s", why.msg);
    memcpy(yshape, ys.d, (size_t)ys.ndim * sizeof *yshape);
    *y = (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, ys.ndim, DL_F32, yshape, NULL, 0};
    return op;
}

/* x [N, C, H, W] row-major as channels-last [N, H, W, C] in a new array, or back (to_last 0) */
static float *relaid(const float *x, const int64_t *s, int to_last) {
    const int64_t n = s[0] * s[1] * s[2] * s[3];
    float *y = malloc((size_t)n * sizeof *y + 64);
    for (int64_t i = 0; i < n; i++) {
        if (to_last) y[tu_channels_last_at(s, i)] = x[i];
        else y[i] = x[tu_channels_last_at(s, i)];
    }
    return y;
}

/* 1 if input i of c is a weight (carries data at prepare) */
static int is_weight(const op_case *c, int i) {
    return i >= c->n_in - c->a.residual - c->n_weights && i < c->n_in - c->a.residual;
}

/* How run_as gives the output: a buffer of its own; over input 0 (supports_in_place); or where
 * the kernel's kernel_in_place (ABI 1.10) names the residual, over it, and it must name it
 * (OVER_RESIDUAL) or must not (NOT_OVER_RESIDUAL). */
enum { OWN_OUTPUT = 0, OVER_INPUT0 = 1, OVER_RESIDUAL = 2, NOT_OVER_RESIDUAL = 3 };

/* Runs the op on backend b with inputs data[]; the output (poisoned first) in a new array. With
 * nhwc, every 4-D activation (not a weight) and a 4-D output are given channels-last (strides and
 * data), and the output is turned back to row-major before it is returned. */
static float *run_as(const dl_backend *b, op_case *c, float **data, int in_place, int nhwc) {
    dl_tensor in[8], y;
    int64_t ys[8], st[9][4];
    float *mine[8] = {0};
    dl_op op = describe(c, in, &y, ys);
    for (int i = 0; nhwc && i < c->n_in; i++)
        if (c->nd[i] == 4 && !is_weight(c, i)) {
            dl_channels_last_strides(c->shape[i], st[i]);
            in[i].strides = st[i];
            mine[i] = relaid(data[i], c->shape[i], 1);
        }
    if (nhwc && y.ndim == 4) dl_channels_last_strides(ys, st[8]), y.strides = st[8];
    dl_error err = {{0}};
    cr_assert(b->supports(b->self, &op, &err), "%s refused %s: %s", b->name, dl_op_kind_name(c->kind), err.msg);
    for (int i = 0; i < c->n_in; i++)
        if (is_weight(c, i)) in[i].data = data[i];
    dl_kernel *k = NULL;
    size_t ws = 0;
    cr_assert_eq(b->prepare(b->self, &op, &k, &ws, &err), DL_OK, "%s: %s", b->name, err.msg);
    int64_t n = dl_tensor_numel(&y);
    float *out = malloc((size_t)n * sizeof *out + 64);
    for (int64_t i = 0; i < n; i++) out[i] = NAN;
    void *w = ws ? malloc(ws) : NULL;
    for (int i = 0; i < c->n_in; i++) in[i].data = mine[i] ? mine[i] : data[i];
    y.data = out;
    if (in_place == OVER_INPUT0) { /* over a copy of input 0, which is then the output */
        cr_assert(b->supports_in_place(b->self, &op), "%s: %s is not in place", b->name, dl_op_kind_name(c->kind));
        memcpy(out, in[0].data, (size_t)n * sizeof *out);
        in[0].data = out;
    }
    if (in_place >= OVER_RESIDUAL) {
        const int at = DL_BACKEND_HAS(b, kernel_in_place) ? b->kernel_in_place(b->self, k, &op) : -1;
        cr_expect_eq(at, in_place == OVER_RESIDUAL ? c->n_in - 1 : -1, "%s: %s in place over input %d", b->name,
                     dl_op_kind_name(c->kind), at);
        if (at == c->n_in - 1) { /* over a copy of the residual, which is then the output */
            memcpy(out, in[at].data, (size_t)n * sizeof *out);
            in[at].data = out;
        }
    }
    cr_assert_eq(b->run(b->self, k, in, &y, w, &err), DL_OK, "%s: %s", b->name, err.msg);
    b->release(b->self, k);
    free(w);
    for (int i = 0; i < c->n_in; i++) free(mine[i]);
    if (y.strides) {
        float *rm = relaid(out, ys, 0);
        free(out);
        out = rm;
    }
    return out;
}

static float *run_on(const dl_backend *b, op_case *c, float **data, int in_place) {
    return run_as(b, c, data, in_place, 0);
}

/* The kinds the plugin takes channels-last (docs/onednn.md): the others are checked refusing it */
static int channels_last_kind(dl_op_kind k) {
    return k != DL_OP_LINEAR && k != DL_OP_MATMUL && k != DL_OP_SOFTMAX && k != DL_OP_LOG_SOFTMAX;
}

/* c with a fused residual (ABI 1.8) of its output's shape as its last input */
static op_case with_residual(op_case c) {
    dl_tensor in[8], y;
    int64_t ys[8];
    describe(&c, in, &y, ys);
    set_shape(&c, c.n_in++, y.ndim, ys);
    c.a.residual = 1;
    return c;
}

/* Random inputs for c, the op on both plugins (the onednn one channels-last where nhwc), NMSE at
 * the table's f32 threshold. */
static void check_as(op_case c, const char *what, int in_place, int nhwc) {
    load();
    float *data[8];
    for (int i = 0; i < c.n_in; i++) {
        int64_t n = 1;
        for (int d = 0; d < c.nd[i]; d++) n *= c.shape[i][d];
        data[i] = (float *)aligned_alloc(64, ((size_t)n * sizeof(float) + 127) & ~(size_t)63) + misalign;
        tu_fill_uniform(data[i], (size_t)n, seed++, is_weight(&c, i) ? -0.5f : c.lo, is_weight(&c, i) ? 0.5f : c.hi);
        if (c.kind == DL_OP_BATCHNORM && i == 4)
            for (int64_t e = 0; e < n; e++) data[i][e] += 1.0f; /* variances */
    }
    dl_tensor in[8], y;
    int64_t ys[8];
    describe(&c, in, &y, ys);
    int64_t n = dl_tensor_numel(&y);
    float *ref = run_on(cpu, &c, data, 0), *got = run_as(odn, &c, data, in_place, nhwc);
    double nmse = tu_nmse(ref, got, (size_t)n), tol = dl_op_nmse(c.kind, DL_PRECISION_F32);
    cr_expect(nmse <= tol, "%s%s: NMSE %.3g > %.1g (seed %llu)", what, nhwc ? " (nhwc)" : "", nmse, tol,
              (unsigned long long)seed);
    free(ref), free(got);
    for (int i = 0; i < c.n_in; i++) free(data[i] - misalign);
}

/* check_as row-major, then (where the op has a 4-D activation) channels-last */
static void check_vs_cpu(op_case c, const char *what, int in_place) {
    check_as(c, what, in_place, 0);
    dl_tensor in[8], y;
    int64_t ys[8];
    describe(&c, in, &y, ys);
    int all4 = y.ndim == 4; /* one layout for all activations: each of them 4-D */
    for (int i = 0; i < c.n_in; i++) all4 &= c.nd[i] == 4 || is_weight(&c, i);
    if (all4 && channels_last_kind(c.kind)) check_as(c, what, in_place, 1);
}

/* ---- conv2d ---- */

static op_case conv_case(int n, int c, int h, int w, int oc, int kh, int kw, int s, int p[4], int d, int g, int bias,
                         int act) {
    op_case k = {DL_OP_CONV2D, {0}, bias ? 3 : 2, bias ? 2 : 1, {0}, {{0}}, -1, 1};
    attrs(&k.a);
    k.a.kernel[0] = kh, k.a.kernel[1] = kw, k.a.stride[0] = k.a.stride[1] = s;
    k.a.pad_begin[0] = p[0], k.a.pad_begin[1] = p[1], k.a.pad_end[0] = p[2], k.a.pad_end[1] = p[3];
    k.a.dilation[0] = k.a.dilation[1] = d, k.a.groups = g, k.a.activation = act;
    k.a.clip_min = -0.25f, k.a.clip_max = 0.5f, k.a.alpha = 0.125f; /* the fused clip's and leaky relu's */
    SHAPE(&k, 0, n, c, h, w);
    SHAPE(&k, 1, oc, c / g, kh, kw);
    SHAPE(&k, 2, oc);
    return k;
}

static void conv(int n, int c, int h, int w, int oc, int kh, int kw, int s, int p[4], int d, int g, int bias, int act,
                 const char *what) {
    check_vs_cpu(conv_case(n, c, h, w, oc, kh, kw, s, p, d, g, bias, act), what, 0);
}

Test(onednn_ops, conv2d) {
    int p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0}, pa[4] = {2, 0, 1, 3};
    conv(1, 3, 11, 13, 5, 3, 3, 1, p1, 1, 1, 1, DL_ACT_NONE, "3x3 pad 1");
    conv(2, 4, 9, 7, 6, 3, 3, 2, p1, 1, 1, 1, DL_ACT_RELU, "stride 2 batch 2 relu");
    conv(1, 5, 10, 9, 7, 3, 2, 1, pa, 1, 1, 0, DL_ACT_NONE, "asymmetric pad, no bias");
    conv(1, 3, 15, 13, 4, 3, 3, 1, p1, 2, 1, 1, DL_ACT_SILU, "dilation 2 silu");
    conv(3, 9, 8, 9, 9, 3, 3, 1, p1, 1, 3, 1, DL_ACT_HARD_SWISH, "groups 3 hard_swish");
    conv(2, 19, 9, 11, 19, 3, 3, 2, p1, 1, 19, 1, DL_ACT_RELU, "depthwise stride 2");
    conv(1, 3, 23, 21, 17, 7, 7, 2, (int[4]){3, 3, 3, 3}, 1, 1, 0, DL_ACT_GELU, "7x7 stem gelu");
    conv(2, 21, 7, 5, 13, 1, 1, 1, p0, 1, 1, 1, DL_ACT_GELU_TANH, "1x1 gelu tanh");
    conv(1, 33, 19, 17, 35, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU, "33 to 35 channels");
    conv(1, 16, 14, 13, 16, 3, 3, 1, p1, 1, 16, 1, DL_ACT_CLIP, "depthwise clip (relu6 of ABI 1.5)");
    conv(1, 16, 9, 11, 24, 1, 1, 1, p0, 1, 1, 1, DL_ACT_CLIP, "1x1 clip");
    conv(2, 5, 9, 8, 7, 3, 3, 2, p1, 1, 1, 1, DL_ACT_LEAKY_RELU, "stride 2 leaky relu");
    conv(1, 6, 8, 7, 5, 3, 3, 1, p1, 1, 1, 0, DL_ACT_SIGMOID, "sigmoid, no bias");
}

/* A fused residual (ABI 1.8): a binary add post-op, its operand reordered into the blocked
 * layout the convolution writes, or a sum post-op on the residual in the destination, copied
 * there or run in place over it (3x3, 1x1 stride 2, no bias, before relu and clip); linear too,
 * always a binary add. Run with the plugin's own form (a conv's sum, each case both in place and
 * not), then with the binary add forced (DLRUN_ONEDNN_RESIDUAL=binary, read when the plugin starts). */
/* The onednn plugin loaded anew with variable `name` set to `value` for its start (the plugin
 * reads its DLRUN_ONEDNN_* settings then); the test fails if it does not load. */
static const dl_backend *load_with(const char *name, const char *value) {
    dl_error err = {{0}};
    setenv(name, value, 1);
    const dl_backend *be = tu_load_backend(ONEDNN_SO, 2, &err);
    unsetenv(name);
    cr_assert(be, "loading the onednn plugin with %s=%s: %s", name, value, err.msg);
    return be;
}

static void residual_cases(int sum);
Test(onednn_ops, fused_residual) {
    residual_cases(1);
    load();
    const dl_backend *own = odn, *forced = load_with("DLRUN_ONEDNN_RESIDUAL", "binary");
    odn = forced;
    residual_cases(0);
    forced->destroy(forced->self);
    odn = own;
}

/* conv c with a residual on the onednn plugin against the cpu plugin, where the output has a
 * buffer of its own and (sum) in place over the residual */
static void conv_with_residual(op_case c, const char *what, int sum) {
    c = with_residual(c);
    check_vs_cpu(c, what, sum ? OWN_OUTPUT : NOT_OVER_RESIDUAL);
    if (sum) check_vs_cpu(c, what, OVER_RESIDUAL);
}

static void residual_cases(int sum) {
    int p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0};
    conv_with_residual(conv_case(2, 16, 9, 11, 16, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU), "3x3 + r, relu", sum);
    conv_with_residual(conv_case(1, 12, 13, 11, 20, 1, 1, 2, p0, 1, 1, 0, DL_ACT_NONE), "1x1/2 + r", sum);
    conv_with_residual(conv_case(1, 5, 9, 8, 7, 3, 3, 1, p1, 1, 1, 1, DL_ACT_CLIP), "3x3 + r, clip", sum);
    conv_with_residual(conv_case(1, 40, 7, 9, 72, 3, 3, 1, p1, 1, 1, 1, DL_ACT_NONE), "40 to 72 channels + r", sum);
    op_case l = {DL_OP_LINEAR, {0}, 3, 2, {0}, {{0}}, -1, 1};
    attrs(&l.a);
    l.a.activation = DL_ACT_RELU;
    SHAPE(&l, 0, 5, 37);
    SHAPE(&l, 1, 29, 37);
    SHAPE(&l, 2, 29);
    check_vs_cpu(with_residual(l), "linear + r, relu", NOT_OVER_RESIDUAL);
}

/* The ABI promises no alignment of a tensor (a weight read in place from a safetensors file, a
 * slice of an elided concat): every input 4 bytes past an aligned address, the plugin measuring
 * (a conv with a residual sum tries oneDNN's further implementations). On an AVX2 CPU oneDNN 2.6
 * offered its SSE4.1 kernel among them, whose bias load faulted there: ResNet-18 crashed. */
Test(onednn_ops, unaligned_tensors) {
    int p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0};
    misalign = 1;
    conv_with_residual(conv_case(1, 64, 14, 13, 64, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU), "3x3 + r, relu, unaligned", 1);
    conv_with_residual(conv_case(1, 24, 9, 11, 40, 1, 1, 1, p0, 1, 1, 1, DL_ACT_NONE), "1x1 + r, unaligned", 1);
    check_vs_cpu(conv_case(1, 16, 9, 11, 24, 3, 3, 2, p1, 1, 1, 1, DL_ACT_CLIP), "3x3/2 clip, unaligned", 0);
    misalign = 0;
}

/* Below AVX (here DNNL_MAX_CPU_ISA, read once per process at oneDNN's first dispatch, so in this
 * test's own process before anything loads it) oneDNN runs only SSE4.1 kernels: the plugin does not
 * start, and says why, leaving every op to the cpu plugin. */
Test(onednn_ops, refused_below_avx) {
    if (access(ONEDNN_SO, F_OK) != 0) cr_skip_test("the onednn plugin is not built (no oneDNN)");
    setenv("DNNL_MAX_CPU_ISA", "SSE41", 1);
    dl_error err = {{0}};
    const dl_backend *be = tu_load_backend(ONEDNN_SO, 2, &err);
    cr_expect_null(be, "the onednn plugin started with oneDNN limited to SSE4.1");
    cr_expect(strstr(err.msg, "(SSE4.1) need 16-byte aligned tensors"), "%s", err.msg);
}

/* ---- Winograd ---- */

/* c on the cpu plugin and on two onednn plugins, `direct` and `wino` (DLRUN_ONEDNN_CONV=direct and
 * =winograd, or =other), row-major then channels-last; `wino` run in place over the residual where
 * c has one. Both within the table's threshold of the cpu plugin; and the two bit for bit the same
 * exactly where the forced kernel is not expected to run (its rounding differs from the direct sums);
 * expect_wino -1: either. */
static void winograd_case(const dl_backend *direct, const dl_backend *wino, op_case c, int expect_wino,
                          const char *what) {
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        float *data[8];
        for (int i = 0; i < c.n_in; i++) {
            int64_t n = 1;
            for (int d = 0; d < c.nd[i]; d++) n *= c.shape[i][d];
            data[i] = malloc((size_t)n * sizeof(float) + 64);
            tu_fill_uniform(data[i], (size_t)n, seed++, is_weight(&c, i) ? -0.5f : c.lo,
                            is_weight(&c, i) ? 0.5f : c.hi);
        }
        dl_tensor in[8], y;
        int64_t ys[8];
        describe(&c, in, &y, ys);
        const int64_t n = dl_tensor_numel(&y);
        const int over = c.a.residual ? OVER_RESIDUAL : OWN_OUTPUT;
        float *ref = run_on(cpu, &c, data, 0), *d = run_as(direct, &c, data, 0, nhwc),
              *w = run_as(wino, &c, data, over, nhwc);
        const double tol = dl_op_nmse(c.kind, DL_PRECISION_F32), nd = tu_nmse(ref, d, (size_t)n),
                     nw = tu_nmse(ref, w, (size_t)n);
        cr_expect(nd <= tol, "%s%s, direct: NMSE %.3g > %.1g", what, nhwc ? " (nhwc)" : "", nd, tol);
        cr_expect(nw <= tol, "%s%s, forced: NMSE %.3g > %.1g", what, nhwc ? " (nhwc)" : "", nw, tol);
        const int same = !memcmp(d, w, (size_t)n * sizeof *d);
        if (expect_wino >= 0) /* -1: either */
            cr_expect_neq(same, expect_wino, "%s%s: the forced plugin's output is %s the direct one's", what,
                          nhwc ? " (nhwc)" : "", same ? "bit for bit" : "not");
        free(ref), free(d), free(w);
        for (int i = 0; i < c.n_in; i++) free(data[i]);
    }
}

/* Winograd against direct, each forced (DLRUN_ONEDNN_CONV, read when the plugin starts): 3x3
 * stride-1 convs with bias or none, padding or none, odd channel counts, relu, and a residual as a
 * sum run in place over it. oneDNN 2.6 has Winograd kernels on AVX-512 only, and with no
 * activation or relu: where it has none (clip, stride 2, another machine) the conv runs direct.
 * Under the default (auto) the conv tests above run whichever of the two the plugin measured
 * faster. */
Test(onednn_ops, winograd) {
    load();
    dl_error bad = {{0}};
    const dl_backend *direct = load_with("DLRUN_ONEDNN_CONV", "direct"),
                     *wino = load_with("DLRUN_ONEDNN_CONV", "winograd");
    setenv("DLRUN_ONEDNN_CONV", "fast", 1);
    cr_expect_null(tu_load_backend(ONEDNN_SO, 2, &bad), "DLRUN_ONEDNN_CONV=fast accepted");
    cr_expect(strstr(bad.msg, "DLRUN_ONEDNN_CONV=fast: want auto, direct, winograd or other"), "%s", bad.msg);
    unsetenv("DLRUN_ONEDNN_CONV");
    cr_expect(strstr(wino->description, "Winograd forced"), "%s", wino->description);
    cr_expect(strstr(direct->description, "direct convs"), "%s", direct->description);
    const int avx512 = strstr(wino->description, "AVX-512") != NULL;
    int p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0};
    winograd_case(direct, wino, conv_case(1, 64, 15, 13, 64, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU), avx512,
                  "64 to 64, relu");
    winograd_case(direct, wino, conv_case(2, 16, 9, 11, 32, 3, 3, 1, p1, 1, 1, 0, DL_ACT_NONE), avx512,
                  "16 to 32, batch 2, no bias");
    winograd_case(direct, wino, conv_case(1, 33, 12, 10, 35, 3, 3, 1, p0, 1, 1, 1, DL_ACT_RELU), avx512,
                  "33 to 35, no padding");
    winograd_case(direct, wino, with_residual(conv_case(2, 32, 9, 11, 32, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU)), avx512,
                  "32 to 32 + r, relu");
    winograd_case(direct, wino, conv_case(1, 48, 7, 9, 80, 3, 3, 1, p1, 1, 1, 1, DL_ACT_CLIP), 0, "clip: direct");
    winograd_case(direct, wino, conv_case(2, 16, 9, 7, 16, 3, 3, 2, p1, 1, 1, 1, DL_ACT_RELU), 0, "stride 2: direct");
    direct->destroy(direct->self);
    wino->destroy(wino->self);
}

/* A residual conv by oneDNN's second jit implementation (DLRUN_ONEDNN_CONV=other), the one auto
 * measures beside its first where the residual is a sum: on AVX-512 the first is brgconv, the
 * second jit_1x1 (1x1) or jit (3x3), whose sums run in another order; on AVX2 a 1x1 may have a
 * second (jit after jit_1x1) or not (its SSE4.1 kernels are never offered), so either there. Within
 * the threshold of the cpu plugin, in place over the residual, row-major and NHWC; without a
 * residual, bit for bit the direct one. */
Test(onednn_ops, other_implementations) {
    load();
    const dl_backend *direct = load_with("DLRUN_ONEDNN_CONV", "direct"),
                     *other = load_with("DLRUN_ONEDNN_CONV", "other");
    cr_expect(strstr(other->description, "other residual convs"), "%s", other->description);
    const int avx512 = strstr(other->description, "AVX-512") != NULL;
    int p1[4] = {1, 1, 1, 1}, p0[4] = {0, 0, 0, 0};
    winograd_case(direct, other, with_residual(conv_case(2, 67, 9, 11, 80, 1, 1, 1, p0, 1, 1, 1, DL_ACT_RELU)),
                  avx512 ? 1 : -1, "1x1, 67 to 80 + r, relu");
    winograd_case(direct, other, with_residual(conv_case(1, 35, 13, 7, 48, 3, 3, 1, p1, 1, 1, 0, DL_ACT_NONE)),
                  avx512 ? 1 : -1, "3x3, 35 to 48 + r, no bias");
    winograd_case(direct, other, conv_case(2, 67, 9, 11, 80, 1, 1, 1, p0, 1, 1, 1, DL_ACT_RELU), 0,
                  "1x1 without a residual: direct");
    winograd_case(direct, other, conv_case(1, 64, 15, 13, 64, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU), 0,
                  "3x3 without a residual: direct, not Winograd");
    direct->destroy(direct->self);
    other->destroy(other->self);
}

/* ---- conv variants kept by the host (ABI 1.12) ---- */

/* A host store for the tests: answers every conv variant key with `answer` (none where it is
 * negative), and counts the puts, the last one's key and value kept. */
static struct {
    double answer;
    int puts;
    char key[DL_HOST_KEY_LEN + 1];
    double value;
} store;
static int store_get(void *ctx, const char *key, double *v) {
    (void)ctx;
    if (store.answer < 0 || strncmp(key, "conv variant ", 13) != 0) return 0;
    *v = store.answer;
    return 1;
}
static void store_put(void *ctx, const char *key, double v) {
    (void)ctx;
    store.puts++;
    snprintf(store.key, sizeof store.key, "%s", key);
    store.value = v;
}
static void quiet(void *ctx, int level, const char *msg) { (void)ctx, (void)level, (void)msg; }

/* A new onednn plugin (its own memo of variants: nothing measured yet) on the test store,
 * answering `answer` from now. */
static const dl_backend *load_with_store(double answer) {
    static dl_host hosts[6];
    static int used;
    cr_assert(used < 6);
    dl_host *h = &hosts[used++];
    *h = (dl_host){DL_ABI_VERSION, sizeof *h, NULL, 2, 0, quiet, store_get, store_put};
    dl_error err = {{0}};
    const dl_backend *be = tu_load_backend_as(ONEDNN_SO, h, &err);
    cr_assert(be, "loading the onednn plugin: %s", err.msg);
    store.answer = answer, store.puts = 0, store.key[0] = 0;
    return be;
}

/* The variant a conv measured fastest at prepare goes to the host's store (cache_put); a plugin
 * in a later process, answered from it, builds that variant alone with no timing (no put), and
 * runs it: the Winograd answer gives Winograd's output, not the direct one's (on AVX-512, where
 * oneDNN 2.6 has Winograd). An answer the conv does not offer (from an edited file: an unknown
 * variant, a fraction, another implementation, which a conv without a residual has none of) is
 * measured again. */
Test(onednn_ops, conv_variants_kept_by_the_host) {
    load();
    int p1[4] = {1, 1, 1, 1};
    op_case c = conv_case(1, 64, 15, 13, 64, 3, 3, 1, p1, 1, 1, 1, DL_ACT_RELU);
    const int avx512 = strstr(odn->description, "AVX-512") != NULL;
    const dl_backend *direct = load_with("DLRUN_ONEDNN_CONV", "direct");
    const dl_backend *first = load_with_store(-1);
    winograd_case(direct, first, c, -1, "measured");
    if (avx512) {
        cr_expect_eq(store.puts, 2, "one put a layout, row-major and channels-last: %d", store.puts);
        cr_expect(strstr(store.key, "conv variant t2 a1 r0 ") && strstr(store.key, "64x64x3x3"), "%s", store.key);
        cr_expect(store.value == 0 || store.value == 1, "variant %g", store.value);
    }
    const dl_backend *kept = load_with_store(1); /* ODN_WINOGRAD */
    winograd_case(direct, kept, c, avx512, "Winograd kept");
    cr_expect_eq(store.puts, 0, "a kept variant was measured again");
    const double offered_not[] = {7, 0.5, 2};
    for (int i = 0; avx512 && i < 3; i++) {
        const dl_backend *odd = load_with_store(offered_not[i]);
        winograd_case(direct, odd, c, -1, "an answer not offered");
        cr_expect_eq(store.puts, 2, "answer %g was taken: %d puts", offered_not[i], store.puts);
        odd->destroy(odd->self);
    }
    direct->destroy(direct->self);
    first->destroy(first->self);
    kept->destroy(kept->self);
}

/* ---- pools ---- */

static void pool(dl_op_kind kind, int c, int h, int w, int k, int s, int p, int d, int ceil, int incl,
                 const char *what) {
    op_case o = {kind, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&o.a);
    o.a.kernel[0] = o.a.kernel[1] = k, o.a.stride[0] = o.a.stride[1] = s;
    for (int i = 0; i < 2; i++) o.a.pad_begin[i] = o.a.pad_end[i] = p;
    o.a.dilation[0] = o.a.dilation[1] = d, o.a.ceil_mode = ceil, o.a.count_include_pad = incl;
    SHAPE(&o, 0, 2, c, h, w);
    check_vs_cpu(o, what, 0);
}

Test(onednn_ops, pools) {
    pool(DL_OP_MAXPOOL2D, 3, 11, 13, 2, 2, 0, 1, 0, 1, "max 2");
    pool(DL_OP_MAXPOOL2D, 5, 10, 7, 3, 2, 1, 1, 1, 1, "max 3 s2 p1 ceil");
    pool(DL_OP_MAXPOOL2D, 2, 13, 11, 3, 1, 0, 2, 0, 1, "max dilation 2");
    pool(DL_OP_MAXPOOL2D, 2, 12, 9, 2, 2, 1, 3, 1, 1, "max dilated ceil pad");
    pool(DL_OP_AVGPOOL2D, 4, 9, 8, 3, 2, 1, 1, 0, 1, "avg include pad");
    pool(DL_OP_AVGPOOL2D, 4, 8, 11, 3, 2, 1, 1, 1, 0, "avg exclude pad ceil");
    pool(DL_OP_AVGPOOL2D, 3, 9, 8, 3, 2, 2, 1, 0, 1, "avg pad over half");
    op_case g = {DL_OP_GLOBAL_AVGPOOL, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&g.a);
    SHAPE(&g, 0, 3, 5, 7, 9);
    check_vs_cpu(g, "global avgpool", 0);
}

/* ---- linear and matmul ---- */

Test(onednn_ops, linear_matmul) {
    op_case l = {DL_OP_LINEAR, {0}, 3, 2, {0}, {{0}}, -1, 1};
    attrs(&l.a);
    SHAPE(&l, 0, 3, 37);
    SHAPE(&l, 1, 29, 37);
    SHAPE(&l, 2, 29);
    check_vs_cpu(l, "linear", 0);
    l.a.activation = DL_ACT_GELU;
    check_vs_cpu(l, "linear gelu", 0);
    l.n_in = 2, l.n_weights = 1, l.a.activation = DL_ACT_RELU;
    check_vs_cpu(l, "linear no bias relu", 0);

    op_case m = {DL_OP_MATMUL, {0}, 2, 0, {0}, {{0}}, -1, 1};
    attrs(&m.a);
    SHAPE(&m, 0, 2, 3, 5, 7);
    SHAPE(&m, 1, 3, 7, 9);
    check_vs_cpu(m, "matmul batch broadcast", 0);
    m.a.trans_a = m.a.trans_b = 1, m.a.alpha = 0.5f;
    SHAPE(&m, 0, 7, 5);
    SHAPE(&m, 1, 9, 7);
    check_vs_cpu(m, "matmul transposed, alpha", 0);
    m.a.trans_a = m.a.trans_b = 0, m.a.alpha = 1, m.n_in = 3;
    SHAPE(&m, 0, 5, 7);
    SHAPE(&m, 1, 7, 9);
    SHAPE(&m, 2, 9);
    check_vs_cpu(m, "matmul + c", 0);
}

/* ---- eltwise, softmax, concat, add, batchnorm ---- */

static void unary(dl_op_kind kind, float lo, float hi, const char *what) {
    op_case e = {kind, {0}, 1, 0, {0}, {{0}}, lo, hi};
    attrs(&e.a);
    if (kind == DL_OP_LEAKY_RELU) e.a.alpha = 0.1f;
    if (kind == DL_OP_CLIP) e.a.clip_min = -0.5f, e.a.clip_max = 0.25f;
    SHAPE(&e, 0, 3, 7, 5, 3);
    check_vs_cpu(e, what, 0);
    check_vs_cpu(e, what, OVER_INPUT0);
}

Test(onednn_ops, eltwise) {
    unary(DL_OP_RELU, -1, 1, "relu");
    unary(DL_OP_LEAKY_RELU, -1, 1, "leaky_relu");
    unary(DL_OP_SIGMOID, -30, 30, "sigmoid");
    unary(DL_OP_CLIP, -1, 1, "clip");
    unary(DL_OP_SQRT, 0.01f, 4, "sqrt");
    unary(DL_OP_EXP, -5, 5, "exp");
    unary(DL_OP_LOG, 0.01f, 4, "log");
    unary(DL_OP_TANH, -5, 5, "tanh");
    unary(DL_OP_NEG, -1, 1, "neg");
    unary(DL_OP_ABS, -1, 1, "abs");
    unary(DL_OP_RECIPROCAL, 0.1f, 4, "reciprocal");
    unary(DL_OP_HARD_SWISH, -5, 5, "hard_swish");
    unary(DL_OP_SILU, -8, 8, "silu");
    unary(DL_OP_GELU, -5, 5, "gelu");
}

/* Far from zero, where approximations of exp often clamp: element by element the reference's
 * values (to 1e-5 relative, 1e-6 absolute: both approximate erf in gelu's tail), infinities
 * included (exp(100) is +inf, not FLT_MAX). softplus is refused for this: oneDNN gives 7.6e-6 at
 * -86.5, where the value is 2.7e-38. */
Test(onednn_ops, eltwise_far_out) {
    static const dl_op_kind kinds[] = {DL_OP_SIGMOID, DL_OP_EXP, DL_OP_TANH, DL_OP_SILU, DL_OP_GELU};
    load();
    enum { N = 401 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = -100.0f + 0.5f * (float)i; /* -100 .. 100 */
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        op_case e = {kinds[k], {0}, 1, 0, {0}, {{0}}, 0, 0};
        attrs(&e.a);
        SHAPE(&e, 0, N);
        float *data[1] = {x};
        float *ref = run_on(cpu, &e, data, 0), *got = run_on(odn, &e, data, 0);
        for (int i = 0; i < N; i++) {
            int same = isinf(ref[i]) ? got[i] == ref[i] : fabsf(got[i] - ref[i]) <= 1e-5f * fabsf(ref[i]) + 1e-6f;
            cr_expect(same, "%s(%g): %.9g, reference %.9g", dl_op_kind_name(kinds[k]), x[i], got[i], ref[i]);
            if (!same) break;
        }
        free(ref), free(got);
    }
}

Test(onednn_ops, softmax_concat_add_batchnorm) {
    op_case s = {DL_OP_SOFTMAX, {0}, 1, 0, {0}, {{0}}, -5, 5};
    attrs(&s.a);
    s.a.axis = 1;
    SHAPE(&s, 0, 3, 5, 4, 7);
    check_vs_cpu(s, "softmax axis 1", 0);
    s.kind = DL_OP_LOG_SOFTMAX, s.a.axis = 3;
    check_vs_cpu(s, "log_softmax last", 0);

    op_case c = {DL_OP_CONCAT, {0}, 3, 0, {0}, {{0}}, -1, 1};
    attrs(&c.a);
    c.a.axis = 1;
    SHAPE(&c, 0, 2, 3, 5, 7);
    SHAPE(&c, 1, 2, 1, 5, 7);
    SHAPE(&c, 2, 2, 6, 5, 7);
    check_vs_cpu(c, "concat axis 1", 0);

    op_case a = {DL_OP_ADD, {0}, 2, 0, {0}, {{0}}, -1, 1};
    attrs(&a.a);
    a.a.activation = DL_ACT_RELU;
    SHAPE(&a, 0, 3, 7, 5, 3);
    SHAPE(&a, 1, 3, 7, 5, 3);
    check_vs_cpu(a, "add relu", 0);
    a.a.activation = DL_ACT_NONE;
    SHAPE(&a, 1, 7, 1, 1);
    check_vs_cpu(a, "add broadcast second", 0);
    SHAPE(&a, 0, 7, 1, 3);
    SHAPE(&a, 1, 2, 7, 5, 3);
    check_vs_cpu(a, "add broadcast first", 0);
    SHAPE(&a, 0, 3, 7, 5, 3); /* 4-D broadcasts: also run channels-last, strides and all */
    SHAPE(&a, 1, 3, 7, 1, 1);
    check_vs_cpu(a, "add broadcast 4-D per channel", 0);
    SHAPE(&a, 1, 1, 7, 1, 3);
    check_vs_cpu(a, "add broadcast 4-D over batch and rows", 0);

    op_case b = {DL_OP_BATCHNORM, {0}, 5, 4, {0}, {{0}}, -2, 2};
    attrs(&b.a);
    SHAPE(&b, 0, 2, 5, 3, 7);
    for (int i = 1; i < 5; i++) SHAPE(&b, i, 5);
    check_vs_cpu(b, "batchnorm", 0);
    b.a.activation = DL_ACT_RELU;
    check_vs_cpu(b, "batchnorm relu", 0);
    SHAPE(&b, 0, 4, 5);
    check_vs_cpu(b, "batchnorm 2-D", 0);
}

/* ---- what it refuses ---- */

static void expect_refused(op_case c, const char *tensor_dtype, const char *needle) {
    load();
    dl_tensor in[8], y;
    int64_t ys[8], st[4], yst[4];
    dl_op op = describe(&c, in, &y, ys);
    if (tensor_dtype && !strcmp(tensor_dtype, "f16")) {
        for (int i = 0; i < c.n_in; i++) in[i].dtype = DL_F16;
        y.dtype = DL_F16;
    } else if (tensor_dtype && !strcmp(tensor_dtype, "nhwc")) { /* input 0 only */
        dl_channels_last_strides(c.shape[0], st);
        in[0].strides = st;
    } else if (tensor_dtype && !strcmp(tensor_dtype, "nhwc weight")) { /* input 1 only */
        dl_channels_last_strides(c.shape[1], st);
        in[1].strides = st;
    } else if (tensor_dtype && !strcmp(tensor_dtype, "nhwc in and out")) { /* input 0 and the output */
        dl_channels_last_strides(c.shape[0], st);
        dl_channels_last_strides(ys, yst);
        in[0].strides = st, y.strides = yst;
    }
    dl_error why = {{0}};
    cr_expect_not(odn->supports(odn->self, &op, &why), "%s accepted, expected: %s", dl_op_kind_name(c.kind), needle);
    cr_expect(strstr(why.msg, needle), "reason '%s' lacks '%s'", why.msg, needle);
    cr_expect(!strchr(why.msg, '\n'), "reason must be one line");
}

Test(onednn_ops, refusals) {
    op_case r = {DL_OP_RELU, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&r.a);
    SHAPE(&r, 0, 2, 3, 5, 7);
    expect_refused(r, "f16", "f16");
    expect_refused(r, "nhwc", "channels-last and row-major activations mixed");
    int p1[4] = {1, 1, 1, 1};
    op_case cw = conv_case(1, 4, 6, 5, 3, 3, 3, 1, p1, 1, 1, 1, DL_ACT_NONE);
    expect_refused(cw, "nhwc weight", "a strided weight"); /* its builder reads it OIHW */
    op_case am = {DL_OP_ADD, {0}, 2, 0, {0}, {{0}}, -1, 1};
    attrs(&am.a);
    SHAPE(&am, 0, 2, 3, 5, 7);
    SHAPE(&am, 1, 5, 7);
    expect_refused(am, "nhwc in and out", "mixed"); /* a 2-D operand beside a channels-last one */
    op_case sm = {DL_OP_SOFTMAX, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&sm.a);
    sm.a.axis = 1;
    SHAPE(&sm, 0, 2, 3, 5, 7);
    expect_refused(sm, "nhwc", "channels-last");

    op_case p = {DL_OP_AVGPOOL2D, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&p.a);
    p.a.kernel[0] = p.a.kernel[1] = 3, p.a.stride[0] = p.a.stride[1] = 2, p.a.ceil_mode = 1;
    p.a.pad_begin[0] = p.a.pad_begin[1] = p.a.pad_end[0] = p.a.pad_end[1] = 1;
    SHAPE(&p, 0, 1, 4, 10, 7);
    expect_refused(p, NULL, "count_include_pad");

    op_case b = {DL_OP_BATCHNORM, {0}, 5, 4, {0}, {{0}}, -1, 1};
    attrs(&b.a);
    b.a.activation = DL_ACT_SILU;
    SHAPE(&b, 0, 2, 5, 3, 7);
    for (int i = 1; i < 5; i++) SHAPE(&b, i, 5);
    expect_refused(b, NULL, "only relu");

    op_case a = {DL_OP_ADD, {0}, 2, 0, {0}, {{0}}, -1, 1};
    attrs(&a.a);
    SHAPE(&a, 0, 2, 1, 5);
    SHAPE(&a, 1, 3, 1);
    expect_refused(a, NULL, "both inputs broadcast");

    op_case sp = {DL_OP_SOFTPLUS, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&sp.a);
    SHAPE(&sp, 0, 9);
    expect_refused(sp, NULL, "no kernel in the onednn plugin");

    op_case t = {DL_OP_TRANSPOSE, {0}, 1, 0, {0}, {{0}}, -1, 1};
    attrs(&t.a);
    t.a.perm[0] = 1;
    SHAPE(&t, 0, 3, 4);
    expect_refused(t, NULL, "no kernel in the onednn plugin");
}
