/* storage.c — where a session stores each value and how values move between those places. A
 * place is a memory domain plus a storage format (dtype, layout); place 0 is host memory in f32
 * row-major. This module chooses each node's format (asking its backend's supports() with the real
 * dtypes and layouts), converts weights once into the places that read them, and plans and runs
 * the COPY steps that move or convert an activation: a plain copy, a host conversion, the
 * backend's own converting copy (ABI 1.3 convert) or, failing that, a conversion through host
 * memory. docs/storage.md describes the choices. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oprun.h"
#include "session.h"
#include "tensor_convert.h"

static const dl_format F32_ROW_MAJOR = {{DL_DTYPE_FLOAT, 32, 1}, DL_LAYOUT_ROW_MAJOR};

static int format_eq(dl_format a, dl_format b) { return dl_dtype_eq(a.dtype, b.dtype) && a.layout == b.layout; }

const char *dl_domain_name(const dl_session *s, int d) { return d == 0 ? "host" : s->doms[d].be->name; }

int dl_place_index(dl_session *s, int dom, dl_format fmt) {
    for (int p = 0; p < s->n_places; p++)
        if (s->places[p].dom == dom && format_eq(s->places[p].fmt, fmt)) return p;
    if (s->n_places == DL_MAX_PLACES) return -1;
    s->places[s->n_places] = (dl_store){dom, fmt};
    dl_format_str(fmt, s->place_name[s->n_places], sizeof s->place_name[0]);
    return s->n_places++;
}

static int is_4d_activation(const dl_session *s, int v) {
    return s->g->values[v].kind != DL_VALUE_WEIGHT && s->shape[v].ndim == 4;
}

/* An integer value (gather's int64 indices) keeps its own dtype, row-major, in every place: the
 * places' formats are those of the floating-point tensors. */
static int is_integer(const dl_session *s, int v) { return s->g->values[v].dtype.code == DL_DTYPE_INT; }

int dl_place_of_value(dl_session *s, int v, int p) {
    dl_store pl = s->places[p];
    if (is_integer(s, v)) /* stored the same in every place of a domain: the domain's first */
        for (int q = 0; q < s->n_places; q++)
            if (s->places[q].dom == pl.dom) return q;
    if (pl.fmt.layout == DL_LAYOUT_ROW_MAJOR || is_4d_activation(s, v)) return p;
    return dl_place_index(s, pl.dom, (dl_format){pl.fmt.dtype, DL_LAYOUT_ROW_MAJOR}); /* exists or fits */
}

size_t dl_session_place_bytes(const dl_session *s, int v, int p) {
    dl_dtype d = is_integer(s, v) ? s->g->values[v].dtype : s->places[p].fmt.dtype;
    return (size_t)dl_shape_numel(&s->shape[v]) * dl_dtype_size(d);
}

dl_tensor dl_place_view(const dl_session *s, int v, int p, int64_t *strides) {
    const dl_store *pl = &s->places[p];
    dl_tensor t = {NULL, {DL_DEVICE_CPU, 0}, s->shape[v].ndim, pl->fmt.dtype, (int64_t *)s->shape[v].d, NULL, 0};
    if (pl->dom) t.device = s->doms[pl->dom].device;
    if (is_integer(s, v)) t.dtype = s->g->values[v].dtype;
    else if (pl->fmt.layout == DL_LAYOUT_CHANNELS_LAST && t.ndim == 4) {
        dl_channels_last_strides(t.shape, strides);
        t.strides = strides;
    }
    return t;
}

/* ---- choosing each node's format ---- */

/* A conv with one group per input channel and as many outputs as inputs (MobileNet's 3x3 on
 * each channel): in NCHW each channel's plane is a strided walk of its own, in NHWC a pixel's
 * channels are one vector (docs/layout.md). */
static int is_depthwise(const dl_session *s, const dl_node *n) {
    if (n->kind != DL_OP_CONV2D || n->params.attrs.groups <= 1) return 0;
    const dl_shape *x = &s->shape[n->inputs[0]], *y = &s->shape[n->output];
    return x->ndim == 4 && y->ndim == 4 && x->d[1] == n->params.attrs.groups && y->d[1] == x->d[1];
}

void dl_session_layout_ask(dl_session *s) {
    s->depthwise = 0;
    for (int i = 0; i < s->g->n_nodes; i++) s->depthwise += is_depthwise(s, &s->g->nodes[i]);
    s->layout_ask = s->forced_ask                          ? s->forced_ask - 1
                    : s->opt.layout == DL_LAYOUT_MODE_AUTO ? DL_ASK_MEASURE
                                                           : dl_layout_ask_for(s->opt.layout, 0);
    const char *what = s->layout_ask == DL_ASK_ROW_MAJOR       ? "nchw"
                       : s->layout_ask == DL_ASK_CL_CONVS      ? "nhwc at every conv"
                       : s->layout_ask == DL_ASK_PLUGIN        ? "each backend's own"
                       : s->layout_ask == DL_ASK_CL_CONVS_HOST ? "nhwc at every conv on the host"
                                                               : "auto";
    snprintf(s->layout_desc, sizeof s->layout_desc, "%s", what); /* auto: dl_session_place says */
}

const char *dl_session_layout(const dl_session *s) { return s->layout_desc; }

void dl_session_weight_flags(const dl_session *s, int node, unsigned char *is_weight) {
    int ins[DL_MAX_OP_INPUTS], n = dl_session_node_inputs(s, node, ins);
    for (int j = 0; j < n; j++) is_weight[j] = s->g->values[ins[j]].kind == DL_VALUE_WEIGHT;
}

/* Is node i's first 4-D activation input already channels-last in be's domain (known once the
 * formats of the nodes before it are chosen)? */
static int input_channels_last(const dl_session *s, const dl_backend *be, int i) {
    const dl_node *n = &s->g->nodes[i];
    for (int j = 0; j < n->n_inputs; j++) {
        int v = n->inputs[j], p = s->g->values[v].producer;
        if (!is_4d_activation(s, v)) continue;
        if (p < 0 || s->n_places == 0) return 0;
        const dl_store *home = &s->places[dl_session_home(s, v)];
        if (home->fmt.layout != DL_LAYOUT_CHANNELS_LAST) return 0;
        const dl_device *d = home->dom ? &s->doms[home->dom].device : NULL;
        return d ? d->device_type == be->device.device_type && d->device_id == be->device.device_id
                 : be->device.device_type == DL_DEVICE_CPU;
    }
    return 0;
}

int dl_session_accepts_as(const dl_session *s, const dl_backend *be, int i, const dl_op_attrs *attrs, dl_format *f,
                          dl_error *why) {
    return dl_session_accepts_from(s, be, i, attrs, input_channels_last(s, be, i), f, why);
}

int dl_session_accepts_from(const dl_session *s, const dl_backend *be, int i, const dl_op_attrs *attrs, int input_cl,
                            dl_format *f, dl_error *why) {
    dl_tensor in[DL_MAX_OP_INPUTS], out;
    int64_t strides[4 * (DL_MAX_OP_INPUTS + 1)];
    unsigned char is_weight[DL_MAX_OP_INPUTS];
    dl_op op;
    dl_session_op_view(s, i, attrs, &op, in, &out);
    dl_session_weight_flags(s, i, is_weight);
    for (int j = 0; j < op.n_inputs; j++) in[j].device = be->device;
    out.device = be->device;
    return dl_backend_accepts_as(be, s->opt.precision, s->layout_ask, input_cl, &op, in, &out, is_weight, strides, f,
                                 why);
}

int dl_session_accepts(const dl_session *s, const dl_backend *be, int node, const dl_op_attrs *attrs, dl_error *why) {
    return dl_session_accepts_as(s, be, node, attrs, NULL, why);
}

/* 1 if be takes node i with its input stored as `fin` and its output as `fout` (a layout view). */
static int view_accepted(const dl_session *s, const dl_backend *be, int i, dl_format fin, dl_format fout) {
    dl_tensor in[DL_MAX_OP_INPUTS], out;
    int64_t strides[4 * (DL_MAX_OP_INPUTS + 1)];
    unsigned char is_weight[DL_MAX_OP_INPUTS];
    dl_op op;
    dl_error why;
    dl_session_op_view(s, i, &s->fuse.attrs[i], &op, in, &out);
    dl_session_weight_flags(s, i, is_weight);
    in[0].device = out.device = be->device;
    dl_op_apply_format(&op, in, &out, is_weight, fout, strides);
    dl_tensor_apply_format(&in[0], fin, strides); /* the output's format everywhere, then the input's own */
    return dl_backend_accepts(be, &op, &why);
}

/* Node i as a layout view (layout_view.c) on the host: its output's format into *pick and its
 * input's place into s->view_in[i], where its input is (or will be read) in the view's first
 * layout and its backend takes the two formats; else nothing changes. A transpose to rows is a
 * view where its input was stored channels-last; one to channels-last where the plan asks the
 * host's convs channels-last (the ops after it follow its layout, as after such a conv). */
static int choose_view(dl_session *s, int i, dl_format *pick) {
    const int kind = dl_layout_view_of(s, i), d = s->node_dom[i];
    if (kind == DL_VIEW_NONE || d != 0) return 0;
    dl_format fin = {pick->dtype, DL_LAYOUT_ROW_MAJOR}, fout = {pick->dtype, DL_LAYOUT_CHANNELS_LAST};
    if (kind == DL_VIEW_TO_ROWS) {
        const dl_store *home = &s->places[dl_session_home(s, s->g->nodes[i].inputs[0])];
        if (home->dom != d || home->fmt.layout != DL_LAYOUT_CHANNELS_LAST) return 0;
        fin = home->fmt;
        fout = (dl_format){home->fmt.dtype, DL_LAYOUT_ROW_MAJOR};
    } else if (!dl_layout_view_ask(s->layout_ask)) {
        return 0;
    }
    if (!view_accepted(s, s->place.be[i], i, fin, fout)) return 0;
    const int at = dl_place_index(s, d, fin);
    if (at < 0) return -1;
    s->view_in[i] = at;
    *pick = fout;
    return 0;
}

dl_status dl_choose_storage(dl_session *s, dl_error *err) {
    s->n_places = 0;
    dl_place_index(s, 0, F32_ROW_MAJOR);
    for (int i = 0; i < s->g->n_nodes; i++) {
        s->view_in[i] = -1;
        if (s->fuse.into[i] >= 0) continue;
        dl_format pick = F32_ROW_MAJOR;
        dl_error why;
        if (!dl_session_accepts_as(s, s->place.be[i], i, &s->fuse.attrs[i], &pick, &why)) pick = F32_ROW_MAJOR;
        int p = choose_view(s, i, &pick) < 0 ? -1 : dl_place_index(s, s->node_dom[i], pick);
        /* the row-major twin too, so dl_place_of_value always finds room */
        if (p < 0 || dl_place_index(s, s->node_dom[i], (dl_format){pick.dtype, DL_LAYOUT_ROW_MAJOR}) < 0)
            return dl_fail(err, DL_E_UNSUPPORTED, "too many storage places (domains x formats)");
        s->node_place[i] = p;
    }
    return DL_OK;
}

/* ---- moving values ---- */

dl_status dl_dom_copy(dl_session *s, int to, void *dst, int from, const void *src, size_t n, void *staging,
                      dl_error *err) {
    dl_error e = {{0}};
    dl_status st = DL_OK;
    if (from == 0 && to == 0) memcpy(dst, src, n);
    else if (from == 0) st = s->doms[to].be->copy(s->doms[to].be->self, dst, src, n, DL_COPY_HOST_TO_DEVICE, &e);
    else if (to == 0) st = s->doms[from].be->copy(s->doms[from].be->self, dst, src, n, DL_COPY_DEVICE_TO_HOST, &e);
    else {
        st = s->doms[from].be->copy(s->doms[from].be->self, staging, src, n, DL_COPY_DEVICE_TO_HOST, &e);
        if (st == DL_OK && DL_BACKEND_HAS(s->doms[from].be, synchronize))
            st = s->doms[from].be->synchronize(s->doms[from].be->self, &e);
        if (st == DL_OK) st = s->doms[to].be->copy(s->doms[to].be->self, dst, staging, n, DL_COPY_HOST_TO_DEVICE, &e);
    }
    if (st != DL_OK)
        return dl_fail(err, DL_E_RUNTIME, "copy %s -> %s: %s", dl_domain_name(s, from), dl_domain_name(s, to), e.msg);
    return DL_OK;
}

/* The device backend that would convert from place a to place b in one call, and the direction. */
static const dl_backend *converter(const dl_session *s, int a, int b, dl_copy_kind *kind) {
    int da = s->places[a].dom, db = s->places[b].dom;
    const dl_backend *be = NULL;
    if (da == 0 && db != 0) be = s->doms[db].be, *kind = DL_COPY_HOST_TO_DEVICE;
    else if (da != 0 && db == 0) be = s->doms[da].be, *kind = DL_COPY_DEVICE_TO_HOST;
    else if (da != 0 && da == db) be = s->doms[da].be, *kind = DL_COPY_DEVICE_TO_DEVICE;
    if (!be || DL_ABI_MINOR_OF(be->abi_version) < 3 || !DL_BACKEND_HAS(be, supports_convert) ||
        !DL_BACKEND_HAS(be, convert))
        return NULL;
    return be;
}

dl_status dl_step_plan_transfer(dl_session *s, dl_step *st, dl_error *err) {
    int a = st->src_place, b = st->place, v = st->value;
    dl_format fa = s->places[a].fmt, fb = s->places[b].fmt;
    int integer = is_integer(s, v); /* moved as it is, whatever the places' formats */
    int moves = st->src_dom != st->dom, casts = !integer && !dl_dtype_eq(fa.dtype, fb.dtype);
    int transposes = !integer && fa.layout != fb.layout;
    static const char *const what[8] = {"copy", "transpose",      "cast",      "cast+transpose",
                                        "copy", "copy+transpose", "copy+cast", "copy+cast+transpose"};
    st->what = what[moves << 2 | casts << 1 | transposes];
    char sa[32] = "", sb[32] = "";
    if (integer) {
        snprintf(sa, sizeof sa, " int64");
        snprintf(sb, sizeof sb, " int64");
    } else if (casts || transposes || !dl_dtype_is_f32(fa.dtype)) {
        dl_format_str(fa, sa + 1, sizeof sa - 1), sa[0] = ' ';
        dl_format_str(fb, sb + 1, sizeof sb - 1), sb[0] = ' ';
    }
    int r = moves ? asprintf(&st->label, "%s%s->%s%s", dl_domain_name(s, st->src_dom), casts || transposes ? sa : "",
                             dl_domain_name(s, st->dom), sb)
                  : asprintf(&st->label, "%s%s->%s", dl_domain_name(s, st->dom), sa, sb + 1);
    if (r < 0) st->label = NULL;
    s->casts += casts || transposes;
    if (!casts && !transposes) {
        st->xfer = DL_XFER_COPY;
        if (st->src_dom != 0 && st->dom != 0)
            return dl_session_alloc(s, 0, dl_session_place_bytes(s, v, a), &st->staging, err);
        return DL_OK;
    }
    if (st->src_dom == 0 && st->dom == 0) return st->xfer = DL_XFER_HOST, DL_OK;
    dl_copy_kind kind;
    const dl_backend *be = converter(s, a, b, &kind);
    if (be) {
        int64_t sa4[4], sb4[4];
        dl_tensor src = dl_place_view(s, v, a, sa4), dst = dl_place_view(s, v, b, sb4);
        if (be->supports_convert(be->self, &dst, &src, kind)) return st->xfer = DL_XFER_BACKEND, DL_OK;
    }
    st->xfer = DL_XFER_VIA_HOST;
    dl_status rc = DL_OK;
    if (st->src_dom != 0) rc = dl_session_alloc(s, 0, dl_session_place_bytes(s, v, a), &st->staging, err);
    if (rc == DL_OK && st->dom != 0) rc = dl_session_alloc(s, 0, st->bytes, &st->staging2, err);
    return rc;
}

static dl_status host_convert(const dl_tensor *dst, const dl_tensor *src, dl_error *err) {
    if (!dl_convert_host(dst, src))
        return dl_fail(err, DL_E_UNSUPPORTED, "cannot convert %s to %s", dl_dtype_name(src->dtype),
                       dl_dtype_name(dst->dtype));
    return DL_OK;
}

static dl_status sync_dom(dl_session *s, int d, dl_error *err) {
    const dl_backend *be = s->doms[d].be;
    dl_error e = {{0}};
    if (d && DL_BACKEND_HAS(be, synchronize) && be->synchronize(be->self, &e) != DL_OK)
        return dl_fail(err, DL_E_RUNTIME, "%s: %s", be->name, e.msg);
    return DL_OK;
}

/* Converts host or device data `src` (place a) into `dst` (place b) for value v, by the plan of
 * the transfer `x` (staging buffers as dl_step_plan_transfer made them). */
static dl_status transfer(dl_session *s, int v, int a, const void *src, int b, void *dst, dl_xfer x, void *staging,
                          void *staging2, dl_error *err) {
    int da = s->places[a].dom, db = s->places[b].dom;
    int64_t sa4[4], sb4[4];
    dl_tensor ts = dl_place_view(s, v, a, sa4), td = dl_place_view(s, v, b, sb4);
    ts.data = (void *)src, td.data = dst;
    if (x == DL_XFER_COPY) return dl_dom_copy(s, db, dst, da, src, dl_session_place_bytes(s, v, b), staging, err);
    if (x == DL_XFER_HOST) return host_convert(&td, &ts, err);
    if (x == DL_XFER_BACKEND) {
        dl_copy_kind kind;
        const dl_backend *be = converter(s, a, b, &kind);
        dl_error e = {{0}};
        if (be->convert(be->self, &td, &ts, kind, &e) != DL_OK)
            return dl_fail(err, DL_E_RUNTIME, "%s: converting '%s': %s", be->name, s->g->values[v].name, e.msg);
        return DL_OK;
    }
    dl_status rc = DL_OK; /* through host memory */
    if (da != 0) {
        rc = dl_dom_copy(s, 0, staging, da, src, dl_session_place_bytes(s, v, a), NULL, err);
        if (rc == DL_OK) rc = sync_dom(s, da, err);
        ts.data = staging, ts.device = (dl_device){DL_DEVICE_CPU, 0};
    }
    dl_tensor th = td;
    if (db != 0) th.data = staging2, th.device = (dl_device){DL_DEVICE_CPU, 0};
    if (rc == DL_OK) rc = host_convert(&th, &ts, err);
    if (rc == DL_OK && db != 0) rc = dl_dom_copy(s, db, dst, 0, staging2, dl_session_place_bytes(s, v, b), NULL, err);
    return rc;
}

dl_status dl_step_transfer_from(dl_session *s, const dl_step *st, const void *src, dl_error *err) {
    int v = st->value;
    return transfer(s, v, st->src_place, src, st->place, BUF(s, v, st->place), st->xfer, st->staging, st->staging2,
                    err);
}

dl_status dl_step_transfer(dl_session *s, const dl_step *st, dl_error *err) {
    return dl_step_transfer_from(s, st, BUF(s, st->value, st->src_place), err);
}

dl_status dl_place_weight(dl_session *s, int v, int p, dl_error *err) {
    if (BUF(s, v, p)) return DL_OK;
    int d = s->places[p].dom;
    int64_t s4[4];
    dl_tensor dst = dl_place_view(s, v, p, s4), src = dst;
    src.data = (void *)dl_session_weight_stored(s, v, &src.dtype);
    src.device = (dl_device){DL_DEVICE_CPU, 0};
    if (!src.data) return dl_fail(err, DL_E_NOMEM, "no data for weight '%s'", s->g->values[v].name);
    int same = dl_dtype_eq(src.dtype, dst.dtype);
    if (same && d == 0) { /* host memory in its own dtype: used where it is (mapped or folded) */
        BUF(s, v, p) = src.data;
        return DL_OK;
    }
    size_t n = dl_session_place_bytes(s, v, p);
    dl_status st = dl_session_alloc(s, d, n, &BUF(s, v, p), err);
    if (st != DL_OK) return st;
    s->owned[(size_t)v * DL_MAX_PLACES + (size_t)p] = 1;
    s->mem[d].weights += n;
    dst.data = BUF(s, v, p);
    void *tmp = NULL; /* host staging when the host converts for a device */
    if (same) st = dl_dom_copy(s, d, dst.data, 0, src.data, n, NULL, err);
    else if (d == 0) st = host_convert(&dst, &src, err);
    else {
        dl_copy_kind kind;
        const dl_backend *be = converter(s, 0, p, &kind);
        dl_error e = {{0}};
        if (be && be->supports_convert(be->self, &dst, &src, kind)) {
            if (be->convert(be->self, &dst, &src, kind, &e) != DL_OK)
                st =
                    dl_fail(err, DL_E_RUNTIME, "%s: converting weight '%s': %s", be->name, s->g->values[v].name, e.msg);
        } else { /* converted in host memory, then copied */
            dl_tensor h = dst;
            h.device = src.device;
            st = dl_session_alloc(s, 0, n, &tmp, err);
            h.data = tmp;
            if (st == DL_OK) st = host_convert(&h, &src, err);
            if (st == DL_OK) st = dl_dom_copy(s, d, dst.data, 0, tmp, n, NULL, err);
        }
    }
    if (st == DL_OK && d) st = sync_dom(s, d, err); /* a queued copy may still read its source */
    free(tmp);
    return st;
}
