// launch.cuh — what the cuda plugin's kernel files (ops/*.cu) share: grid sizing, the
// grid-stride loop's start and step, the launch status, the GEMMs' epilogue, asking for shared
// memory past 48 KiB, and the storage
// types (storage.cuh from plugins/cuda_common: to_f, from_f, by_type). Internal to
// plugins/cuda/ops.
#ifndef DLRUN_CUDA_LAUNCH_CUH
#define DLRUN_CUDA_LAUNCH_CUH
#include <atomic>
#include <cstdint>

#include "kernels.h"
#include "storage.cuh"

namespace dlk {

constexpr int THREADS = 256; // threads per block of the elementwise-style kernels

// 0, or the error of the launch just made on this host thread, returned to the launcher's caller
// (kernels.h: every launcher returns it), which reports it. It is read with cudaGetLastError,
// which also clears it: the error now belongs to the caller, and a later, unrelated check must
// not report it again. So a caller must use the value returned, never ask cudaGetLastError
// afterwards (that says "no error"). A sticky error (the context is lost) stays whatever is done.
inline int launched() { return (int)cudaGetLastError(); }
// blocks of `threads` covering n
inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }
// blocks of THREADS for a grid-stride loop over n: at least 1, at most 65535 * 8
inline unsigned grid_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// for (int64_t i = grid_first(); i < n; i += grid_step()): this thread's indices of [0, n)
__device__ inline int64_t grid_first() { return blockIdx.x * (int64_t)blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_step() { return (int64_t)gridDim.x * blockDim.x; }

// A GEMM's sum v of output element y[at], filter or output feature o, with the epilogue applied
// (kernels.h, dlk_epilogue: + bias[o], + residual[at], relu), for storage type T.
template <class T> __device__ inline float epilogue(const dlk_epilogue &e, int o, long long at, float v) {
    if (e.bias) v += dlg::to_f(static_cast<const T *>(e.bias)[o]);
    if (e.residual) v += dlg::to_f(static_cast<const T *>(e.residual)[at]);
    return e.relu && v < 0.f ? 0.f : v;
}

// Past 48 KiB of dynamic shared memory a kernel must ask for it, once per device: 0, or the
// error of asking. Devices 0-31 are noted once asked (per kernel: Kern is a template argument);
// a later device asks at every launch.
template <auto Kern> int smem_opt_in(int smem) {
    static std::atomic<unsigned> asked{0};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    const unsigned bit = dev < 32 ? 1u << dev : 0u;
    if (asked.load() & bit) return 0;
    e = cudaFuncSetAttribute(Kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return (int)e;
    asked.fetch_or(bit);
    return 0;
}

} // namespace dlk

#endif
