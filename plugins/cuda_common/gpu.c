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
    if (pthread_mutex_init(&g->lock, NULL) != 0) return dl_fail(err, DL_E_RUNTIME, "pthread_mutex_init failed");
    g->has_lock = 1;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
        return dl_fail(err, DL_E_NODEVICE, "no CUDA device");
    if (e != cudaSuccess) return dl_fail(err, DL_E_NODEVICE, "no CUDA device (%s)", cudaGetErrorString(e));
    if (index < 0 || index >= count)
        return dl_fail(err, DL_E_NODEVICE, "no CUDA device %d (this machine has %d)", index, count);
    g->device = index;
    DL_GPU_TRY(cudaSetDevice(index), err);
    struct cudaDeviceProp p;
    DL_GPU_TRY(cudaGetDeviceProperties(&p, index), err);
    snprintf(g->name, sizeof g->name, "%s", p.name);
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(g->family, sizeof g->family,
             "cuda-events GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    g->total_mem = p.totalGlobalMem;
    g->cc_major = p.major, g->cc_minor = p.minor;
    cudaDriverGetVersion(&g->driver_version);
    cudaRuntimeGetVersion(&g->runtime_version);
    DL_GPU_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), err);
    DL_GPU_TRY(cudaEventCreate(&g->ev_start), err);
    DL_GPU_TRY(cudaEventCreate(&g->ev_stop), err);
    for (int b = 0; b < 2; b++) DL_GPU_TRY(cudaEventCreateWithFlags(&g->ev_staged[b], cudaEventDisableTiming), err);
    DL_GPU_TRY(cudaMallocHost(&g->staging, DL_GPU_STAGING), err);
    snprintf(g->description, sizeof g->description, "%s (GPU %d), sm_%d%d, %.1f GiB, driver %d.%d, runtime %d.%d",
             g->name, index, g->cc_major, g->cc_minor, (double)g->total_mem / 1073741824.0, g->driver_version / 1000,
             g->driver_version % 1000 / 10, g->runtime_version / 1000, g->runtime_version % 1000 / 10);
    return DL_OK;
}

void dl_gpu_close(dl_gpu *g) {
    if (g->stream) cudaSetDevice(g->device); /* destroy may come from any thread */
    if (g->staging) cudaFreeHost(g->staging);
    if (g->scratch) cudaFree(g->scratch);
    if (g->ev_start) cudaEventDestroy(g->ev_start);
    if (g->ev_stop) cudaEventDestroy(g->ev_stop);
    for (int b = 0; b < 2; b++)
        if (g->ev_staged[b]) cudaEventDestroy(g->ev_staged[b]);
    if (g->stream) cudaStreamDestroy(g->stream);
    for (int i = 0; i < g->n_pinned; i++) cudaFreeHost(g->pinned[i].p); /* a host that forgot them */
    free(g->pinned);
    if (g->has_lock) pthread_mutex_destroy(&g->lock);
    memset(g, 0, sizeof *g);
}

dl_status dl_gpu_use(dl_gpu *g, dl_error *err) {
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    return DL_OK;
}

void dl_gpu_lock(dl_gpu *g) { pthread_mutex_lock(&g->lock); }
void dl_gpu_unlock(dl_gpu *g) { pthread_mutex_unlock(&g->lock); }

dl_status dl_gpu_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err) {
    *ptr = NULL;
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    DL_GPU_TRY(cudaMalloc(ptr, bytes ? bytes : 256), err);
    return DL_OK;
}

void dl_gpu_free(dl_gpu *g, void *ptr) {
    if (!ptr) return;
    cudaSetDevice(g->device);
    cudaFree(ptr);
}

dl_status dl_gpu_host_alloc(dl_gpu *g, size_t bytes, void **ptr, dl_error *err) {
    *ptr = NULL;
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    DL_GPU_TRY(cudaMallocHost(ptr, bytes ? bytes : 64), err);
    dl_gpu_lock(g);
    int ok = 1;
    if (g->n_pinned == g->cap_pinned) {
        int cap = g->cap_pinned ? 2 * g->cap_pinned : 8;
        struct dl_gpu_block *grown = realloc(g->pinned, (size_t)cap * sizeof *grown);
        if (grown) g->pinned = grown, g->cap_pinned = cap;
        ok = grown != NULL;
    }
    if (ok) g->pinned[g->n_pinned++] = (struct dl_gpu_block){*ptr, bytes};
    dl_gpu_unlock(g);
    if (!ok) {
        cudaFreeHost(*ptr);
        *ptr = NULL;
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    return DL_OK;
}

void dl_gpu_host_free(dl_gpu *g, void *ptr) {
    if (!ptr) return;
    dl_gpu_lock(g);
    for (int i = 0; i < g->n_pinned; i++)
        if (g->pinned[i].p == ptr) g->pinned[i] = g->pinned[--g->n_pinned];
    dl_gpu_unlock(g);
    cudaSetDevice(g->device);
    cudaStreamSynchronize(g->stream); /* no queued copy still reads or writes the block */
    cudaFreeHost(ptr);
}

/* 1 if host bytes [p, p + bytes) lie in one of host_alloc's blocks; the caller holds the lock. */
static int pinned(const dl_gpu *g, const void *p, size_t bytes) {
    for (int i = 0; i < g->n_pinned; i++)
        if ((const char *)p >= g->pinned[i].p && bytes <= g->pinned[i].bytes &&
            (size_t)((const char *)p - g->pinned[i].p) <= g->pinned[i].bytes - bytes)
            return 1;
    return 0;
}

/* The host's half of a staged transfer: fill writes units lo..lo+count of an upload into the
 * staging half buf; drain reads them out of buf after a download. */
typedef void (*stage_fn)(const void *ctx, void *buf, int64_t lo, int64_t count);

/* An upload to (or download from) device memory dev of n units of `unit` bytes, chunk by chunk
 * through the two halves of the staging buffer, so that the host's copy into (out of) one half
 * runs while the DMA of the other does. Each half's event marks when its last DMA is done. The
 * caller holds the lock. An upload returns with its last chunks still queued on the stream. */
static dl_status staged(dl_gpu *g, int up, char *dev, int64_t n, int64_t unit, stage_fn fn, const void *ctx,
                        dl_error *err) {
    const int64_t half = (int64_t)DL_GPU_STAGING / 2, chunk = half / unit, chunks = (n + chunk - 1) / chunk;
    char *buf[2] = {g->staging, (char *)g->staging + half};
    for (int64_t j = 0; j <= chunks; j++) {
        int b = (int)(j & 1);
        if (j < chunks) {
            int64_t lo = j * chunk, count = n - lo < chunk ? n - lo : chunk;
            if (up) {
                DL_GPU_TRY(cudaEventSynchronize(g->ev_staged[b]), err); /* chunk j-2 has left this half */
                fn(ctx, buf[b], lo, count);
                DL_GPU_TRY(
                    cudaMemcpyAsync(dev + lo * unit, buf[b], (size_t)(count * unit), cudaMemcpyHostToDevice, g->stream),
                    err);
            } else { /* this half was drained at step j-1 */
                DL_GPU_TRY(
                    cudaMemcpyAsync(buf[b], dev + lo * unit, (size_t)(count * unit), cudaMemcpyDeviceToHost, g->stream),
                    err);
            }
            DL_GPU_TRY(cudaEventRecord(g->ev_staged[b], g->stream), err);
        }
        if (!up && j > 0) { /* chunk j-1 arrived while chunk j's DMA is queued behind it */
            int64_t lo = (j - 1) * chunk, count = n - lo < chunk ? n - lo : chunk;
            DL_GPU_TRY(cudaEventSynchronize(g->ev_staged[b ^ 1]), err);
            fn(ctx, buf[b ^ 1], lo, count);
        }
    }
    return DL_OK;
}

typedef struct plain_host {
    char *dst;
    const char *src;
} plain_host;
static void fill_plain(const void *ctx, void *buf, int64_t lo, int64_t count) {
    memcpy(buf, ((const plain_host *)ctx)->src + lo, (size_t)count);
}
static void drain_plain(const void *ctx, void *buf, int64_t lo, int64_t count) {
    memcpy(((const plain_host *)ctx)->dst + lo, buf, (size_t)count);
}

/* A copy to or from host memory through the staging buffer, or, where the host side is one of
 * host_alloc's blocks, straight by DMA: an upload queued, a download waited for (complete when it
 * returns, as the staged one is). The caller holds the lock. */
static dl_status copy_staged(dl_gpu *g, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    int up = kind == DL_COPY_HOST_TO_DEVICE;
    if (pinned(g, up ? src : dst, bytes)) {
        DL_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, g->stream),
                   err);
        if (!up) DL_GPU_TRY(cudaStreamSynchronize(g->stream), err);
        return DL_OK;
    }
    plain_host h = {dst, src};
    if (kind == DL_COPY_HOST_TO_DEVICE) return staged(g, 1, dst, (int64_t)bytes, 1, fill_plain, &h, err);
    return staged(g, 0, (char *)src, (int64_t)bytes, 1, drain_plain, &h, err);
}

dl_status dl_gpu_copy(dl_gpu *g, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    if (kind == DL_COPY_DEVICE_TO_DEVICE) { /* no staging: queued without the lock */
        DL_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->stream), err);
        return DL_OK;
    }
    dl_gpu_lock(g);
    dl_status st = copy_staged(g, dst, src, bytes, kind, err);
    dl_gpu_unlock(g);
    return st;
}

/* The host halves of a converting copy: an upload gathers dst's elements lo.. from host src,
 * converted, into the staging buffer; a download scatters src's elements lo.., converted, from
 * the staging buffer into host dst. */
typedef struct convert_host {
    const dl_gpu_convert_plan *p;
    void *dst;
    const void *src;
} convert_host;
static void fill_converted(const void *ctx, void *buf, int64_t lo, int64_t count) {
    const convert_host *h = ctx;
    dl_gpu_gather_host(buf, h->src, h->p, lo, count);
}
static void drain_converted(const void *ctx, void *buf, int64_t lo, int64_t count) {
    const convert_host *h = ctx;
    dl_gpu_scatter_host(h->dst, buf, h->p, lo, count);
}

/* The plugin's device scratch, at least `bytes` of it; the caller holds the lock. A buffer that
 * must grow is freed only once the stream is done with it (a queued cast may still read it). */
static dl_status scratch_at_least(dl_gpu *g, size_t bytes, dl_error *err) {
    if (g->scratch_bytes >= bytes) return DL_OK;
    if (g->scratch) {
        DL_GPU_TRY(cudaStreamSynchronize(g->stream), err);
        cudaFree(g->scratch);
        g->scratch = NULL, g->scratch_bytes = 0;
    }
    DL_GPU_TRY(cudaMalloc(&g->scratch, bytes), err);
    g->scratch_bytes = bytes;
    return DL_OK;
}

/* A converting copy across the bus that reorders: gathering element by element on the host was
 * slow (an f32 NCHW batch of 32 images to f16 NHWC: 45 ms on the GPU machine), so the host side's
 * bytes cross as they are, through the device scratch, and the cast kernel reorders and casts on
 * the device: after the upload into the scratch, or before the download out of it. The stream
 * orders the scratch's uses. The caller holds the lock and has made the scratch hold the host
 * side's `bytes`. */
static dl_status convert_on_device(dl_gpu *g, const dl_tensor *dst, const dl_tensor *src, const dl_gpu_convert_plan *p,
                                   dl_copy_kind kind, size_t bytes, dl_error *err) {
    int up = kind == DL_COPY_HOST_TO_DEVICE;
    dl_status st = up ? copy_staged(g, g->scratch, src->data, bytes, kind, err) : DL_OK;
    if (st != DL_OK) return st;
    int rc = up ? dl_gpu_cast(dst->data, p->dt, g->scratch, p->st, &p->x, g->stream)
                : dl_gpu_cast(g->scratch, p->dt, src->data, p->st, &p->x, g->stream);
    if (rc) return dl_gpu_status((cudaError_t)rc, "cast kernel launch", err);
    return up ? DL_OK : copy_staged(g, dst->data, g->scratch, bytes, kind, err);
}

/* The staged converting copy, the caller holding the lock: reordering ones on the device, the
 * others (dtype only), and reordering ones where the device has no room for the scratch, on the
 * host, chunk by chunk through the staging buffer. */
static dl_status convert_staged(dl_gpu *g, const dl_tensor *dst, const dl_tensor *src, const dl_gpu_convert_plan *p,
                                dl_copy_kind kind, dl_error *err) {
    dl_gpu_type host_side = kind == DL_COPY_HOST_TO_DEVICE ? p->st : p->dt;
    size_t bytes = (size_t)p->x.n * (size_t)dl_gpu_type_size(host_side);
    /* the host side in a page-locked block: its bytes cross by DMA as they are, and the device
     * casts, whatever the order (the host's conversion would be the slow part) */
    if (p->x.relayout != DL_GPU_SAME_ORDER ||
        pinned(g, kind == DL_COPY_HOST_TO_DEVICE ? src->data : dst->data, bytes)) {
        dl_error no_room;
        if (scratch_at_least(g, bytes, &no_room) == DL_OK) return convert_on_device(g, dst, src, p, kind, bytes, err);
        cudaGetLastError(); /* the failed allocation is not this copy's error: it goes the host's way */
    }
    convert_host h = {p, dst->data, src->data};
    if (kind == DL_COPY_HOST_TO_DEVICE)
        return staged(g, 1, dst->data, p->x.n, dl_gpu_type_size(p->dt), fill_converted, &h, err);
    return staged(g, 0, src->data, p->x.n, dl_gpu_type_size(p->st), drain_converted, &h, err);
}

dl_status dl_gpu_convert(dl_gpu *g, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err) {
    dl_gpu_convert_plan p;
    if (!dl_gpu_convert_plan_of(dst, src, kind, &p, err)) return DL_E_UNSUPPORTED;
    if (p.dt == p.st && p.x.relayout == DL_GPU_SAME_ORDER) /* nothing to convert */
        return dl_gpu_copy(g, dst->data, src->data, (size_t)p.x.n * (size_t)dl_gpu_type_size(p.dt), kind, err);
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    if (kind == DL_COPY_DEVICE_TO_DEVICE) { /* the cast kernel, queued without the lock */
        int rc = dl_gpu_cast(dst->data, p.dt, src->data, p.st, &p.x, g->stream);
        return rc ? dl_gpu_status((cudaError_t)rc, "cast kernel launch", err) : DL_OK;
    }
    dl_gpu_lock(g);
    dl_status st = convert_staged(g, dst, src, &p, kind, err);
    dl_gpu_unlock(g);
    return st;
}

dl_status dl_gpu_synchronize(dl_gpu *g, dl_error *err) {
    DL_GPU_TRY(cudaSetDevice(g->device), err); /* not under the lock: other threads keep queuing */
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

/* dl_gpu_time's measurements into t[0..runs), the caller holding the lock: cudaSuccess, or the
 * first error seen, from fn's launch or from the stream, event and timing calls. Every call's
 * status is checked, so t[i] is written whenever cudaSuccess is returned. */
static cudaError_t time_runs(dl_gpu *g, int runs, int (*fn)(void *arg), void *arg, float *t) {
    cudaError_t e;
    int rc = fn(arg); /* the warm-up */
    if (rc != 0) return (cudaError_t)rc;
    if ((e = cudaStreamSynchronize(g->stream)) != cudaSuccess) return e;
    for (int i = 0; i < runs; i++) {
        if ((e = cudaEventRecord(g->ev_start, g->stream)) != cudaSuccess) return e;
        if ((rc = fn(arg)) != 0) return (cudaError_t)rc;
        if ((e = cudaEventRecord(g->ev_stop, g->stream)) != cudaSuccess) return e;
        if ((e = cudaEventSynchronize(g->ev_stop)) != cudaSuccess) return e;
        if ((e = cudaEventElapsedTime(&t[i], g->ev_start, g->ev_stop)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

double dl_gpu_time(dl_gpu *g, int runs, int (*fn)(void *arg), void *arg, cudaError_t *error) {
    if (runs < 1) runs = 1;
    if (runs > 64) runs = 64;
    float t[64];
    dl_gpu_lock(g); /* the events are the plugin's one pair */
    cudaError_t e = time_runs(g, runs, fn, arg, t);
    dl_gpu_unlock(g);
    if (error) *error = e;
    if (e != cudaSuccess) {
        /* the error is the caller's now: clear this thread's record of it, so that a later,
         * unrelated check does not report it again (a sticky error stays whatever is done) */
        cudaGetLastError();
        return -1;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_float);
    return t[runs / 2];
}

dl_status dl_gpu_be_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    return dl_gpu_alloc(self, bytes, ptr, err);
}
void dl_gpu_be_free(void *self, void *ptr) { dl_gpu_free(self, ptr); }
dl_status dl_gpu_be_copy(void *self, void *dst, const void *src, size_t bytes, dl_copy_kind kind, dl_error *err) {
    return dl_gpu_copy(self, dst, src, bytes, kind, err);
}
dl_status dl_gpu_be_synchronize(void *self, dl_error *err) { return dl_gpu_synchronize(self, err); }
dl_status dl_gpu_be_host_alloc(void *self, size_t bytes, void **ptr, dl_error *err) {
    return dl_gpu_host_alloc(self, bytes, ptr, err);
}
void dl_gpu_be_host_free(void *self, void *ptr) { dl_gpu_host_free(self, ptr); }
dl_status dl_gpu_be_memory_info(void *self, size_t *free_bytes, size_t *total_bytes, dl_error *err) {
    return dl_gpu_memory_info(self, free_bytes, total_bytes, err);
}
int dl_gpu_be_supports_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind) {
    return dl_gpu_convert_plan_of(dst, src, kind, NULL, NULL);
}
dl_status dl_gpu_be_convert(void *self, const dl_tensor *dst, const dl_tensor *src, dl_copy_kind kind, dl_error *err) {
    return dl_gpu_convert(self, dst, src, kind, err);
}

/* ABI 1.6 timing events: one cudaEvent_t per handle, created at its first record and recorded again
 * after that; no lock (an event is the host's, used by one session's thread at a time). The host
 * hands the GPU between plugins with them too (ABI 1.14, dl_gpu_be_event_wait): recording one again
 * while a wait on its earlier record is queued is CUDA's rule, the wait keeps that record. */
/* A failed record or wait also leaves its error as the thread's last one, which the next
 * synchronize would report: the host falls back to synchronizing (ABI 1.14), so it is cleared. */
static dl_status event_failed(cudaError_t e, const char *call, dl_error *err) {
    (void)cudaGetLastError();
    return dl_gpu_status(e, call, err);
}
dl_status dl_gpu_be_event_record(void *self, void **event, dl_error *err) {
    dl_gpu *g = self;
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    cudaError_t e = cudaSuccess;
    if (!*event) {
        cudaEvent_t ev = NULL;
        if ((e = cudaEventCreate(&ev)) != cudaSuccess) return event_failed(e, "cudaEventCreate", err);
        *event = ev;
    }
    if ((e = cudaEventRecord((cudaEvent_t)*event, g->stream)) != cudaSuccess)
        return event_failed(e, "cudaEventRecord", err);
    return DL_OK;
}
dl_status dl_gpu_be_event_elapsed(void *self, void *start, void *end, double *ms, dl_error *err) {
    dl_gpu *g = self;
    float t = 0;
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    DL_GPU_TRY(cudaEventElapsedTime(&t, (cudaEvent_t)start, (cudaEvent_t)end), err);
    *ms = t;
    return DL_OK;
}
dl_status dl_gpu_be_event_wait(void *self, void *event, dl_error *err) {
    dl_gpu *g = self;
    DL_GPU_TRY(cudaSetDevice(g->device), err);
    cudaError_t e = cudaStreamWaitEvent(g->stream, (cudaEvent_t)event, 0);
    return e == cudaSuccess ? DL_OK : event_failed(e, "cudaStreamWaitEvent", err);
}
void dl_gpu_be_event_release(void *self, void *event) {
    dl_gpu *g = self;
    if (!event || cudaSetDevice(g->device) != cudaSuccess) return;
    cudaEventDestroy((cudaEvent_t)event);
}

void *dl_gpu_plugin_new(const dl_host *host, size_t size, dl_error *err) {
    if (!dl_plugin_host_ok(host, err)) return NULL;
    dl_gpu *g = calloc(1, size);
    if (!g) return dl_fail(err, DL_E_NOMEM, "out of memory"), NULL;
    if (dl_gpu_open(g, host->device_index, err) != DL_OK) {
        dl_gpu_close(g);
        free(g);
        return NULL;
    }
    g->host = host;
    return g;
}

dl_backend dl_gpu_table(dl_gpu *g, const char *name, const char *description) {
    return (dl_backend){
        .abi_version = DL_ABI_VERSION,
        .struct_size = sizeof(dl_backend),
        .name = name,
        .description = description,
        .device = {DL_DEVICE_CUDA, g->device},
        .self = g,
        .alloc = dl_gpu_be_alloc,
        .free = dl_gpu_be_free,
        .copy = dl_gpu_be_copy,
        .synchronize = dl_gpu_be_synchronize,
        .memory_info = dl_gpu_be_memory_info,
        .supports_convert = dl_gpu_be_supports_convert,
        .convert = dl_gpu_be_convert,
        .event_record = dl_gpu_be_event_record,
        .event_elapsed = dl_gpu_be_event_elapsed,
        .event_release = dl_gpu_be_event_release,
        .host_alloc = dl_gpu_be_host_alloc,
        .host_free = dl_gpu_be_host_free,
        .queue_family = g->family,
        .event_wait = dl_gpu_be_event_wait,
    };
}
