// reduce_norm.cu — the cuda plugin's kernels that combine many elements into one (ABI 1.4):
// reduce_sum, reduce_mean, reduce_max, reduce_min over any axes (kept and reduced dimensions and
// their strides from prepare, cuda_params.c) and layer_norm over the trailing dimensions (two
// passes per row: the mean, then the variance about it). Sums are float: per thread over a
// strided share, then a tree of warp shuffles and one across warps (pairwise-like, so the error
// grows with log n, not n), or Kahan-compensated where one thread sums a whole output. max and
// min propagate NaN as the CPU plugin (plugins/cpu/ops/reduce_norm.c); group_norm as layer_norm
// over each group's channels. Templates on the storage
// type T: loads widen to float, stores round.
#include <type_traits>

#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

struct sum_op {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct max_op { // NaN wins, whichever side it is on
    __device__ float operator()(float a, float b) const { return a > b || isnan(a) ? a : b; }
};
struct min_op {
    __device__ float operator()(float a, float b) const { return a < b || isnan(a) ? a : b; }
};

template <dlk_reduce_kind H>
using op_of = std::conditional_t<H == DLK_REDUCE_MAX, max_op, std::conditional_t<H == DLK_REDUCE_MIN, min_op, sum_op>>;
template <dlk_reduce_kind H> __device__ constexpr float identity() {
    return H == DLK_REDUCE_MAX ? -INFINITY : H == DLK_REDUCE_MIN ? INFINITY : 0.f;
}

template <class Op> __device__ float warp_all(float v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// v combined over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// Every thread of the block must call it (it synchronizes); smem holds 32 floats.
template <class Op> __device__ float block_all(float v, Op op, float id, float *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_all(v, op);
    __syncthreads(); // smem may still be read from the previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    return warp_all(lane < warps ? smem[lane] : id, op);
}

template <dlk_reduce_kind H> __device__ float finish(float acc, int64_t count) {
    return H == DLK_REDUCE_MEAN ? acc / (float)count : acc;
}

// The input's last dimension is reduced: a block per output, threads on adjacent elements.
template <dlk_reduce_kind H, class T> __global__ void reduce_block_k(const T *x, T *y, dlk_reduce_p p) {
    __shared__ float smem[32];
    const op_of<H> op;
    for (int64_t o = blockIdx.x; o < p.kept; o += gridDim.x) {
        const T *base = x + dlk_offset(p.nk, p.ks, p.kst, o);
        float acc = identity<H>();
        for (int64_t q = threadIdx.x; q < p.count; q += blockDim.x)
            acc = op(acc, to_f(base[dlk_offset(p.nr, p.rs, p.rst, q)]));
        acc = block_all(acc, op, identity<H>(), smem);
        if (threadIdx.x == 0) y[o] = from_f<T>(finish<H>(acc, p.count));
    }
}

// s += v, Kahan-compensated (c carries what s lost); an infinite or NaN s stays as a plain sum
// would leave it (the compensation would turn inf - inf into NaN)
__device__ inline void kahan_add(float &s, float &c, float v) {
    float yv = v - c, t = s + yv;
    c = isfinite(t) ? (t - s) - yv : 0.f;
    s = t;
}

// The input's last dimension is kept: a thread per output, adjacent threads on adjacent elements.
template <dlk_reduce_kind H, class T> __global__ void reduce_thread_k(const T *x, T *y, dlk_reduce_p p) {
    const op_of<H> op;
    for (int64_t o = grid_first(); o < p.kept; o += grid_step()) {
        const T *base = x + dlk_offset(p.nk, p.ks, p.kst, o);
        float acc = identity<H>(), c = 0.f;
        for (int64_t q = 0; q < p.count; q++) {
            float v = to_f(base[dlk_offset(p.nr, p.rs, p.rst, q)]);
            if constexpr (H == DLK_REDUCE_SUM || H == DLK_REDUCE_MEAN) kahan_add(acc, c, v);
            else acc = op(acc, v);
        }
        y[o] = from_f<T>(finish<H>(acc, p.count));
    }
}

// blocks for a loop over `items` (one block each, then striding): at most 65535 * 8
inline unsigned blocks_over(int64_t items) { return (unsigned)(items < 65535 * 8 ? items : 65535 * 8); }

template <dlk_reduce_kind H>
int launch_reduce(const dlk_reduce_p *p, int type, const void *x, void *y, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        if (p->inner_reduced)
            reduce_block_k<H, T><<<blocks_over(p->kept), p->threads, 0, s>>>((const T *)x, (T *)y, *p);
        else reduce_thread_k<H, T><<<grid_for(p->kept), THREADS, 0, s>>>((const T *)x, (T *)y, *p);
        return launched();
    });
}

// The mean of a row of n elements and 1 / sqrt(variance + eps), the variance about the mean (two
// passes, as the CPU plugin, rather than E[x^2] - mean^2, which cancels). Every thread of the
// block calls it and gets both.
template <class T> __device__ void row_stats(const T *src, int64_t n, float eps, float *smem, float *mean, float *inv) {
    const sum_op add;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += to_f(src[i]);
    const float m = block_all(s, add, 0.f, smem) / (float)n;
    float v = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float d = to_f(src[i]) - m;
        v += d * d;
    }
    *mean = m;
    *inv = 1.f / sqrtf(block_all(v, add, 0.f, smem) / (float)n + eps);
}

// One block per row of `inner` elements, normalised, then scaled and shifted element by element.
template <class T> __global__ void layer_norm_k(const T *x, const T *w, const T *b, T *y, dlk_layer_norm_p p) {
    __shared__ float smem[32];
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const T *src = x + r * p.inner;
        T *dst = y + r * p.inner;
        float mean, inv;
        row_stats(src, p.inner, p.eps, smem, &mean, &inv);
        for (int64_t i = threadIdx.x; i < p.inner; i += blockDim.x)
            dst[i] = from_f<T>((to_f(src[i]) - mean) * inv * to_f(w[i]) + to_f(b[i]));
    }
}

// One block per (image, group) over the group's contiguous channels x positions, each element
// then scaled and shifted by its channel's weight and bias.
template <class T> __global__ void group_norm_k(const T *x, const T *w, const T *b, T *y, dlk_group_norm_p p) {
    __shared__ float smem[32];
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const T *src = x + r * p.inner;
        T *dst = y + r * p.inner;
        const int64_t first_channel = (r % p.groups) * p.per_group;
        float mean, inv;
        row_stats(src, p.inner, p.eps, smem, &mean, &inv);
        for (int64_t i = threadIdx.x; i < p.inner; i += blockDim.x) {
            const int64_t ch = first_channel + i / p.spatial;
            dst[i] = from_f<T>((to_f(src[i]) - mean) * inv * to_f(w[ch]) + to_f(b[ch]));
        }
    }
}

} // namespace

extern "C" int dlk_group_norm(const dlk_group_norm_p *p, int type, const void *x, const void *w, const void *b, void *y,
                              cudaStream_t s) {
    if (p->rows <= 0 || p->inner <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        group_norm_k<T>
            <<<blocks_over(p->rows), p->threads, 0, s>>>((const T *)x, (const T *)w, (const T *)b, (T *)y, *p);
        return launched();
    });
}

extern "C" int dlk_reduce(const dlk_reduce_p *p, int type, const void *x, void *y, cudaStream_t s) {
    if (p->kept <= 0) return launched();
    switch (p->how) {
    case DLK_REDUCE_SUM: return launch_reduce<DLK_REDUCE_SUM>(p, type, x, y, s);
    case DLK_REDUCE_MEAN: return launch_reduce<DLK_REDUCE_MEAN>(p, type, x, y, s);
    case DLK_REDUCE_MAX: return launch_reduce<DLK_REDUCE_MAX>(p, type, x, y, s);
    case DLK_REDUCE_MIN: return launch_reduce<DLK_REDUCE_MIN>(p, type, x, y, s);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int dlk_layer_norm(const dlk_layer_norm_p *p, int type, const void *x, const void *w, const void *b, void *y,
                              cudaStream_t s) {
    if (p->rows <= 0 || p->inner <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        layer_norm_k<T>
            <<<blocks_over(p->rows), p->threads, 0, s>>>((const T *)x, (const T *)w, (const T *)b, (T *)y, *p);
        return launched();
    });
}
