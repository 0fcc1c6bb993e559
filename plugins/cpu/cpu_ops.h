/* cpu_ops.h — the CPU plugin's prepared kernel and the op entry points (one family per file in
 * ops/). Every op reads f32 NCHW dense tensors and parallelises with OpenMP; OpenBLAS runs
 * single-threaded inside those threads so only one thread pool is ever busy. f16/bf16 storage and
 * channels-last layouts are converted around the ops by storage.c. */
#ifndef DLRUN_CPU_OPS_H
#define DLRUN_CPU_OPS_H
#include "activate.h"
#include "blas.h"
#include "dlrun/plugin.h"
#include "gemm.h"
#include "op_check.h"
#include "storage.h"
#include "winograd.h"

#ifdef _OPENMP
#include <omp.h>
#else /* built without OpenMP (DLRUN_OPENMP=OFF, the ThreadSanitizer build): one thread per call */
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
static inline void omp_set_num_threads(int n) { (void)n; }
static inline int omp_get_max_threads(void) { return 1; }
#endif

/* Elementwise loops over fewer elements than this run on the calling thread: waking the pool
 * costs more than they do, and a thread pool per tiny op stalls when another process holds a
 * core (100,000 small layers took seconds to minutes). */
#define CPU_PARALLEL_MIN 32768

/* for (int64_t VAR = 0; VAR < COUNT; VAR++) { BODY }: across the thread pool when WORK (what the
 * loop computes, in elements or products) reaches CPU_PARALLEL_MIN and the kernel has more than
 * one thread, else on the calling thread outside any OpenMP construct. Not an if() clause: libgomp
 * builds a team of one for that, and allocates a new team whenever the team size differs from the
 * region before (or is one), so a model mixing small and large ops allocated in every run, and so
 * did every run on one thread (tests/test_noalloc.c, mobile_block.yaml; parts side by side). */
#define CPU_FOR(WORK, VAR, COUNT, ...)                                                                        \
    do {                                                                                                      \
        const int64_t cpu_for_count_ = (COUNT);                                                               \
        if ((WORK) >= CPU_PARALLEL_MIN && omp_get_max_threads() > 1) {                                        \
            _Pragma("omp parallel for schedule(static)") for (int64_t VAR = 0; VAR < cpu_for_count_; VAR++) { \
                __VA_ARGS__                                                                                   \
            }                                                                                                 \
        } else {                                                                                              \
            for (int64_t VAR = 0; VAR < cpu_for_count_; VAR++) {                                              \
                __VA_ARGS__                                                                                   \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

/* CPU_PAR("omp parallel ...", STATEMENT): STATEMENT (a loop or a block) under that OpenMP
 * directive where the kernel has more than one thread, else as it is on the calling thread (an
 * omp for or barrier inside then binds to no region and runs serially): for the kernels that go
 * parallel whatever their size. A region of one allocates (see CPU_FOR): ResNet-18 on one thread
 * allocated 22 times a run channels-last and 28 row-major, from its convs, pools and linear layer. */
#define CPU_PAR(DIRECTIVE, ...)            \
    do {                                   \
        if (omp_get_max_threads() > 1) {   \
            _Pragma(DIRECTIVE) __VA_ARGS__ \
        } else {                           \
            __VA_ARGS__                    \
        }                                  \
    } while (0)

/* max that lets NaN through, as PyTorch does: a NaN in v wins the compare (it is false), a NaN
 * already in m stays. Written as two selects so it compiles without branches (random data made
 * the short-circuit form mispredict on every other element) and vectorises. */
static inline float cpu_max_nan(float m, float v) {
    const float r = m > v ? m : v;
    return m != m ? m : r;
}

/* The sum of x[0..n) in double, in 16 running sums (two vectors of 8 doubles with AVX-512: 8, one
 * chain of additions, made softmax's row wait on each) added at the end: global_avgpool, softmax. */
static inline double cpu_sum_f64(const float *x, int64_t n) {
    double lane[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) lane[l] += x[i + l];
    double s = 0;
    for (; i < n; i++) s += x[i];
    for (int l = 0; l < 16; l++) s += lane[l];
    return s;
}

/* conv2d's paths (ops/conv2d.c): OpenBLAS over im2col windows or a 1x1 conv's input; Winograd;
 * depthwise; the packed GEMM of gemm.c (weight packed at prepare): reading a conv's windows in
 * place from a padded copy of the image (CONV_DIRECT), or packing them from the image
 * where cpu_gemm_conv_form says it is the faster, with the filters as the rows of its product
 * (CONV_PACKED) or the pixels (CONV_PACKED_T, small maps); a 1x1 conv that narrows the channels
 * with the pixels as rows read in place from the image (CONV_POINTWISE_T). */
enum {
    CONV_IM2COL = 0,
    CONV_GEMM_1X1 = 1,
    CONV_WINOGRAD = 2,
    CONV_DEPTHWISE = 3,
    CONV_PACKED = 4,
    CONV_PACKED_T = 5,
    CONV_DIRECT = 6,
    CONV_POINTWISE_T = 7,
    CONV_NHWC_DENSE = 8,  /* ops/nhwc.c: a conv of one group on channels-last tensors */
    CONV_NHWC_GROUPED = 9 /* ops/nhwc.c: groups of 2 or 4 channels in and out, channels-last */
};

/* CONV_DIRECT's padded image, split into stride[0] x stride[1] phase planes of hq x wq (stride 1:
 * one plane, the padded image itself), channels cs floats apart; output pixel (y, x) is column
 * y * wq + x of the product (n columns; x >= ow are the gutter, computed and dropped), and its tap
 * p reads row_at[p] floats further on: 16 pixels' taps are 16 consecutive floats. */
typedef struct cpu_direct {
    int64_t hq, wq, cs, n;
    int64_t *row_at;
} cpu_direct;

struct dl_kernel {
    dl_op_geom g;  /* the op's kind, attributes and shapes */
    int conv_mode; /* CONV_* */
    cpu_winograd wg;
    float *packed;    /* a constant weight packed for cpu_gemm at prepare (CONV_PACKED*, linear), or NULL */
    cpu_direct dc;    /* CONV_DIRECT's geometry */
    size_t workspace; /* bytes the f32 kernel needs (the staging of storage formats not counted) */
    int threads;
    int cl;         /* 1: the op runs on its channels-last f32 tensors where they lie (ops/nhwc.c) */
    cpu_storage st; /* f16/bf16 and channels-last tensors: inactive when all are f32 row-major */
};

/* Every op runs with the same signature: the prepared kernel, the inputs (data in host memory),
 * the output and the workspace prepare asked for. cpu_backend.c maps each kind to one. */
typedef void (*cpu_op_fn)(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);

dl_status cpu_conv2d_prepare(dl_kernel *k, const dl_op *op);
/* 1x1, stride 1, no padding: the image's channels are the product's operand as they lie */
int cpu_conv_plain_1x1(const dl_op_attrs *a);
/* ops/nhwc.c: the channels-last kernels. cpu_nhwc_runs: 1 where op has one and every 4-D
 * activation and the output are f32 channels-last (k->cl); cpu_nhwc_prepare then packs its weight
 * (conv_mode CONV_GEMM_1X1, CONV_NHWC_DENSE, CONV_DEPTHWISE, or CONV_WINOGRAD with k->wg.cl) or permutes a binary op's
 * or a concat's shapes, or sizes batchnorm's workspace; conv2d, the pools and batchnorm call the kernels below when
 * k->cl. cpu_preferred_layout: the plugin's answer to preferred_layout (ABI 1.9). */
int cpu_nhwc_runs(const dl_op *op);
int cpu_preferred_layout(void *self, const dl_op *op);
dl_status cpu_nhwc_prepare(dl_kernel *k, const dl_op *op);
void cpu_conv2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y, void *workspace);
void cpu_global_avgpool_nhwc(const dl_kernel *k, const dl_tensor *in, float *y);
void cpu_maxpool2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y);
void cpu_avgpool2d_nhwc(const dl_kernel *k, const dl_tensor *in, float *y);
/* ws: the 2 x C floats of k->workspace (each channel's scale, then its shift) */
void cpu_batchnorm_nhwc(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
size_t cpu_maxpool2d_workspace(const dl_kernel *k); /* bytes cpu_maxpool2d needs as ws */
void cpu_conv2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
/* ops/window8.c: depthwise conv (groups == input channels; conv2d picks it at prepare) and max
 * pooling, 8 channels at a time. Both need cpu_window8_workspace bytes, SIZE_MAX when that size
 * does not fit. */
size_t cpu_window8_workspace(const dl_kernel *k);
int cpu_depthwise_suits(const dl_kernel *k);
void cpu_depthwise(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_maxpool8(const dl_kernel *k, const float *x, float *y, void *ws);
/* ops/linear.c: a constant weight packed for cpu_gemm at prepare where x has two rows or more */
dl_status cpu_linear_prepare(dl_kernel *k, const dl_op *op);
void cpu_linear(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_maxpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_avgpool2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_global_avgpool(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_leaky_relu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_sigmoid(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_clip(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_copy(const dl_kernel *k, const dl_tensor *in, float *y, void *ws); /* flatten, dropout, reshape */
void cpu_matmul(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_add(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_batchnorm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
/* batchnorm's per-channel y = x * s + t of its inputs (x, gamma, beta, mean, var), in double, rounded once */
void cpu_batchnorm_coeffs(const dl_tensor *in, int64_t ch, double eps, float *s, float *t);
void cpu_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_concat(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
/* ABI 1.4: ops/math.c, ops/movement.c, ops/reduce_norm.c */
void cpu_mul(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_sub(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_div(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_pow(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_min(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_max(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_sqrt(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_exp(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_log(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_tanh(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_erf(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_neg(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_abs(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_reciprocal(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_hard_sigmoid(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_hard_swish(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_silu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_gelu(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_softplus(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_transpose(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_slice(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_pad(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_resize(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_reduce_mean(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_reduce_sum(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_reduce_max(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_reduce_min(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_layer_norm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_log_softmax(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_group_norm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_gather(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_channel_shuffle(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
void cpu_conv_transpose2d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
size_t cpu_conv_transpose2d_workspace(const dl_kernel *k); /* bytes cpu_conv_transpose2d needs as ws */
void cpu_conv3d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws);
/* ops/conv3d.c: a constant weight packed for cpu_gemm, or the columns of the per-slice path sized */
dl_status cpu_conv3d_prepare(dl_kernel *k, const dl_op *op);
/* y[m x n] (row stride ldy) = op(w) x with x [kdim x n] dense and op(w) [m x kdim]: w itself
 * ([m x kdim]) or, trans_w, w transposed (w [kdim x m]); the columns split across the threads,
 * each a single-threaded OpenBLAS sgemm (conv_transpose.c) */
void cpu_sgemm_columns(int trans_w, int m, int64_t n, int kdim, const float *w, const float *x, float *y, int64_t ldy);
/* gather's indices inside their dimension, else an error naming the first that is not */
dl_status cpu_gather_check(const dl_kernel *k, const dl_tensor *in, dl_error *err);
#endif
