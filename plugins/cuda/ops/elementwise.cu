// elementwise.cu — the cuda plugin's elementwise kernels: the functions of one element (relu,
// leaky relu, sigmoid, clip; from ABI 1.4 sqrt, exp, log, tanh, erf, neg, abs, reciprocal,
// hard_sigmoid, hard_swish, silu, gelu, softplus: one kernel template, one instance per kind), the
// binary ops (add with its fused relu, mul, sub, div, pow, min, max: one template on the op,
// same-shape and numpy broadcasting) and inference batchnorm (relu fused; NCHW or channels-last).
// Each is a template on the storage type T (float, __half, __nv_bfloat16): loads widen to float,
// the math is float, stores round (storage.cuh). The math is the CPU plugin's
// (plugins/cpu/ops/math.c) term for term, NaN going through every op as there.
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

// clamp to [lo, hi] keeping NaN (fminf/fmaxf would turn it into a bound)
__device__ inline float clamp_nan(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

// 1 / (1 + exp(-x)) without exp of a large positive number
__device__ inline float sigmoid_of(float v) {
    float e = expf(-fabsf(v));
    return v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

template <dlk_unary_kind K> __device__ inline float unary_of(float v, float p0, float p1) {
    if constexpr (K == DLK_RELU) return v > 0.f ? v : 0.f;
    else if constexpr (K == DLK_LEAKY_RELU) return v >= 0.f ? v : p0 * v;
    else if constexpr (K == DLK_SIGMOID) return sigmoid_of(v);
    else if constexpr (K == DLK_CLIP) return fminf(fmaxf(v, p0), p1);
    else if constexpr (K == DLK_SQRT) return sqrtf(v);
    else if constexpr (K == DLK_EXP) return expf(v);
    else if constexpr (K == DLK_LOG) return logf(v);
    else if constexpr (K == DLK_TANH) return tanhf(v);
    else if constexpr (K == DLK_ERF) return erff(v);
    else if constexpr (K == DLK_NEG) return -v;
    else if constexpr (K == DLK_ABS) return fabsf(v);
    else if constexpr (K == DLK_RECIPROCAL) return 1.f / v;
    else if constexpr (K == DLK_HARD_SIGMOID) return clamp_nan(p0 * v + p1, 0.f, 1.f);
    else if constexpr (K == DLK_HARD_SWISH) return v * clamp_nan(v + 3.f, 0.f, 6.f) / 6.f;
    else if constexpr (K == DLK_SILU) return v * sigmoid_of(v);
    else if constexpr (K == DLK_GELU_ERF) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    else if constexpr (K == DLK_GELU_TANH) {
        const float c = 0.7978845608028654f; // sqrt(2 / pi)
        return 0.5f * v * (1.f + tanhf(c * (v + 0.044715f * v * v * v)));
    } else return fmaxf(v, 0.f) + log1pf(expf(-fabsf(v))); // softplus; NaN through log1pf
}

template <dlk_unary_kind K, class T> __global__ void unary_k(const T *x, T *y, int64_t n, float p0, float p1) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) y[i] = from_f<T>(unary_of<K>(to_f(x[i]), p0, p1));
}

template <dlk_unary_kind K>
int launch_unary(const dlk_unary_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        unary_k<K, T><<<grid_for(n), THREADS, 0, s>>>((const T *)x, (T *)y, n, p->a, p->b);
        return launched();
    });
}

// min and max that propagate NaN, as the CPU plugin's min_nan / max_nan
__device__ inline float min_nan(float a, float b) { return a < b || isnan(a) ? a : b; }
__device__ inline float max_nan(float a, float b) { return a > b || isnan(a) ? a : b; }

template <dlk_binary_kind K> __device__ inline float binary_of(float a, float b) {
    if constexpr (K == DLK_ADD) return a + b;
    else if constexpr (K == DLK_MUL) return a * b;
    else if constexpr (K == DLK_SUB) return a - b;
    else if constexpr (K == DLK_DIV) return a / b;
    else if constexpr (K == DLK_POW) return powf(a, b);
    else if constexpr (K == DLK_MIN) return min_nan(a, b);
    else return max_nan(a, b);
}

// the fused relu (add only) keeps NaN
__device__ inline float relu_if(float v, int relu) { return relu && v < 0.f ? 0.f : v; }

template <dlk_binary_kind K, class T> __global__ void binary_k(const T *a, const T *b, T *y, int64_t n, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step())
        y[i] = from_f<T>(relu_if(binary_of<K>(to_f(a[i]), to_f(b[i])), relu));
}

// numpy broadcasting: the operands' strides over y's (merged) dimensions are 0 where they repeat
template <dlk_binary_kind K, class T>
__global__ void binary_bcast_k(const T *a, const T *b, T *y, int64_t n, dlk_bcast bc, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t q = r % bc.ys[d];
            oa += q * bc.sa[d], ob += q * bc.sb[d];
            r /= bc.ys[d];
        }
        y[i] = from_f<T>(relu_if(binary_of<K>(to_f(a[oa]), to_f(b[ob])), relu));
    }
}

template <dlk_binary_kind K>
int launch_binary(const dlk_binary_p *p, int type, const void *a, const void *b, void *y, int64_t n, int relu,
                  cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        if (p->bcast)
            binary_bcast_k<K, T><<<grid_for(n), THREADS, 0, s>>>((const T *)a, (const T *)b, (T *)y, n, p->bc, relu);
        else binary_k<K, T><<<grid_for(n), THREADS, 0, s>>>((const T *)a, (const T *)b, (T *)y, n, relu);
        return launched();
    });
}

template <class T>
__global__ void batchnorm_k(const T *x, const T *gamma, const T *beta, const T *mean, const T *var, float eps, T *y,
                            int64_t total, int c, int64_t inner, int relu, int cl) {
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        int ch = cl ? (int)(i % c) : (int)((i / inner) % c);
        float scale = to_f(gamma[ch]) * rsqrtf(to_f(var[ch]) + eps);
        float v = (to_f(x[i]) - to_f(mean[ch])) * scale + to_f(beta[ch]);
        y[i] = from_f<T>(relu && v < 0.f ? 0.f : v);
    }
}

} // namespace

extern "C" int dlk_unary(const dlk_unary_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s) {
    switch (p->kind) {
    case DLK_RELU: return launch_unary<DLK_RELU>(p, type, x, y, n, s);
    case DLK_LEAKY_RELU: return launch_unary<DLK_LEAKY_RELU>(p, type, x, y, n, s);
    case DLK_SIGMOID: return launch_unary<DLK_SIGMOID>(p, type, x, y, n, s);
    case DLK_CLIP: return launch_unary<DLK_CLIP>(p, type, x, y, n, s);
    case DLK_SQRT: return launch_unary<DLK_SQRT>(p, type, x, y, n, s);
    case DLK_EXP: return launch_unary<DLK_EXP>(p, type, x, y, n, s);
    case DLK_LOG: return launch_unary<DLK_LOG>(p, type, x, y, n, s);
    case DLK_TANH: return launch_unary<DLK_TANH>(p, type, x, y, n, s);
    case DLK_ERF: return launch_unary<DLK_ERF>(p, type, x, y, n, s);
    case DLK_NEG: return launch_unary<DLK_NEG>(p, type, x, y, n, s);
    case DLK_ABS: return launch_unary<DLK_ABS>(p, type, x, y, n, s);
    case DLK_RECIPROCAL: return launch_unary<DLK_RECIPROCAL>(p, type, x, y, n, s);
    case DLK_HARD_SIGMOID: return launch_unary<DLK_HARD_SIGMOID>(p, type, x, y, n, s);
    case DLK_HARD_SWISH: return launch_unary<DLK_HARD_SWISH>(p, type, x, y, n, s);
    case DLK_SILU: return launch_unary<DLK_SILU>(p, type, x, y, n, s);
    case DLK_GELU_ERF: return launch_unary<DLK_GELU_ERF>(p, type, x, y, n, s);
    case DLK_GELU_TANH: return launch_unary<DLK_GELU_TANH>(p, type, x, y, n, s);
    case DLK_SOFTPLUS: return launch_unary<DLK_SOFTPLUS>(p, type, x, y, n, s);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int dlk_binary(const dlk_binary_p *p, int type, const void *a, const void *b, void *y, int64_t n, int relu,
                          cudaStream_t s) {
    switch (p->kind) {
    case DLK_ADD: return launch_binary<DLK_ADD>(p, type, a, b, y, n, relu, s);
    case DLK_MUL: return launch_binary<DLK_MUL>(p, type, a, b, y, n, relu, s);
    case DLK_SUB: return launch_binary<DLK_SUB>(p, type, a, b, y, n, relu, s);
    case DLK_DIV: return launch_binary<DLK_DIV>(p, type, a, b, y, n, relu, s);
    case DLK_POW: return launch_binary<DLK_POW>(p, type, a, b, y, n, relu, s);
    case DLK_MIN: return launch_binary<DLK_MIN>(p, type, a, b, y, n, relu, s);
    case DLK_MAX: return launch_binary<DLK_MAX>(p, type, a, b, y, n, relu, s);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int dlk_batchnorm(const dlk_batchnorm_p *p, int type, const void *x, const void *gamma, const void *beta,
                             const void *mean, const void *var, void *y, cudaStream_t s) {
    int64_t total = p->planes * p->inner;
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        batchnorm_k<T><<<grid_for(total), THREADS, 0, s>>>((const T *)x, (const T *)gamma, (const T *)beta,
                                                           (const T *)mean, (const T *)var, p->eps, (T *)y, total, p->c,
                                                           p->inner, p->relu, p->cl);
        return launched();
    });
}
