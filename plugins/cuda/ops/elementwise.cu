// elementwise.cu — the cuda plugin's elementwise kernels: the unary activations (relu, leaky
// relu, sigmoid, clip; one kernel template, one instance per kind), add (same-shape and numpy
// broadcasting, relu fused) and inference batchnorm (relu fused; NCHW or channels-last). Each is a
// template on the storage type T (float, __half, __nv_bfloat16): loads widen to float, the math is
// float, stores round (storage.cuh).
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

template <dlk_unary_kind K, class T> __global__ void unary_k(const T *x, T *y, int64_t n, float p0, float p1) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        float v = to_f(x[i]), r;
        if constexpr (K == DLK_RELU) r = v > 0.f ? v : 0.f;
        else if constexpr (K == DLK_LEAKY_RELU) r = v >= 0.f ? v : p0 * v;
        else if constexpr (K == DLK_SIGMOID) {
            float e = expf(-fabsf(v));
            r = v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
        } else r = fminf(fmaxf(v, p0), p1);
        y[i] = from_f<T>(r);
    }
}

template <dlk_unary_kind K>
int launch_unary(const dlk_unary_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        unary_k<K, T><<<grid_for(n), THREADS, 0, s>>>((const T *)x, (T *)y, n, p->a, p->b);
        return launched();
    });
}

template <class T> __global__ void add_k(const T *a, const T *b, T *y, int64_t n, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        float v = to_f(a[i]) + to_f(b[i]);
        y[i] = from_f<T>(relu && v < 0.f ? 0.f : v);
    }
}

/* numpy-broadcast add: the operands' strides over y's dimensions are 0 where they repeat */
template <class T> __global__ void add_bcast_k(const T *a, const T *b, T *y, int64_t n, dlk_bcast bc, int relu) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t q = r % bc.ys[d];
            oa += q * bc.sa[d], ob += q * bc.sb[d];
            r /= bc.ys[d];
        }
        float v = to_f(a[oa]) + to_f(b[ob]);
        y[i] = from_f<T>(relu && v < 0.f ? 0.f : v);
    }
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
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int dlk_add(int type, const void *a, const void *b, void *y, int64_t n, int relu, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        add_k<T><<<grid_for(n), THREADS, 0, s>>>((const T *)a, (const T *)b, (T *)y, n, relu);
        return launched();
    });
}

extern "C" int dlk_add_bcast(int type, const void *a, const void *b, void *y, int64_t n, const dlk_bcast *bc, int relu,
                             cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        add_bcast_k<T><<<grid_for(n), THREADS, 0, s>>>((const T *)a, (const T *)b, (T *)y, n, *bc, relu);
        return launched();
    });
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
