/* op_harness.h — the harness of the CPU op tests (test_cpu_ops.c, test_cpu_ops_v14.c): the CPU
 * plugin loaded through the ABI, random test tensors, running one op as the host does (supports,
 * prepare, run) in f32 or one of the ABI 1.3 storage formats (OP_TEST runs a test in each), and the
 * comparisons against a naive reference in double. Included once per test program. */
#ifndef DLRUN_OP_HARNESS_H
#define DLRUN_OP_HARNESS_H
#pragma GCC diagnostic ignored "-Wunused-function" /* each program uses its share */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"
#include "op_table.h"
#include "test_util.h"

static const dl_backend *be;

/* The cpu plugin of this build, or the one $DLRUN_TEST_CPU_PLUGIN names (tests/CMakeLists.txt:
 * the AVX2 build of the plugin, where this build's kernels take AVX-512) */
static void load(void) {
    if (be) return;
    dl_error err = {{0}};
    const char *path = getenv("DLRUN_TEST_CPU_PLUGIN");
    be = tu_load_backend(path && *path ? path : DLRUN_PLUGIN_DIR "/libdlrun-cpu.so", 2, &err);
    cr_assert(be, "loading the cpu plugin: %s", err.msg);
}

/* A test tensor: shape + f32 data. */
typedef struct tt {
    int nd;
    int64_t shape[8];
    float *data;
    int64_t n;
} tt;

static uint64_t seed_counter = 1000;

static tt make(int nd, const int64_t *shape, float lo, float hi) {
    tt t = {nd, {0}, NULL, 1};
    for (int i = 0; i < nd; i++) t.n *= (t.shape[i] = shape[i]);
    t.data = malloc((size_t)t.n * sizeof(float) + 4);
    tu_fill_uniform(t.data, (size_t)t.n, seed_counter++, lo, hi);
    return t;
}
#define MAKE(lo, hi, ...) make(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__}, lo, hi)

static int n_weights(dl_op_kind kind, int n) {
    if (kind == DL_OP_CONV2D || kind == DL_OP_LINEAR || kind == DL_OP_CONV_TRANSPOSE2D || kind == DL_OP_CONV3D)
        return n - 1;
    if (kind == DL_OP_BATCHNORM) return 4;
    if (kind == DL_OP_LAYER_NORM || kind == DL_OP_GROUP_NORM) return 2;
    return 0;
}

/* Input i of n is a weight: one of the op's last n_weights, but never a fused residual (ABI 1.8:
 * the last input when attrs.residual, an activation) */
static int is_weight_input(dl_op_kind kind, const dl_op_attrs *a, int i, int n) {
    const int res = a && a->residual;
    return i >= n - res - n_weights(kind, n - res) && !(res && i == n - 1);
}

/* ---- storage formats (ABI 1.3) ----
 * The mode every op test runs in: the dtype of all its tensors, and whether 4-D activations and
 * outputs (and 4-D weights) are channels-last. run_op rounds the inputs to their storage dtype in
 * place before running, so the naive references, computed afterwards from the same arrays, see
 * exactly what the plugin saw; expect_close then allows the one rounding of the output. */
typedef struct storage_mode {
    const char *name;
    dl_dtype dtype;
    int nhwc;         /* 4-D activations and outputs channels-last */
    int nhwc_weights; /* 4-D weights too (a session keeps them row-major; the plugin takes both) */
} storage_mode;
static const storage_mode f32_mode = {"f32", {DL_DTYPE_FLOAT, 32, 1}, 0, 0};
static const storage_mode modes[5] = {{"f16", {DL_DTYPE_FLOAT, 16, 1}, 0, 0},
                                      {"bf16", {DL_DTYPE_BFLOAT, 16, 1}, 0, 0},
                                      {"f16 nhwc", {DL_DTYPE_FLOAT, 16, 1}, 1, 0},
                                      {"bf16 nhwc, nhwc weights", {DL_DTYPE_BFLOAT, 16, 1}, 1, 1},
                                      {"f32 nhwc, nhwc weights", {DL_DTYPE_FLOAT, 32, 1}, 1, 1}};
static storage_mode mode = {"f32", {DL_DTYPE_FLOAT, 32, 1}, 0, 0};

/* An op test: a function run in f32 row-major and in each storage mode. */
#define OP_TEST(name)                                                \
    static void name(void);                                          \
    Test(cpu_ops, name) { mode = f32_mode, name(); }                 \
    Test(cpu_storage, name##_f16) { mode = modes[0], name(); }       \
    Test(cpu_storage, name##_bf16) { mode = modes[1], name(); }      \
    Test(cpu_storage, name##_f16_nhwc) { mode = modes[2], name(); }  \
    Test(cpu_storage, name##_bf16_nhwc) { mode = modes[3], name(); } \
    Test(cpu_storage, name##_f32_nhwc) { mode = modes[4], name(); }  \
    static void name(void)

/* Input i of op kind holds int64 indices (its row's int_inputs: gather's second input); the test
 * keeps them as exact integer floats and stores them as int64. */
static int is_index_input(dl_op_kind kind, int i) { return dl_op_def_of(kind)->int_inputs >> i & 1; }

static float round_to(dl_dtype d, float v) {
    if (d.bits == 32 || d.code == DL_DTYPE_INT) return v;
    return d.code == DL_DTYPE_BFLOAT ? dl_bf16_to_f32(dl_f32_to_bf16(v)) : dl_f16_to_f32(dl_f32_to_f16(v));
}

/* Where row-major element i of tensor t is in its storage (channels-last: tu_channels_last_at, not
 * the plugin's conversion). */
static int64_t stored_at(const dl_tensor *t, int64_t i) { return t->strides ? tu_channels_last_at(t->shape, i) : i; }
static void put(const dl_tensor *t, int64_t i, float v) {
    int64_t o = stored_at(t, i);
    if (t->dtype.code == DL_DTYPE_INT) ((int64_t *)t->data)[o] = (int64_t)v;
    else if (t->dtype.bits == 32) ((float *)t->data)[o] = v;
    else ((uint16_t *)t->data)[o] = t->dtype.code == DL_DTYPE_BFLOAT ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}
static float fetch(const dl_tensor *t, int64_t i) {
    int64_t o = stored_at(t, i);
    if (t->dtype.bits == 32) return ((const float *)t->data)[o];
    uint16_t h = ((const uint16_t *)t->data)[o];
    return t->dtype.code == DL_DTYPE_BFLOAT ? dl_bf16_to_f32(h) : dl_f16_to_f32(h);
}

/* Test tensor t stored in dtype d, channels-last if cl: a new buffer, filled from t's data. */
static dl_tensor store(tt *t, dl_dtype d, int cl, int64_t *strides) {
    if (cl) dl_channels_last_strides(t->shape, strides);
    dl_tensor s = {
        malloc((size_t)t->n * dl_dtype_size(d) + 64), {DL_DEVICE_CPU, 0}, t->nd, d, t->shape, cl ? strides : NULL, 0};
    for (int64_t i = 0; i < t->n; i++) put(&s, i, t->data[i]);
    return s;
}

static int precision_of(dl_dtype d) {
    return d.bits == 32 ? DL_PRECISION_F32 : d.code == DL_DTYPE_BFLOAT ? DL_PRECISION_BF16 : DL_PRECISION_F16;
}

/* Set by a test: the weights too get their data only at run time (a weight computed by the graph),
 * as the kernels' paths for a weight unknown at prepare need. */
static int weights_late;

/* Runs op on the plugin with input i stored as dt[i] (channels-last if cl[i]) and the output as
 * ydt (ycl); each input is first rounded to its dtype in place. y's data is filled from the output
 * (poisoned with NaN before the run). in_place: the output is written over input 0's storage.
 * Returns the workspace prepare asked for. */
static size_t run_formats(dl_op_kind kind, const dl_op_attrs *a, tt *in, int n_in, tt *y, const dl_dtype *dt,
                          const int *cl, dl_dtype ydt, int ycl, int in_place) {
    load();
    dl_tensor tin[16], tout;
    int64_t strides[17][4];
    void *bufs[16];
    for (int i = 0; i < n_in; i++) {
        for (int64_t e = 0; e < in[i].n; e++) in[i].data[e] = round_to(dt[i], in[i].data[e]);
        tin[i] = store(&in[i], dt[i], cl[i], strides[i]);
        bufs[i] = tin[i].data;
        if (!is_weight_input(kind, a, i, n_in) || weights_late) tin[i].data = NULL; /* weights have data at prepare */
    }
    for (int64_t i = 0; i < y->n; i++) y->data[i] = NAN;
    tout = store(y, ydt, ycl, strides[16]);
    void *ybuf = tout.data;
    tout.data = NULL;
    dl_op op = {sizeof op, kind, "t", a, n_in, tin, 1, &tout, precision_of(ydt)};
    dl_error err = {{0}};
    cr_assert(be->supports(be->self, &op, &err), "supports() refused (%s): %s", mode.name, err.msg);
    dl_kernel *k = NULL;
    size_t ws = 0;
    cr_assert_eq(be->prepare(be->self, &op, &k, &ws, &err), DL_OK, "%s", err.msg);
    void *w = ws ? malloc(ws) : NULL;
    for (int i = 0; i < n_in; i++) tin[i].data = bufs[i];
    tout.data = ybuf;
    if (in_place) {
        cr_assert(be->supports_in_place(be->self, &op), "op kind %d is not in place", kind);
        cr_assert_eq(dl_tensor_numel(&tout) * dl_dtype_size(ydt), dl_tensor_numel(&tin[0]) * dl_dtype_size(dt[0]));
        tout.data = bufs[0];
    }
    cr_assert_eq(be->run(be->self, k, tin, &tout, w, &err), DL_OK, "%s", err.msg);
    for (int64_t i = 0; i < y->n; i++) y->data[i] = fetch(&tout, i);
    be->release(be->self, k);
    free(w);
    free(ybuf);
    for (int i = 0; i < n_in; i++) free(bufs[i]);
    return ws;
}

/* Runs op in the current mode (see run_formats). */
static size_t run_op_as(dl_op_kind kind, const dl_op_attrs *a, tt *in, int n_in, tt *y, int in_place) {
    dl_dtype dt[16];
    int cl[16];
    for (int i = 0; i < n_in; i++) {
        dt[i] = is_index_input(kind, i) ? DL_I64 : mode.dtype;
        cl[i] = mode.nhwc && in[i].nd == 4 && (!is_weight_input(kind, a, i, n_in) || mode.nhwc_weights) &&
                !is_index_input(kind, i);
    }
    return run_formats(kind, a, in, n_in, y, dt, cl, mode.dtype, mode.nhwc && y->nd == 4, in_place);
}
static void run_op(dl_op_kind kind, const dl_op_attrs *a, tt *in, int n_in, tt *y) {
    run_op_as(kind, a, in, n_in, y, 0);
}

/* The output rounded once to a 16-bit dtype of unit roundoff u (bf16: 2^-8, f16: 2^-11) from an
 * f32 result: each element within u of its reference (half an ulp: rounding to nearest, once),
 * plus u/16 of the output's magnitude (the largest |reference|) for the f32 arithmetic before it
 * (the long sums of Winograd at f16 use 0.005 u of it). Truncating, or rounding twice through a
 * narrower dtype, does not pass. */
static void expect_rounded(const tt *y, const double *ref, double u, const char *what) {
    double mag = 0;
    for (int64_t i = 0; i < y->n; i++)
        if (isfinite(ref[i])) mag = fmax(mag, fabs(ref[i]));
    int64_t bad = -1;
    for (int64_t i = 0; i < y->n; i++) {
        double d = fabs(y->data[i] - ref[i]), tol = u * fabs(ref[i]) + u / 16 * mag;
        if (isnan(ref[i]) ? !isnan(y->data[i]) : !(d <= tol)) {
            bad = i;
            break;
        }
    }
    cr_expect(bad < 0, "%s (%s): element %lld is %.9g, reference %.9g (%s unit %g, magnitude %g; seed counter %llu)",
              what, mode.name, (long long)bad, bad < 0 ? 0.0 : y->data[bad], bad < 0 ? 0.0 : ref[bad],
              u == 0x1p-8 ? "bf16" : "f16", u, mag, (unsigned long long)seed_counter);
    cr_expect(mag > 0 || y->n == 0, "%s: reference is all zeros, test is vacuous", what);
}

static void expect_close(const tt *y, const double *ref, double tol, const char *what) {
    if (mode.dtype.bits == 16) {
        expect_rounded(y, ref, mode.dtype.code == DL_DTYPE_BFLOAT ? 0x1p-8 : 0x1p-11, what);
        return;
    }
    double num = 0, den = 0;
    int64_t first_bad = -1;
    for (int64_t i = 0; i < y->n; i++) {
        double d = y->data[i] - ref[i];
        if (isnan(y->data[i]) && first_bad < 0) first_bad = i;
        num += d * d;
        den += ref[i] * ref[i];
    }
    double nmse = den > 0 ? num / den : num;
    cr_expect(first_bad < 0 && nmse <= tol, "%s (%s): NMSE %.3g > %.1g (first NaN at %lld; seed counter %llu)", what,
              mode.name, nmse, tol, (long long)first_bad, (unsigned long long)seed_counter);
    cr_expect(den > 0 || y->n == 0, "%s: reference is all zeros, test is vacuous", what);
}

static void attrs(dl_op_attrs *a) {
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->stride[0] = a->stride[1] = a->dilation[0] = a->dilation[1] = a->groups = 1;
    for (int i = 0; i < 3; i++) a->stride3[i] = a->dilation3[i] = 1;
    a->count_include_pad = 1;
    a->epsilon = 1e-5f;
}

/* An op of `kind` with input shape xs and weight shape ws (rank nd) and output ys, sizes a hostile
 * model may declare: supports() accepts it, and prepare refuses it as out of memory instead of
 * asking for a workspace whose size wrapped around. */
static void expect_workspace_refused(dl_op_kind kind, const dl_op_attrs *a, int nd, int64_t *xs, int64_t *ws,
                                     int64_t *ys) {
    load();
    dl_tensor in[2] = {{NULL, {DL_DEVICE_CPU, 0}, nd, DL_F32, xs, NULL, 0},
                       {NULL, {DL_DEVICE_CPU, 0}, nd, DL_F32, ws, NULL, 0}};
    dl_tensor y = {NULL, {DL_DEVICE_CPU, 0}, nd, DL_F32, ys, NULL, 0};
    dl_op op = {sizeof op, kind, "t", a, 2, in, 1, &y, DL_PRECISION_F32};
    dl_error err = {{0}};
    cr_assert(be->supports(be->self, &op, &err), "%s", err.msg);
    dl_kernel *k = NULL;
    size_t bytes = 0;
    cr_expect_neq(be->prepare(be->self, &op, &k, &bytes, &err), DL_OK, "a workspace of %zu bytes was accepted", bytes);
    cr_expect(strstr(err.msg, "out of memory"), "%s", err.msg);
}

/* offset in t (rank tnd) of the element that numpy broadcasting pairs with y's coordinates */
static int64_t bcast_index(const tt *t, int ynd, const int64_t *coord) {
    int64_t off = 0;
    for (int d = 0; d < t->nd; d++) {
        int64_t c = t->shape[d] == 1 ? 0 : coord[d + ynd - t->nd];
        off = off * t->shape[d] + c;
    }
    return off;
}

/* row-major coordinates of index i in y */
static void coords(const tt *y, int64_t i, int64_t *coord) {
    for (int d = y->nd - 1; d >= 0; d--) coord[d] = i % y->shape[d], i /= y->shape[d];
}

#endif
