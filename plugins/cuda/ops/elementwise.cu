// elementwise.cu — the cuda plugin's elementwise kernels: the unary activations (relu, leaky
// relu, sigmoid, clip; one kernel template, one instance per kind), add (same-shape and numpy
// broadcasting, relu fused) and inference batchnorm (relu fused).
#include "launch.cuh"

namespace {

using namespace dlk;

template <dlk_unary_kind K> __global__ void unary_k(const float *x, float *y, int64_t n, float p0, float p1) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        float v = x[i];
        if constexpr (K == DLK_RELU) y[i] = v > 0.f ? v : 0.f;
        else if constexpr (K == DLK_LEAKY_RELU) y[i] = v >= 0.f ? v : p0 * v;
        else if constexpr (K == DLK_SIGMOID) {
            float e = expf(-fabsf(v));
            y[i] = v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
        } else y[i] = fminf(fmaxf(v, p0), p1);
    }
}

template <dlk_unary_kind K>
int launch_unary(const dlk_unary_p *p, const float *x, float *y, int64_t n, cudaStream_t s) {
    unary_k<K><<<grid_for(n), THREADS, 0, s>>>(x, y, n, p->a, p->b);
    return launched();
}

__global__ void add_k(const float *a, const float *b, float *y, int64_t n, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        float v = a[i] + b[i];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

/* numpy-broadcast add: the operands' strides over y's dimensions are 0 where they repeat */
__global__ void add_bcast_k(const float *a, const float *b, float *y, int64_t n, dlk_bcast bc, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t q = r % bc.ys[d];
            oa += q * bc.sa[d], ob += q * bc.sb[d];
            r /= bc.ys[d];
        }
        float v = a[oa] + b[ob];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

__global__ void batchnorm_k(const float *x, const float *gamma, const float *beta, const float *mean, const float *var,
                            float eps, float *y, int64_t total, int c, int64_t inner, int relu) {
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        int ch = (int)((i / inner) % c);
        float scale = gamma[ch] * rsqrtf(var[ch] + eps);
        float v = (x[i] - mean[ch]) * scale + beta[ch];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

} // namespace

extern "C" int dlk_unary(const dlk_unary_p *p, const float *x, float *y, int64_t n, cudaStream_t s) {
    switch (p->kind) {
    case DLK_RELU: return launch_unary<DLK_RELU>(p, x, y, n, s);
    case DLK_LEAKY_RELU: return launch_unary<DLK_LEAKY_RELU>(p, x, y, n, s);
    case DLK_SIGMOID: return launch_unary<DLK_SIGMOID>(p, x, y, n, s);
    case DLK_CLIP: return launch_unary<DLK_CLIP>(p, x, y, n, s);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int dlk_add(const float *a, const float *b, float *y, int64_t n, int relu, cudaStream_t s) {
    add_k<<<grid_for(n), THREADS, 0, s>>>(a, b, y, n, relu);
    return launched();
}

extern "C" int dlk_add_bcast(const float *a, const float *b, float *y, int64_t n, const dlk_bcast *bc, int relu,
                             cudaStream_t s) {
    add_bcast_k<<<grid_for(n), THREADS, 0, s>>>(a, b, y, n, *bc, relu);
    return launched();
}

extern "C" int dlk_batchnorm(const dlk_batchnorm_p *p, const float *x, const float *gamma, const float *beta,
                             const float *mean, const float *var, float *y, cudaStream_t s) {
    int64_t total = p->planes * p->inner;
    batchnorm_k<<<grid_for(total), THREADS, 0, s>>>(x, gamma, beta, mean, var, p->eps, y, total, p->c, p->inner,
                                                    p->relu);
    return launched();
}
