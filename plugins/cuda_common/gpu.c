/* gpu.c — see gpu.h. Plain C against the CUDA runtime API (linked statically, so the plugin needs
 * only the driver's libcuda at run time, and loads without it to say so). */
#define _POSIX_C_SOURCE 200809L
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dl_status dl_gpu_status(cudaError_t e, const char *call, dl_error *err) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(call, "("), call);
    return dl_fail(err, e == cudaErrorMemoryAllocation ? DL_E_NOMEM : DL_E_RUNTIME, "%s: %s (%s)", name,
                   cudaGetErrorString(e), cudaGetErrorName(e));
}

dl_status dl_gpu_open(dl_gpu *g, int index, dl_error *err) {
    memset(g, 0, sizeof *g);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
        return dl_fail(err, DL_E_NODEVICE, "no CUDA device");
    if (e != cudaSuccess)
        return dl_fail(err, DL_E_NODEVICE, "no CUDA device (%s)", cudaGetErrorString(e));
    if (index < 0 || index >= count)
        return dl_fail(err, DL_E_NODEVICE, "no CUDA device %d (this machine has %d)", index, count);
    g->device = index;
    DL_GPU_TRY(cudaSetDevice(index), err);
    struct cudaDeviceProp p;
    DL_GPU_TRY(cudaGetDeviceProperties(&p, index), err);
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->total_mem = p.totalGlobalMem;
    g->cc_major = p.major, g->cc_minor = p.minor;
    cudaDriverGetVersion(&g->driver_version);
    cudaRuntimeGetVersion(&g->runtime_version);
    DL_GPU_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), err);
    DL_GPU_TRY(cudaEventCreate(&g->ev_start), err);
    DL_GPU_TRY(cudaEventCreate(&g->ev_stop), err);
    DL_GPU_TRY(cudaMallocHost(&g->staging, DL_GPU_STAGING), err);
    snprintf(g->description, sizeof g->description, "%s (GPU %d), sm_%d%d, %.1f GiB, driver %d.%d, runtime %d.%d", g->name,
             index, g->cc_major, g->cc_minor, (double)g->total_mem / 1073741824.0, g->driver_version / 1000,
             g->driver_version % 1000 / 10, g->runtime_version / 1000, g->runtime_version % 1000 / 10);
    return DL_OK;
}

void dl_gpu_close(dl_gpu *g) {
    if (g->staging) cudaFreeHost(g->staging);
    if (g->ev_start) cudaEventDestroy(g->ev_start);
    if (g->ev_stop) cudaEventDestroy(g->ev_stop);
    if (g->stream) cudaStreamDestroy(g->stream);
    memset(g, 0, sizeof *g);
}

dl_status dl_gpu_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err) {
    (void)g;
    *ptr = NULL;
    DL_GPU_TRY(cudaMalloc(ptr, bytes ? bytes : 256), err);
    return DL_OK;
}

void dl_gpu_free(dl_gpu *g, void *ptr) {
    (void)g;
    if (ptr) cudaFree(ptr);
}

dl_status dl_gpu_copy(dl_gpu *g, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    if (kind == DL_COPY_DEVICE_TO_DEVICE) {
        DL_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->stream), err);
        return DL_OK;
    }
    for (size_t off = 0; off < bytes; off += DL_GPU_STAGING) {
        size_t n = bytes - off < DL_GPU_STAGING ? bytes - off : DL_GPU_STAGING;
        /* the staging buffer is reused: wait until the previous chunk has left it */
        DL_GPU_TRY(cudaStreamSynchronize(g->stream), err);
        if (kind == DL_COPY_HOST_TO_DEVICE) {
            memcpy(g->staging, (const char *)src + off, n);
            DL_GPU_TRY(cudaMemcpyAsync((char *)dst + off, g->staging, n, cudaMemcpyHostToDevice, g->stream), err);
        } else {
            DL_GPU_TRY(cudaMemcpyAsync(g->staging, (const char *)src + off, n, cudaMemcpyDeviceToHost, g->stream), err);
            DL_GPU_TRY(cudaStreamSynchronize(g->stream), err);
            memcpy((char *)dst + off, g->staging, n);
        }
    }
    return DL_OK;
}

dl_status dl_gpu_synchronize(dl_gpu *g, dl_error *err) {
    DL_GPU_TRY(cudaStreamSynchronize(g->stream), err);
    DL_GPU_TRY(cudaGetLastError(), err);
    return DL_OK;
}

dl_status dl_gpu_memory_info(dl_gpu *g, size_t *free_bytes, size_t *total_bytes, dl_error *err) {
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    DL_GPU_TRY(cudaMemGetInfo(free_bytes, total_bytes), err);
    return DL_OK;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double dl_gpu_time(dl_gpu *g, int runs, int (*fn)(void *arg), void *arg) {
    if (runs < 1) runs = 1;
    if (runs > 64) runs = 64;
    float t[64];
    if (fn(arg) != 0 || cudaStreamSynchronize(g->stream) != cudaSuccess) return -1;
    for (int i = 0; i < runs; i++) {
        cudaEventRecord(g->ev_start, g->stream);
        if (fn(arg) != 0) return -1;
        cudaEventRecord(g->ev_stop, g->stream);
        if (cudaEventSynchronize(g->ev_stop) != cudaSuccess) return -1;
        cudaEventElapsedTime(&t[i], g->ev_start, g->ev_stop);
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_float);
    return t[runs / 2];
}

dl_status dl_gpu_be_alloc(void *self, size_t bytes, void **ptr, dl_error *err) { return dl_gpu_alloc(self, bytes, ptr, err); }
void dl_gpu_be_free(void *self, void *ptr) { dl_gpu_free(self, ptr); }
dl_status dl_gpu_be_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    return dl_gpu_copy(self, dst, src, bytes, kind, err);
}
dl_status dl_gpu_be_synchronize(void *self, dl_error *err) { return dl_gpu_synchronize(self, err); }
dl_status dl_gpu_be_memory_info(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err) {
    return dl_gpu_memory_info(self, free_bytes, total_bytes, err);
}
