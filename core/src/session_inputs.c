/* session_inputs.c — a run's inputs: host tensors are copied into the session's host buffers
 * where something reads them there (an op on the host, a model output, a view); where only
 * transfers from the input's host place read it (an upload to a GPU, a conversion for another
 * backend), those read the caller's memory instead, and the copy is saved (it is part of the
 * 6.3 ms VGG-16's 19 MB batch of 32 took to upload on an H100; not yet timed alone). Device
 * tensors (a DLPack pointer into the memory of a GPU the session uses, e.g. a PyTorch CUDA tensor)
 * are copied on that device, straight into the buffers its ops read there, without a trip through
 * host memory.
 * Only where an op on the host (or a copy that converts) also reads such an input is it
 * downloaded once into its host buffer. The caller's memory is only read during the run, which
 * synchronizes every backend before it returns (a plugin's copy may read its source until then).
 * dl_session_input_buffer gives the caller host memory to fill from the backend that uploads the
 * input (ABI 1.13 host_alloc: page-locked, for the CUDA plugins), which its copy reads fastest. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "session.h"

static int same_shape(const dl_tensor *a, const dl_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* The device domain holding memory of device `dev`, or -1. */
static int domain_of_device(const dl_session *s, dl_device dev) {
    for (int d = 1; d < s->n_doms; d++)
        if (s->doms[d].device.device_type == dev.device_type && s->doms[d].device.device_id == dev.device_id) return d;
    return -1;
}

/* Copy step st takes device input data as it is: an upload of the unconverted input to domain d. */
static int direct(const dl_step *st, int v, int d) {
    return st->kind == DL_STEP_COPY && st->value == v && st->src_dom == 0 && st->dom == d && st->xfer == DL_XFER_COPY;
}

/* Does anything read input v from its host buffer? d > 0: v is given in domain d's memory, and the
 * direct uploads to d take it from there instead. d == 0: v is given in host memory, and the
 * transfers of v itself out of its host place 0 can read it where the caller keeps it; copies of a
 * view of v (they read the buffer v shares) and out of another host place of v cannot. Ops on the
 * host and the model's outputs read the buffer in either case. */
static int reads_on_host(const dl_session *s, int v, int d) {
    for (int k = 0; k < s->n_steps; k++) {
        const dl_step *st = &s->steps[k];
        if (st->kind == DL_STEP_COPY &&
            (d ? st->value == v && !direct(st, v, d)
               : dl_session_root(s, st->value) == v && st->src_dom == 0 && (st->value != v || st->src_place != 0)))
            return 1;
        if (st->kind == DL_STEP_OP && st->dom == 0) {
            int ins[DL_MAX_OP_INPUTS], n_in = dl_session_node_inputs(s, st->node, ins);
            for (int j = 0; j < n_in; j++)
                if (dl_session_root(s, ins[j]) == v) return 1;
        }
    }
    for (int i = 0; i < s->g->n_outputs; i++)
        if (dl_session_root(s, s->g->outputs[i]) == v) return 1;
    return 0;
}

void dl_session_plan_inputs(dl_session *s) {
    for (int i = 0; i < s->g->n_inputs; i++) {
        int v = s->g->inputs[i];
        s->in_host_mask[i] = 0;
        for (int d = 0; d < s->n_doms; d++) s->in_host_mask[i] |= (uint8_t)(reads_on_host(s, v, d) << d);
    }
}

dl_status dl_session_take_inputs(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err) {
    const dl_graph *g = s->g;
    if (n_inputs != g->n_inputs)
        return dl_fail(err, DL_E_INVALID, "model '%s' takes %d input(s), got %d", g->name, g->n_inputs, n_inputs);
    s->n_dev_in = s->n_src_in = 0;
    for (int i = 0; i < n_inputs; i++) {
        const dl_tensor *t = &inputs[i];
        int v = g->inputs[i];
        dl_dtype want_dt = g->values[v].dtype;
        int on_host = t->device.device_type == DL_DEVICE_CPU;
        int d = on_host ? 0 : domain_of_device(s, t->device);
        s->in_dev[i] = s->in_src[i] = NULL;
        if (!same_shape(t, &s->inputs[i]) || !dl_dtype_eq(t->dtype, want_dt) || !t->data || t->strides || d < 0) {
            char want[128], got[128];
            dl_shape_str(s->inputs[i].shape, s->inputs[i].ndim, want, sizeof want);
            dl_shape_str(t->shape, t->ndim, got, sizeof got);
            if (d < 0)
                return dl_fail(err, DL_E_INVALID,
                               "input '%s' is in device memory (DLPack device type %d, id %d) where no backend of "
                               "this session works; give a host tensor",
                               g->values[v].name, (int)t->device.device_type, (int)t->device.device_id);
            return dl_fail(err, DL_E_INVALID, "input '%s' must be a dense %s tensor of shape %s, got %s%s",
                           g->values[v].name, dl_dtype_is_f32(want_dt) ? "f32" : "int64", want, got,
                           dl_dtype_eq(t->dtype, want_dt) ? "" : " of another dtype");
        }
        const char *src = (const char *)t->data + t->byte_offset;
        size_t bytes = dl_session_value_bytes(s, v);
        if (on_host) {
            if (s->in_host_mask[i] & 1) memcpy(BUF(s, v, 0), src, bytes);
            else s->in_src[i] = src, s->n_src_in++; /* its transfers read it where it is */
            continue;
        }
        s->in_dev[i] = src;
        s->in_dom[i] = d;
        s->n_dev_in++;
        if (s->in_host_mask[i] >> d & 1) { /* once, before anything reads it */
            dl_status rc = dl_dom_copy(s, 0, BUF(s, v, 0), d, src, bytes, NULL, err);
            const dl_backend *be = s->doms[d].be;
            dl_error e = {{0}};
            if (rc == DL_OK && DL_BACKEND_HAS(be, synchronize) && be->synchronize(be->self, &e) != DL_OK)
                rc = dl_fail(err, DL_E_RUNTIME, "%s: %s", be->name, e.msg);
            if (rc != DL_OK) return rc;
        }
    }
    return DL_OK;
}

int dl_session_input_copy(dl_session *s, const dl_step *st, dl_status *rc, dl_error *err) {
    if ((!s->n_dev_in && !s->n_src_in) || st->src_dom != 0) return 0;
    for (int i = 0; i < s->g->n_inputs; i++) { /* a host input's transfer, from the caller's memory */
        if (!s->in_src[i] || st->value != s->g->inputs[i] || st->src_place != 0) continue;
        *rc = dl_step_transfer_from(s, st, s->in_src[i], err);
        return 1;
    }
    for (int i = 0; i < s->g->n_inputs; i++) {
        if (!s->in_dev[i] || !direct(st, s->g->inputs[i], s->in_dom[i])) continue;
        const dl_backend *be = s->doms[st->dom].be;
        dl_error e = {{0}};
        *rc = be->copy(be->self, BUF(s, st->value, st->place), s->in_dev[i], st->bytes, DL_COPY_DEVICE_TO_DEVICE, &e);
        if (*rc != DL_OK)
            *rc = dl_fail(err, DL_E_RUNTIME, "copy of input '%s' on %s: %s", s->g->values[st->value].name, be->name,
                          e.msg);
        return 1;
    }
    return 0;
}

/* The backend whose transfer of input value v out of its host place reads the caller's memory
 * (a plain or converting upload) in session x (the one that takes the inputs), where it offers
 * host memory (ABI 1.13); NULL for none. */
static const dl_backend *uploader_of(const dl_session *x, int v) {
    for (int k = 0; k < x->n_steps; k++) {
        const dl_step *st = &x->steps[k];
        const dl_backend *be = st->dom > 0 ? x->doms[st->dom].be : NULL;
        if (st->kind == DL_STEP_COPY && st->value == v && st->src_dom == 0 && st->src_place == 0 && be &&
            (st->xfer == DL_XFER_COPY || st->xfer == DL_XFER_BACKEND) && DL_BACKEND_HAS(be, host_alloc) &&
            DL_BACKEND_HAS(be, host_free) && be->host_alloc && be->host_free)
            return be;
    }
    return NULL;
}

void *dl_session_input_buffer(dl_session *s, int i) {
    if (!s || i < 0 || i >= s->g->n_inputs) return NULL;
    const int n = s->g->n_inputs;
    if (!s->in_buf && (!(s->in_buf = calloc((size_t)n, sizeof *s->in_buf)) ||
                       !(s->in_buf_be = calloc((size_t)n, sizeof *s->in_buf_be)))) {
        free(s->in_buf);
        s->in_buf = NULL;
        return NULL;
    }
    if (s->in_buf[i]) return s->in_buf[i];
    const dl_tensor *t = dl_session_input(s, i);
    size_t bytes = (size_t)dl_tensor_numel(t) * dl_dtype_size(t->dtype); /* checked when the session was made */
    const dl_session *taker = s; /* a session whose first layers run in parts: its prefix takes the inputs */
    while (taker->prefix) taker = taker->prefix;
    const dl_backend *be = (taker->in_host_mask[i] & 1) ? NULL : uploader_of(taker, taker->g->inputs[i]);
    void *p = NULL;
    dl_error e = {{0}};
    if (be && be->host_alloc(be->self, bytes ? bytes : 1, &p, &e) != DL_OK) p = NULL, be = NULL;
    if (!p && posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return NULL; /* where the backend has none */
    s->in_buf[i] = p;
    s->in_buf_be[i] = be;
    return p;
}

void dl_session_free_input_buffers(dl_session *s) {
    for (int i = 0; s->in_buf && i < s->g->n_inputs; i++) {
        const dl_backend *be = s->in_buf_be[i];
        if (be) be->host_free(be->self, s->in_buf[i]);
        else free(s->in_buf[i]);
    }
    free(s->in_buf);
    free(s->in_buf_be);
    s->in_buf = NULL;
    s->in_buf_be = NULL;
}
