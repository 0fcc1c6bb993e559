/* shape.c — shape inference: every activation's and weight's shape from the model inputs, with
 * errors that name the layer and where it is declared. Follows PyTorch's size formulas. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

static dl_status bad(const dl_graph *g, const dl_node *n, dl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dl_status bad(const dl_graph *g, const dl_node *n, dl_error *err, const char *fmt, ...) {
    char where[300], msg[DL_ERROR_LEN];
    dl_graph_where(g, n->loc, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dl_fail(err, DL_E_INVALID, "%s%s '%s': %s", where, dl_op_kind_name(n->kind), n->name, msg);
}

static void set_shape(dl_value *v, int ndim, const int64_t *shape) {
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
}

/* Output size of a window op along one axis, PyTorch's rule; <= 0 when the window does not fit. */
static int64_t window_out(int64_t in, int k, int s, int pb, int pe, int d, int ceil_mode) {
    int64_t span = in + pb + pe - (int64_t)d * (k - 1) - 1;
    if (span < 0) return 0;
    int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    /* With ceil_mode the last window must start inside the input or the left padding. */
    if (ceil_mode && (out - 1) * s >= in + pb) out--;
    return out;
}

static dl_status infer_window(const dl_graph *g, const dl_node *n, const dl_value *x, int64_t out[4], dl_error *err) {
    const dl_op_attrs *a = &n->attrs;
    if (x->ndim != 4) return bad(g, n, err, "needs a 4-D input [N, C, H, W], got %d-D", x->ndim);
    for (int i = 0; i < 2; i++) {
        int k = a->kernel[i], d = n->kind == DL_OP_CONV2D ? a->dilation[i] : 1;
        if (n->kind != DL_OP_CONV2D && (a->pad_begin[i] > k / 2 || a->pad_end[i] > k / 2))
            return bad(g, n, err, "padding %d is more than half the kernel %d", a->pad_begin[i] > k / 2 ? a->pad_begin[i] : a->pad_end[i], k);
        out[2 + i] = window_out(x->shape[2 + i], k, a->stride[i], a->pad_begin[i], a->pad_end[i], d,
                                n->kind == DL_OP_CONV2D ? 0 : a->ceil_mode);
        if (out[2 + i] < 1) {
            char s[96];
            dl_shape_str(x->shape, x->ndim, s, sizeof s);
            return bad(g, n, err, "kernel %dx%d (dilation %d) does not fit the padded input %s", a->kernel[0], a->kernel[1], d, s);
        }
    }
    out[0] = x->shape[0];
    out[1] = x->shape[1];
    return DL_OK;
}

static int norm_axis(int axis, int ndim) { return axis < 0 ? axis + ndim : axis; }

static dl_status infer_node(dl_graph *g, dl_node *n, dl_error *err) {
    dl_value *x = &g->values[n->inputs[0]];
    dl_value *y = &g->values[n->output];
    dl_op_attrs *a = &n->attrs;
    int64_t s[DL_MAX_DIMS];
    char xs[128];
    dl_shape_str(x->shape, x->ndim, xs, sizeof xs);
    switch (n->kind) {
    case DL_OP_CONV2D: {
        if (x->ndim != 4) return bad(g, n, err, "needs a 4-D input [N, C, H, W], got %s", xs);
        int64_t c = x->shape[1];
        if (c % a->groups) return bad(g, n, err, "input channels %lld are not divisible by groups %d", (long long)c, a->groups);
        if (n->out_channels % a->groups) return bad(g, n, err, "filters %d are not divisible by groups %d", n->out_channels, a->groups);
        dl_status st = infer_window(g, n, x, s, err);
        if (st != DL_OK) return st;
        s[1] = n->out_channels;
        set_shape(y, 4, s);
        dl_value *w = &g->values[n->inputs[1]];
        int64_t ws[4] = {n->out_channels, c / a->groups, a->kernel[0], a->kernel[1]};
        set_shape(w, 4, ws);
        w->fan_in = (int)(ws[1] * ws[2] * ws[3]);
        if (n->has_bias) {
            dl_value *b = &g->values[n->inputs[2]];
            set_shape(b, 1, ws);
            b->fan_in = w->fan_in;
        }
        return DL_OK;
    }
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D: {
        dl_status st = infer_window(g, n, x, s, err);
        if (st == DL_OK) set_shape(y, 4, s);
        return st;
    }
    case DL_OP_GLOBAL_AVGPOOL:
        if (x->ndim != 4) return bad(g, n, err, "needs a 4-D input [N, C, H, W], got %s", xs);
        s[0] = x->shape[0], s[1] = x->shape[1], s[2] = s[3] = 1;
        set_shape(y, 4, s);
        return DL_OK;
    case DL_OP_LINEAR: {
        if (x->ndim != 2) return bad(g, n, err, "needs a 2-D input [N, features], got %s (add a flatten layer before it)", xs);
        s[0] = x->shape[0], s[1] = n->out_channels;
        set_shape(y, 2, s);
        dl_value *w = &g->values[n->inputs[1]];
        int64_t ws[2] = {n->out_channels, x->shape[1]};
        set_shape(w, 2, ws);
        w->fan_in = (int)x->shape[1];
        if (n->has_bias) {
            dl_value *b = &g->values[n->inputs[2]];
            set_shape(b, 1, ws);
            b->fan_in = w->fan_in;
        }
        return DL_OK;
    }
    case DL_OP_FLATTEN: {
        int axis = norm_axis(a->axis, x->ndim);
        if (axis < 0 || axis > x->ndim) return bad(g, n, err, "axis %d is out of range for input %s", a->axis, xs);
        int64_t lead = 1, rest = 1;
        for (int i = 0; i < x->ndim; i++) {
            if (i < axis) lead *= x->shape[i];
            else rest *= x->shape[i];
        }
        a->axis = axis;
        s[0] = lead, s[1] = rest;
        set_shape(y, 2, s);
        return DL_OK;
    }
    case DL_OP_SOFTMAX: {
        int axis = norm_axis(a->axis, x->ndim);
        if (axis < 0 || axis >= x->ndim) return bad(g, n, err, "axis %d is out of range for input %s", a->axis, xs);
        a->axis = axis;
        set_shape(y, x->ndim, x->shape);
        return DL_OK;
    }
    case DL_OP_RELU:
    case DL_OP_LEAKY_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
    case DL_OP_DROPOUT:
        set_shape(y, x->ndim, x->shape);
        return DL_OK;
    case DL_OP_ADD: {
        const dl_value *b = &g->values[n->inputs[1]];
        int same = b->ndim == x->ndim;
        for (int i = 0; same && i < x->ndim; i++) same = b->shape[i] == x->shape[i];
        if (!same) {
            char bs[128];
            dl_shape_str(b->shape, b->ndim, bs, sizeof bs);
            return bad(g, n, err, "inputs '%s' %s and '%s' %s have different shapes", x->name, xs, b->name, bs);
        }
        set_shape(y, x->ndim, x->shape);
        return DL_OK;
    }
    case DL_OP_CONCAT: {
        int axis = norm_axis(a->axis, x->ndim);
        if (axis < 0 || axis >= x->ndim) return bad(g, n, err, "axis %d is out of range for input %s", a->axis, xs);
        a->axis = axis;
        memcpy(s, x->shape, sizeof s);
        for (int i = 1; i < n->n_inputs; i++) {
            const dl_value *b = &g->values[n->inputs[i]];
            int ok = b->ndim == x->ndim;
            for (int d = 0; ok && d < x->ndim; d++) ok = d == axis || b->shape[d] == x->shape[d];
            if (!ok) {
                char bs[128];
                dl_shape_str(b->shape, b->ndim, bs, sizeof bs);
                return bad(g, n, err, "input '%s' %s does not match '%s' %s outside axis %d", b->name, bs, x->name, xs, axis);
            }
            s[axis] += b->shape[axis];
        }
        set_shape(y, x->ndim, s);
        return DL_OK;
    }
    case DL_OP_BATCHNORM: {
        if (x->ndim < 2) return bad(g, n, err, "needs an input with channels in dimension 1, got %s", xs);
        for (int i = 1; i <= 4; i++) set_shape(&g->values[n->inputs[i]], 1, &x->shape[1]);
        set_shape(y, x->ndim, x->shape);
        return DL_OK;
    }
    default: return bad(g, n, err, "unknown op");
    }
}

dl_status dl_graph_infer_shapes(dl_graph *g, int64_t batch, dl_error *err) {
    if (batch > 0)
        for (int i = 0; i < g->n_inputs; i++) g->values[g->inputs[i]].shape[0] = batch;
    for (int i = 0; i < g->n_nodes; i++) {
        dl_status st = infer_node(g, &g->nodes[i], err);
        if (st != DL_OK) return st;
        /* Guard the element count against overflow of sizes computed from it later. */
        const dl_value *y = &g->values[g->nodes[i].output];
        double numel = 1;
        for (int d = 0; d < y->ndim; d++) numel *= (double)y->shape[d];
        if (numel > 4e12) return bad(g, &g->nodes[i], err, "output of %.3g elements is too large", numel);
    }
    return DL_OK;
}
