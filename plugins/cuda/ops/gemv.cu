// gemv.cu — the cuda plugin's linear for a few batch rows (issue 14's GEMV path): y[n, out] =
// x[n, in] w[out, in]^T + b with n <= DLK_GEMV_ROWS. It reads the weights once, which is all the
// time it takes (VGG-16's fc6 reads 411 MB in f32 at batch 1), so it is written for bandwidth: one
// warp per output feature, 16-byte loads of the weight row (4 f32 or 8 f16/bf16 in each), several
// in flight per lane, every batch row's sum kept in registers, a warp shuffle to add the lanes up,
// bias, a residual and relu on the way out. Sums in f32 whatever the storage: exact f32 FMA math,
// so it may run at every precision.
#include "launch.cuh"

namespace {

using namespace dlk;
using namespace dlg;

constexpr int WARPS = 8; // per block: the 8 warps read the same x, which stays in L1

// the two 16-bit elements of a 32-bit word as floats (the first in the low half), by bit
// operations: no detour through local memory
__device__ inline void unpack(unsigned w, __half, float *out) {
    out[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
    out[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
__device__ inline void unpack(unsigned w, __nv_bfloat16, float *out) {
    out[0] = __uint_as_float(w << 16); // a bf16 is the top half of the f32 it widens to
    out[1] = __uint_as_float(w & 0xffff0000u);
}

// 16 / sizeof(T) elements of storage type T from 16 aligned bytes, as floats
template <class T> __device__ inline void load16(const T *p, float *out) {
    const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) out[i] = __uint_as_float(w[i]);
        else unpack(w[i], T{}, out + 2 * i);
    }
}

template <class T, int NB>
__global__ void __launch_bounds__(WARPS * 32)
    gemv_rows(const T *__restrict__ x, const T *__restrict__ w, dlk_epilogue e, T *y, int in, int out, int vec) {
    const int o = blockIdx.x * WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= out) return;
    const T *wr = w + (size_t)o * in;
    float acc[NB];
#pragma unroll
    for (int r = 0; r < NB; r++) acc[r] = 0.f;
    if (vec) { // in is a multiple of V, w and x 16-byte aligned
        constexpr int V = 16 / (int)sizeof(T);
#pragma unroll 4
        for (int k = lane * V; k < in; k += 32 * V) {
            float wv[V], xv[V];
            load16(wr + k, wv);
#pragma unroll
            for (int r = 0; r < NB; r++) {
                load16(x + (size_t)r * in + k, xv);
#pragma unroll
                for (int i = 0; i < V; i++) acc[r] = fmaf(wv[i], xv[i], acc[r]);
            }
        }
    } else {
#pragma unroll 4
        for (int k = lane; k < in; k += 32) {
            float wv = to_f(wr[k]);
#pragma unroll
            for (int r = 0; r < NB; r++) acc[r] = fmaf(wv, to_f(x[(size_t)r * in + k]), acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < NB; r++)
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], d);
    if (lane < NB) { // lane r writes batch row r (the sums are the same in every lane now)
        float v = 0.f;
#pragma unroll
        for (int r = 0; r < NB; r++)
            if (r == lane) v = acc[r];
        const long long at = (long long)lane * out + o;
        y[at] = from_f<T>(epilogue<T>(e, o, at, v));
    }
}

template <class T, int NB>
int launch(const dlk_linear_p *l, const void *x, const void *w, const dlk_epilogue *e, void *y, cudaStream_t s) {
    const int V = 16 / (int)sizeof(T);
    int vec = l->in % V == 0 && ((size_t)x & 15) == 0 && ((size_t)w & 15) == 0;
    gemv_rows<T, NB><<<blocks_for(l->out, WARPS), WARPS * 32, 0, s>>>(
        static_cast<const T *>(x), static_cast<const T *>(w), *e, static_cast<T *>(y), l->in, l->out, vec);
    return launched();
}

} // namespace

extern "C" int dlk_gemv(const dlk_linear_p *l, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                        cudaStream_t s) {
    return by_type(type, [&](auto t) {
        using T = decltype(t);
        switch (l->n) {
        case 1: return launch<T, 1>(l, x, w, e, y, s);
        case 2: return launch<T, 2>(l, x, w, e, y, s);
        case 3: return launch<T, 3>(l, x, w, e, y, s);
        case 4: return launch<T, 4>(l, x, w, e, y, s);
        case 5: return launch<T, 5>(l, x, w, e, y, s);
        case 6: return launch<T, 6>(l, x, w, e, y, s);
        case 7: return launch<T, 7>(l, x, w, e, y, s);
        case 8: return launch<T, 8>(l, x, w, e, y, s);
        default: return (int)cudaErrorInvalidValue;
        }
    });
}
