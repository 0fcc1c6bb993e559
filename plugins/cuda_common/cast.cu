// cast.cu — the cast kernel of the CUDA plugins: a copy within the device that converts between
// f32, f16 and bf16 and/or between row-major and channels-last (gathering each destination
// element from its source index, gpu_storage.h). The plugins' DEVICE_TO_DEVICE convert, the cudnn
// plugin's NHWC filter reorder and its f32 staging use it.
#include <type_traits>

#include "gpu.h"
#include "storage.cuh"

namespace {

template <class D, class S> __global__ void cast_k(D *y, const S *x, dl_gpu_xform t) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < t.n; j += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (std::is_same_v<D, S>) y[j] = x[dl_gpu_src_of(&t, j)]; // bits kept
        else y[j] = dlg::from_f<D>(dlg::to_f(x[dl_gpu_src_of(&t, j)]));
    }
}

} // namespace

extern "C" int dl_gpu_cast(void *dst, int dt, const void *src, int st, const dl_gpu_xform *x, cudaStream_t s) {
    if (x->n <= 0) return 0;
    int64_t b = (x->n + 255) / 256;
    unsigned blocks = (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
    return dlg::by_type(dt, [&](auto d) {
        using D = decltype(d);
        return dlg::by_type(st, [&](auto sv) {
            using S = decltype(sv);
            cast_k<D, S><<<blocks, 256, 0, s>>>((D *)dst, (const S *)src, *x);
            return (int)cudaGetLastError();
        });
    });
}
