/* placement.c — chooses the backend each op runs on, by measurement, counting the cost of moving
 * tensors between memory domains. Reads the session's shapes, weights and fusion; its product is
 * a dl_placement (relu fusion, which needs it, follows in fuse.c).
 *
 * 1. Candidates: `--backend` forces one; a layer's `backend:` pin is obeyed (or, if that backend
 *    cannot run it, falls back with a warning — an error with --no-fallback); otherwise every
 *    backend whose supports() accepts the op.
 * 2. Times: an op with more than one candidate is run on each (warm-up, then the median of five;
 *    of three where one run takes over 20 ms) on its real shapes, unless the timing cache has it;
 *    a weight-heavy op of a model whose weights exceed the last-level cache with the caches
 *    emptied before each run (cold_bytes); under --layout auto every op, in each of two plans
 *    (dl_session_place). Transfers between host memory and each device domain are measured the
 *    same way (latency and bandwidth) and cached.
 * 3. Choice: the assignment minimising total op time plus transfers (each tensor copied at most
 *    once per destination domain, the input from and the output back to host memory) plus, where
 *    two backends share a device (cuda and cudnn on one GPU), a hand-over each time the device
 *    passes from one to the other in run order (the session waits for the first one's queue:
 *    priced at its small transfer's latency, one wait and one launch). A device domain's copies
 *    are priced at its backend with the cheapest transfers, which the session makes their copier
 *    (dl_placement.copier). On a chain
 *    this is solved exactly by dynamic programming over (op, backend). On a DAG (residual blocks,
 *    concat) dlrun runs coordinate descent on the same cost from several starts (each backend
 *    wherever it can run, and the fastest per op) and keeps the best: not guaranteed optimal, but
 *    it never moves a lone op off a device when the copies cost more than the op saves, since
 *    every move is judged on the whole model's cost. docs/placement.md has the details.
 * A move is judged by the costs it changes (the node's op and the values it reads and writes),
 * found through the graph's reader lists, so placing a model of 10^5 layers stays near-linear. */
#define _GNU_SOURCE
#include <assert.h>
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "context.h"
#include "oprun.h"
#include "rng.h"
#include "session.h"
#include "tensor_convert.h"
#include "timing_cache.h"

#define MAX_CAND 16
#define TIMING_RUNS 5

/* The largest last-level cache believed (the eviction buffer is twice it): 2 GiB */
#define MAX_LLC ((unsigned long long)1 << 31)

/* The largest cache cpu0 has, from Linux's sysfs ("32768K"): 0 where it cannot be read. */
static size_t sysfs_llc(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char *end;
        unsigned long long v = fgets(buf, sizeof buf, f) ? strtoull(buf, &end, 10) : 0;
        fclose(f);
        if (!v) continue;
        v *= *end == 'K' ? 1024ull : *end == 'M' ? 1048576ull : 1ull;
        if (v > best && v <= MAX_LLC) best = (size_t)v;
    }
    return best;
}

/* The last-level cache in bytes: DLRUN_CACHE_BYTES where set (tests; a machine whose cache is
 * misreported or shared), else the largest of cpu0's caches in sysfs, else the C library's L3,
 * else 32 MiB. sysfs first: glibc reads an AMD EPYC's L3 from CPUID as the whole package's
 * (256 MiB on the 2-core VM whose CCX, and so its cores' L3, has 32). */
static size_t llc_bytes(void) {
    const char *env = getenv("DLRUN_CACHE_BYTES");
    char *end;
    unsigned long long v = env ? strtoull(env, &end, 10) : 0;
    if (env && *env && !*end && v >= 4096 && v <= MAX_LLC) return (size_t)v;
    size_t sys = sysfs_llc();
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return sys ? sys : l3 > 0 ? (size_t)l3 : (size_t)32 << 20;
}

static int on_host(const dl_backend *be) { return be->device.device_type == DL_DEVICE_CPU; }
int dl_same_domain(const dl_backend *a, const dl_backend *b) {
    if (on_host(a) || on_host(b)) return on_host(a) && on_host(b);
    return a->device.device_type == b->device.device_type && a->device.device_id == b->device.device_id;
}

/* ---- candidates ---- */

static void host_warn(const dl_session *s, const char *msg) { s->ctx->host.log(s->ctx->host.ctx, DL_LOG_WARN, msg); }

static dl_status candidates(const dl_session *s, dl_placement *pl, int i, dl_error *err) {
    const dl_node *n = &s->g->nodes[i];
    const dl_op_attrs *attrs = &s->fuse.attrs[i];
    dl_node_choice *c = &pl->choice[i];
    const char *op = dl_op_kind_name(n->kind);
    dl_error why;
    c->n = 0;
    if (s->opt.backend) {
        const dl_backend *be = dl_context_backend(s->ctx, s->opt.backend);
        if (!dl_session_accepts(s, be, i, attrs, &why))
            return dl_fail(err, DL_E_UNSUPPORTED, "backend '%s' cannot run %s '%s': %s", s->opt.backend, op, n->name,
                           why.msg);
        c->cand[c->n++] = (dl_placement_candidate){be->name, 0, 0, NULL};
        return DL_OK;
    }
    if (n->backend) {
        char where[256];
        dl_graph_where(s->g, n->loc, where, sizeof where);
        const dl_backend *be = dl_context_backend(s->ctx, n->backend);
        const char *reason = !be ? "it is not loaded" : NULL;
        if (be && !dl_session_accepts(s, be, i, attrs, &why)) reason = why.msg;
        if (!reason) {
            c->cand[c->n++] = (dl_placement_candidate){be->name, 0, 0, NULL};
            return DL_OK;
        }
        if (s->opt.no_fallback)
            return dl_fail(err, DL_E_UNSUPPORTED, "%s%s '%s' is pinned to backend '%s', but %.300s (--no-fallback)",
                           where, op, n->name, n->backend, reason);
        char msg[2048];
        snprintf(msg, sizeof msg, "%s%s '%s' is pinned to backend '%s', but %.300s; placing it elsewhere", where, op,
                 n->name, n->backend, reason);
        host_warn(s, msg);
    }
    if (s->opt.prefer_backend) { /* dlrun check: the checked backend wherever it can run */
        const dl_backend *be = dl_context_backend(s->ctx, s->opt.prefer_backend);
        if (be && dl_session_accepts(s, be, i, attrs, &why)) {
            c->cand[c->n++] = (dl_placement_candidate){be->name, 0, 0, NULL};
            return DL_OK;
        }
    }
    char reasons[DL_ERROR_LEN] = "";
    int device_loaded = 0, device_ok = 0;
    for (int p = 0; p < s->ctx->n_plugins && c->n < MAX_CAND; p++) {
        const dl_backend *be = s->ctx->plugins[p].be;
        if (!be) continue;
        device_loaded |= !on_host(be);
        if (dl_session_accepts(s, be, i, attrs, &why)) {
            c->cand[c->n++] = (dl_placement_candidate){be->name, 0, 0, NULL};
            device_ok |= !on_host(be);
        } else {
            size_t used = strlen(reasons);
            snprintf(reasons + used, sizeof reasons - used, "%s%s: %.300s", used ? "; " : "", be->name, why.msg);
        }
    }
    if (c->n == 0)
        return dl_fail(err, DL_E_UNSUPPORTED, "no backend can run %s '%s'%s%s", op, n->name,
                       reasons[0] ? ": " : " (no backend is loaded)", reasons);
    if (s->opt.no_fallback && device_loaded && !device_ok)
        return dl_fail(err, DL_E_UNSUPPORTED, "no device backend can run %s '%s' and --no-fallback forbids the CPU: %s",
                       op, n->name, reasons);
    return DL_OK;
}

/* ---- measuring ---- */

static void key_of(const dl_session *s, int i, const dl_backend *be, char *key, size_t len) {
    const dl_node *n = &s->g->nodes[i];
    const dl_op_attrs *a = &s->fuse.attrs[i];
    size_t u = (size_t)snprintf(
        key, len, "op=%s;k=%dx%d;s=%dx%d;p=%d,%d,%d,%d;d=%dx%d;g=%d;ceil=%d;cip=%d;axis=%d;eps=%g;act=%d;in=",
        dl_op_kind_name(n->kind), a->kernel[0], a->kernel[1], a->stride[0], a->stride[1], a->pad_begin[0],
        a->pad_begin[1], a->pad_end[0], a->pad_end[1], a->dilation[0], a->dilation[1], a->groups, a->ceil_mode,
        a->count_include_pad, a->axis, (double)a->epsilon, a->activation);
    for (int j = 0; j <= n->n_inputs && u < len; j++) {
        int v = j < n->n_inputs ? n->inputs[j] : n->output;
        char sh[128];
        dl_shape_str(s->shape[v].d, s->shape[v].ndim, sh, sizeof sh);
        u += (size_t)snprintf(key + u, len - u, "%s%s%s", j == n->n_inputs ? ";out=" : (j ? "," : ""), sh,
                              s->g->values[v].dtype.bits == 32 ? "f32" : "?");
    }
    if (u < len)
        u += (size_t)snprintf(key + u, len - u, ";alpha=%g;clip=%g,%g", (double)a->alpha, (double)a->clip_min,
                              (double)a->clip_max);
    if (u < len && n->kind == DL_OP_CONV3D)
        u += (size_t)snprintf(key + u, len - u, ";k3=%dx%dx%d;s3=%dx%dx%d;p3=%d,%d,%d,%d,%d,%d;d3=%dx%dx%d",
                              a->kernel3[0], a->kernel3[1], a->kernel3[2], a->stride3[0], a->stride3[1], a->stride3[2],
                              a->pad_begin3[0], a->pad_begin3[1], a->pad_begin3[2], a->pad_end3[0], a->pad_end3[1],
                              a->pad_end3[2], a->dilation3[0], a->dilation3[1], a->dilation3[2]);
    if (u < len)
        snprintf(key + u, len - u, ";prec=%d;backend=%s;device=%s;build=%s;abi=%u;dlrun=%s", s->opt.precision, be->name,
                 be->description ? be->description : "", dl_context_build(s->ctx, be), DL_ABI_VERSION,
                 DLRUN_VERSION_STRING);
}

/* x[0, n) uniform in [-1, 1): the first 2^18 values drawn, then repeated (a batch of 10000 is a
 * GB an input, which drawing one by one took a second). */
static void fill_random(float *x, int64_t n, uint64_t seed) {
    const int64_t period = (int64_t)1 << 18, drawn = n < period ? n : period;
    dl_rng r;
    dl_rng_seed(&r, seed);
    for (int64_t e = 0; e < drawn; e++) x[e] = dl_rng_uniform(&r, -1, 1);
    for (int64_t at = drawn; at < n; at += drawn)
        memcpy(x + at, x, (size_t)(n - at < drawn ? n - at : drawn) * sizeof *x);
}

/* Times node i on backend be with random activations and the real weights, in the storage format
 * it will run in (f: dl_session_accepts_from's choice), or as the graph gives it where f is NULL.
 * res >= 0: with that value as a fused residual (dl_fuse_residual_of), as the op will run: a
 * residual read in the epilogue is no free add (ResNet-50's 1x1 convs at batch 8: 0.2-0.5 ms
 * each, more on one backend than the other). A backend that does not take it is timed without. */
static double time_op(const dl_session *s, int i, const dl_backend *be, const dl_format *f, int res, dl_op_scratch *sc,
                      dl_error *err) {
    dl_tensor in[DL_MAX_OP_INPUTS], out;
    unsigned char isw[DL_MAX_OP_INPUTS];
    int ins[DL_MAX_OP_INPUTS];
    const int n_ins = dl_session_node_inputs(s, i, ins);
    dl_op op;
    dl_op_attrs fused = s->fuse.attrs[i];
    int64_t strides[4 * (DL_MAX_OP_INPUTS + 1)];
    dl_session_op_view(s, i, &s->fuse.attrs[i], &op, in, &out);
    dl_session_weight_flags(s, i, isw);
    if (res >= 0 && n_ins < DL_MAX_OP_INPUTS && op.n_inputs == n_ins) { /* the residual as the last input */
        fused.residual = 1, op.attrs = &fused;
        ins[n_ins] = res, isw[n_ins] = 0;
        in[n_ins] = out;
        op.n_inputs = n_ins + 1;
    } else res = -1;
    if (f) dl_op_apply_format(&op, in, &out, isw, *f, strides);
    dl_error why;
    if (res >= 0 && !dl_backend_accepts(be, &op, &why)) return time_op(s, i, be, f, -1, sc, err);
    double ms = -1;
    int ok = 1;
    for (int j = 0; j < DL_MAX_OP_INPUTS; j++) { /* sc's slot j: input j's activation, else nothing */
        if (j >= op.n_inputs || isw[j]) {
            dl_op_scratch_put(sc, j);
            if (j < op.n_inputs) in[j].data = (void *)dl_session_weight(s, ins[j]); /* maybe folded */
            continue;
        }
        const dl_value *v = &s->g->values[ins[j]];
        const int64_t cnt = dl_shape_numel(&s->shape[ins[j]]);
        const size_t esz = v->dtype.code == DL_DTYPE_INT ? dl_dtype_size(v->dtype) : sizeof(float);
        if (ok && !(in[j].data = dl_op_scratch_get(sc, j, (size_t)cnt * esz))) ok = 0;
        else if (ok && v->dtype.code == DL_DTYPE_INT) memset(in[j].data, 0, (size_t)cnt * esz); /* valid indices */
        else if (ok) fill_random(in[j].data, cnt, dl_rng_derive(7, v->name));
    }
    dl_op_result r;
    if (ok && dl_run_op(be, &op, isw, NULL, TIMING_RUNS, sc, &r, err) == DL_OK && r.supported && r.guards_ok == 1)
        ms = r.ms;
    return ms;
}

/* Transfer cost between host memory and a device backend's domain: latency + bytes / bandwidth. */
typedef struct xfer {
    const dl_backend *be;
    double lat_ms, ms_per_byte;
    int measured; /* 0: assumed (the backend could not allocate for it), never a domain's copier */
} xfer;

static double time_copy(const dl_backend *be, void *dev, void *host, size_t bytes) {
    double t[TIMING_RUNS];
    dl_error e;
    for (int k = -1; k < TIMING_RUNS; k++) { /* one warm-up, then the median of a round trip / 2 */
        double t0 = dl_now_ms();
        be->copy(be->self, dev, host, bytes, DL_COPY_HOST_TO_DEVICE, &e);
        be->copy(be->self, host, dev, bytes, DL_COPY_DEVICE_TO_HOST, &e);
        if (DL_BACKEND_HAS(be, synchronize)) be->synchronize(be->self, &e);
        if (k >= 0) t[k] = (dl_now_ms() - t0) / 2;
    }
    qsort(t, TIMING_RUNS, sizeof *t, dl_cmp_double);
    return t[TIMING_RUNS / 2];
}

static void measure_transfer(xfer *x, dl_tcache *cache) {
    const dl_backend *be = x->be;
    char klat[512], kbw[512];
    snprintf(klat, sizeof klat, "transfer-latency;backend=%s;device=%s;dlrun=%s", be->name,
             be->description ? be->description : "", DLRUN_VERSION_STRING);
    snprintf(kbw, sizeof kbw, "transfer-ms-per-MiB;backend=%s;device=%s;dlrun=%s", be->name,
             be->description ? be->description : "", DLRUN_VERSION_STRING);
    double lat, per_mib;
    if (dl_tcache_get(cache, klat, &lat) && dl_tcache_get(cache, kbw, &per_mib)) {
        x->lat_ms = lat, x->ms_per_byte = per_mib / 1048576.0, x->measured = 1;
        return;
    }
    const size_t small = 4096, big = 8u << 20;
    void *dev = NULL, *host = calloc(1, big);
    dl_error e;
    if (host && be->alloc(be->self, big, &dev, &e) == DL_OK) {
        double ts = time_copy(be, dev, host, small), tb = time_copy(be, dev, host, big);
        x->lat_ms = ts;
        x->ms_per_byte = tb > ts ? (tb - ts) / (double)(big - small) : 1e-9;
        x->measured = 1;
        be->free(be->self, dev);
    } else {
        x->lat_ms = 0.01, x->ms_per_byte = 1e-7; /* cannot measure: assume ~10 GB/s */
    }
    free(host);
    if (!x->measured) return; /* and keep no such guess */
    dl_tcache_put(cache, klat, x->lat_ms);
    dl_tcache_put(cache, kbw, x->ms_per_byte * 1048576.0);
}

/* The host's time to hand a device from a to z by an event (ABI 1.14): a's record and z's wait,
 * median of five after a warm-up, with both queues idle. What the device's queues lose to the
 * wait (a few microseconds on a GPU) is not seen here. Where the calls fail: the sync's price. */
static double time_event_handover(const dl_backend *a, const dl_backend *z, double sync_ms) {
    double t[TIMING_RUNS], ms = sync_ms;
    void *ev = NULL;
    dl_error e;
    int ok = 1;
    for (int k = -1; k < TIMING_RUNS && ok; k++) {
        double t0 = dl_now_ms();
        ok = a->event_record(a->self, &ev, &e) == DL_OK && ev && z->event_wait(z->self, ev, &e) == DL_OK;
        if (k >= 0) t[k] = dl_now_ms() - t0;
    }
    if (DL_BACKEND_HAS(z, synchronize)) z->synchronize(z->self, &e);
    if (DL_BACKEND_HAS(a, synchronize)) a->synchronize(a->self, &e);
    if (ev) a->event_release(a->self, ev);
    if (ok) qsort(t, TIMING_RUNS, sizeof *t, dl_cmp_double), ms = t[TIMING_RUNS / 2];
    return ms;
}

/* ---- choosing ---- */

typedef struct planner {
    const dl_session *s;
    int n; /* nodes */
    const dl_backend *be[MAX_CAND * 4];
    int nbe;
    double *t;                        /* t[node * nbe + b]: op time, < 0 if not a candidate */
    xfer x[MAX_CAND * 4];             /* per backend (device ones) */
    size_t esz[MAX_CAND * 4];         /* per backend: bytes per element it stores (4, or 2 at f16/bf16) */
    double cast_ms_per_elem;          /* converting between dtypes, measured in host memory */
    double sync_ms[MAX_CAND * 4];     /* per device backend: a hand-over from it by synchronizing (its small
                                         transfer's latency) */
    double event_ms[MAX_CAND * 4];    /* ... and by an event (ABI 1.14): the host's record and wait, measured */
    uint64_t waits_for[MAX_CAND * 4]; /* per device backend z: bit a, z takes the device from a by an event */
    int shared;                       /* some device domain has two candidate backends: hand-overs cost */
    uint64_t domain_of[MAX_CAND * 4]; /* per backend: the backends sharing its memory domain (bits) */
    /* lay[node * nbe + b]: the node's layout on backend b (LAY_* bits), or NULL where no backend
     * asks for channels-last; a value read in the other layout costs a transpose */
    unsigned char *lay;
    double transpose_ms_per_elem; /* converting f32 NCHW <-> NHWC, measured in host memory */
    /* Values read by more than MANY_READERS nodes: per value, a segment tree over its readers (in
     * node order) of the backends they run on (bit masks), kept by set_backend, so the first
     * reader in each domain is found without walking all readers (one input read by 10^5 layers). */
    int *tree;      /* per value: offset of its tree in mask, or -1 */
    int *leaves;    /* per value: its tree's leaf count (a power of two) */
    uint64_t *mask; /* the trees: node k's children are 2k and 2k + 1, leaves from `leaves` on */
    /* Where hand-overs cost (shared): a segment tree over the nodes whose leaf i is the bit of
     * node i's backend where it queues work on a device (else 0), kept by set_backend, so the
     * nearest such node before or after a node is found without walking the nodes between. */
    uint64_t *qmask;
    int qleaves;           /* its leaf count (a power of two), 0 without it */
    int time_all;          /* time every op, one candidate or many (the layouts compared: dl_session_place) */
    dl_op_scratch scratch; /* the timed ops' activations and outputs, reused from one op to the next */
} planner;

#define MANY_READERS 32

/* Time per element of an f32 NCHW -> NHWC conversion in host memory (as the host converts
 * between two ops in host memory that want different layouts). */
static double time_transpose(void) {
    enum { C = 16, HW = 64 * 64, N = C * HW };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    int64_t shape[4] = {1, C, 64, 64}, strides[4];
    dl_channels_last_strides(shape, strides);
    dl_tensor src = {x, {DL_DEVICE_CPU, 0}, 4, DL_F32, shape, NULL, 0}, dst = src;
    dst.data = y, dst.strides = strides;
    double best = 1e-6;
    for (int i = 0; x && i < N; i++) x[i] = (float)i * 0.001f;
    for (int k = 0; x && y && k < 3; k++) {
        double t0 = dl_now_ms();
        dl_convert_host(&dst, &src);
        double t = (dl_now_ms() - t0) / N;
        if (k == 0 || t < best) best = t;
    }
    free(x), free(y);
    return best;
}

static int be_index(planner *p, const dl_backend *be);

/* planner.lay: LAY_CL, the node's 4-D output is channels-last on that backend (for a follower:
 * if the ops before it ran there too); LAY_FOLLOWS, it takes its input in either layout
 * (preferred_layout AS_INPUT and supports() accepts channels-last), so it never pays a transpose
 * at its input. */
enum { LAY_CL = 1, LAY_FOLLOWS = 2, LAY_IN_ROWS = 4 };
/* LAY_IN_ROWS: it takes its input row-major whatever its output (a transpose to channels-last
 * that is a view of a row-major input, layout_view.c). */

/* Node i's layout on backend b where it is a layout view on the host (layout_view.c), or -1: a
 * transpose to rows follows its input (the view where that is channels-last, a transpose copy
 * where not); one to channels-last, in a plan that asks the host's convs so, reads row-major and
 * writes channels-last. */
static int view_layout(const dl_session *s, int i, const dl_backend *be) {
    const int kind = dl_layout_view_of(s, i);
    if (kind == DL_VIEW_NONE || !on_host(be)) return -1;
    if (kind == DL_VIEW_TO_ROWS) return LAY_FOLLOWS;
    return dl_layout_view_ask(s->layout_ask) ? LAY_CL | LAY_IN_ROWS : -1;
}

/* p->lay, or left NULL where no candidate asks for channels-last anywhere. */
static void layouts_plan(planner *p, const dl_placement *pl) {
    const dl_session *s = p->s;
    int any = 0;
    for (int i = 0; i < p->n && !any; i++) {
        dl_tensor in[DL_MAX_OP_INPUTS], out;
        dl_op op;
        dl_session_op_view(s, i, &s->fuse.attrs[i], &op, in, &out);
        for (int c = 0; c < pl->choice[i].n && !any; c++)
            any = dl_backend_layout_pref(dl_context_backend(s->ctx, pl->choice[i].cand[c].backend), &op,
                                         s->layout_ask) == DL_LAYOUT_CHANNELS_LAST;
    }
    unsigned char *lay = any ? calloc((size_t)p->n * (size_t)p->nbe + 1, 1) : NULL;
    for (int i = 0; lay && i < p->n; i++) {
        if (s->shape[s->g->nodes[i].output].ndim != 4) continue;
        const dl_node *nd = &s->g->nodes[i];
        int from = -1; /* the producer of its first 4-D activation input */
        for (int j = 0; j < nd->n_inputs && from < 0; j++) {
            const dl_value *v = &s->g->values[nd->inputs[j]];
            if (v->kind != DL_VALUE_WEIGHT && s->shape[nd->inputs[j]].ndim == 4)
                from = v->producer >= 0 ? v->producer : -2;
        }
        for (int c = 0; c < pl->choice[i].n; c++) {
            const dl_backend *be = dl_context_backend(s->ctx, pl->choice[i].cand[c].backend);
            int b = be_index(p, be), view = view_layout(s, i, be);
            if (view >= 0) {
                lay[i * p->nbe + b] = (unsigned char)view;
                continue;
            }
            dl_format f0, f1; /* its layout after a row-major input, and after a channels-last one */
            dl_error why;
            if (!dl_session_accepts_from(s, be, i, &s->fuse.attrs[i], 0, &f0, &why) ||
                !dl_session_accepts_from(s, be, i, &s->fuse.attrs[i], 1, &f1, &why))
                continue;
            int cl0 = f0.layout == DL_LAYOUT_CHANNELS_LAST, cl1 = f1.layout == DL_LAYOUT_CHANNELS_LAST;
            if (cl0 == cl1) lay[i * p->nbe + b] = (unsigned char)(cl0 ? LAY_CL : 0);
            else lay[i * p->nbe + b] = LAY_FOLLOWS | (from >= 0 && (lay[from * p->nbe + b] & LAY_CL) ? LAY_CL : 0);
        }
    }
    p->lay = lay;
    if (lay) p->transpose_ms_per_elem = time_transpose();
}

/* Time per element of an f32 -> bf16 conversion in host memory (the host converts where a backend
 * cannot; a device converting is faster, so this errs on the side of fewer casts). */
static double time_cast(void) {
    enum { N = 1 << 18 };
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y);
    double best = 1e-6;
    for (int i = 0; x && i < N; i++) x[i] = (float)i * 0.001f;
    for (int k = 0; x && y && k < 3; k++) {
        double t0 = dl_now_ms();
        dl_convert_elements(y, DL_BF16, x, DL_F32, N);
        double t = (dl_now_ms() - t0) / N;
        if (k == 0 || t < best) best = t;
    }
    free(x), free(y);
    return best;
}

static int be_index(planner *p, const dl_backend *be) {
    for (int b = 0; b < p->nbe; b++)
        if (p->be[b] == be) return b;
    p->be[p->nbe] = be;
    p->x[p->nbe] = (xfer){be, 0, 0, 0};
    p->esz[p->nbe] = 4;
    return p->nbe++;
}

/* Cost of converting n elements between backends a and b's storage dtypes (0 if the same). */
static double cast(const planner *p, int a, int b, double n) {
    return p->esz[a] == p->esz[b] ? 0 : n * p->cast_ms_per_elem;
}

/* Cost of moving the value of `bytes` f32 bytes from backend a's domain to backend b's (through
 * host memory), each side moving its own storage, plus a cast where their dtypes differ. */
static double move(const planner *p, int a, int b, size_t bytes) {
    double n = (double)bytes / 4, c = cast(p, a, b, n);
    if (dl_same_domain(p->be[a], p->be[b])) return c;
    if (!on_host(p->be[a])) c += p->x[a].lat_ms + p->x[a].ms_per_byte * n * (double)p->esz[a];
    if (!on_host(p->be[b])) c += p->x[b].lat_ms + p->x[b].ms_per_byte * n * (double)p->esz[b];
    return c;
}

/* Cost of bringing a value of `bytes` f32 bytes from host memory (f32) into backend d's domain,
 * or back. */
static double to_host(const planner *p, int d, size_t bytes) {
    double n = (double)bytes / 4, c = p->esz[d] == 4 ? 0 : n * p->cast_ms_per_elem;
    return c + (on_host(p->be[d]) ? 0 : p->x[d].lat_ms + p->x[d].ms_per_byte * n * (double)p->esz[d]);
}

/* Cost of handing a value of `bytes` f32 bytes, channels-last if have_cl, to node r on backend d:
 * a host transpose where r takes the other layout and does not follow its input (planner.lay). */
static double relayout(const planner *p, int have_cl, int r, int d, size_t bytes) {
    const int lr = p->lay ? p->lay[r * p->nbe + d] : 0;
    if (!p->lay || (lr & LAY_FOLLOWS) || (lr & LAY_IN_ROWS ? !have_cl : (lr & LAY_CL) == have_cl)) return 0;
    return (double)bytes / 4 * p->transpose_ms_per_elem;
}

/* 1 if node i's output is channels-last on backend b (planner.lay) */
static int out_cl(const planner *p, int i, int b) { return p->lay && (p->lay[i * p->nbe + b] & LAY_CL); }

/* 1 if node i on backend b is a step of the device's that another backend there would wait for:
 * a device op not folded into another. A view run in place (time 0) counts: the session hands
 * the device over before it all the same. */
static int queues(const planner *p, int i, int b) { return !on_host(p->be[b]) && p->s->fuse.into[i] < 0; }

/* Cost of backend z working on a device after backend a queued the last work there: z's queue
 * waits for a's event where it can, else the session waits for a's queue (handover.c) */
static double handover(const planner *p, int a, int z) {
    return a == z ? 0 : p->waits_for[z] >> a & 1 ? p->event_ms[a] : p->sync_ms[a];
}

/* The nearest node before (dir -1) or after (dir 1) node i that queues work on a backend in `dom`
 * (planner.qmask), or -1: up the tree until a sibling on that side holds such a node, then down
 * to the one nearest i. */
static int queued_near(const planner *p, int i, uint64_t dom, int dir) {
    const uint64_t *m = p->qmask;
    int k = p->qleaves + i;
    while (k > 1 && !((dir < 0 ? (k & 1) : !(k & 1)) && m[k + dir] & dom)) k /= 2;
    if (k <= 1) return -1;
    k += dir;
    while (k < p->qleaves)
        k = dir < 0 ? (m[2 * k + 1] & dom ? 2 * k + 1 : 2 * k) : (m[2 * k] & dom ? 2 * k : 2 * k + 1);
    return k - p->qleaves;
}

static void qtree_set(const planner *p, const int *as, int i) {
    int k = p->qleaves + i;
    p->qmask[k] = queues(p, i, as[i]) ? 1ull << as[i] : 0;
    for (k /= 2; k >= 1; k /= 2) p->qmask[k] = p->qmask[2 * k] | p->qmask[2 * k + 1];
}

static void qtree_build(planner *p, const int *as) {
    free(p->qmask);
    p->qmask = NULL, p->qleaves = 0;
    if (!p->shared) return;
    int leaves = 1;
    while (leaves < p->n) leaves *= 2;
    if (!(p->qmask = calloc(2 * (size_t)leaves, sizeof *p->qmask))) return; /* handover_around walks */
    p->qleaves = leaves;
    for (int i = 0; i < p->n; i++) p->qmask[leaves + i] = queues(p, i, as[i]) ? 1ull << as[i] : 0;
    for (int k = leaves - 1; k >= 1; k--) p->qmask[k] = p->qmask[2 * k] | p->qmask[2 * k + 1];
}

/* queued_near's answer found by walking the nodes (as its backend), for when the tree could not
 * be allocated, and to check the tree in debug builds */
static int walk_near(const planner *p, const int *as, int i, uint64_t dom, int dir) {
    for (int j = i + dir; j >= 0 && j < p->n; j += dir)
        if (dom >> as[j] & 1 && queues(p, j, as[j])) return as[j];
    return -1;
}

/* The backend of the nearest node before (dir -1) or after (dir 1) node i that queues work on a
 * backend in `dom`, or -1. */
static int backend_near(const planner *p, const int *as, int i, uint64_t dom, int dir) {
    if (!p->qleaves) return walk_near(p, as, i, dom, dir);
    const int j = queued_near(p, i, dom, dir), b = j >= 0 ? as[j] : -1;
    assert(b == walk_near(p, as, i, dom, dir)); /* debug builds (the sanitizer suite) check the tree */
    return b;
}

/* The part of the hand-overs node i's backend changes: with a and z the backends of the nearest
 * nodes before and after it that queue work on its device, a->i and i->z in place of a->z. */
static double handover_around(const planner *p, const int *as, int i) {
    if (!p->shared || !queues(p, i, as[i])) return 0;
    const uint64_t dom = p->domain_of[as[i]];
    const int a = backend_near(p, as, i, dom, -1), z = backend_near(p, as, i, dom, 1);
    double c = 0;
    if (a >= 0) c += handover(p, a, as[i]);
    if (z >= 0) c += handover(p, as[i], z);
    if (a >= 0 && z >= 0) c -= handover(p, a, z);
    return c;
}

/* ---- readers by backend (planner.tree) ---- */

static void trees_free(planner *p) {
    free(p->tree), free(p->leaves), free(p->mask);
    p->tree = p->leaves = NULL, p->mask = NULL;
}

/* Builds the trees of the values with many readers for assignment as; without memory, none (the
 * costs then walk every reader: slower, the same). */
static void trees_build(planner *p, const int *as) {
    const dl_graph *g = p->s->g;
    trees_free(p);
    size_t total = 0;
    for (int v = 0; v < g->n_values; v++) {
        int k = dl_graph_consumers(g, v), size = 1;
        while (k > MANY_READERS && size < k) size *= 2;
        if (k > MANY_READERS) total += 2 * (size_t)size;
    }
    if (!total || total > INT_MAX) return;
    p->tree = malloc((size_t)g->n_values * sizeof *p->tree);
    p->leaves = malloc((size_t)g->n_values * sizeof *p->leaves);
    p->mask = calloc(total, sizeof *p->mask);
    if (!p->tree || !p->leaves || !p->mask) {
        trees_free(p);
        return;
    }
    int at = 0;
    for (int v = 0; v < g->n_values; v++) {
        int k = dl_graph_consumers(g, v), size = 1;
        p->tree[v] = -1;
        if (k <= MANY_READERS) continue;
        while (size < k) size *= 2;
        uint64_t *m = p->mask + at;
        for (int j = 0; j < k; j++) m[size + j] = 1ull << as[g->reader_node[g->reader_start[v] + j]];
        for (int j = size - 1; j >= 1; j--) m[j] = m[2 * j] | m[2 * j + 1];
        p->tree[v] = at, p->leaves[v] = size;
        at += 2 * size;
    }
}

/* as[i] := b, and node i's entries in the trees of the values it reads. */
static void set_backend(const planner *p, int *as, int i, int b) {
    as[i] = b;
    if (p->qleaves) qtree_set(p, as, i);
    if (!p->tree) return;
    const dl_graph *g = p->s->g;
    const dl_node *n = &g->nodes[i];
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j];
        if (p->tree[v] < 0) continue;
        const int *r = g->reader_node + g->reader_start[v];
        int lo = 0, hi = g->reader_start[v + 1] - g->reader_start[v];
        while (lo < hi) { /* the first of node i's entries: readers are in node order */
            int mid = lo + (hi - lo) / 2;
            if (r[mid] < i) lo = mid + 1;
            else hi = mid;
        }
        uint64_t *m = p->mask + p->tree[v];
        for (int pos = lo; pos < g->reader_start[v + 1] - g->reader_start[v] && r[pos] == i; pos++)
            for (int k = p->leaves[v] + pos; k >= 1; k /= 2)
                m[k] = k >= p->leaves[v] ? 1ull << b : m[2 * k] | m[2 * k + 1];
    }
}

/* Position (in v's reader list) of the first reader running on a backend in `set`, or -1. */
static int first_reader(const planner *p, int v, uint64_t set) {
    const uint64_t *m = p->mask + p->tree[v];
    if (!(m[1] & set)) return -1;
    int k = 1;
    while (k < p->leaves[v]) k = m[2 * k] & set ? 2 * k : 2 * k + 1;
    return k - p->leaves[v];
}

/* ---- costs ---- */

/* Adds to *c the cost of activation (or input) v under an assignment (backend index per node):
 * copied once into each other domain that reads it (by its first reader there, in node order),
 * and brought back to host memory if it is a model output. Weights cost nothing here (copied
 * once at session creation). */
static void add_value_cost(const planner *p, const int *as, int v, double *c) {
    const dl_graph *g = p->s->g;
    const dl_value *val = &g->values[v];
    if (val->kind == DL_VALUE_WEIGHT) return;
    int src = val->producer >= 0 ? as[val->producer] : -1; /* -1: host (a model input) */
    size_t bytes = dl_session_value_bytes(p->s, v);
    int paid[MAX_CAND * 4] = {0}, host_has = src < 0 || on_host(p->be[src]);
    int first[MAX_CAND * 4], n_first = 0; /* reader-list positions that may pay, in order */
    if (p->tree && p->tree[v] >= 0) {     /* many readers: the first in each domain */
        uint64_t seen = 0;
        for (int b = 0; b < p->nbe; b++) {
            if (seen >> b & 1) continue;
            seen |= p->domain_of[b];
            int pos = first_reader(p, v, p->domain_of[b]);
            if (pos < 0) continue;
            int k = n_first++;
            for (; k > 0 && first[k - 1] > pos; k--) first[k] = first[k - 1];
            first[k] = g->reader_start[v] + pos;
        }
    }
    int all = !(p->tree && p->tree[v] >= 0), end = all ? g->reader_start[v + 1] : n_first;
    int have = src >= 0 && out_cl(p, val->producer, src), transposed = 0;
    for (int q = all ? g->reader_start[v] : 0; q < end; q++) { /* the nodes reading v */
        int r = g->reader_node[all ? q : first[q]], d = as[r], dup = 0;
        double t = transposed || p->s->shape[v].ndim != 4 ? 0 : relayout(p, have, r, d, bytes);
        *c += t, transposed |= t > 0; /* once: later readers share it */
        for (int k = 0; k < p->nbe; k++) dup |= paid[k] && dl_same_domain(p->be[k], p->be[d]);
        if (dup || (src >= 0 ? dl_same_domain(p->be[src], p->be[d]) : on_host(p->be[d]))) continue;
        paid[d] = 1;
        *c += src < 0 ? to_host(p, d, bytes) : move(p, src, d, bytes);
        if (on_host(p->be[d])) host_has = 1;
    }
    if (dl_graph_is_output(g, v) && !host_has) *c += to_host(p, src, bytes);
    if (dl_graph_is_output(g, v) && have) *c += (double)bytes / 4 * p->transpose_ms_per_elem; /* back to NCHW */
}

/* Total cost of an assignment: op times plus every value's copies (add_value_cost). */
static double total_cost(const planner *p, const int *as) {
    double c = 0;
    int last[MAX_CAND * 4]; /* per device domain (its lowest backend index): the backend that queued last */
    for (int b = 0; b < p->nbe; b++) last[b] = -1;
    for (int i = 0; i < p->n; i++) {
        c += p->t[i * p->nbe + as[i]];
        if (!p->shared || !queues(p, i, as[i])) continue;
        const int d = __builtin_ctzll(p->domain_of[as[i]]);
        if (last[d] >= 0) c += handover(p, last[d], as[i]);
        last[d] = as[i];
    }
    for (int v = 0; v < p->s->g->n_values; v++) add_value_cost(p, as, v, &c);
    return c;
}

/* The part of total_cost that node i's backend changes: its op time and the copies of the values
 * it reads or writes (each value once). */
static double node_cost(const planner *p, const int *as, int i) {
    const dl_node *n = &p->s->g->nodes[i];
    double c = p->t[i * p->nbe + as[i]] + handover_around(p, as, i);
    for (int j = 0; j < n->n_inputs; j++) {
        int seen = 0;
        for (int k = 0; k < j; k++) seen |= n->inputs[k] == n->inputs[j];
        if (!seen) add_value_cost(p, as, n->inputs[j], &c);
    }
    add_value_cost(p, as, n->output, &c);
    return c;
}

static int is_chain(const dl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        int acts = 0;
        for (int j = 0; j < g->nodes[i].n_inputs; j++) {
            const dl_value *v = &g->values[g->nodes[i].inputs[j]];
            if (v->kind == DL_VALUE_WEIGHT) continue;
            acts++;
            int want = i == 0 ? -1 : i - 1;
            if (v->producer != want) return 0;
        }
        if (acts != 1 || dl_graph_consumers(g, g->nodes[i].output) > 1) return 0;
    }
    return g->n_outputs == 1 && g->outputs[0] == g->nodes[g->n_nodes - 1].output && g->n_inputs == 1;
}

/* Exact DP on a chain: best[i][b] = t[i][b] + min over b' of best[i-1][b'] + move(b', b). */
static void choose_chain(planner *p, int *as) {
    const dl_graph *g = p->s->g;
    int n = p->n, nb = p->nbe;
    double *best = malloc((size_t)n * nb * sizeof *best);
    int *from = malloc((size_t)n * nb * sizeof *from);
    /* lastq[i][b]: on the best path to (i, b), the backend of the last node that queued device work, or -1 */
    int *lastq = malloc((size_t)n * nb * sizeof *lastq);
    if (!best || !from || !lastq) {
        free(best), free(from), free(lastq);
        return;
    }
    for (int i = 0; i < n; i++) {
        size_t in_bytes = dl_session_value_bytes(p->s, g->nodes[i].inputs[0]);
        for (int b = 0; b < nb; b++) {
            best[i * nb + b] = DBL_MAX;
            from[i * nb + b] = -1;
            double t = p->t[i * nb + b];
            if (t < 0) continue;
            lastq[i * nb + b] = queues(p, i, b) ? b : -1;
            if (i == 0) {
                best[b] = t + to_host(p, b, in_bytes);
                if (p->s->shape[g->nodes[0].inputs[0]].ndim == 4) best[b] += relayout(p, 0, 0, b, in_bytes);
                continue;
            }
            for (int a = 0; a < nb; a++) {
                if (best[(i - 1) * nb + a] == DBL_MAX) continue;
                double c = best[(i - 1) * nb + a] + move(p, a, b, in_bytes) + t;
                /* a hand-over from the last node on the path that queued device work (where that
                 * was on another device, one on this device before it is not seen: total_cost
                 * counts it) */
                const int qa = lastq[(i - 1) * nb + a];
                if (p->shared && qa >= 0 && queues(p, i, b) && dl_same_domain(p->be[qa], p->be[b]))
                    c += handover(p, qa, b);
                if (p->s->shape[g->nodes[i].inputs[0]].ndim == 4) c += relayout(p, out_cl(p, i - 1, a), i, b, in_bytes);
                if (c < best[i * nb + b]) best[i * nb + b] = c, from[i * nb + b] = a;
            }
            if (from[i * nb + b] >= 0 && !queues(p, i, b)) lastq[i * nb + b] = lastq[(i - 1) * nb + from[i * nb + b]];
        }
    }
    size_t out_bytes = dl_session_value_bytes(p->s, g->nodes[n - 1].output);
    int bb = -1;
    double bc = DBL_MAX;
    for (int b = 0; b < nb; b++) {
        if (best[(n - 1) * nb + b] == DBL_MAX) continue;
        double c = best[(n - 1) * nb + b] + to_host(p, b, out_bytes);
        if (out_cl(p, n - 1, b)) c += (double)out_bytes / 4 * p->transpose_ms_per_elem;
        if (c < bc) bc = c, bb = b;
    }
    for (int i = n - 1; i >= 0 && bb >= 0; i--) {
        as[i] = bb;
        bb = from[i * nb + bb];
    }
    free(best), free(from), free(lastq);
}

/* Coordinate descent on total_cost from one start; returns the cost reached. A move of node i is
 * judged by the change in node_cost(i) alone, which is the change in the total. */
static double descend(planner *p, int *as) {
    if (p->nbe > 1) trees_build(p, as);
    if (p->nbe > 1) qtree_build(p, as);
    for (int improved = 1, rounds = 0; improved && rounds < 50; rounds++) {
        improved = 0;
        for (int i = 0; i < p->n; i++) {
            int keep = as[i];
            double here = p->nbe > 1 ? node_cost(p, as, i) : 0;
            for (int b = 0; b < p->nbe; b++) {
                if (b == keep || p->t[i * p->nbe + b] < 0) continue;
                set_backend(p, as, i, b);
                double c = node_cost(p, as, i);
                if (c - here < -1e-12) here = c, keep = b, improved = 1;
            }
            if (as[i] != keep) set_backend(p, as, i, keep);
        }
    }
    double c = total_cost(p, as); /* summed afresh: starts are compared on the same arithmetic */
    trees_free(p);
    free(p->qmask);
    p->qmask = NULL, p->qleaves = 0;
    return c;
}

static void choose_dag(planner *p, int *as) {
    int *tryas = malloc((size_t)p->n * sizeof *tryas);
    double best = DBL_MAX;
    for (int start = -1; tryas && start < p->nbe; start++) {
        for (int i = 0; i < p->n; i++) { /* start -1: fastest per op; else backend `start` wherever it can */
            int pick = -1;
            for (int b = 0; b < p->nbe; b++) {
                double t = p->t[i * p->nbe + b];
                if (t < 0) continue;
                if (pick < 0 || (start < 0 ? t < p->t[i * p->nbe + pick] : b == start)) pick = b;
            }
            tryas[i] = pick;
        }
        double c = descend(p, tryas);
        if (c < best) {
            best = c;
            memcpy(as, tryas, (size_t)p->n * sizeof *as);
        }
    }
    free(tryas);
}

/* ---- the whole step ---- */

/* Timing node i allocates its activations and output in host memory: refused, like the plan that
 * would need them at once, when they alone pass the budget (--max-memory or the free memory). */
static dl_status check_timing_fits(const dl_session *s, int i, dl_error *err) {
    const dl_node *n = &s->g->nodes[i];
    size_t bytes = dl_session_value_bytes(s, n->output);
    for (int j = 0; j < n->n_inputs; j++)
        if (s->g->values[n->inputs[j]].kind != DL_VALUE_WEIGHT) bytes += dl_session_value_bytes(s, n->inputs[j]);
    const char *what;
    size_t avail = dl_session_budget(s, 0, &what), need = bytes + dl_session_host_held(s);
    if (avail == 0 || need <= avail) return DL_OK;
    char nb[32], ab[32];
    dl_format_bytes((double)need, nb, sizeof nb);
    dl_format_bytes((double)avail, ab, sizeof ab);
    return dl_fail(err, DL_E_NOMEM,
                   "%s '%s' needs %s of host memory with its inputs, output and the weights, but %s allows %s; use a "
                   "smaller --batch",
                   dl_op_kind_name(n->kind), n->name, nb, what, ab);
}

/* Before any op is timed: refuses a run whose host memory plainly passes the budget. A node whose
 * candidates all run in host memory has its output and each input there at its step, beside the
 * weights and the caller's inputs, so the largest such tensor plus what the host holds is a floor
 * under the memory plan's need. Without it, a batch too big was timed op by op before the plan
 * refused it (VGG-16 at batch 64 with --backend cpu: 31 s, minutes under ASan). */
static dl_status check_host_floor(const dl_session *s, const dl_placement *pl, dl_error *err) {
    const char *what;
    const size_t avail = dl_session_budget(s, 0, &what), held = dl_session_host_held(s);
    size_t biggest = 0;
    int at = -1, is_output = 0;
    for (int i = 0; avail && i < s->g->n_nodes; i++) {
        const dl_node_choice *c = &pl->choice[i];
        int host = c->n > 0;
        for (int k = 0; k < c->n; k++) host &= on_host(dl_context_backend(s->ctx, c->cand[k].backend));
        const dl_node *n = &s->g->nodes[i];
        for (int j = -1; host && j < n->n_inputs; j++) {
            const int v = j < 0 ? n->output : n->inputs[j];
            if (j >= 0 && s->g->values[v].kind == DL_VALUE_WEIGHT) continue;
            const size_t bytes = dl_session_value_bytes(s, v);
            if (bytes > biggest) biggest = bytes, at = i, is_output = j < 0;
        }
    }
    if (at < 0 || (held <= avail && biggest <= avail - held)) return DL_OK;
    char tb[32], parts[600];
    dl_format_bytes((double)biggest, tb, sizeof tb);
    const dl_node *n = &s->g->nodes[at];
    snprintf(parts, sizeof parts, "the weights%s, and %s for %s of %s '%s'",
             held > dl_session_host_weights(s) ? ", the inputs" : "", tb, is_output ? "the output" : "an input",
             dl_op_kind_name(n->kind), n->name);
    const size_t need = held + biggest < held ? SIZE_MAX : held + biggest;
    return dl_session_refuse(s, 0, "at least ", need, avail, what, parts, "use a smaller --batch", err);
}

/* 1 when node i only copies its input (reshape, flatten, dropout) and be runs it in place: the
 * memory plan then gives its output the input's memory, so it costs nothing there, whatever a
 * copy measured alone took (a backend that copies, onednn's reorder, pays the copy). */
static int free_view(const dl_session *s, int i, const dl_backend *be) {
    const dl_op_kind kind = s->g->nodes[i].kind;
    if (kind != DL_OP_RESHAPE && kind != DL_OP_FLATTEN && kind != DL_OP_DROPOUT) return 0;
    if (!DL_BACKEND_HAS(be, supports_in_place)) return 0;
    dl_tensor in[DL_MAX_OP_INPUTS], out;
    dl_op op;
    dl_session_op_view(s, i, &s->fuse.attrs[i], &op, in, &out);
    return be->supports_in_place(be->self, &op);
}

/* 1 if node i on backend b is a layout view that costs nothing in this plan (layout_view.c): a
 * transpose to channels-last where the plan asks for it, or to rows of an input some host
 * backend writes channels-last. storage.c stores it so where its input is so when the plan is
 * built. */
static int view_free(const planner *p, int i, int b) {
    const dl_session *s = p->s;
    const int view = p->lay ? view_layout(s, i, p->be[b]) : -1;
    if (view < 0 || view & LAY_CL) return view >= 0;
    const int from = s->g->values[s->g->nodes[i].inputs[0]].producer;
    for (int a = 0; a < p->nbe; a++)
        if (on_host(p->be[a]) && p->lay[from * p->nbe + a] & LAY_CL) return 1;
    return 0;
}

/* Bytes to read to empty the caches before each timed run of node i on a host backend (0: timed
 * warm). In a model whose weights exceed the last-level cache, every op finds its weights out of
 * cache, each run: the others' weights passed through since. Timed alone and warm, an op whose
 * weights are large looks faster than it will run, and more so on one backend than another
 * (ResNet-50's 512-channel 3x3 convs on 7x7: oneDNN's 1.44 ms alone, 2.2 in the model, where the
 * cpu plugin's 1.64 and 1.82). So ops with at least LLC/32 bytes of weights are timed cold there:
 * twice the cache's size read first, then the op's activations touched (warm, as the previous
 * op left them). */
static size_t cold_bytes(const dl_session *s, const dl_placement *pl, int i) {
    int ins[DL_MAX_OP_INPUTS];
    unsigned char isw[DL_MAX_OP_INPUTS];
    const int n_in = dl_session_node_inputs(s, i, ins);
    size_t op_w = 0;
    dl_session_weight_flags(s, i, isw);
    for (int j = 0; j < n_in; j++)
        if (isw[j]) op_w += dl_session_value_bytes(s, ins[j]);
    return pl->weights > pl->llc && op_w >= pl->llc / 32 ? 2 * pl->llc : 0;
}

/* Times (or finds in the cache) every candidate of every node with more than one, or of every
 * node (p->time_all): p->t. */
static dl_status measure_ops(const dl_session *s, dl_placement *pl, planner *p, dl_tcache *cache, dl_error *err) {
    const dl_graph *g = s->g;
    int timing_index = 0, to_time = 0;
    dl_status st;
    for (int i = 0; i < p->n; i++) to_time += pl->choice[i].n > 1 || p->time_all ? pl->choice[i].n : 0;
    for (int i = 0; i < p->n; i++) {
        dl_node_choice *c = &pl->choice[i];
        /* one candidate is timed only to cost the plan (time_all) */
        const int timed = c->n > 1 || p->time_all;
        const char *layer = g->nodes[i].name, *op = dl_op_kind_name(g->nodes[i].kind);
        const size_t cold = timed ? cold_bytes(s, pl, i) : 0; /* on a host backend */
        int any_cold = 0;
        for (int k = 0; k < c->n; k++) {
            const dl_backend *be = dl_context_backend(s->ctx, c->cand[k].backend);
            int b = be_index(p, be);
            double ms = 0;
            char key[2048];
            if (view_free(p, i, b)) { /* nothing to time: it will not run */
                c->cand[k].ms = p->t[i * p->nbe + b] = 0;
                continue;
            }
            /* a follower is timed channels-last where the ops before it on be would leave it so */
            int in_cl = p->lay && p->lay[i * p->nbe + b] == (LAY_FOLLOWS | LAY_CL);
            /* timed in the storage it will run in; channels-last (its input so, or the host asking
             * it for a conv) has a key of its own */
            dl_format f;
            dl_error why;
            const int accepted = timed && dl_session_accepts_from(s, be, i, &s->fuse.attrs[i], in_cl, &f, &why);
            if (timed) key_of(s, i, be, key, sizeof key);
            if (accepted && f.layout == DL_LAYOUT_CHANNELS_LAST)
                strncat(key, ";layout=nhwc", sizeof key - strlen(key) - 1);
            const int res = timed ? dl_fuse_residual_of(s, i) : -1; /* timed with it: a key of its own */
            if (res >= 0) strncat(key, ";residual", sizeof key - strlen(key) - 1);
            p->scratch.cold = on_host(be) ? cold : 0; /* timed cold: a key of its own */
            if (p->scratch.cold) strncat(key, ";cold", sizeof key - strlen(key) - 1);
            any_cold |= p->scratch.cold > 0;
            if (timed && dl_tcache_get(cache, key, &ms)) {
                c->cand[k].cached = 1;
                pl->cached++;
            } else if (timed) {
                if ((st = check_timing_fits(s, i, c->n > 1 ? err : NULL)) != DL_OK) {
                    if (c->n > 1) return st;
                    /* only costed, and too big to time alone: 0 in both plans (the fit does not
                     * depend on the layout); the session's own memory check speaks */
                    c->cand[k].ms = p->t[i * p->nbe + b] = 0;
                    continue;
                }
                if (s->opt.progress) s->opt.progress(s->opt.progress_user, ++timing_index, to_time, layer, be->name);
                int span = dl_trace_begin(s->trace, layer, "placement timing");
                ms = time_op(s, i, be, accepted ? &f : NULL, res, &p->scratch, err);
                dl_trace_end(s->trace, span);
                dl_trace_arg_str(s->trace, span, "layer", layer);
                dl_trace_arg_str(s->trace, span, "op", op);
                dl_trace_arg_str(s->trace, span, "backend", be->name);
                dl_trace_arg_num(s->trace, span, "measured_ms", ms);
                if (p->scratch.cold) dl_trace_arg_num(s->trace, span, "cold_weights", 1);
                if (ms < 0 && c->n == 1) { /* only costed: this plan cannot be trusted, its run will say */
                    c->cand[k].ms = p->t[i * p->nbe + b] = 0;
                    pl->failed_timings++;
                    continue;
                }
                if (ms < 0) { /* it accepted the op but could not run it: never choose it */
                    char msg[600];
                    snprintf(msg, sizeof msg, "backend '%s' accepted %s '%s' but failed to run it; not using it there",
                             be->name, op, layer);
                    host_warn(s, msg);
                    c->cand[k].ms = -1;
                    continue;
                }
                dl_tcache_put(cache, key, ms);
                pl->timed++;
            }
            c->cand[k].ms = ms;
            p->t[i * p->nbe + b] = timed && free_view(s, i, be) ? 0 : ms;
        }
        pl->cold += any_cold;
        int any = 0;
        for (int b = 0; b < p->nbe; b++) any |= p->t[i * p->nbe + b] >= 0;
        if (!any) return dl_fail(err, DL_E_RUNTIME, "no backend could run %s '%s'", op, layer);
    }
    if (s->opt.progress && timing_index && timing_index < to_time) /* cached ones were counted: done */
        s->opt.progress(s->opt.progress_user, to_time, to_time, "", "");
    return DL_OK;
}

/* With the transfers measured: each device backend's hand-over cost (its own small transfer's
 * latency), whether some device has two backends (p->shared), and each device domain's copier,
 * its backend with the cheapest transfers (1 MiB priced): the session makes it the one that
 * allocates the domain's memory and runs its copies (assign_domains), so every backend there is
 * priced with its transfers (the cuda and cudnn plugins copy through the same code, so which of
 * them was timed faster is noise that must not steer an op). */
static void copiers(planner *p, dl_placement *pl) {
    int copier[MAX_CAND * 4];
    for (int b = 0; b < p->nbe; b++) {
        if (on_host(p->be[b])) continue;
        p->sync_ms[b] = p->x[b].lat_ms;
        p->shared |= __builtin_popcountll(p->domain_of[b]) > 1;
        copier[b] = -1; /* of the measured ones (ties: the first loaded), else the first */
        for (int c = 0; c < p->nbe; c++) {
            const xfer *xc = &p->x[c], *xb = copier[b] >= 0 ? &p->x[copier[b]] : NULL;
            if (p->domain_of[b] >> c & 1 && xc->measured &&
                (!xb || xc->lat_ms + xc->ms_per_byte * 1048576.0 < xb->lat_ms + xb->ms_per_byte * 1048576.0))
                copier[b] = c;
        }
        if (copier[b] < 0) copier[b] = __builtin_ctzll(p->domain_of[b]);
    }
    for (int a = 0; a < p->nbe; a++) /* after the copies' latencies: a sync's price is the fallback */
        for (int z = 0; z < p->nbe && !on_host(p->be[a]); z++) {
            if (z == a || !(p->domain_of[a] >> z & 1) || !dl_handover_by_event(p->be[a], p->be[z])) continue;
            double ms = time_event_handover(p->be[a], p->be[z], p->sync_ms[a]);
            if (ms >= p->sync_ms[a]) continue; /* no cheaper: priced (and made, the session's rule aside) as a sync */
            p->waits_for[z] |= 1ull << a;
            if (ms > p->event_ms[a]) p->event_ms[a] = ms;
        }
    for (int b = 0; b < p->nbe; b++) {
        if (on_host(p->be[b])) continue;
        const xfer *xc = &p->x[copier[b]];
        if (copier[b] == b && xc->measured && pl->n_copiers < DL_MAX_DOMAINS) pl->copier[pl->n_copiers++] = p->be[b];
        p->x[b] = (xfer){p->be[b], xc->lat_ms, xc->ms_per_byte, xc->measured};
    }
}

/* One plan under s->layout_ask into *pl; *cache: the timing cache, opened here if NULL and timing
 * is needed (the caller saves and frees it, so that two plans share it). */
static dl_status place(const dl_session *s, dl_placement *pl, int time_all, dl_tcache **cachep, dl_error *err) {
    const dl_graph *g = s->g;
    int n = g->n_nodes, need_timing = time_all;
    memset(pl, 0, sizeof *pl);
    if (!g->reader_start) /* the costs read the graph's reader lists (dl_graph_index) */
        return dl_fail(err, DL_E_INVALID, "model '%s' has no reader index (dl_graph_index)", g->name);
    pl->choice = calloc((size_t)n + 1, sizeof *pl->choice);
    pl->be = calloc((size_t)n + 1, sizeof *pl->be);
    if (!pl->choice || !pl->be) return dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        dl_status st = candidates(s, pl, i, err);
        if (st != DL_OK) return st;
        need_timing |= pl->choice[i].n > 1;
    }
    dl_status floor_st = check_host_floor(s, pl, err);
    if (floor_st != DL_OK) return floor_st;
    planner p = {.s = s,
                 .n = n,
                 .t = calloc((size_t)n * MAX_CAND * 4 + 1, sizeof(double)),
                 .time_all = time_all,
                 .scratch = {.random = 1}};
    pl->llc = llc_bytes();
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].kind == DL_VALUE_WEIGHT) pl->weights += dl_session_value_bytes(s, v);
    int *as = calloc((size_t)n + 1, sizeof *as);
    if (!p.t || !as) {
        free(p.t), free(as);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    char warn[600];
    if (need_timing && !*cachep) {
        *cachep = dl_tcache_open(s->opt.retune, warn, sizeof warn);
        if (warn[0]) host_warn(s, warn);
    }
    dl_tcache *cache = need_timing ? *cachep : NULL;
    if (cache && dl_tcache_path(cache)) pl->cache_path = strdup(dl_tcache_path(cache));
    for (int i = 0; i < n; i++) /* register backends in a fixed order, then mark non-candidates */
        for (int c = 0; c < pl->choice[i].n; c++)
            be_index(&p, dl_context_backend(s->ctx, pl->choice[i].cand[c].backend));
    for (int i = 0; i < n * p.nbe; i++) p.t[i] = -1;
    if (need_timing && (s->opt.precision == DL_PRECISION_F16 || s->opt.precision == DL_PRECISION_BF16)) {
        p.cast_ms_per_elem = time_cast();
        for (int i = 0; i < n; i++) /* a backend that takes the 16-bit dtype for its ops stores 2 bytes */
            for (int c = 0; c < pl->choice[i].n; c++) {
                const dl_backend *be = dl_context_backend(s->ctx, pl->choice[i].cand[c].backend);
                dl_format f;
                dl_error why;
                if (dl_session_accepts_as(s, be, i, &s->fuse.attrs[i], &f, &why) && dl_dtype_size(f.dtype) == 2)
                    p.esz[be_index(&p, be)] = 2;
            }
    }
    int span = dl_trace_begin(s->trace, "measure transfers", "placement");
    for (int b = 0; b < p.nbe && need_timing; b++)
        if (!on_host(p.be[b])) measure_transfer(&p.x[b], cache);
    dl_trace_end(s->trace, span);
    for (int a = 0; a < p.nbe; a++)
        for (int b = 0; b < p.nbe; b++) p.domain_of[a] |= (uint64_t)dl_same_domain(p.be[a], p.be[b]) << b;
    if (need_timing) copiers(&p, pl);
    if (need_timing) layouts_plan(&p, pl);
    pl->any_cl = p.lay != NULL;
    span = dl_trace_begin(s->trace, "time ops", "placement");
    dl_status st = measure_ops(s, pl, &p, cache, err);
    dl_op_scratch_free(&p.scratch);
    dl_trace_arg_num(s->trace, span, "timed", pl->timed);
    dl_trace_arg_num(s->trace, span, "cached", pl->cached);
    dl_trace_end(s->trace, span);
    if (st == DL_OK) {
        span = dl_trace_begin(s->trace, "choose backends", "placement");
        if (is_chain(g)) choose_chain(&p, as);
        else choose_dag(&p, as);
        for (int i = 0; i < n; i++) pl->be[i] = p.be[as[i]];
        pl->cost_ms = total_cost(&p, as);
        dl_trace_end(s->trace, span);
    }
    free(p.t);
    free(p.lay);
    free(as);
    return st;
}

/* 1 if some conv2d with a 4-D output may run on a backend in host memory, where auto's two asks
 * differ (DL_ASK_PLUGIN and DL_ASK_CL_CONVS_HOST) */
static int host_conv(const dl_session *s) {
    const dl_backend *forced = s->opt.backend ? dl_context_backend(s->ctx, s->opt.backend) : NULL;
    int host = forced && on_host(forced);
    for (int b = 0; !forced && b < s->ctx->n_plugins; b++)
        host |= s->ctx->plugins[b].be && on_host(s->ctx->plugins[b].be);
    for (int i = 0; host && i < s->g->n_nodes; i++)
        if (s->g->nodes[i].kind == DL_OP_CONV2D && s->shape[s->g->nodes[i].output].ndim == 4) return 1;
    return 0;
}

/* Saves and frees the timing cache the plans shared. */
static void cache_close(const dl_session *s, dl_tcache *cache) {
    char warn[600];
    if (cache && !dl_tcache_save(cache, warn, sizeof warn)) host_warn(s, warn);
    dl_tcache_free(cache);
}

dl_status dl_session_place(dl_session *s, dl_error *err) {
    dl_tcache *cache = NULL;
    dl_status st;
    if (s->layout_ask == DL_ASK_MEASURE && !host_conv(s)) {
        s->layout_ask = DL_ASK_PLUGIN;
        snprintf(s->layout_desc, sizeof s->layout_desc, "each backend's own (auto: no conv on the host)");
    }
    if (s->layout_ask != DL_ASK_MEASURE) {
        st = place(s, &s->place, 0, &cache, err);
        cache_close(s, cache);
        return st;
    }
    /* NHWC at the host's convs first: where no backend would take channels-last anywhere, the
     * two plans are one. Else each backend's own, both with every op timed, so that a plan's
     * cost is its whole run's and the two compare; one cache, so that an op the same in both
     * (every non-conv row-major op) is timed once, --retune included. */
    static const int asks[2] = {DL_ASK_CL_CONVS_HOST, DL_ASK_PLUGIN};
    static const char *names[2] = {"nhwc at every conv on the host", "each backend's own"};
    dl_placement pl[2];
    dl_error why[2] = {{{0}}};
    dl_status sts[2];
    memset(pl, 0, sizeof pl);
    s->layout_ask = asks[0];
    sts[0] = place(s, &pl[0], 1, &cache, &why[0]);
    const int same = sts[0] == DL_OK && !pl[0].any_cl;
    sts[1] = same ? DL_E_UNSUPPORTED : (s->layout_ask = asks[1], place(s, &pl[1], 1, &cache, &why[1]));
    cache_close(s, cache);
    /* a plan that failed, or whose ops failed when timed alone, loses */
    int ok0 = sts[0] == DL_OK && !pl[0].failed_timings, ok1 = sts[1] == DL_OK && !pl[1].failed_timings;
    int keep = same ? 0 : ok0 != ok1 ? ok1 : sts[0] != sts[1] ? sts[1] == DL_OK : pl[1].cost_ms <= pl[0].cost_ms;
    if (sts[keep] != DL_OK) {
        *err = why[keep];
        st = sts[keep];
    } else {
        st = DL_OK;
        s->layout_ask = asks[keep];
        s->place = pl[keep];
        s->place.timed += pl[!keep].timed, s->place.cached += pl[!keep].cached;
        if (same)
            snprintf(s->layout_desc, sizeof s->layout_desc,
                     "each backend's own (auto: no conv on the host takes nhwc)");
        else if (sts[!keep] != DL_OK)
            snprintf(s->layout_desc, sizeof s->layout_desc, "%s (auto: %s could not be placed)", names[keep],
                     names[!keep]);
        else {
            snprintf(s->layout_desc, sizeof s->layout_desc, "%s (auto: %.2f ms measured, against %.2f ms for %s)",
                     names[keep], pl[keep].cost_ms, pl[!keep].cost_ms, names[!keep]);
            s->other_ask = 1 + asks[!keep], s->plan_ms[0] = pl[keep].cost_ms, s->plan_ms[1] = pl[!keep].cost_ms;
        }
        memset(&pl[keep], 0, sizeof pl[keep]);
    }
    dl_placement_free(&pl[0]);
    dl_placement_free(&pl[1]);
    return st;
}

uint64_t dl_session_plan_hash(const dl_session *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over every placed node's timing key */
    char key[2048];
    for (int i = 0; i < s->g->n_nodes; i++) {
        if (!s->place.be || !s->place.be[i]) continue;
        key_of(s, i, s->place.be[i], key, sizeof key);
        for (const char *c = key; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ '\n') * 1099511628211ull;
    }
    return h;
}

void dl_placement_free(dl_placement *p) {
    free(p->be);
    free(p->choice);
    free(p->cache_path);
    memset(p, 0, sizeof *p);
}

/* ---- reporting ---- */

int dl_session_placement_count(const dl_session *s) { return s->g->n_nodes; }

void dl_session_placement(const dl_session *s, int i, dl_placement_info *info) {
    memset(info, 0, sizeof *info);
    if (i < 0 || i >= s->g->n_nodes) return;
    const dl_node *n = &s->g->nodes[i];
    info->layer = n->name;
    info->op = dl_op_kind_name(n->kind);
    info->chosen = s->place.be && s->place.be[i] ? s->place.be[i]->name : "";
    int at = s->fuse.into && s->fuse.into[i] >= 0 ? s->fuse.into[i] : i;
    info->storage = s->node_place && s->n_places ? s->place_name[s->node_place[at]] : "f32";
    info->n_candidates = s->place.choice ? s->place.choice[i].n : 0;
    info->candidates = s->place.choice ? s->place.choice[i].cand : NULL;
}

void dl_session_placement_stats(const dl_session *s, int *timed, int *cached, const char **path) {
    if (timed) *timed = s->place.timed;
    if (cached) *cached = s->place.cached;
    if (path) *path = s->place.cache_path;
}

void dl_session_placement_cold(const dl_session *s, int *cold_ops, uint64_t *cache_bytes, uint64_t *weight_bytes) {
    if (cold_ops) *cold_ops = s->place.cold;
    if (cache_bytes) *cache_bytes = s->place.llc;
    if (weight_bytes) *weight_bytes = s->place.weights;
}
