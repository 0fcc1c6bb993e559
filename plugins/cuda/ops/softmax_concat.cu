// softmax_concat.cu — the cuda plugin's softmax and log_softmax along an axis (max-subtracted, float
// arithmetic on any storage type: one warp per row along the last axis, whose elements are
// contiguous; one thread per row along any other) and the copy of one input of a concat into its
// place in the output (elements moved as they are).
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

template <class T> __global__ void softmax_k(const T *x, T *y, int64_t rows, int64_t len, int64_t inner, int log_of) {
    for (int64_t r = grid_first(); r < rows; r += grid_step()) {
        const T *src = x + (r / inner) * len * inner + r % inner;
        T *dst = y + (r / inner) * len * inner + r % inner;
        float m = -INFINITY;
        for (int64_t i = 0; i < len; i++) m = fmaxf(m, to_f(src[i * inner]));
        float s = 0.f;
        for (int64_t i = 0; i < len; i++) s += expf(to_f(src[i * inner]) - m);
        const float ls = logf(s);
        for (int64_t i = 0; i < len; i++) {
            const float v = to_f(src[i * inner]) - m;
            dst[i * inner] = from_f<T>(log_of ? v - ls : expf(v) / s);
        }
    }
}

__device__ inline float warp_max(float v) {
    for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}
__device__ inline float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

constexpr int ROW_WARPS = 8; // rows per block of softmax_rows

// the last axis (inner 1): one warp per row, its lanes striding along it (coalesced); the same
// arithmetic as softmax_k, the sums in another order
template <class T> __global__ void softmax_rows(const T *x, T *y, int64_t rows, int64_t len, int log_of) {
    const int64_t r = (int64_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return; // a whole warp leaves together: the shuffles below see all 32 lanes
    const T *src = x + r * len;
    T *dst = y + r * len;
    float m = -INFINITY;
    for (int64_t i = lane; i < len; i += 32) m = fmaxf(m, to_f(src[i]));
    m = warp_max(m);
    float s = 0.f;
    for (int64_t i = lane; i < len; i += 32) s += expf(to_f(src[i]) - m);
    s = warp_sum(s);
    const float ls = logf(s);
    for (int64_t i = lane; i < len; i += 32) {
        const float v = to_f(src[i]) - m;
        dst[i] = from_f<T>(log_of ? v - ls : expf(v) / s);
    }
}

template <class T>
__global__ void concat_k(const T *x, T *y, int64_t total, int64_t chunk, int64_t row, int64_t offset) {
    for (int64_t i = grid_first(); i < total; i += grid_step()) y[(i / chunk) * row + offset + i % chunk] = x[i];
}

} // namespace

extern "C" int dlk_softmax(const dlk_softmax_p *p, int type, const void *x, void *y, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        if (p->inner == 1) {
            if (p->outer <= 0) return launched();
            softmax_rows<T><<<blocks_for(p->outer, ROW_WARPS), ROW_WARPS * 32, 0, s>>>((const T *)x, (T *)y, p->outer,
                                                                                       p->len, p->log);
            return launched();
        }
        softmax_k<T><<<grid_for(p->outer * p->inner), THREADS, 0, s>>>((const T *)x, (T *)y, p->outer * p->inner,
                                                                       p->len, p->inner, p->log);
        return launched();
    });
}

extern "C" int dlk_concat_part(int type, const void *x, void *y, int64_t outer, int64_t chunk, int64_t row,
                               int64_t offset, cudaStream_t s) {
    int64_t total = outer * chunk;
    if (total <= 0) return launched();
    if (type == DL_GPU_F32)
        concat_k<float><<<grid_for(total), THREADS, 0, s>>>((const float *)x, (float *)y, total, chunk, row, offset);
    else
        concat_k<uint16_t>
            <<<grid_for(total), THREADS, 0, s>>>((const uint16_t *)x, (uint16_t *)y, total, chunk, row, offset);
    return launched();
}
