/* gpu.h — what every CUDA-based plugin (cuda, cudnn) needs, built once and linked into each:
 * device selection, a stream, device memory, copies through pinned staging buffers, events, and
 * CUDA errors turned into dlrun errors that name the failing call. */
#ifndef DLRUN_GPU_H
#define DLRUN_GPU_H
#include <cuda_runtime_api.h>

#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_GPU_STAGING (16u << 20) /* bytes of pinned host memory per direction */

typedef struct dl_gpu {
    int device;
    cudaStream_t stream;
    cudaEvent_t ev_start, ev_stop;
    void *staging;          /* pinned host buffer for uploads and downloads */
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int driver_version, runtime_version;
    char description[512];  /* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, driver 13.0, runtime 13.0" */
} dl_gpu;

/* Turns a CUDA status into a dlrun error naming the call: return DL_GPU_CHECK(cudaMalloc(...), err); */
dl_status dl_gpu_status(cudaError_t e, const char *call, dl_error *err);
#define DL_GPU_TRY(call, err)                                                      \
    do {                                                                           \
        cudaError_t dl_gpu_e_ = (call);                                            \
        if (dl_gpu_e_ != cudaSuccess) return dl_gpu_status(dl_gpu_e_, #call, err); \
    } while (0)

/* Opens device `index` (or fails with "no CUDA device" / the driver's reason, status
 * DL_E_NODEVICE), creates the stream, events and staging buffer. */
dl_status dl_gpu_open(dl_gpu *g, int index, dl_error *err);
void dl_gpu_close(dl_gpu *g);

dl_status dl_gpu_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_free(dl_gpu *g, void *ptr);
/* Copies ordered on the plugin's stream; host memory goes through the pinned staging buffer.
 * Downloads are complete when this returns; uploads may still be in flight (synchronize). */
dl_status dl_gpu_copy(dl_gpu *g, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err);
dl_status dl_gpu_synchronize(dl_gpu *g, dl_error *err);
dl_status dl_gpu_memory_info(dl_gpu *g, size_t *free_bytes, size_t *total_bytes, dl_error *err);
/* Backend-table members for a plugin whose state struct begins with its dl_gpu (self points at
 * it): memory, copies, synchronize and memory_info are the same in every CUDA plugin. */
dl_status dl_gpu_be_alloc(void *self, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_be_free(void *self, void *ptr);
dl_status dl_gpu_be_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err);
dl_status dl_gpu_be_synchronize(void *self, dl_error *err);
dl_status dl_gpu_be_memory_info(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err);
/* Milliseconds of `fn(arg)` on the stream, measured with CUDA events: median of `runs` after
 * one warm-up. Returns < 0 if launching failed. */
double dl_gpu_time(dl_gpu *g, int runs, int (*fn)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif
