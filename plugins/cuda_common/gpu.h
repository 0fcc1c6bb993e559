/* gpu.h — what every CUDA-based plugin (cuda, cudnn) needs, built once and linked into each:
 * device selection, a stream, device memory, copies through pinned staging buffers, events, the
 * lock that guards them, and CUDA errors turned into dlrun errors that name the failing call.
 *
 * Threads. The host may call a backend's members from several threads at once (sessions of one
 * model running side by side share the loaded backend). The rules every CUDA plugin follows:
 *   - the current device is per host thread (a thread that never chose one uses device 0), so every
 *     member that allocates, copies or queues work first makes the plugin's device current
 *     (dl_gpu_use; dl_gpu_alloc, dl_gpu_free, dl_gpu_copy, dl_gpu_synchronize and
 *     dl_gpu_memory_info do it themselves);
 *   - what one plugin instance holds once and reuses is guarded by its `lock`: the staging buffer
 *     (dl_gpu_copy and dl_gpu_convert hold it for a whole staged copy), the timing events (dl_gpu_time holds it, so
 *     it must not be called with the lock held), and in the cudnn plugin its cuDNN and cuBLASLt
 *     handles (held around its prepare and run);
 *   - queuing kernels and device-to-device copies on the one stream from several threads needs no
 *     lock (the CUDA runtime is thread-safe; a launch's status, cudaGetLastError, is per thread),
 *     and nothing waits on the stream with the lock held except a staged copy, which must
 *     (dl_gpu_synchronize waits without it);
 *   - a prepared kernel belongs to one session, so its own state needs no lock. */
#ifndef DLRUN_GPU_H
#define DLRUN_GPU_H
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "dlrun/plugin.h"
#include "gpu_storage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_GPU_STAGING (16u << 20) /* bytes of pinned host memory: two halves, filled and sent in turn */

typedef struct dl_gpu {
    int device;
    cudaStream_t stream;
    cudaEvent_t ev_start, ev_stop; /* dl_gpu_time's, under `lock` */
    void *staging;                 /* pinned host buffer for uploads and downloads, under `lock` */
    void *scratch;                 /* device memory for the reordering converting copies (gpu.c),
                                      under `lock`; grown to the largest, freed at close */
    size_t scratch_bytes;
    cudaEvent_t ev_staged[2]; /* the last DMA of each half of `staging` is done, under `lock` */
    struct dl_gpu_block {     /* page-locked host blocks dl_gpu_host_alloc gave (ABI 1.13), under `lock`:
                                 copies whose host side lies in one skip the staging buffer */
        char *p;
        size_t bytes;
    } * pinned;
    int n_pinned, cap_pinned;
    pthread_mutex_t lock; /* see the thread rules above */
    int has_lock;         /* `lock` was initialised (dl_gpu_close destroys it) */
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int driver_version, runtime_version;
    char description[512]; /* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, driver 13.0, runtime 13.0" */
    char family[64];       /* ABI 1.14 queue_family: "cuda-events GPU-<uuid>" (the device's UUID,
                              as nvidia-smi writes it): the plugins on one GPU wait for each
                              other's events */
    const dl_host *host;   /* the host's table from dl_plugin_init (dl_gpu_plugin_new), valid until
                              destroy: its timing cache keeps the choices timed at prepare
                              (choice_store.h) */
} dl_gpu;

/* Turns a CUDA status into a dlrun error naming the call (DL_GPU_TRY returns it on failure). */
dl_status dl_gpu_status(cudaError_t e, const char *call, dl_error *err);
#define DL_GPU_TRY(call, err)                                                      \
    do {                                                                           \
        cudaError_t dl_gpu_e_ = (call);                                            \
        if (dl_gpu_e_ != cudaSuccess) return dl_gpu_status(dl_gpu_e_, #call, err); \
    } while (0)

/* Opens device `index` (or fails with "no CUDA device" / the driver's reason, status
 * DL_E_NODEVICE), creates the lock, stream, events and staging buffer. */
dl_status dl_gpu_open(dl_gpu *g, int index, dl_error *err);
void dl_gpu_close(dl_gpu *g);

/* For a plugin's dl_plugin_init: checks the host (dl_plugin_host_ok), allocates `size` zeroed
 * bytes of plugin state, which must begin with its dl_gpu, opens the device the host asks for and
 * keeps the host's table (dl_gpu.host). NULL with the reason in err ("no CUDA device") on failure. */
void *dl_gpu_plugin_new(const dl_host *host, size_t size, dl_error *err);
/* The backend table's members every GPU plugin shares: version, size, device, self (the state
 * beginning with g), memory, copies, synchronize, memory_info, supports_convert, convert and the
 * timing events. The plugin adds its op members. */
dl_backend dl_gpu_table(dl_gpu *g, const char *name, const char *description);

/* Makes the plugin's device current on the calling thread (cheap; see the thread rules). */
dl_status dl_gpu_use(dl_gpu *g, dl_error *err);
/* Take and give back g->lock around what it guards (never around waiting for other threads' work
 * when that is avoidable). */
void dl_gpu_lock(dl_gpu *g);
void dl_gpu_unlock(dl_gpu *g);

/* Product of the dimensions [from, to) of a shape: the outer and inner extents around an axis. */
static inline int64_t dl_gpu_prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

dl_status dl_gpu_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_free(dl_gpu *g, void *ptr);
/* ABI 1.13 host_alloc / host_free: page-locked host memory (cudaMallocHost), kept in g's list of
 * blocks so that a copy or converting copy whose host side lies in one goes by DMA from (to) it
 * directly, with no staging copy on the host: an upload is then queued and returns at once. */
dl_status dl_gpu_host_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_host_free(dl_gpu *g, void *ptr);

/* Copies ordered on the plugin's stream; host memory goes through the pinned staging buffer
 * (under the lock, chunk after chunk). Downloads are complete when this returns; uploads may
 * still be in flight (synchronize). */
dl_status dl_gpu_copy(dl_gpu *g, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err);
/* A copy that converts dtype (f32, f16, bf16) and/or layout (row-major, channels-last) on the way
 * (ABI 1.3 convert; dl_gpu_convert_plan_of says what it takes). A copy with nothing to convert is
 * dl_gpu_copy. DEVICE_TO_DEVICE is the cast kernel on the stream; HOST_TO_DEVICE converts on the
 * host into the pinned staging buffer, chunk by chunk, which then goes up as dl_gpu_copy's does;
 * DEVICE_TO_HOST brings chunks down and converts them out of the staging buffer. A copy that
 * reorders (row-major <-> channels-last) across the bus moves the host side's bytes as they are,
 * through the plugin's device scratch, and the cast kernel reorders on the device. Ordered and
 * complete as dl_gpu_copy. */
dl_status dl_gpu_convert(dl_gpu *g, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err);
/* The cast kernel (cast.cu): dst[j] = src[dl_gpu_src_of(x, j)] for j < x->n, converted from
 * storage type st to dt, queued on s. 0, or the cudaError_t of the launch. */
int dl_gpu_cast(void *dst, int dt, const void *src, int st, const dl_gpu_xform *x, cudaStream_t s);
/* Waits for the stream (without the lock: other threads may keep queuing meanwhile). */
dl_status dl_gpu_synchronize(dl_gpu *g, dl_error *err);
dl_status dl_gpu_memory_info(dl_gpu *g, size_t *free_bytes, size_t *total_bytes, dl_error *err);
/* Backend-table members for a plugin whose state struct begins with its dl_gpu (self points at
 * it): memory, copies, synchronize and memory_info are the same in every CUDA plugin. */
dl_status dl_gpu_be_alloc(void *self, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_be_free(void *self, void *ptr);
dl_status dl_gpu_be_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err);
dl_status dl_gpu_be_synchronize(void *self, dl_error *err);
dl_status dl_gpu_be_memory_info(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err);
dl_status dl_gpu_be_host_alloc(void *self, size_t bytes, void **ptr, dl_error *err);
void dl_gpu_be_host_free(void *self, void *ptr);
int dl_gpu_be_supports_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind);
dl_status dl_gpu_be_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err);
/* ABI 1.6 timing events (CUDA events on the plugin's stream): record (creating the event the first
 * time), elapsed milliseconds between two after a synchronize, release. */
dl_status dl_gpu_be_event_record(void *self, void **event, dl_error *err);
/* ABI 1.14: the plugin's stream waits (on the device) for an event another CUDA plugin recorded on
 * the same GPU; a CUDA runtime's event is the driver's, so one linked into another plugin serves. */
dl_status dl_gpu_be_event_wait(void *self, void *event, dl_error *err);
dl_status dl_gpu_be_event_elapsed(void *self, void *start, void *end, double *ms, dl_error *err);
void dl_gpu_be_event_release(void *self, void *event);
/* Milliseconds of `fn(arg)` on the stream, measured with CUDA events: median of `runs` after
 * one warm-up. fn returns 0, or the cudaError_t of its launch. Returns < 0 if anything failed:
 * fn's launch, waiting on the stream, or an event's record, wait or reading; then *error (where
 * error is not NULL) is that failure's cudaError_t, else cudaSuccess. Takes the lock for the
 * events (the caller must not hold it); the device must be current. Work other threads queue
 * meanwhile is timed with it. */
double dl_gpu_time(dl_gpu *g, int runs, int (*fn)(void *arg), void *arg, cudaError_t *error);

#ifdef __cplusplus
}
#endif
#endif
