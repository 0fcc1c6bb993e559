/* model_yaml.c — reads a YAML model (docs/model-format.md) into a dl_graph with libyaml's document
 * API. Every error is one line, "path:line:col: what is wrong", at the offending node. */
#define _POSIX_C_SOURCE 200809L
#include "model_yaml.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct reader {
    const char *path;
    yaml_document_t *doc;
    dl_graph *g;
    dl_error *err;
} reader;

static dl_srcloc loc_of(const yaml_node_t *n) {
    return (dl_srcloc){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

static dl_status failat(reader *r, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dl_status failat(reader *r, const yaml_node_t *n, const char *fmt, ...) {
    char msg[DL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n) dl_fail(r->err, DL_E_INVALID, "%s:%lu:%lu: %s", r->path, (unsigned long)n->start_mark.line + 1,
                   (unsigned long)n->start_mark.column + 1, msg);
    else dl_fail(r->err, DL_E_INVALID, "%s: %s", r->path, msg);
    return DL_E_INVALID;
}

static yaml_node_t *node(reader *r, int id) { return yaml_document_get_node(r->doc, id); }

static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static const char *kind_name(const yaml_node_t *n) {
    switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

static dl_status get_string(reader *r, const yaml_node_t *n, const char *what, const char **out) {
    const char *s = scalar(n);
    if (!s || !*s) return failat(r, n, "%s must be a non-empty string, not %s", what, s ? "empty" : kind_name(n));
    *out = s;
    return DL_OK;
}

static dl_status get_int(reader *r, const yaml_node_t *n, const char *what, long lo, long hi, int *out) {
    const char *s = scalar(n);
    if (!s) return failat(r, n, "%s must be an integer, not %s", what, kind_name(n));
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno) return failat(r, n, "%s must be an integer, not '%s'", what, s);
    if (v < lo || v > hi) {
        if (hi == INT_MAX) return failat(r, n, "%s must be at least %ld, not %ld", what, lo, v);
        return failat(r, n, "%s must be between %ld and %ld, not %ld", what, lo, hi, v);
    }
    *out = (int)v;
    return DL_OK;
}

static dl_status get_bool(reader *r, const yaml_node_t *n, const char *what, int *out) {
    const char *s = scalar(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes"))) return *out = 1, DL_OK;
    if (s && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no"))) return *out = 0, DL_OK;
    return failat(r, n, "%s must be true or false, not %s%s%s", what, s ? "'" : "", s ? s : kind_name(n), s ? "'" : "");
}

static dl_status get_float(reader *r, const yaml_node_t *n, const char *what, double *out) {
    const char *s = scalar(n);
    if (!s) return failat(r, n, "%s must be a number, not %s", what, kind_name(n));
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v)) return failat(r, n, "%s must be a number, not '%s'", what, s);
    *out = v;
    return DL_OK;
}

/* An int or a list of `count` ints (count 2; padding also accepts 4). Fills out[0..n-1]. */
static dl_status get_ints(reader *r, const yaml_node_t *n, const char *what, int lo, int *out,
                          int max_count, int *count) {
    if (n->type == YAML_SCALAR_NODE) {
        dl_status st = get_int(r, n, what, lo, INT_MAX, &out[0]);
        *count = 1;
        return st;
    }
    if (n->type != YAML_SEQUENCE_NODE)
        return failat(r, n, "%s must be an integer or a list of integers, not %s", what, kind_name(n));
    int len = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (len != 2 && !(max_count == 4 && len == 4))
        return failat(r, n, "%s must have %s values, not %d", what, max_count == 4 ? "1, 2 or 4" : "1 or 2", len);
    for (int i = 0; i < len; i++) {
        dl_status st = get_int(r, node(r, n->data.sequence.items.start[i]), what, lo, INT_MAX, &out[i]);
        if (st != DL_OK) return st;
    }
    *count = len;
    return DL_OK;
}

static dl_status get_pair(reader *r, const yaml_node_t *n, const char *what, int lo, int32_t pair[2]) {
    int v[4], c;
    dl_status st = get_ints(r, n, what, lo, v, 2, &c);
    if (st != DL_OK) return st;
    pair[0] = v[0];
    pair[1] = c == 1 ? v[0] : v[1];
    return DL_OK;
}

static dl_status get_padding(reader *r, const yaml_node_t *n, dl_op_attrs *a) {
    int v[4], c;
    dl_status st = get_ints(r, n, "padding", 0, v, 4, &c);
    if (st != DL_OK) return st;
    if (c == 1) v[1] = v[2] = v[3] = v[0];
    else if (c == 2) v[2] = v[0], v[3] = v[1];
    a->pad_begin[0] = v[0], a->pad_begin[1] = v[1], a->pad_end[0] = v[2], a->pad_end[1] = v[3];
    return DL_OK;
}

/* Iterates a mapping's pairs, rejecting non-scalar and duplicate keys. */
typedef dl_status (*pair_fn)(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *ctx);
static dl_status each_pair(reader *r, yaml_node_t *map, pair_fn fn, void *ctx) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(r, p->key), *v = node(r, p->value);
        const char *key = scalar(k);
        if (!key) return failat(r, k, "keys must be plain names, not %s", kind_name(k));
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const char *other = scalar(node(r, q->key));
            if (other && !strcmp(other, key)) return failat(r, k, "duplicate key '%s'", key);
        }
        dl_status st = fn(r, key, k, v, ctx);
        if (st != DL_OK) return st;
    }
    return DL_OK;
}

static yaml_node_t *lookup(reader *r, yaml_node_t *map, const char *key) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(r, p->key));
        if (k && !strcmp(k, key)) return node(r, p->value);
    }
    return NULL;
}

/* ---- inputs and constants ---- */

/* One `inputs:` entry {name, shape, dtype}, or (constant = 1) one `constants:` entry: a weight of
 * the given shape that layers may name as an input, bound from the weights file by its name. */
static dl_status read_tensor_decl(reader *r, yaml_node_t *m, int constant) {
    const char *what = constant ? "constant" : "input";
    if (m->type != YAML_MAPPING_NODE)
        return failat(r, m, "each %s must be a mapping {name, shape, dtype}, not %s", what, kind_name(m));
    yaml_node_t *name = NULL, *shape = NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(r, p->key), *v = node(r, p->value);
        const char *key = scalar(k);
        for (yaml_node_pair_t *q = m->data.mapping.pairs.start; key && q < p; q++) {
            const char *other = scalar(node(r, q->key));
            if (other && !strcmp(other, key)) return failat(r, k, "duplicate key '%s'", key);
        }
        if (key && !strcmp(key, "name")) name = v;
        else if (key && !strcmp(key, "shape")) shape = v;
        else if (key && !strcmp(key, "dtype")) {
            const char *d = scalar(v);
            if (!d || (strcmp(d, "f32") && strcmp(d, "float32")))
                return failat(r, v, "unsupported dtype '%s' (this version supports f32)", d ? d : kind_name(v));
        } else return failat(r, k, "unknown key '%s' in an %s (expected name, shape, dtype)", key ? key : "?", what);
    }
    if (!name) return failat(r, m, "%s needs 'name'", what);
    if (!shape) return failat(r, m, "%s needs 'shape'", what);
    const char *nm = NULL;
    dl_status st = get_string(r, name, constant ? "constant name" : "input name", &nm);
    if (st != DL_OK) return st;
    if (dl_graph_find_value(r->g, nm) >= 0) return failat(r, name, "duplicate name '%s'", nm);
    if (shape->type != YAML_SEQUENCE_NODE) return failat(r, shape, "shape must be a list of sizes, not %s", kind_name(shape));
    int nd = (int)(shape->data.sequence.items.top - shape->data.sequence.items.start);
    if (nd < 1 || nd > DL_MAX_DIMS)
        return failat(r, shape, "shape must have 1 to %d dimensions%s, not %d", DL_MAX_DIMS, constant ? "" : " (batch first)", nd);
    int v = dl_graph_add_value(r->g, nm, constant ? DL_VALUE_WEIGHT : DL_VALUE_INPUT, loc_of(m));
    if (v < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < nd; i++) {
        int d;
        st = get_int(r, node(r, shape->data.sequence.items.start[i]), "a dimension", 1, INT_MAX, &d);
        if (st != DL_OK) return st;
        r->g->values[v].shape[i] = d;
    }
    r->g->values[v].ndim = nd;
    if (constant) {
        r->g->values[v].constant = 1;
        r->g->values[v].init = DL_INIT_UNIFORM;
        return DL_OK;
    }
    int *p = realloc(r->g->inputs, (size_t)(r->g->n_inputs + 1) * sizeof *p);
    if (!p) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->inputs = p;
    p[r->g->n_inputs++] = v;
    return DL_OK;
}

/* ---- layers ---- */

/* Attribute keys each op accepts, besides name, op, inputs, backend. */
static const char *const op_keys[DL_OP_COUNT] = {
    [DL_OP_CONV2D] = "filters kernel stride padding dilation groups bias",
    [DL_OP_RELU] = "",
    [DL_OP_MAXPOOL2D] = "kernel stride padding dilation ceil_mode",
    [DL_OP_AVGPOOL2D] = "kernel stride padding ceil_mode count_include_pad",
    [DL_OP_GLOBAL_AVGPOOL] = "",
    [DL_OP_LINEAR] = "units bias",
    [DL_OP_FLATTEN] = "axis",
    [DL_OP_DROPOUT] = "rate",
    [DL_OP_SOFTMAX] = "axis",
    [DL_OP_ADD] = "",
    [DL_OP_CONCAT] = "axis",
    [DL_OP_BATCHNORM] = "eps",
    [DL_OP_LEAKY_RELU] = "alpha",
    [DL_OP_SIGMOID] = "",
    [DL_OP_CLIP] = "min max",
    [DL_OP_MATMUL] = "trans_a trans_b alpha beta",
    [DL_OP_RESHAPE] = "shape"};

static int has_word(const char *list, const char *w) {
    size_t n = strlen(w);
    if (n == 0) return 0; /* an empty key is never a known one (and strstr would not advance) */
    for (const char *p = list; (p = strstr(p, w)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

/* reshape's `shape`: 1 to 8 sizes: positive, 0 (the input's size in that dimension, so a batch
 * dimension follows --batch) or one -1 (what the others leave). */
static dl_status get_reshape(reader *r, yaml_node_t *v, dl_node *n) {
    if (v->type != YAML_SEQUENCE_NODE) return failat(r, v, "shape must be a list of sizes, not %s", kind_name(v));
    int nd = (int)(v->data.sequence.items.top - v->data.sequence.items.start), infer = 0;
    if (nd < 1 || nd > DL_MAX_DIMS) return failat(r, v, "shape must have 1 to %d dimensions, not %d", DL_MAX_DIMS, nd);
    for (int i = 0; i < nd; i++) {
        int d;
        yaml_node_t *item = node(r, v->data.sequence.items.start[i]);
        dl_status st = get_int(r, item, "a dimension", -1, INT_MAX, &d);
        if (st != DL_OK) return st;
        if (d == -1 && infer++) return failat(r, item, "only one dimension may be -1");
        n->reshape[i] = d;
    }
    n->reshape_nd = nd;
    return DL_OK;
}

typedef struct layer_ctx {
    int node;
    dl_op_kind kind;
    int have_kernel, have_stride, have_filters, have_units, have_shape;
    yaml_node_t *inputs;
} layer_ctx;

static dl_status layer_pair(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *vctx) {
    layer_ctx *lc = vctx;
    dl_node *n = &r->g->nodes[lc->node];
    dl_op_attrs *a = &n->attrs;
    const char *op = dl_op_kind_name(lc->kind);
    if (!strcmp(key, "name") || !strcmp(key, "op")) return DL_OK; /* read before */
    if (!strcmp(key, "inputs")) return lc->inputs = v, DL_OK;
    if (!strcmp(key, "backend")) {
        const char *b = NULL;
        dl_status st = get_string(r, v, "backend", &b);
        if (st == DL_OK && !(n->backend = strdup(b))) st = dl_fail(r->err, DL_E_NOMEM, "out of memory");
        return st;
    }
    if (!has_word(op_keys[lc->kind], key)) {
        if (op_keys[lc->kind][0])
            return failat(r, k, "%s '%s': unknown key '%s' (expected %s, or name, op, inputs, backend)", op, n->name, key, op_keys[lc->kind]);
        return failat(r, k, "%s '%s': unknown key '%s' (%s takes only name, op, inputs, backend)", op, n->name, key, op);
    }
    double f;
    dl_status st;
    if (!strcmp(key, "filters")) return lc->have_filters = 1, get_int(r, v, "filters", 1, INT_MAX, &n->out_channels);
    if (!strcmp(key, "units")) return lc->have_units = 1, get_int(r, v, "units", 1, INT_MAX, &n->out_channels);
    if (!strcmp(key, "kernel")) return lc->have_kernel = 1, get_pair(r, v, "kernel", 1, a->kernel);
    if (!strcmp(key, "stride")) return lc->have_stride = 1, get_pair(r, v, "stride", 1, a->stride);
    if (!strcmp(key, "dilation")) return get_pair(r, v, "dilation", 1, a->dilation);
    if (!strcmp(key, "padding")) return get_padding(r, v, a);
    if (!strcmp(key, "groups")) return get_int(r, v, "groups", 1, INT_MAX, &a->groups);
    if (!strcmp(key, "bias")) return get_bool(r, v, "bias", &n->has_bias);
    if (!strcmp(key, "ceil_mode")) return get_bool(r, v, "ceil_mode", &a->ceil_mode);
    if (!strcmp(key, "count_include_pad")) return get_bool(r, v, "count_include_pad", &a->count_include_pad);
    if (!strcmp(key, "axis")) return get_int(r, v, "axis", -DL_MAX_DIMS, DL_MAX_DIMS - 1, &a->axis);
    if (!strcmp(key, "eps")) {
        st = get_float(r, v, "eps", &f);
        if (st == DL_OK && !(f > 0)) return failat(r, v, "eps must be positive");
        a->epsilon = (float)f;
        return st;
    }
    if (!strcmp(key, "trans_a")) return get_bool(r, v, "trans_a", &a->trans_a);
    if (!strcmp(key, "trans_b")) return get_bool(r, v, "trans_b", &a->trans_b);
    if (!strcmp(key, "beta")) {
        st = get_float(r, v, "beta", &f);
        a->beta = (float)f;
        return st;
    }
    if (!strcmp(key, "shape")) return lc->have_shape = 1, get_reshape(r, v, n);
    if (!strcmp(key, "alpha")) {
        st = get_float(r, v, "alpha", &f);
        a->alpha = (float)f;
        return st;
    }
    if (!strcmp(key, "min") || !strcmp(key, "max")) {
        st = get_float(r, v, key, &f);
        *(key[1] == 'i' ? &a->clip_min : &a->clip_max) = (float)f;
        if (st == DL_OK && a->clip_min > a->clip_max) return failat(r, v, "clip min %g is above max %g", (double)a->clip_min, (double)a->clip_max);
        return st;
    }
    if (!strcmp(key, "rate")) {
        st = get_float(r, v, "rate", &f);
        if (st == DL_OK && !(f >= 0 && f < 1)) return failat(r, v, "dropout rate must be in [0, 1), not %g", f);
        return st;
    }
    return failat(r, k, "unhandled key '%s'", key);
}

static dl_status add_weight(reader *r, int node, const char *suffix, int init) {
    char name[512];
    snprintf(name, sizeof name, "%s.%s", r->g->nodes[node].name, suffix);
    if (dl_graph_find_value(r->g, name) >= 0)
        return failat(r, NULL, "weight name '%s' is used twice (rename one of the layers)", name);
    int v = dl_graph_add_value(r->g, name, DL_VALUE_WEIGHT, r->g->nodes[node].loc);
    if (v < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->values[v].init = init;
    dl_node *n = &r->g->nodes[node];
    n->inputs[n->n_inputs++] = v;
    return DL_OK;
}

static dl_status read_layer(reader *r, yaml_node_t *m, int index, int prev) {
    if (m->type != YAML_MAPPING_NODE) return failat(r, m, "each layer must be a mapping, not %s", kind_name(m));
    yaml_node_t *opn = lookup(r, m, "op");
    if (!opn) return failat(r, m, "layer %d needs 'op'", index + 1);
    const char *ops = NULL;
    dl_status st = get_string(r, opn, "op", &ops);
    if (st != DL_OK) return st;
    int kind = dl_op_kind_from_name(ops);
    if (kind < 0)
        return failat(r, opn, "unknown op '%s' (known: conv2d, relu, maxpool2d, avgpool2d, global_avgpool, linear, flatten, dropout, softmax, add, concat, batchnorm, leaky_relu, sigmoid, clip, matmul, reshape)", ops);
    char defname[64];
    const char *name = defname;
    snprintf(defname, sizeof defname, "%s_%d", ops, index + 1);
    yaml_node_t *nn = lookup(r, m, "name");
    if (nn && (st = get_string(r, nn, "name", &name)) != DL_OK) return st;
    for (int i = 0; i < r->g->n_nodes; i++)
        if (!strcmp(r->g->nodes[i].name, name)) return failat(r, nn ? nn : m, "duplicate layer name '%s'", name);
    if (dl_graph_find_value(r->g, name) >= 0) return failat(r, nn ? nn : m, "layer name '%s' is already used by an input or weight", name);
    int ni = dl_graph_add_node(r->g, name, (dl_op_kind)kind, loc_of(m));
    if (ni < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    dl_node *n = &r->g->nodes[ni];
    n->has_bias = 1;
    if (kind == DL_OP_AVGPOOL2D || kind == DL_OP_MAXPOOL2D) n->attrs.stride[0] = 0; /* default = kernel */
    layer_ctx lc = {ni, (dl_op_kind)kind, 0, 0, 0, 0, 0, NULL};
    st = each_pair(r, m, layer_pair, &lc);
    if (st != DL_OK) return st;
    n = &r->g->nodes[ni];
    if (kind == DL_OP_CONV2D && !lc.have_filters) return failat(r, m, "conv2d '%s' needs 'filters'", name);
    if (kind == DL_OP_LINEAR && !lc.have_units) return failat(r, m, "linear '%s' needs 'units'", name);
    if (kind == DL_OP_RESHAPE && !lc.have_shape) return failat(r, m, "reshape '%s' needs 'shape'", name);
    if ((kind == DL_OP_CONV2D || kind == DL_OP_MAXPOOL2D || kind == DL_OP_AVGPOOL2D) && !lc.have_kernel)
        return failat(r, m, "%s '%s' needs 'kernel'", ops, name);
    if ((kind == DL_OP_MAXPOOL2D || kind == DL_OP_AVGPOOL2D) && !lc.have_stride) {
        n->attrs.stride[0] = n->attrs.kernel[0];
        n->attrs.stride[1] = n->attrs.kernel[1];
    }
    if (kind != DL_OP_CONV2D && kind != DL_OP_LINEAR) n->has_bias = 0;
    /* activation inputs */
    int acts[64], nacts = 0;
    if (lc.inputs) {
        yaml_node_t *in = lc.inputs;
        int count = in->type == YAML_SEQUENCE_NODE ? (int)(in->data.sequence.items.top - in->data.sequence.items.start) : 1;
        if (in->type == YAML_MAPPING_NODE) return failat(r, in, "inputs must be a list of names, not a mapping");
        if (count < 1 || count > 64) return failat(r, in, "inputs must list 1 to 64 names");
        for (int i = 0; i < count; i++) {
            yaml_node_t *item = in->type == YAML_SEQUENCE_NODE ? node(r, in->data.sequence.items.start[i]) : in;
            const char *src = NULL;
            if ((st = get_string(r, item, "an input name", &src)) != DL_OK) return st;
            int v = dl_graph_find_value(r->g, src);
            if (v < 0 || (r->g->values[v].kind == DL_VALUE_WEIGHT && !r->g->values[v].constant))
                return failat(r, item, "%s '%s' uses '%s', which is not defined before it (layers must be listed in execution order; cycles are not allowed)", ops, name, src);
            acts[nacts++] = v;
        }
    } else {
        if (prev < 0) return failat(r, m, "%s '%s' has no input: the model declares no inputs", ops, name);
        acts[nacts++] = prev;
    }
    int want_min = 1, want_max = 1;
    if (kind == DL_OP_ADD) want_min = want_max = 2;
    if (kind == DL_OP_CONCAT) want_min = 2, want_max = 64;
    if (kind == DL_OP_MATMUL) want_min = 2, want_max = 3;
    if (nacts < want_min || nacts > want_max) {
        if (want_min == want_max) return failat(r, lc.inputs ? lc.inputs : m, "%s '%s' takes %d input%s, not %d", ops, name, want_min, want_min == 1 ? "" : "s", nacts);
        return failat(r, lc.inputs ? lc.inputs : m, "%s '%s' takes at least %d inputs, not %d", ops, name, want_min, nacts);
    }
    n->inputs = malloc((size_t)(nacts + 4) * sizeof *n->inputs);
    if (!n->inputs) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < nacts; i++) n->inputs[n->n_inputs++] = acts[i];
    if (kind == DL_OP_CONV2D || kind == DL_OP_LINEAR) {
        if ((st = add_weight(r, ni, "weight", DL_INIT_KAIMING_UNIFORM)) != DL_OK) return st;
        if (r->g->nodes[ni].has_bias && (st = add_weight(r, ni, "bias", DL_INIT_FAN_IN_UNIFORM)) != DL_OK) return st;
    } else if (kind == DL_OP_BATCHNORM) {
        if ((st = add_weight(r, ni, "weight", DL_INIT_ONES)) != DL_OK) return st;
        if ((st = add_weight(r, ni, "bias", DL_INIT_ZEROS)) != DL_OK) return st;
        if ((st = add_weight(r, ni, "running_mean", DL_INIT_ZEROS)) != DL_OK) return st;
        if ((st = add_weight(r, ni, "running_var", DL_INIT_ONES)) != DL_OK) return st;
    }
    int out = dl_graph_add_value(r->g, name, DL_VALUE_ACTIVATION, loc_of(m));
    if (out < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->values[out].producer = ni;
    r->g->nodes[ni].output = out;
    return DL_OK;
}

/* ---- top level ---- */

typedef struct top_ctx {
    yaml_node_t *model, *inputs, *layers, *outputs, *weights, *constants;
} top_ctx;

static dl_status top_pair(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *vctx) {
    top_ctx *t = vctx;
    if (!strcmp(key, "model")) t->model = v;
    else if (!strcmp(key, "inputs")) t->inputs = v;
    else if (!strcmp(key, "layers")) t->layers = v;
    else if (!strcmp(key, "outputs")) t->outputs = v;
    else if (!strcmp(key, "weights")) t->weights = v;
    else if (!strcmp(key, "constants")) t->constants = v;
    else return failat(r, k, "unknown key '%s' (expected model, inputs, constants, layers, outputs, weights)", key);
    return DL_OK;
}

static dl_status read_document(reader *r, yaml_node_t *root) {
    if (!root) return failat(r, NULL, "empty model file");
    if (root->type != YAML_MAPPING_NODE) return failat(r, root, "a model must be a mapping with model, inputs and layers");
    top_ctx t = {0};
    dl_status st = each_pair(r, root, top_pair, &t);
    if (st != DL_OK) return st;
    if (!t.model) return failat(r, root, "model needs 'model' (its name)");
    if (!t.inputs) return failat(r, root, "model needs 'inputs'");
    if (!t.layers) return failat(r, root, "model needs 'layers'");
    const char *name = NULL;
    if ((st = get_string(r, t.model, "model", &name)) != DL_OK) return st;
    if (!(r->g->name = strdup(name))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    if (t.weights) {
        const char *w = NULL;
        if ((st = get_string(r, t.weights, "weights", &w)) != DL_OK) return st;
        const char *slash = strrchr(r->path, '/');
        int dirlen = w[0] == '/' || !slash ? 0 : (int)(slash - r->path + 1);
        size_t len = (size_t)dirlen + strlen(w) + 1;
        if (!(r->g->weights_path = malloc(len))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
        snprintf(r->g->weights_path, len, "%.*s%s", dirlen, r->path, w);
    }
    if (t.inputs->type != YAML_SEQUENCE_NODE || t.inputs->data.sequence.items.top == t.inputs->data.sequence.items.start)
        return failat(r, t.inputs, "inputs must be a non-empty list");
    for (yaml_node_item_t *i = t.inputs->data.sequence.items.start; i < t.inputs->data.sequence.items.top; i++)
        if ((st = read_tensor_decl(r, node(r, *i), 0)) != DL_OK) return st;
    if (t.constants) {
        if (t.constants->type != YAML_SEQUENCE_NODE) return failat(r, t.constants, "constants must be a list of {name, shape}");
        for (yaml_node_item_t *i = t.constants->data.sequence.items.start; i < t.constants->data.sequence.items.top; i++)
            if ((st = read_tensor_decl(r, node(r, *i), 1)) != DL_OK) return st;
    }
    if (t.layers->type != YAML_SEQUENCE_NODE || t.layers->data.sequence.items.top == t.layers->data.sequence.items.start)
        return failat(r, t.layers, "layers must be a non-empty list");
    int prev = r->g->inputs[0], index = 0;
    for (yaml_node_item_t *i = t.layers->data.sequence.items.start; i < t.layers->data.sequence.items.top; i++, index++) {
        if ((st = read_layer(r, node(r, *i), index, prev)) != DL_OK) return st;
        prev = r->g->nodes[r->g->n_nodes - 1].output;
    }
    if (t.outputs) {
        yaml_node_t *o = t.outputs;
        if (o->type != YAML_SEQUENCE_NODE || o->data.sequence.items.top == o->data.sequence.items.start)
            return failat(r, o, "outputs must be a non-empty list of layer names");
        int count = (int)(o->data.sequence.items.top - o->data.sequence.items.start);
        if (!(r->g->outputs = malloc((size_t)count * sizeof(int)))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
        for (int i = 0; i < count; i++) {
            yaml_node_t *item = node(r, o->data.sequence.items.start[i]);
            const char *nm = NULL;
            if ((st = get_string(r, item, "an output name", &nm)) != DL_OK) return st;
            int v = dl_graph_find_value(r->g, nm);
            if (v < 0 || r->g->values[v].kind == DL_VALUE_WEIGHT) return failat(r, item, "output '%s' is not a layer or input of this model", nm);
            r->g->outputs[r->g->n_outputs++] = v;
        }
    } else {
        if (!(r->g->outputs = malloc(sizeof(int)))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
        r->g->outputs[r->g->n_outputs++] = prev;
    }
    return dl_graph_infer_shapes(r->g, 0, r->err);
}

dl_status dl_model_parse_yaml(const char *text, size_t len, const char *path, dl_graph **out, dl_error *err) {
    *out = NULL;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return dl_fail(err, DL_E_NOMEM, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        dl_status st = dl_fail(err, DL_E_INVALID, "%s:%lu:%lu: malformed YAML: %s%s%s", path,
                               (unsigned long)parser.problem_mark.line + 1, (unsigned long)parser.problem_mark.column + 1,
                               parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
                               parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return st;
    }
    dl_graph *g = dl_graph_new();
    dl_status st = g ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    if (g && !(g->path = strdup(path))) st = dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) {
        reader r = {path, &doc, g, err};
        st = read_document(&r, yaml_document_get_root_node(&doc));
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (st != DL_OK) {
        dl_graph_free(g);
        return st;
    }
    *out = g;
    return DL_OK;
}

dl_status dl_model_read_yaml(const char *path, dl_graph **out, dl_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dl_fail(err, DL_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            if (cap >= (64u << 20)) {
                free(buf);
                fclose(f);
                return dl_fail(err, DL_E_INVALID, "%s: model file larger than 64 MiB", path);
            }
            char *p = realloc(buf, cap *= 2);
            if (!p) free(buf);
            buf = p;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return dl_fail(err, DL_E_NOMEM, "out of memory");
    if (bad) {
        free(buf);
        return dl_fail(err, DL_E_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    dl_status st = dl_model_parse_yaml(buf, len, path, out, err);
    free(buf);
    return st;
}
