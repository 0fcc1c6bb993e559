/* oprun.c — runs one op on one backend in that backend's own memory domain, from host inputs to a
 * host output, with a poisoned and guarded output buffer, optionally timed. Used by the
 * cross-checks (check.c) and by measured placement (placement.c). */
#define _GNU_SOURCE
#include "oprun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "context.h"
#include "op_table.h"
#include "tensor_convert.h"

static dl_status be_copy(const dl_backend *be, void *dst, const void *src, size_t n, dl_copy_kind k, dl_error *err) {
    dl_error e = {{0}};
    if (be->copy(be->self, dst, src, n, k, &e) != DL_OK)
        return dl_fail(err, DL_E_RUNTIME, "%s: copy failed: %s", be->name, e.msg);
    return DL_OK;
}

static dl_status be_sync(const dl_backend *be, dl_error *err) {
    dl_error e = {{0}};
    if (DL_BACKEND_HAS(be, synchronize) && be->synchronize(be->self, &e) != DL_OK)
        return dl_fail(err, DL_E_RUNTIME, "%s: %s", be->name, e.msg);
    return DL_OK;
}

int dl_backend_accepts(const dl_backend *be, const dl_op *op, dl_error *why) {
    uint32_t need = dl_op_min_minor(op), have = DL_ABI_MINOR_OF(be->abi_version);
    if (have < need)
        return dl_fail(why, DL_E_UNSUPPORTED, "needs plugin ABI %d.%u, the plugin speaks %d.%u", DL_ABI_MAJOR, need,
                       DL_ABI_MAJOR, have),
               0;
    return be->supports(be->self, op, why);
}

void dl_format_str(dl_format f, char *buf, size_t len) {
    snprintf(buf, len, "%s%s", dl_dtype_name(f.dtype), f.layout == DL_LAYOUT_CHANNELS_LAST ? " nhwc" : "");
}

void dl_tensor_apply_format(dl_tensor *t, dl_format f, int64_t *strides4) {
    t->dtype = f.dtype;
    t->strides = NULL;
    if (f.layout == DL_LAYOUT_CHANNELS_LAST && t->ndim == 4) {
        dl_channels_last_strides(t->shape, strides4);
        t->strides = strides4;
    }
}

void dl_op_apply_format(dl_op *op, dl_tensor *in, dl_tensor *out, const unsigned char *is_weight, dl_format f,
                        int64_t *strides) {
    const int n = op->n_inputs;
    const dl_format rows = {f.dtype, DL_LAYOUT_ROW_MAJOR};
    for (int j = 0; j <= n; j++) {
        dl_tensor *t = j < n ? &in[j] : out;
        if (t->dtype.code == DL_DTYPE_INT) continue; /* gather's indices stay int64 row-major */
        dl_tensor_apply_format(t, j == n || !is_weight[j] ? f : rows, strides + 4 * j);
    }
}

int dl_layout_ask_for(int mode, int depthwise) {
    if (mode == DL_LAYOUT_MODE_NCHW) return DL_ASK_ROW_MAJOR;
    if (mode == DL_LAYOUT_MODE_NHWC) return DL_ASK_CL_CONVS;
    return depthwise ? DL_ASK_CL_CONVS_HOST : DL_ASK_PLUGIN;
}

/* be's own answer as ABI 1.9 reads it (row-major from an older plugin followed its input) */
static int plugin_layout_pref(const dl_backend *be, const dl_op *op) {
    if (DL_ABI_MINOR_OF(be->abi_version) < 3 || !DL_BACKEND_HAS(be, preferred_layout)) return DL_LAYOUT_AS_INPUT;
    int pref = be->preferred_layout(be->self, op);
    if (pref == DL_LAYOUT_ROW_MAJOR && DL_ABI_MINOR_OF(be->abi_version) < 9) return DL_LAYOUT_AS_INPUT;
    return pref == DL_LAYOUT_ROW_MAJOR || pref == DL_LAYOUT_CHANNELS_LAST ? pref : DL_LAYOUT_AS_INPUT;
}

int dl_backend_layout_pref(const dl_backend *be, const dl_op *op, int ask) {
    if (ask == DL_ASK_ROW_MAJOR) return DL_LAYOUT_ROW_MAJOR;
    if (op->kind != DL_OP_CONV2D) return plugin_layout_pref(be, op);
    if (ask == DL_ASK_CL_CONVS) return DL_LAYOUT_CHANNELS_LAST;
    int pref = plugin_layout_pref(be, op);
    /* auto: channels-last at a host backend's conv, unless it says row-major (no NHWC kernel for it:
     * 16-bit storage, a grouped conv) */
    if (ask == DL_ASK_CL_CONVS_HOST && be->device.device_type == DL_DEVICE_CPU && pref != DL_LAYOUT_ROW_MAJOR)
        return DL_LAYOUT_CHANNELS_LAST;
    return pref;
}

int dl_backend_accepts_as(const dl_backend *be, int precision, int ask, int input_cl, dl_op *op, dl_tensor *in,
                          dl_tensor *out, const unsigned char *is_weight, int64_t *strides, dl_format *f,
                          dl_error *why) {
    dl_format tries[4];
    int n = 0;
    if (DL_ABI_MINOR_OF(be->abi_version) >= 3) {
        int has4d = out->ndim == 4;
        for (int j = 0; j < op->n_inputs; j++) has4d |= in[j].ndim == 4 && !is_weight[j];
        int pref = dl_backend_layout_pref(be, op, ask);
        int want_cl = has4d && (pref == DL_LAYOUT_CHANNELS_LAST || (pref == DL_LAYOUT_AS_INPUT && input_cl));
        dl_dtype low = precision == DL_PRECISION_F16 ? DL_F16 : DL_BF16;
        if (precision == DL_PRECISION_F16 || precision == DL_PRECISION_BF16) {
            if (want_cl) tries[n++] = (dl_format){low, DL_LAYOUT_CHANNELS_LAST};
            tries[n++] = (dl_format){low, DL_LAYOUT_ROW_MAJOR};
        }
        if (want_cl) tries[n++] = (dl_format){DL_F32, DL_LAYOUT_CHANNELS_LAST};
    }
    tries[n++] = (dl_format){DL_F32, DL_LAYOUT_ROW_MAJOR};
    for (int t = 0; t < n; t++) {
        dl_op_apply_format(op, in, out, is_weight, tries[t], strides);
        why->msg[0] = 0;
        if (dl_backend_accepts(be, op, why)) {
            if (f) *f = tries[t];
            return 1;
        }
    }
    return 0;
}

void *dl_op_scratch_get(dl_op_scratch *sc, int k, size_t bytes) {
    bytes = bytes ? bytes : 64;
    if (sc->p[k] && sc->cap[k] >= bytes && sc->cap[k] / 2 <= bytes) return sc->p[k];
    dl_op_scratch_put(sc, k);
    if (posix_memalign(&sc->p[k], 64, bytes) != 0) return sc->p[k] = NULL;
    sc->cap[k] = bytes;
    return sc->p[k];
}

void dl_op_scratch_put(dl_op_scratch *sc, int k) {
    free(sc->p[k]);
    sc->p[k] = NULL, sc->cap[k] = 0;
}

void dl_op_scratch_free(dl_op_scratch *sc) {
    for (int k = 0; k <= DL_MAX_OP_INPUTS; k++) dl_op_scratch_put(sc, k);
    free(sc->evict);
    sc->evict = NULL, sc->evict_cap = 0;
}

/* Reads one word in each 64-byte line of [p, p + bytes): brings it into the caches. */
static void touch_lines(const void *p, size_t bytes) {
    const volatile unsigned char *c = p;
    unsigned char sink = 0;
    for (size_t i = 0; p && i < bytes; i += 64) sink ^= c[i];
    (void)sink;
}

/* sc->cold bytes read from sc's eviction buffer (allocated and written once: no page faults in
 * the timed loop); 0 when that memory cannot be had (the run is then timed warm). */
static int evict_caches(dl_op_scratch *sc) {
    if (sc->evict_cap < sc->cold) {
        free(sc->evict);
        sc->evict_cap = 0;
        if (!(sc->evict = malloc(sc->cold))) return 0;
        memset(sc->evict, 1, sc->cold);
        sc->evict_cap = sc->cold;
    }
    touch_lines(sc->evict, sc->cold);
    sc->evictions++;
    return 1;
}

/* Host f32 row-major data `f32` as tensor t's dtype and layout, in a new buffer (or f32 itself
 * when t is f32 row-major, or f32 in any layout where the data is random; *owned says which). An
 * integer tensor's data is already its own (int64 indices), used as it is. NULL when out of memory. */
static const void *as_stored(const dl_tensor *t, const void *f32, int random, void **owned) {
    *owned = NULL;
    if ((dl_dtype_is_f32(t->dtype) && (!t->strides || random)) || t->dtype.code == DL_DTYPE_INT) return f32;
    size_t b = (size_t)dl_tensor_numel(t) * dl_dtype_size(t->dtype);
    if (!(*owned = malloc(b ? b : 1))) return NULL;
    dl_tensor d = *t, src = *t;
    d.data = *owned, d.byte_offset = 0, d.device = (dl_device){DL_DEVICE_CPU, 0};
    src.data = (void *)f32, src.dtype = DL_F32, src.strides = NULL, src.byte_offset = 0, src.device = d.device;
    if (!dl_convert_host(&d, &src)) free(*owned), *owned = NULL;
    return *owned;
}

/* A run longer than this is timed at most DL_SLOW_RUNS times after the checked run, its warm-up:
 * placement at batch 10000 spent a minute running ops of 1 GB eight times each. */
#define DL_SLOW_RUN_MS 20.0
#define DL_SLOW_RUNS 3
/* A set of timed runs whose median lies above DL_DISTURBED times its fastest run was disturbed:
 * on a shared machine one of an op's threads descheduled holds the others at its barrier for a
 * time slice (a 2.3 ms conv measured at 15.4 on the 2-core VM, a 1.4 ms one at 8.0, and the
 * timing cache keeps a time once measured). Such a set is run again, DL_TIMING_SETS sets in all
 * at most, and the lowest median kept. Not for slow runs, which a time slice disturbs less. */
#define DL_DISTURBED 1.5
#define DL_TIMING_SETS 3

/* A backend in host memory reads a tensor of this size or more where it lies, when it is 64-byte
 * aligned (as a session's arena is), and writes an output as large into the guarded host buffer:
 * no copies, no fresh pages. Smaller ones are copied into memory the backend allocated, as a
 * device's are (a test backend tells an op timed alone from a session's by that: storage_backend.c). */
#define DL_DIRECT_MIN_BYTES ((size_t)16 << 20)

static void poison_words(uint32_t *w, size_t from, size_t to, uint32_t poison) {
    for (size_t i = from; i < to; i++) w[i] = poison;
}

/* 1 if bytes [from, to) of b still hold the poison pattern */
static int poisoned(const void *b, size_t from, size_t to, uint32_t poison) {
    const unsigned char *c = b, *pb = (const unsigned char *)&poison;
    for (size_t i = from; i < to; i++)
        if (c[i] != pb[i % 4]) return 0;
    return 1;
}

/* Runs `op` (shapes; inputs[i].data: host data; is_weight[i]: data given at prepare) on be and
 * writes the output to host `out` (NULL: checks the guards only). iterations > 0 also times it. */
dl_status dl_run_op(const dl_backend *be, const dl_op *op, const unsigned char *is_weight, float *out, int iterations,
                    dl_op_scratch *sc, dl_op_result *r, dl_error *err) {
    memset(r, 0, sizeof *r);
    r->guards_ok = 1;
    int n = op->n_inputs;
    dl_tensor *in = calloc((size_t)n, sizeof *in);
    void **dev = calloc((size_t)n, sizeof *dev);
    struct lent { /* an input a host backend reads where it lies, and the conversion it is, if any */
        unsigned char lent;
        void *owned;
    } *lent = calloc((size_t)n, sizeof *lent);
    dl_tensor o = op->outputs[0];
    size_t obytes = (size_t)dl_tensor_numel(&o) * dl_dtype_size(o.dtype), total = (obytes + 3) / 4 * 4 + 2 * DL_GUARD;
    const int on_host = be->device.device_type == DL_DEVICE_CPU, out_direct = on_host && obytes >= DL_DIRECT_MIN_BYTES;
    uint32_t *host = NULL;
    if (sc) host = dl_op_scratch_get(sc, DL_MAX_OP_INPUTS, total);
    else if (posix_memalign((void **)&host, 64, total) != 0) host = NULL;
    const int random = sc && sc->random;
    void *odev = NULL, *ws = NULL;
    dl_kernel *k = NULL;
    dl_status st = in && dev && lent && host ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_op view = *op;
    for (int i = 0; st == DL_OK && i < n; i++) {
        in[i] = op->inputs[i];
        in[i].device = be->device;
        in[i].data = NULL;
    }
    o.device = be->device;
    o.data = NULL;
    view.inputs = in;
    view.outputs = &o;
    if (st == DL_OK) {
        dl_error why = {{0}};
        r->supported = dl_backend_accepts(be, &view, &why);
        if (!r->supported) snprintf(r->why, sizeof r->why, "%s", why.msg[0] ? why.msg : "no reason given");
    }
    if (st != DL_OK || !r->supported) goto done;
    dl_error e = {{0}};
    for (int i = 0; st == DL_OK && i < n; i++) {
        size_t b = (size_t)dl_tensor_numel(&op->inputs[i]) * dl_dtype_size(op->inputs[i].dtype);
        void *owned;
        const void *src = as_stored(&op->inputs[i], op->inputs[i].data, random && !is_weight[i], &owned);
        if (!src) st = dl_fail(err, DL_E_NOMEM, "out of memory");
        else if (on_host && b >= DL_DIRECT_MIN_BYTES && (owned || (uintptr_t)src % 64 == 0))
            dev[i] = (void *)src, lent[i] = (struct lent){1, owned}, owned = NULL;
        else if (be->alloc(be->self, b ? b : 64, &dev[i], &e) != DL_OK)
            st = dl_fail(err, DL_E_NOMEM, "%s: %s", be->name, e.msg);
        else st = be_copy(be, dev[i], src, b, DL_COPY_HOST_TO_DEVICE, err);
        free(owned);
        if (is_weight[i]) in[i].data = dev[i];
    }
    if (st == DL_OK && !out_direct && be->alloc(be->self, total, &odev, &e) != DL_OK)
        st = dl_fail(err, DL_E_NOMEM, "%s: %s", be->name, e.msg);
    uint32_t poison = dl_dtype_size(o.dtype) == 2 ? DL_POISON16 : DL_POISON;
    if (host) { /* the guards, and the output too where it is read back */
        poison_words(host, 0, out ? total / 4 : DL_GUARD / 4, poison);
        poison_words(host, (DL_GUARD + obytes) / 4, total / 4, poison);
    }
    if (st == DL_OK && out_direct) odev = host;
    else if (st == DL_OK) st = be_copy(be, odev, host, total, DL_COPY_HOST_TO_DEVICE, err);
    size_t wsb = 0;
    if (st == DL_OK && be->prepare(be->self, &view, &k, &wsb, &e) != DL_OK) {
        st = DL_OK; /* a backend that accepts an op must prepare it: report as a failure row */
        snprintf(r->why, sizeof r->why, "prepare failed after supports() accepted: %.400s", e.msg);
        r->guards_ok = -1;
        goto done;
    }
    if (st == DL_OK && wsb && be->alloc(be->self, wsb, &ws, &e) != DL_OK)
        st = dl_fail(err, DL_E_NOMEM, "%s: %s", be->name, e.msg);
    for (int i = 0; i < n; i++) in[i].data = dev[i];
    o.data = (char *)odev + DL_GUARD;
    const double t_first = dl_now_ms();
    if (st == DL_OK && be->run(be->self, k, in, &o, ws, &e) != DL_OK) {
        snprintf(r->why, sizeof r->why, "run failed: %.400s", e.msg);
        r->guards_ok = -1;
        goto done;
    }
    if (st == DL_OK) st = be_sync(be, err);
    const int slow = dl_now_ms() - t_first > DL_SLOW_RUN_MS;
    if (st == DL_OK && !out_direct) st = be_copy(be, host, odev, total, DL_COPY_DEVICE_TO_HOST, err);
    if (st == DL_OK) st = be_sync(be, err);
    if (st == DL_OK) {
        /* every byte outside the output still the poison's */
        r->guards_ok = poisoned(host, 0, DL_GUARD, poison) && poisoned(host, DL_GUARD + obytes, total, poison);
        dl_tensor got = o, want = o;
        got.data = (char *)host + DL_GUARD, got.device = (dl_device){DL_DEVICE_CPU, 0};
        want.data = out, want.dtype = DL_F32, want.strides = NULL, want.device = got.device;
        if (out && !dl_convert_host(&want, &got))
            st = dl_fail(err, DL_E_UNSUPPORTED, "cannot read a %s output", dl_dtype_name(o.dtype));
    }
    if (slow && iterations > DL_SLOW_RUNS) iterations = DL_SLOW_RUNS;
    if (st == DL_OK && iterations > 0) {
        /* timed as a session runs it: the output over the input the kernel may overwrite (a fused
         * residual, ABI 1.10), which a session passes so where that input dies at the op (the
         * usual residual), where the kernel would otherwise copy it first */
        const int over = DL_BACKEND_HAS(be, kernel_in_place) ? be->kernel_in_place(be->self, k, &view) : -1;
        if (over >= 0 && over < n && !is_weight[over] &&
            (size_t)dl_tensor_numel(&op->inputs[over]) * dl_dtype_size(op->inputs[over].dtype) == obytes)
            in[over].data = o.data;
        double *t = malloc((size_t)iterations * sizeof *t);
        const int cold = on_host && sc && sc->cold;
        for (int set = 0; t && set < (slow ? 1 : DL_TIMING_SETS) && st == DL_OK; set++) {
            /* two warm-up runs, or the checked one alone; none before a set run again */
            for (int it = slow || set ? 0 : -2; it < iterations && st == DL_OK; it++) {
                if (cold && evict_caches(sc)) { /* the weights out of cache, the rest in, as in the model */
                    for (int i = 0; i < n; i++)
                        if (!is_weight[i])
                            touch_lines(in[i].data, (size_t)dl_tensor_numel(&in[i]) * dl_dtype_size(in[i].dtype));
                    touch_lines(o.data, obytes);
                    touch_lines(ws, wsb);
                }
                double t0 = dl_now_ms();
                if (be->run(be->self, k, in, &o, ws, &e) != DL_OK)
                    st = dl_fail(err, DL_E_RUNTIME, "%s: %s", be->name, e.msg);
                if (st == DL_OK) st = be_sync(be, err);
                if (it >= 0) t[it] = dl_now_ms() - t0;
            }
            if (st != DL_OK) break;
            qsort(t, (size_t)iterations, sizeof *t, dl_cmp_double);
            if (!set || t[iterations / 2] < r->ms) r->ms = t[iterations / 2];
            if (t[iterations / 2] <= DL_DISTURBED * t[0]) break;
        }
        free(t);
    }
done:
    if (k) be->release(be->self, k);
    if (ws) be->free(be->self, ws);
    if (odev && odev != host) be->free(be->self, odev);
    for (int i = 0; dev && i < n; i++)
        if (dev[i] && !(lent && lent[i].lent)) be->free(be->self, dev[i]);
    for (int i = 0; lent && i < n; i++) free(lent[i].owned);
    free(lent);
    free(in);
    free(dev);
    if (!sc) free(host);
    return st;
}
