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
        int k = a->kernel[i], d = n->kind == DL_OP_AVGPOOL2D ? 1 : a->dilation[i], ext = d * (k - 1) + 1;
        /* A pool's window must always see an input element (ONNX allows up to this, PyTorch half) */
        if (n->kind != DL_OP_CONV2D && (a->pad_begin[i] >= ext || a->pad_end[i] >= ext))
            return bad(g, n, err, "padding %d is not less than the window extent %d", a->pad_begin[i] >= ext ? a->pad_begin[i] : a->pad_end[i], ext);
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

/* numpy broadcasting of a and b (aligned at the last dimension) into s; 0 if they do not. */
static int broadcast(const int64_t *as, int an, const int64_t *bs, int bn, int64_t *s, int *sn) {
    int n = an > bn ? an : bn;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - an ? 1 : as[i - (n - an)], db = i < n - bn ? 1 : bs[i - (n - bn)];
        if (da != db && da != 1 && db != 1) return 0;
        s[i] = da == 1 ? db : da;
    }
    *sn = n;
    return 1;
}

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
        int nd;
        if (!broadcast(x->shape, x->ndim, b->shape, b->ndim, s, &nd)) {
            char bs[128];
            dl_shape_str(b->shape, b->ndim, bs, sizeof bs);
            return bad(g, n, err, "inputs '%s' %s and '%s' %s do not broadcast to one shape", x->name, xs, b->name, bs);
        }
        set_shape(y, nd, s);
        return DL_OK;
    }
    case DL_OP_MATMUL: {
        const dl_value *b = &g->values[n->inputs[1]];
        char bs[128];
        dl_shape_str(b->shape, b->ndim, bs, sizeof bs);
        if (x->ndim < 2 || b->ndim < 2) return bad(g, n, err, "needs operands of at least 2 dimensions, got %s and %s", xs, bs);
        int64_t m = x->shape[x->ndim - (a->trans_a ? 1 : 2)], k = x->shape[x->ndim - (a->trans_a ? 2 : 1)];
        int64_t kb = b->shape[b->ndim - (a->trans_b ? 1 : 2)], nn = b->shape[b->ndim - (a->trans_b ? 2 : 1)];
        if (k != kb) return bad(g, n, err, "inner dimensions differ: '%s' %s%s has %lld, '%s' %s%s has %lld", x->name, xs, a->trans_a ? " (transposed)" : "", (long long)k, b->name, bs, a->trans_b ? " (transposed)" : "", (long long)kb);
        int nd;
        if (!broadcast(x->shape, x->ndim - 2, b->shape, b->ndim - 2, s, &nd))
            return bad(g, n, err, "batch dimensions of %s and %s do not broadcast", xs, bs);
        s[nd] = m, s[nd + 1] = nn;
        set_shape(y, nd + 2, s);
        if (n->n_inputs == 3) {
            const dl_value *c = &g->values[n->inputs[2]];
            int64_t t[DL_MAX_DIMS];
            int tn, ok = c->ndim <= y->ndim && broadcast(y->shape, y->ndim, c->shape, c->ndim, t, &tn);
            for (int i = 0; ok && i < tn; i++) ok = t[i] == y->shape[i];
            if (!ok) {
                char cs[128], ys[128];
                dl_shape_str(c->shape, c->ndim, cs, sizeof cs);
                dl_shape_str(y->shape, y->ndim, ys, sizeof ys);
                return bad(g, n, err, "'%s' %s does not broadcast to the product's shape %s", c->name, cs, ys);
            }
        }
        return DL_OK;
    }
    case DL_OP_RESHAPE: {
        int64_t known = 1, total = dl_value_numel(x);
        int infer = -1;
        for (int i = 0; i < n->reshape_nd; i++) {
            s[i] = n->reshape[i];
            if (s[i] == 0) {
                if (i >= x->ndim) return bad(g, n, err, "dimension %d is 0 (copy the input's) but input %s has only %d", i, xs, x->ndim);
                s[i] = x->shape[i];
            }
            if (s[i] == -1) infer = i;
            else known *= s[i];
        }
        if (infer >= 0 && known > 0 && total % known == 0) s[infer] = total / known;
        else if (infer >= 0) known = -1;
        if (infer < 0 ? known != total : known < 0) {
            char ts[128];
            dl_shape_str(n->reshape, n->reshape_nd, ts, sizeof ts);
            return bad(g, n, err, "cannot reshape %s (%lld elements) to %s", xs, (long long)total, ts);
        }
        set_shape(y, n->reshape_nd, s);
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
