/* op_check.c — the exact op check the in-tree plugins' supports() share, driven by the op table:
 * what passes here the cpu and cuda plugins can run (f32, NCHW, dense), so nothing they accept
 * fails later; dl_op_check_as adds the storage dtypes and layouts a plugin converts. Also broadcast indexing and
 * dl_op_geom (see op_check.h). */
#include "op_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_rows.h"
#include "tensor_convert.h"

/* Inputs an op of this row takes: its activations, then its weights (optional ones may be absent). */
static void input_range(const dl_op_def *d, int *lo, int *hi) {
    *lo = d->min_inputs, *hi = d->max_inputs;
    for (const dl_weight_def *w = d->weights; w && w->suffix; w++) {
        *lo += !w->optional;
        (*hi)++;
    }
}

/* A dtype for messages: "f32", "f16", "bf16", else as DLPack spells it ("int32", "float64x4"). */
static const char *dtype_txt(dl_dtype d, char *buf, size_t len) {
    static const char *const codes[] = {"int", "uint", "float", "opaque", "bfloat"};
    if (dl_dtype_is_float(d)) return dl_dtype_name(d);
    const char *code = d.code < sizeof codes / sizeof *codes ? codes[d.code] : "code?";
    if (d.lanes == 1) snprintf(buf, len, "%s%u", code, (unsigned)d.bits);
    else snprintf(buf, len, "%s%ux%u", code, (unsigned)d.bits, (unsigned)d.lanes);
    return buf;
}

/* 1 if tensor t's dtype and layout are among those `formats` (DL_ACCEPT_*) adds to f32 row-major. */
static int format_ok(const dl_tensor *t, unsigned formats, const char *what, int i, dl_error *why) {
    dl_dtype d = t->dtype;
    int ok = dl_dtype_is_f32(d) || ((formats & DL_ACCEPT_F16) && dl_dtype_eq(d, DL_F16)) ||
             ((formats & DL_ACCEPT_BF16) && dl_dtype_eq(d, DL_BF16));
    char name[32];
    if (!ok) DL_NO(why, "%s%.0d is %s, not a dtype this backend takes", what, i, dtype_txt(d, name, sizeof name));
    if (t->byte_offset || t->ndim < 0 || t->ndim > DL_MAX_DIMS) DL_NO(why, "only dense tensors up to 8-D");
    dl_layout l = dl_tensor_layout(t);
    if (l != DL_LAYOUT_ROW_MAJOR && !(l == DL_LAYOUT_CHANNELS_LAST && (formats & DL_ACCEPT_CHANNELS_LAST)))
        DL_NO(why, "%s%.0d is not in a layout this backend takes (%s)", what, i,
              l == DL_LAYOUT_CHANNELS_LAST ? "channels-last" : "strided");
    return 1;
}

int dl_op_check(const dl_op *op, dl_error *why) { return dl_op_check_as(op, 0, why); }

/* The residual input of a fused add (the last): an activation of the output's shape, dtype and
 * layout. Then the op without it is checked as any other. */
static int residual_ok(const dl_op *op, const dl_op_def *d, unsigned formats, dl_error *why) {
    if (!(d->flags & DL_OPF_RESIDUAL)) DL_NO(why, "a residual add cannot be fused into %s", d->name);
    if (!(formats & DL_ACCEPT_RESIDUAL)) DL_NO(why, "this backend does not fuse a residual add into %s", d->name);
    if (op->n_inputs < 2 || op->n_outputs != 1) DL_NO(why, "%s with a residual add lacks an input", d->name);
    const dl_tensor *r = &op->inputs[op->n_inputs - 1], *y = &op->outputs[0];
    char rs[128], ys[128];
    dl_shape rshape = {0};
    if (r->ndim >= 0 && r->ndim <= DL_MAX_DIMS) dl_shape_of(r, &rshape);
    if (r->ndim != rshape.ndim || !dl_shape_eq(&rshape, y) || !dl_dtype_eq(r->dtype, y->dtype) || r->byte_offset ||
        dl_tensor_layout(r) != dl_tensor_layout(y))
        DL_NO(why, "the residual %s %s differs from the output %s %s in shape, dtype or layout",
              dl_shape_txt(r, rs, sizeof rs), dl_dtype_name(r->dtype), dl_shape_txt(y, ys, sizeof ys),
              dl_dtype_name(y->dtype));
    return 1;
}

int dl_op_check_as(const dl_op *op, unsigned formats, dl_error *why) {
    const dl_op_def *d = dl_op_def_of(op->kind);
    if (!d) DL_NO(why, "op kind %d is unknown to this plugin", op->kind);
    uint32_t minor = dl_op_min_minor(op);
    if (!op->attrs || op->attrs->struct_size < dl_op_attrs_size(minor))
        DL_NO(why, "%s needs the ABI %d.%u attributes", d->name, DL_ABI_MAJOR, minor);
    if (minor >= 8 && op->attrs->residual) {
        if (!residual_ok(op, d, formats, why)) return 0;
        dl_op inner = *op;
        dl_op_attrs a = *op->attrs;
        a.residual = 0;
        inner.attrs = &a;
        inner.n_inputs--;
        return dl_op_check_as(&inner, formats & ~(unsigned)DL_ACCEPT_RESIDUAL, why);
    }
    int lo, hi;
    input_range(d, &lo, &hi);
    if (op->n_outputs != 1) DL_NO(why, "%s has one output, not %d", d->name, op->n_outputs);
    if (op->n_inputs < lo || op->n_inputs > hi)
        DL_NO(why, "%s takes %d to %d inputs, not %d", d->name, lo, hi, op->n_inputs);
    for (int i = 0; i <= op->n_inputs; i++) { /* dlrun's tensors have a size: no 0-D, no empty ones */
        const dl_tensor *t = i < op->n_inputs ? &op->inputs[i] : &op->outputs[0];
        if (t->ndim < 1 || t->ndim > DL_MAX_DIMS) DL_NO(why, "a tensor of rank %d (1 to 8 are supported)", t->ndim);
        for (int k = 0; k < t->ndim; k++)
            if (t->shape[k] < 1) DL_NO(why, "an empty tensor (dimension %d is %lld)", k, (long long)t->shape[k]);
    }
    for (int i = 0; i < op->n_inputs; i++) {
        const dl_tensor *t = &op->inputs[i];
        if (d->int_inputs >> i & 1) { /* gather's indices: int64, dense row-major, whatever the formats */
            char name[32];
            if (!dl_dtype_eq(t->dtype, DL_I64))
                DL_NO(why, "input %d is %s, not int64", i + 1, dtype_txt(t->dtype, name, sizeof name));
            if (t->byte_offset || t->ndim < 1 || t->ndim > DL_MAX_DIMS || t->strides)
                DL_NO(why, "input %d: only dense row-major int64 tensors up to 8-D", i + 1);
        } else if (!format_ok(t, formats, "input ", i + 1, why)) {
            return 0;
        }
    }
    if (!format_ok(&op->outputs[0], formats, "the output", 0, why)) return 0;
    int act = op->attrs->activation;
    int act_ok =
        act == DL_ACT_RELU || ((formats & DL_ACCEPT_ACTIVATIONS) && act > DL_ACT_RELU && act <= DL_ACT_SIGMOID);
    if (act != DL_ACT_NONE && !(act_ok && (d->flags & DL_OPF_FUSES_RELU)))
        DL_NO(why, "fused activation %d is not supported after %s", act, d->name);
    if ((d->flags & DL_OPF_AXIS) && op->attrs->axis < 0) DL_NO(why, "axis %d is negative", op->attrs->axis);
    dl_shape want;
    if (!d->infer(op, NULL, &want, why)) return 0;
    const dl_tensor *y = &op->outputs[0];
    if (!dl_shape_eq(&want, y)) {
        char ws[128], ys[128];
        dl_shape_str(want.d, want.ndim, ws, sizeof ws);
        DL_NO(why, "output shape %s does not follow from the inputs (expected %s)", dl_shape_txt(y, ys, sizeof ys), ws);
    }
    return 1;
}

int dl_op_is_elementwise(int kind) {
    const dl_op_def *d = dl_op_def_of(kind);
    return d && (d->flags & DL_OPF_ELEMENTWISE);
}

void dl_bcast_strides(int tnd, const int64_t *ts, int ynd, const int64_t *ys, int64_t *st) {
    int64_t step = 1;
    for (int d = ynd - 1; d >= 0; d--) {
        int td = d - (ynd - tnd); /* t's dimension aligned with y's dimension d, if any */
        int64_t extent = td >= 0 ? ts[td] : 1;
        st[d] = extent == 1 && ys[d] != 1 ? 0 : step;
        step *= extent;
    }
}

int64_t dl_bcast_offset(int64_t i, int nd, const int64_t *ys, const int64_t *st) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0 && i; d--) {
        off += (i % ys[d]) * st[d];
        i /= ys[d];
    }
    return off;
}

int dl_merge_dims(int nd, int64_t *s, int64_t *const *st, int k) {
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (s[d] == 1) continue; /* its coordinate is always 0 */
        int merge = m > 0;
        for (int j = 0; j < k && merge; j++) merge = st[j][m - 1] == st[j][d] * s[d];
        if (merge) {
            s[m - 1] *= s[d];
            for (int j = 0; j < k; j++) st[j][m - 1] = st[j][d];
            continue;
        }
        s[m] = s[d];
        for (int j = 0; j < k; j++) st[j][m] = st[j][d];
        m++;
    }
    if (m > 0) return m;
    s[0] = 1;
    for (int j = 0; j < k; j++) st[j][0] = 0;
    return 1;
}

int dl_op_geom_init(dl_op_geom *g, const dl_op *op) {
    memset(g, 0, sizeof *g);
    g->kind = (dl_op_kind)op->kind;
    /* a host of an older ABI passes a shorter struct: copy what it has, the rest stays 0 */
    size_t have = op->attrs->struct_size < sizeof g->a ? op->attrs->struct_size : sizeof g->a;
    memcpy(&g->a, op->attrs, have);
    g->n_inputs = op->n_inputs;
    g->xnd = op->inputs[0].ndim;
    g->ynd = op->outputs[0].ndim;
    memcpy(g->xs, op->inputs[0].shape, (size_t)g->xnd * sizeof(int64_t));
    memcpy(g->ys, op->outputs[0].shape, (size_t)g->ynd * sizeof(int64_t));
    if (op->n_inputs > 1)
        g->bnd = op->inputs[1].ndim, memcpy(g->bs, op->inputs[1].shape, (size_t)g->bnd * sizeof(int64_t));
    if (op->n_inputs > 2)
        g->cnd = op->inputs[2].ndim, memcpy(g->cs, op->inputs[2].shape, (size_t)g->cnd * sizeof(int64_t));
    g->numel = dl_tensor_numel(&op->outputs[0]);
    g->residual = dl_op_residual(op);
    g->has_bias = (g->kind == DL_OP_CONV2D || g->kind == DL_OP_LINEAR || g->kind == DL_OP_CONV_TRANSPOSE2D ||
                   g->kind == DL_OP_CONV3D) &&
                  op->n_inputs - (g->residual > 0) == 3;
    if (g->kind == DL_OP_CONCAT) {
        g->cat_len = malloc((size_t)op->n_inputs * sizeof *g->cat_len);
        if (!g->cat_len) return 0;
        for (int i = 0; i < op->n_inputs; i++) g->cat_len[i] = op->inputs[i].shape[g->a.axis];
    }
    return 1;
}

void dl_op_geom_free(dl_op_geom *g) {
    free(g->cat_len);
    g->cat_len = NULL;
}
