// storage.cuh — the storage types on the device: loads widen to float, stores round to nearest
// even (f16 and bf16 overflow to infinity, NaN stays NaN), and the dispatch of a launcher over the
// three types, for the kernels of every CUDA plugin (cast.cu here, plugins/cuda/ops/*.cu).
#ifndef DLRUN_GPU_STORAGE_CUH
#define DLRUN_GPU_STORAGE_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu_storage.h"

namespace dlg {

__device__ inline float to_f(float v) { return v; }
__device__ inline float to_f(__half v) { return __half2float(v); }
__device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ inline T from_f(float v);
template <> __device__ inline float from_f<float>(float v) { return v; }
template <> __device__ inline __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// f(T{}) for the C++ type of storage type t: the launcher instantiated for that type. Returns
// f's result, or cudaErrorInvalidValue for a type no kernel is built for.
template <class F> int by_type(int t, F f) {
    switch (t) {
    case DL_GPU_F32: return f(float{});
    case DL_GPU_F16: return f(__half{});
    case DL_GPU_BF16: return f(__nv_bfloat16{});
    default: return (int)cudaErrorInvalidValue;
    }
}

} // namespace dlg

#endif
