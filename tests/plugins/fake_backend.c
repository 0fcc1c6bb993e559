/* fake_backend.c — a backend whose speed, supported ops and memory domain the placement tests
 * control. Built as "fakedev" (its own device domain, memory that is really host memory) and
 * "fakecpu" (host memory). It computes relu, dropout, flatten and add correctly, and, when named in
 * its OPS, concat where each input is one run of the output (batch 1), then waits:
 *   DLFAKE_<NAME>_US          time per op in microseconds (default 100)
 *   DLFAKE_<NAME>_<OP>_US     time for one op kind (OP in capitals: RELU, ADD, ...)
 *   DLFAKE_<NAME>_COPY_US     time per copy to or from host memory (default 0)
 *   DLFAKE_<NAME>_OPS         comma-separated op kinds it supports (default all four)
 *   DLFAKE_<NAME>_IN_PLACE    1: it may run its ops with the output over input 0 (supports_in_place)
 *   DLFAKE_<NAME>_OVER_INPUT1_US  set: its add kernels may write their output over input 1
 *                             (kernel_in_place, ABI 1.10), and each run of one whose output is not
 *                             there waits this many microseconds more (the copy a kernel that sums
 *                             into its destination would make first)
 *   DLFAKE_<NAME>_ASYNC       1: like a GPU stream, run() only queues the op; the queue runs, in
 *                             order, at synchronize() or before a copy (so a host that reads a
 *                             result without synchronizing this backend reads stale memory)
 *   DLFAKE_<NAME>_EVENT_US    set: it has ABI 1.6 timing events on a fake device clock, which runs
 *                             its queue as a GPU does: each op starts when queued or when the one
 *                             before ends, and takes this many microseconds; synchronize and
 *                             copies wait (on the host) until the clock is reached. A trace shows
 *                             these durations for its ops, whatever the host measures.
 *   DLFAKE_<NAME>_SYNC_US     time synchronize() takes besides waiting for the queue (default 0):
 *                             the latency of a real device's synchronize
 *   DLFAKE_<NAME>_FIRST_US    time each prepared op's first run takes besides its own (default 0):
 *                             a JIT building its code, or the first touch of its memory (waited
 *                             on the host in run(): a device clock of EVENT_US does not see it)
 *   DLFAKE_<NAME>_STORE       set: at prepare it asks the host's store (ABI 1.12) for "<kind>
 *                             n=<elements>", and where it is not kept "measures" it and puts the
 *                             element count there (and a negative and a NaN under other keys,
 *                             which must not be kept); dlfake_store_counts() says how often it
 *                             measured, found the count, found anything else, and was answered
 *                             during dl_plugin_init (never, by the ABI)
 *   DLFAKE_<NAME>_FAIL_ADD    set: its add kernels fail at run ("fake add failure");
 *                             dlfake_pending() says how many ops the newest instance still has
 *                             queued (ASYNC), so a test sees whether the host waited for them
 *   DLFAKE_<NAME>_HOSTMEM     set: it offers host memory (ABI 1.13 host_alloc / host_free), as a
 *                             CUDA plugin offers page-locked memory; dlfake_hostmem_counts() says
 *                             how many blocks it gave, took back, and how many uploads read one
 *   DLFAKE_<NAME>_WAIT        set (with EVENT_US): ABI 1.14 event_wait, in queue family "fake
 *                             queues": its queue (ASYNC) then holds waits for another fake's
 *                             events, and running it runs that fake's queue up to the record first
 *                             (as a GPU's streams do); dlfake_handovers() says how many waits
 *                             every fake of the process queued, how many synchronizes it had and
 *                             how many events it made
 *   DLFAKE_<NAME>_WAIT_FAILS  set (with WAIT): event_wait fails ("fake wait failure"), so the host
 *                             must hand the device over another way
 *   DLFAKE_<NAME>_FAIL_SYNC   set: synchronize fails ("fake queue error") where an op ran since
 *                             the last one, as a GPU reports a kernel's fault at the next sync
 * Built with FAKE_ABI_1_2 it declares ABI 1.2 and accepts any dtype it is shown, so a test can
 * see that the host never shows an older plugin anything but f32 row-major tensors. Built with
 * FAKE_BF16 it takes bf16 tensors only (placement tests of the cost of casts). It takes row-major
 * tensors only (placement tests of the cost of transposes). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrun/plugin.h"

#ifdef FAKE_BF16
#define FAKE_DTYPE DL_BF16
#else
#define FAKE_DTYPE DL_F32
#endif
#ifdef FAKE_ABI_1_2
#define FAKE_ABI (((uint32_t)DL_ABI_MAJOR << 16) | 2u)
#define ANY_DTYPE 1
#else
#define FAKE_ABI DL_ABI_VERSION
#define ANY_DTYPE 0
#endif

struct dl_kernel {
    int kind;
    int64_t n;
    int n_inputs;
    int ran; /* it has run once */
};

typedef struct fk_event fk_event;
typedef struct pending { /* a queued op (async mode), or a wait for an event (k NULL) */
    const dl_kernel *k;
    const float *x, *b;
    float *y;
    const fk_event *wait; /* with k NULL: run its fake's queue up to the record first */
    long seq, wait_seq;   /* its place in its queue; the record's, for a wait */
} pending;

/* (1.6) an event: the fake device clock when recorded; (1.14) and how far its fake's queue had
 * come, so that another fake's wait can run that queue so far (each fake is a plugin of its own:
 * it reaches the other's queue through the event's function) */
struct fk_event {
    double clock;
    void *owner;
    long seq;
    void (*run_upto)(void *owner, long seq);
};

/* DLFAKE_<NAME>_STORE's counts, for the tests (dlsym): measured, kept, wrong, answered at init */
static int store_counts[4];
DL_PLUGIN_EXPORT void dlfake_store_counts(int out[4]) { memcpy(out, store_counts, sizeof store_counts); }
/* every run() call so far, for the tests (dlsym) */
static int runs;
DL_PLUGIN_EXPORT int dlfake_runs(void) { return runs; }

/* DLFAKE_<NAME>_HOSTMEM's counts, for the tests (dlsym): blocks given, blocks freed, uploads
 * whose host side lay in a block given and not yet freed */
enum { HOSTMEM_BLOCKS = 16 };
static int hostmem_counts[3];
static struct {
    const char *p;
    size_t n;
} hostmem[HOSTMEM_BLOCKS];
DL_PLUGIN_EXPORT void dlfake_hostmem_counts(int out[3]) { memcpy(out, hostmem_counts, sizeof hostmem_counts); }
/* DLFAKE_<NAME>_WAIT's counts, for the tests (dlsym): waits queued, synchronize calls, events made
 * (any fake of this plugin file) */
static long handovers[3];
DL_PLUGIN_EXPORT void dlfake_handovers(long out[3]) { memcpy(out, handovers, sizeof handovers); }

typedef struct fake fake;
static fake *newest; /* the instance dl_plugin_init made last, for dlfake_pending */

struct fake {
    dl_backend table;
    const dl_host *host;
    int store; /* DLFAKE_<NAME>_STORE */
    double op_us[DL_OP_COUNT_V1_0];
    int ok[DL_OP_COUNT_V1_0];
    double copy_us;
    int async, n_queued, head; /* queue[head, n_queued) still to run */
    long queued;               /* entries queued so far (the newest one's seq) */
    pending queue[64];
    double event_ms, clock_ms; /* EVENT_US in ms; the fake device clock */
    double sync_us;
    double first_us; /* added to each kernel's first run */
    double over1_us; /* OVER_INPUT1_US */
    int fail_add;    /* FAIL_ADD */
    int fail_sync;   /* FAIL_SYNC */
    int wait_fails;  /* WAIT_FAILS */
    int ran;         /* an op ran since the last synchronize */
};
DL_PLUGIN_EXPORT int dlfake_pending(void) { return newest ? newest->n_queued - newest->head : -1; }

static const char *const names[DL_OP_COUNT_V1_0] = {"CONV2D",         "RELU",   "MAXPOOL2D", "AVGPOOL2D",
                                                    "GLOBAL_AVGPOOL", "LINEAR", "FLATTEN",   "DROPOUT",
                                                    "SOFTMAX",        "ADD",    "CONCAT",    "BATCHNORM"};

static void wait_us(double us) { /* busy-wait: sleeps overshoot by more than the times we model */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3 < us);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The fake device clock: when the work queued so far ends (never before now). */
static double device_clock(fake *f) {
    double now = now_ms();
    return f->clock_ms > now ? f->clock_ms : now;
}
/* Waits until the fake device has done its queue (events on). */
static void device_wait(fake *f) {
    double left = f->event_ms > 0 ? f->clock_ms - now_ms() : 0;
    if (left > 0) wait_us(left * 1e3);
}

static double env_num(const char *name, double def) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : def;
}

static void compute(fake *f, const dl_kernel *k, const float *x, const float *b, float *y) {
    for (int64_t i = 0; i < k->n; i++) {
#ifdef FAKE_BF16 /* the same in bf16 storage; relu and copies on the bits, as cheap as f32 */
        const uint16_t *xh = (const uint16_t *)x, *bh = (const uint16_t *)b;
        uint16_t *yh = (uint16_t *)y;
        if (k->kind == DL_OP_ADD) yh[i] = dl_f32_to_bf16(dl_bf16_to_f32(xh[i]) + dl_bf16_to_f32(bh[i]));
        else yh[i] = k->kind == DL_OP_RELU && (xh[i] & 0x8000u) ? 0 : xh[i];
#else
        float v = k->kind == DL_OP_ADD ? x[i] + b[i] : x[i];
        y[i] = k->kind == DL_OP_RELU && v < 0 ? 0 : v;
#endif
    }
    wait_us(f->op_us[k->kind]);
    f->ran = 1;
}

/* Runs the queue in order up to entry seq; a wait runs the other fake's queue up to its record
 * first, which may wait in turn for this one (for entries already taken off the queue). */
static void run_upto(void *self, long seq) {
    fake *f = self;
    while (f->head < f->n_queued && f->queue[f->head].seq <= seq) {
        pending p = f->queue[f->head++];
        if (p.k) compute(f, p.k, p.x, p.b, p.y);
        else p.wait->run_upto(p.wait->owner, p.wait_seq);
    }
    if (f->head == f->n_queued) f->head = f->n_queued = 0;
}
static void flush(fake *f) { run_upto(f, f->queued); }
static void enqueue(fake *f, pending p) {
    if (f->n_queued == (int)(sizeof f->queue / sizeof f->queue[0])) flush(f);
    p.seq = ++f->queued;
    f->queue[f->n_queued++] = p;
}

static dl_status fk_synchronize(void *self, dl_error *err) {
    fake *f = self;
    handovers[1]++;
    flush(f);
    device_wait(f);
    wait_us(f->sync_us);
    const int failed = f->fail_sync && f->ran;
    f->ran = 0;
    return failed ? dl_fail(err, DL_E_RUNTIME, "fake queue error") : DL_OK;
}

static void fk_destroy(void *self) {
    if (newest == self) newest = NULL;
    free(self);
}
static dl_status fk_alloc(void *self, size_t bytes, void **p, dl_error *err) {
    *p = NULL;
    if (posix_memalign(p, 64, bytes ? bytes : 64)) return dl_fail(err, DL_E_NOMEM, "no memory");
    return DL_OK;
}
static void fk_free(void *self, void *p) { free(p); }
static dl_status fk_host_alloc(void *self, size_t bytes, void **p, dl_error *err) {
    int i = 0;
    while (i < HOSTMEM_BLOCKS && hostmem[i].p) i++;
    if (i == HOSTMEM_BLOCKS || posix_memalign(p, 64, bytes ? bytes : 64))
        return dl_fail(err, DL_E_NOMEM, "no host memory");
    hostmem[i].p = *p, hostmem[i].n = bytes;
    hostmem_counts[0]++;
    return DL_OK;
}
static void fk_host_free(void *self, void *p) {
    for (int i = 0; i < HOSTMEM_BLOCKS; i++)
        if (p && hostmem[i].p == p) hostmem[i].p = NULL, hostmem_counts[1]++;
    free(p);
}
static dl_status fk_copy(void *self, void *dst, const void *src, size_t n, dl_copy_kind kind, dl_error *err) {
    fake *f = self;
    for (int i = 0; kind == DL_COPY_HOST_TO_DEVICE && i < HOSTMEM_BLOCKS; i++)
        if (hostmem[i].p && (const char *)src >= hostmem[i].p && (const char *)src + n <= hostmem[i].p + hostmem[i].n)
            hostmem_counts[2]++;
    flush(f); /* copies are ordered after the queued ops, as on a stream */
    device_wait(f);
    memcpy(dst, src, n);
    if (kind != DL_COPY_DEVICE_TO_DEVICE) wait_us(f->copy_us);
    return DL_OK;
}
static int fk_supports(void *self, const dl_op *op, dl_error *why) {
    fake *f = self;
    if (op->kind < 0 || op->kind >= DL_OP_COUNT_V1_0 || !f->ok[op->kind])
        return dl_fail(why, DL_E_UNSUPPORTED, "not in DLFAKE ops"), 0;
    if (op->attrs->activation) return dl_fail(why, DL_E_UNSUPPORTED, "no fused activation"), 0;
    if (op->kind == DL_OP_CONCAT) {
        int64_t outer = 1;
        for (int i = 0; i < op->attrs->axis; i++) outer *= op->outputs[0].shape[i];
        return outer == 1 ? 1 : (dl_fail(why, DL_E_UNSUPPORTED, "concat of one run per input only"), 0);
    }
    for (int i = 0; i <= op->n_inputs; i++) {
        const dl_tensor *t = i < op->n_inputs ? &op->inputs[i] : &op->outputs[0];
        if ((!ANY_DTYPE && !dl_dtype_eq(t->dtype, FAKE_DTYPE)) || t->strides ||
            dl_tensor_numel(t) != dl_tensor_numel(&op->outputs[0]))
            return dl_fail(why, DL_E_UNSUPPORTED, "elementwise f32 row-major only"), 0;
    }
    return (op->kind == DL_OP_ADD) == (op->n_inputs == 2) ? 1 : (dl_fail(why, DL_E_UNSUPPORTED, "input count"), 0);
}
static dl_status fk_prepare(void *self, const dl_op *op, dl_kernel **k, size_t *ws, dl_error *err) {
    *k = malloc(sizeof **k);
    if (!*k) return dl_fail(err, DL_E_NOMEM, "no memory");
    (*k)->kind = op->kind;
    (*k)->n = dl_tensor_numel(&op->outputs[0]);
    (*k)->n_inputs = op->n_inputs;
    (*k)->ran = 0;
    *ws = 0;
    fake *f = self;
    if (f->store) {
        char key[64], bad[80];
        double v = -1;
        snprintf(key, sizeof key, "%s n=%lld", names[op->kind], (long long)(*k)->n);
        if (!f->host->cache_get(f->host->ctx, key, &v)) {
            store_counts[0]++;
            f->host->cache_put(f->host->ctx, key, (double)(*k)->n);
            snprintf(bad, sizeof bad, "%s negative", key);
            f->host->cache_put(f->host->ctx, bad, -1.0);
            snprintf(bad, sizeof bad, "%s nan", key);
            f->host->cache_put(f->host->ctx, bad, NAN);
        } else {
            store_counts[v == (double)(*k)->n ? 1 : 2]++;
            snprintf(bad, sizeof bad, "%s negative", key);
            if (f->host->cache_get(f->host->ctx, bad, &v)) store_counts[2]++;
            snprintf(bad, sizeof bad, "%s nan", key);
            if (f->host->cache_get(f->host->ctx, bad, &v)) store_counts[2]++;
        }
    }
    return DL_OK;
}
static dl_status fk_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    fake *f = self;
    runs++;
    if (f->fail_add && k->kind == DL_OP_ADD) return dl_fail(err, DL_E_RUNTIME, "fake add failure");
    if (!k->ran) wait_us(f->first_us);
    k->ran = 1;
    if (k->kind == DL_OP_CONCAT) { /* the inputs one after another, in order after what is queued */
        flush(f);
        char *y = out[0].data;
        for (int i = 0; i < k->n_inputs; i++) {
            size_t n = (size_t)dl_tensor_numel(&in[i]) * dl_dtype_size(in[i].dtype);
            memmove(y, in[i].data, n);
            y += n;
        }
        wait_us(f->op_us[k->kind]);
        return DL_OK;
    }
    if (f->over1_us > 0 && k->kind == DL_OP_ADD && out[0].data != in[1].data) wait_us(f->over1_us);
    pending p = {k, in[0].data, k->kind == DL_OP_ADD ? in[1].data : NULL, out[0].data, NULL, 0, 0};
    if (f->event_ms > 0) f->clock_ms = device_clock(f) + f->event_ms;
    if (!f->async) {
        compute(f, p.k, p.x, p.b, p.y);
        return DL_OK;
    }
    enqueue(f, p);
    return DL_OK;
}
static void fk_release(void *self, dl_kernel *k) { free(k); }
static int fk_in_place(void *self, const dl_op *op) { return op->kind != DL_OP_ADD; } /* reads x[i], then writes y[i] */
static int fk_kernel_in_place(void *self, const dl_kernel *k, const dl_op *op) { return k->kind == DL_OP_ADD ? 1 : -1; }
/* (1.6) events: the fake device clock when recorded, and the queue's place */
static dl_status fk_event_record(void *self, void **event, dl_error *err) {
    fake *f = self;
    if (!*event && (handovers[2]++, !(*event = malloc(sizeof(fk_event))))) return dl_fail(err, DL_E_NOMEM, "no memory");
    *(fk_event *)*event = (fk_event){device_clock(f), f, f->queued, run_upto};
    return DL_OK;
}
static dl_status fk_event_elapsed(void *self, void *start, void *end, double *ms, dl_error *err) {
    (void)self, (void)err;
    *ms = ((const fk_event *)end)->clock - ((const fk_event *)start)->clock;
    return DL_OK;
}
/* (1.14) this queue waits for another fake's record: its clock too */
static dl_status fk_event_wait(void *self, void *event, dl_error *err) {
    fake *f = self;
    const fk_event *ev = event;
    if (f->wait_fails) return dl_fail(err, DL_E_RUNTIME, "fake wait failure");
    handovers[0]++;
    if (f->event_ms > 0 && ev->clock > f->clock_ms) f->clock_ms = ev->clock;
    if (!f->async) ev->run_upto(ev->owner, ev->seq); /* runs as it is queued: the other's work first */
    else enqueue(f, (pending){NULL, NULL, NULL, NULL, ev, 0, ev->seq});
    return DL_OK;
}
static void fk_event_release(void *self, void *event) { free(event); }

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    fake *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    char key[96], up[32];
    snprintf(up, sizeof up, "%s", FAKE_NAME);
    for (char *p = up; *p; p++) *p = (char)toupper((unsigned char)*p);
    snprintf(key, sizeof key, "DLFAKE_%s_US", up);
    double def = env_num(key, 100);
    snprintf(key, sizeof key, "DLFAKE_%s_COPY_US", up);
    f->copy_us = env_num(key, 0);
    snprintf(key, sizeof key, "DLFAKE_%s_ASYNC", up);
    f->async = env_num(key, 0) != 0;
    snprintf(key, sizeof key, "DLFAKE_%s_OPS", up);
    const char *ops = getenv(key);
    for (int i = 0; i < DL_OP_COUNT_V1_0; i++) {
        snprintf(key, sizeof key, "DLFAKE_%s_%s_US", up, names[i]);
        f->op_us[i] = env_num(key, def);
        int elementwise = i == DL_OP_RELU || i == DL_OP_DROPOUT || i == DL_OP_FLATTEN || i == DL_OP_ADD;
        f->ok[i] = ops ? strstr(ops, names[i]) != NULL : elementwise;
        if (!elementwise && i != DL_OP_CONCAT) f->ok[i] = 0;
    }
    f->table = (dl_backend){.abi_version = FAKE_ABI,
                            .struct_size = sizeof(dl_backend),
                            .name = FAKE_NAME,
                            .description = "fake backend for placement tests",
                            .device = {FAKE_DEVICE_TYPE, 0},
                            .self = f,
                            .destroy = fk_destroy,
                            .alloc = fk_alloc,
                            .free = fk_free,
                            .copy = fk_copy,
                            .supports = fk_supports,
                            .prepare = fk_prepare,
                            .run = fk_run,
                            .release = fk_release,
                            .synchronize = fk_synchronize};
    snprintf(key, sizeof key, "DLFAKE_%s_IN_PLACE", up);
    if (env_num(key, 0) != 0) f->table.supports_in_place = fk_in_place;
    snprintf(key, sizeof key, "DLFAKE_%s_OVER_INPUT1_US", up);
    if ((f->over1_us = env_num(key, 0)) > 0) f->table.kernel_in_place = fk_kernel_in_place;
    snprintf(key, sizeof key, "DLFAKE_%s_SYNC_US", up);
    f->sync_us = env_num(key, 0);
    snprintf(key, sizeof key, "DLFAKE_%s_FIRST_US", up);
    f->first_us = env_num(key, 0);
    snprintf(key, sizeof key, "DLFAKE_%s_EVENT_US", up);
    if (getenv(key)) {
        f->event_ms = env_num(key, 0) * 1e-3;
        f->table.event_record = fk_event_record;
        f->table.event_elapsed = fk_event_elapsed;
        f->table.event_release = fk_event_release;
        snprintf(key, sizeof key, "DLFAKE_%s_WAIT", up);
        if (getenv(key)) f->table.queue_family = "fake queues", f->table.event_wait = fk_event_wait;
    }
    snprintf(key, sizeof key, "DLFAKE_%s_FAIL_ADD", up);
    f->fail_add = getenv(key) != NULL;
    snprintf(key, sizeof key, "DLFAKE_%s_FAIL_SYNC", up);
    f->fail_sync = getenv(key) != NULL;
    snprintf(key, sizeof key, "DLFAKE_%s_WAIT_FAILS", up);
    f->wait_fails = getenv(key) != NULL;
    newest = f;
    snprintf(key, sizeof key, "DLFAKE_%s_HOSTMEM", up);
    if (getenv(key)) f->table.host_alloc = fk_host_alloc, f->table.host_free = fk_host_free;
    snprintf(key, sizeof key, "DLFAKE_%s_STORE", up);
    f->host = host;
    f->store = getenv(key) && DL_HOST_HAS(host, cache_get) && DL_HOST_HAS(host, cache_put);
    double v;
    if (f->store && host->cache_get(host->ctx, "RELU n=210", &v)) store_counts[3]++;
    (void)err;
    return &f->table;
}
