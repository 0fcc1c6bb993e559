// async_copy.cuh — the copy instructions the tensor-core GEMMs (mma_gemm.cu, wgmma_gemm.cu) feed
// their shared-memory stages with: cp.async of 16 or 4 bytes with zero-fill, its commit and wait,
// and a generic pointer's shared-memory address. Internal to plugins/cuda/ops.
#ifndef DLRUN_CUDA_ASYNC_COPY_CUH
#define DLRUN_CUDA_ASYNC_COPY_CUH

namespace dlk {

__device__ inline unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes, or zeros where !ok (src-size 0 reads nothing)
__device__ inline void cp_async16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}
__device__ inline void cp_async4(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// until at most N of this thread's committed groups are still in flight
template <int N> __device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

} // namespace dlk

#endif
