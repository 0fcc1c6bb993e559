/* model_yaml.c — reads a YAML model (docs/model-format.md) into a dl_graph: libyaml's parser
 * events are built into a libyaml document (below, not with yaml_parser_load), which is then read
 * node by node. Every error is one line, "path:line:col: what is wrong", at the offending node.
 *
 * Hostile files stay cheap: the nesting depth is limited (MAX_DEPTH) while parsing, since
 * libyaml's scanner costs time quadratic in the depth of flow collections ('[' * 10^6 ran for
 * minutes); anchors are found through a hash table (yaml_parser_load scans a list for each one);
 * a layer's mapping is refused before it is searched when it has more keys than any op takes, so
 * aliases cannot make the reader walk one huge mapping many times; names are looked up hashed. */
#define _POSIX_C_SOURCE 200809L
#include "model_yaml.h"

#include "dlrun/dlrun.h"
#include "files.h"
#include "image.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "names.h"

/* How deeply collections may nest: a model needs 4 (the file, layers, a layer, its inputs). */
#define MAX_DEPTH 64
/* The longest name of an input, constant or layer: a weight is named "<layer>.<suffix>". */
#define MAX_NAME 255
/* The most layers a model may have, and YAML nodes (scalars, lists, mappings) a file may hold:
 * each layer costs a few KiB of bookkeeping in the model and in each session, each node ~160
 * bytes while reading, so a hostile file stays within about 1 GiB. */
#define MAX_LAYERS 250000
#define MAX_NODES 4000000

typedef struct reader {
    const char *path;
    yaml_document_t *doc;
    dl_graph *g;
    dl_error *err;
} reader;

static dl_srcloc loc_of(const yaml_node_t *n) {
    return (dl_srcloc){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

static dl_status failat(reader *r, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static dl_status failat(reader *r, const yaml_node_t *n, const char *fmt, ...) {
    char msg[DL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        dl_fail(r->err, DL_E_INVALID, "%s:%lu:%lu: %s", r->path, (unsigned long)n->start_mark.line + 1,
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

/* A name something else is named after: a non-empty string of at most MAX_NAME bytes. */
static dl_status get_name(reader *r, const yaml_node_t *n, const char *what, const char **out) {
    dl_status st = get_string(r, n, what, out);
    if (st == DL_OK && n->data.scalar.length > MAX_NAME)
        return failat(r, n, "%s longer than %d characters (%zu)", what, MAX_NAME, n->data.scalar.length);
    return st;
}

static dl_status get_int(reader *r, const yaml_node_t *n, const char *what, long lo, long hi, int *out) {
    const char *s = scalar(n);
    if (!s) return failat(r, n, "%s must be an integer, not %s", what, kind_name(n));
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno) return failat(r, n, "%s must be an integer, not '%s'", what, s);
    if (v < lo || v > hi) {
        if (hi == INT_MAX && v < lo) return failat(r, n, "%s must be at least %ld, not %ld", what, lo, v);
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

/* An int or a list of ints: max_count 2 or 3 ([h, w], [d, h, w]), or a padding's 4 or 6, which
 * also accepts half as many. Fills out[0..count-1]. */
static dl_status get_ints(reader *r, const yaml_node_t *n, const char *what, int lo, int *out, int max_count,
                          int *count) {
    if (n->type == YAML_SCALAR_NODE) {
        dl_status st = get_int(r, n, what, lo, INT_MAX, &out[0]);
        *count = 1;
        return st;
    }
    if (n->type != YAML_SEQUENCE_NODE)
        return failat(r, n, "%s must be an integer or a list of integers, not %s", what, kind_name(n));
    int len = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    int half = max_count == 4 ? 2 : max_count == 6 ? 3 : max_count;
    if (len != half && len != max_count) {
        if (half == max_count) return failat(r, n, "%s must have 1 or %d values, not %d", what, half, len);
        return failat(r, n, "%s must have 1, %d or %d values, not %d", what, half, max_count, len);
    }
    for (int i = 0; i < len; i++) {
        dl_status st = get_int(r, node(r, n->data.sequence.items.start[i]), what, lo, INT_MAX, &out[i]);
        if (st != DL_OK) return st;
    }
    *count = len;
    return DL_OK;
}

/* An integer or a list of `dims` (2: [h, w]; 3: [d, h, w]), each at least lo. */
static dl_status get_pair(reader *r, const yaml_node_t *n, const char *what, int lo, int dims, int32_t *out) {
    int v[6], c;
    dl_status st = get_ints(r, n, what, lo, v, dims, &c);
    if (st != DL_OK) return st;
    for (int i = 0; i < dims; i++) out[i] = c == 1 ? v[0] : v[i];
    return DL_OK;
}

/* Padding over `dims` dimensions (2 or 3) as the values before each, then those after: from 1
 * (all sides), `dims` (both sides of each) or 2 * dims values ([top, left, bottom, right]). */
static dl_status get_padding(reader *r, const yaml_node_t *n, const char *what, int dims, int32_t *out) {
    int v[6] = {0}, c = 0;
    dl_status st = get_ints(r, n, what, 0, v, 2 * dims, &c);
    if (st != DL_OK) return st;
    for (int i = 0; i < 2 * dims; i++) out[i] = c == 1 ? v[0] : c == dims ? v[i % dims] : v[i];
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
    dl_dtype dtype = DL_F32;
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
            if (d && !constant && (!strcmp(d, "int64") || !strcmp(d, "i64"))) dtype = DL_I64; /* token ids */
            else if (!d || (strcmp(d, "f32") && strcmp(d, "float32")))
                return failat(r, v, "unsupported dtype '%s' (%s)", d ? d : kind_name(v),
                              constant ? "constants are f32" : "an input is f32 or int64");
        } else return failat(r, k, "unknown key '%s' in an %s (expected name, shape, dtype)", key ? key : "?", what);
    }
    if (!name) return failat(r, m, "%s needs 'name'", what);
    if (!shape) return failat(r, m, "%s needs 'shape'", what);
    const char *nm = NULL;
    dl_status st = get_name(r, name, constant ? "constant name" : "input name", &nm);
    if (st != DL_OK) return st;
    if (dl_graph_find_value(r->g, nm) >= 0) return failat(r, name, "duplicate name '%s'", nm);
    if (shape->type != YAML_SEQUENCE_NODE)
        return failat(r, shape, "shape must be a list of sizes, not %s", kind_name(shape));
    int nd = (int)(shape->data.sequence.items.top - shape->data.sequence.items.start);
    if (nd < 1 || nd > DL_MAX_DIMS)
        return failat(r, shape, "shape must have 1 to %d dimensions%s, not %d", DL_MAX_DIMS,
                      constant ? "" : " (batch first)", nd);
    int v = dl_graph_add_value(r->g, nm, constant ? DL_VALUE_WEIGHT : DL_VALUE_INPUT, loc_of(m));
    if (v < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->values[v].dtype = dtype;
    for (int i = 0; i < nd; i++) {
        int d;
        int batch = i == 0 && !constant; /* capped as --batch is */
        st = get_int(r, node(r, shape->data.sequence.items.start[i]),
                     batch ? "the batch (first dimension)" : "a dimension", 1, batch ? DL_MAX_BATCH : INT_MAX, &d);
        if (st != DL_OK) return st;
        r->g->values[v].shape.d[i] = d;
    }
    r->g->values[v].shape.ndim = nd;
    if (constant) {
        r->g->values[v].constant = 1;
        r->g->values[v].init = DL_INIT_UNIFORM;
        return DL_OK;
    }
    r->g->inputs[r->g->n_inputs++] = v; /* room for every entry of `inputs:` (read_document) */
    return DL_OK;
}

/* ---- layers: keys and weights come from the op's row in the op table ---- */

/* A list of sizes, each >= 0 or one -1 (reshape's `shape`: 0 copies the input's size there). */
static dl_status get_dims(reader *r, yaml_node_t *v, const char *what, dl_shape *out) {
    if (v->type != YAML_SEQUENCE_NODE) return failat(r, v, "%s must be a list of sizes, not %s", what, kind_name(v));
    int nd = (int)(v->data.sequence.items.top - v->data.sequence.items.start), infer = 0;
    if (nd < 1 || nd > DL_MAX_DIMS)
        return failat(r, v, "%s must have 1 to %d dimensions, not %d", what, DL_MAX_DIMS, nd);
    for (int i = 0; i < nd; i++) {
        int d;
        yaml_node_t *item = node(r, v->data.sequence.items.start[i]);
        dl_status st = get_int(r, item, "a dimension", -1, INT_MAX, &d);
        if (st != DL_OK) return st;
        if (d == -1 && infer++) return failat(r, item, "only one dimension may be -1");
        out->d[i] = d;
    }
    out->ndim = nd;
    return DL_OK;
}

/* A list of at most `max` integers, each at least lo (slice's `ends: [0, -1]`, transpose's `perm`). */
static dl_status get_int_list(reader *r, yaml_node_t *v, const char *what, long long lo, int max, dl_ints *out) {
    if (v->type != YAML_SEQUENCE_NODE) return failat(r, v, "%s must be a list of integers, not %s", what, kind_name(v));
    int len = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (len > max) return failat(r, v, "%s has %d values; at most %d are allowed", what, len, max);
    for (int i = 0; i < len; i++) {
        yaml_node_t *item = node(r, v->data.sequence.items.start[i]);
        const char *s = scalar(item);
        if (!s) return failat(r, item, "%s must hold integers, not %s", what, kind_name(item));
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!*s || *end || errno) return failat(r, item, "%s must hold integers, not '%s'", what, s);
        if (x < lo) return failat(r, item, "%s must hold integers of at least %lld, not %lld", what, lo, x);
        out->v[i] = x;
    }
    out->n = len;
    return DL_OK;
}

/* One of an attribute's names (pad's `mode: reflect`), as its index. */
static dl_status get_choice(reader *r, yaml_node_t *v, const dl_attr_def *a, const char *what, int32_t *out) {
    const char *s = scalar(v);
    char names[256];
    size_t u = 0;
    for (int i = 0; a->choices[i]; i++) {
        if (s && !strcmp(s, a->choices[i])) return *out = i, DL_OK;
        if (u < sizeof names) u += (size_t)snprintf(names + u, sizeof names - u, "%s%s", i ? ", " : "", a->choices[i]);
    }
    return failat(r, v, "%s must be one of %s, not %s%s%s", what, names, s ? "'" : "", s ? s : kind_name(v),
                  s ? "'" : "");
}

/* A number within an attribute's bounds. */
static dl_status get_bounded(reader *r, yaml_node_t *v, const dl_attr_def *a, const char *what, float *out) {
    double f = 0;
    dl_status st = get_float(r, v, what, &f);
    if (st != DL_OK) return st;
    int open_lo = a->flags & DL_ATTR_OPEN_LO, open_hi = a->flags & DL_ATTR_OPEN_HI;
    if (f < a->lo || f > a->hi || (open_lo && f == a->lo) || (open_hi && f == a->hi)) {
        if (a->lo == 0 && open_lo && isinf(a->hi)) return failat(r, v, "%s must be positive, not %g", what, f);
        return failat(r, v, "%s must be in %c%g, %g%c, not %g", what, open_lo ? '(' : '[', a->lo, a->hi,
                      open_hi ? ')' : ']', f);
    }
    *out = (float)f;
    return DL_OK;
}

/* Reads one attribute's value into the layer's parameters. */
static dl_status read_attr(reader *r, const dl_attr_def *a, yaml_node_t *v, dl_op_params *p) {
    char *dst = (char *)p + a->offset;
    const char *what = a->what ? a->what : a->key;
    int32_t i32 = 0;
    float f32 = 0;
    dl_status st;
    switch ((dl_attr_type)a->type) {
    case DL_ATTR_INT: {
        int x = 0;
        st = get_int(r, v, what, (long)a->lo, (long)a->hi, &x);
        i32 = x;
        break;
    }
    case DL_ATTR_BOOL: {
        int x = 0;
        st = get_bool(r, v, what, &x);
        i32 = x;
        break;
    }
    case DL_ATTR_PAIR:
    case DL_ATTR_TRIPLE: {
        int dims = a->type == DL_ATTR_PAIR ? 2 : 3;
        int32_t pair[3] = {0};
        st = get_pair(r, v, what, (int)a->lo, dims, pair);
        if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, pair, (size_t)dims * sizeof pair[0]);
        return st;
    }
    case DL_ATTR_PADDING:
    case DL_ATTR_PADDING3: {
        int dims = a->type == DL_ATTR_PADDING ? 2 : 3;
        int32_t pad[6] = {0};
        st = get_padding(r, v, what, dims, pad);
        if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, pad, (size_t)(2 * dims) * sizeof pad[0]);
        return st;
    }
    case DL_ATTR_FLOAT:
        st = get_bounded(r, v, a, what, &f32);
        if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, &f32, sizeof f32);
        return st;
    case DL_ATTR_DIMS: {
        dl_shape dims = {0, {0}};
        st = get_dims(r, v, what, &dims);
        if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, &dims, sizeof dims);
        return st;
    }
    case DL_ATTR_INTS: {
        dl_ints list = {0, {0}};
        st = get_int_list(r, v, what, (long long)a->lo, (int)a->hi, &list);
        if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, &list, sizeof list);
        return st;
    }
    case DL_ATTR_ENUM: st = get_choice(r, v, a, what, &i32); break;
    default: return failat(r, v, "%s: attribute type %d is unknown", what, a->type);
    }
    if (st == DL_OK && !(a->flags & DL_ATTR_IGNORED)) memcpy(dst, &i32, sizeof i32);
    return st;
}

/* Every attribute's default, before the layer's keys are read. */
static void attr_defaults(const dl_op_def *row, dl_op_params *p) {
    for (const dl_attr_def *a = row->attrs; a && a->key; a++) {
        if (a->flags & DL_ATTR_IGNORED) continue;
        char *dst = (char *)p + a->offset;
        /* a float attribute's default may be +-inf (clip's bounds): cast only integer ones */
        int32_t d = a->type == DL_ATTR_FLOAT ? 0 : (int32_t)a->def, ints[6] = {d, d, d, d, d, d};
        float f = (float)a->def;
        switch ((dl_attr_type)a->type) {
        case DL_ATTR_INT:
        case DL_ATTR_ENUM:
        case DL_ATTR_BOOL: memcpy(dst, ints, sizeof ints[0]); break;
        case DL_ATTR_PAIR: memcpy(dst, ints, 2 * sizeof ints[0]); break;
        case DL_ATTR_PADDING: memcpy(dst, ints, 4 * sizeof ints[0]); break;
        case DL_ATTR_TRIPLE: memcpy(dst, ints, 3 * sizeof ints[0]); break;
        case DL_ATTR_PADDING3: memcpy(dst, ints, 6 * sizeof ints[0]); break;
        case DL_ATTR_FLOAT: memcpy(dst, &f, sizeof f); break;
        case DL_ATTR_DIMS: break;                          /* required where used */
        case DL_ATTR_INTS: ((dl_ints *)dst)->n = 0; break; /* absent: the row's complete() decides */
        }
    }
}

static const dl_attr_def *find_attr(const dl_op_def *row, const char *key, int *index) {
    int i = 0;
    for (const dl_attr_def *a = row->attrs; a && a->key; a++, i++)
        if (!strcmp(a->key, key)) return *index = i, a;
    return NULL;
}

#define MAX_ATTRS 32 /* keys one op may have */

typedef struct layer_ctx {
    int node;
    const dl_op_def *row;
    uint32_t given;                /* bit i: attrs[i] was given */
    yaml_node_t *value[MAX_ATTRS]; /* where each given attribute's value is, for messages */
    yaml_node_t *inputs;
} layer_ctx;

static dl_status layer_pair(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *vctx) {
    layer_ctx *lc = vctx;
    dl_node *n = &r->g->nodes[lc->node];
    const char *op = lc->row->name;
    if (!strcmp(key, "name") || !strcmp(key, "op")) return DL_OK; /* read before */
    if (!strcmp(key, "inputs")) return lc->inputs = v, DL_OK;
    if (!strcmp(key, "backend")) {
        const char *b = NULL;
        dl_status st = get_string(r, v, "backend", &b);
        if (st == DL_OK && !(n->backend = strdup(b))) st = dl_fail(r->err, DL_E_NOMEM, "out of memory");
        return st;
    }
    int index;
    const dl_attr_def *a = find_attr(lc->row, key, &index);
    if (!a) {
        char keys[256] = "";
        for (const dl_attr_def *e = lc->row->attrs; e && e->key; e++)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", keys[0] ? " " : "", e->key);
        if (keys[0])
            return failat(r, k, "%s '%s': unknown key '%s' (expected %s, or name, op, inputs, backend)", op, n->name,
                          key, keys);
        return failat(r, k, "%s '%s': unknown key '%s' (%s takes only name, op, inputs, backend)", op, n->name, key,
                      op);
    }
    if (index >= MAX_ATTRS) return failat(r, k, "%s: key '%s' is past the %d keys an op may have", op, key, MAX_ATTRS);
    lc->given |= 1u << index;
    lc->value[index] = v;
    return read_attr(r, a, v, &n->params);
}

/* The layer's parameters are all read: required keys, defaults that follow others, checks. */
static dl_status finish_params(reader *r, yaml_node_t *m, layer_ctx *lc) {
    dl_node *n = &r->g->nodes[lc->node];
    const dl_op_def *row = lc->row;
    int i = 0;
    for (const dl_attr_def *a = row->attrs; a && a->key; a++, i++)
        if ((a->flags & DL_ATTR_REQUIRED) && !(lc->given & (1u << i)))
            return failat(r, m, "%s '%s' needs '%s'", row->name, n->name, a->key);
    if (row->complete) row->complete(&n->params, lc->given);
    const char *key = NULL;
    char msg[DL_ERROR_LEN];
    if (row->validate && !row->validate(&n->params, &key, msg, sizeof msg)) {
        find_attr(row, key, &i);
        return failat(r, lc->value[i] ? lc->value[i] : m, "%s", msg);
    }
    return DL_OK;
}

static dl_status add_weight(reader *r, int node, const char *suffix, int init) {
    char name[2 * MAX_NAME + 2];
    if (snprintf(name, sizeof name, "%s.%s", r->g->nodes[node].name, suffix) >= (int)sizeof name)
        return failat(r, NULL, "weight name '%s.%s' is too long", r->g->nodes[node].name, suffix);
    if (dl_graph_find_value(r->g, name) >= 0)
        return failat(r, NULL, "weight name '%s' is used twice (rename one of the layers)", name);
    int v = dl_graph_add_value(r->g, name, DL_VALUE_WEIGHT, r->g->nodes[node].loc);
    if (v < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->values[v].init = init;
    dl_node *n = &r->g->nodes[node];
    n->inputs[n->n_inputs++] = v;
    return DL_OK;
}

/* The layer's activation inputs: `inputs:` names, else the previous layer's output. */
static dl_status read_inputs(reader *r, yaml_node_t *m, layer_ctx *lc, int prev, int *acts, int *nacts) {
    const dl_node *n = &r->g->nodes[lc->node];
    const char *op = lc->row->name, *name = n->name;
    dl_status st;
    *nacts = 0;
    if (lc->inputs) {
        yaml_node_t *in = lc->inputs;
        int count =
            in->type == YAML_SEQUENCE_NODE ? (int)(in->data.sequence.items.top - in->data.sequence.items.start) : 1;
        if (in->type == YAML_MAPPING_NODE) return failat(r, in, "inputs must be a list of names, not a mapping");
        if (count < 1 || count > 64) return failat(r, in, "inputs must list 1 to 64 names");
        for (int i = 0; i < count; i++) {
            yaml_node_t *item = in->type == YAML_SEQUENCE_NODE ? node(r, in->data.sequence.items.start[i]) : in;
            const char *src = NULL;
            if ((st = get_string(r, item, "an input name", &src)) != DL_OK) return st;
            int v = dl_graph_find_value(r->g, src);
            if (v < 0 || (r->g->values[v].kind == DL_VALUE_WEIGHT && !r->g->values[v].constant))
                return failat(r, item,
                              "%s '%s' uses '%s', which is not defined before it (layers must be listed in execution "
                              "order; cycles are not allowed)",
                              op, name, src);
            acts[(*nacts)++] = v;
        }
    } else {
        if (prev < 0) return failat(r, m, "%s '%s' has no input: the model declares no inputs", op, name);
        acts[(*nacts)++] = prev;
    }
    int lo = lc->row->min_inputs, hi = lc->row->max_inputs;
    if (*nacts < lo || *nacts > hi) {
        yaml_node_t *at = lc->inputs ? lc->inputs : m;
        if (lo == hi)
            return failat(r, at, "%s '%s' takes %d input%s, not %d", op, name, lo, lo == 1 ? "" : "s", *nacts);
        return failat(r, at, "%s '%s' takes at least %d inputs, not %d", op, name, lo, *nacts);
    }
    return DL_OK;
}

static dl_status read_layer(reader *r, yaml_node_t *m, int index, int prev) {
    if (m->type != YAML_MAPPING_NODE) return failat(r, m, "each layer must be a mapping, not %s", kind_name(m));
    long keys = (long)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    if (keys > MAX_ATTRS + 4) /* before `lookup` walks it: an alias may name one mapping many times */
        return failat(r, m, "layer %d has %ld keys; a layer has at most %d", index + 1, keys, MAX_ATTRS + 4);
    yaml_node_t *opn = lookup(r, m, "op");
    if (!opn) return failat(r, m, "layer %d needs 'op'", index + 1);
    const char *ops = NULL;
    dl_status st = get_string(r, opn, "op", &ops);
    if (st != DL_OK) return st;
    int kind = dl_op_kind_from_name(ops);
    if (kind < 0) {
        char known[512];
        dl_op_names(known, sizeof known);
        return failat(r, opn, "unknown op '%s' (known: %s)", ops, known);
    }
    char defname[64];
    const char *name = defname;
    snprintf(defname, sizeof defname, "%s_%d", ops, index + 1);
    yaml_node_t *nn = lookup(r, m, "name");
    if (nn && (st = get_name(r, nn, "layer name", &name)) != DL_OK) return st;
    int used = dl_graph_find_value(r->g, name); /* a layer's output value has the layer's name */
    if (used >= 0 && r->g->values[used].kind == DL_VALUE_ACTIVATION)
        return failat(r, nn ? nn : m, "duplicate layer name '%s'", name);
    if (used >= 0) return failat(r, nn ? nn : m, "layer name '%s' is already used by an input or weight", name);
    int ni = dl_graph_add_node(r->g, name, (dl_op_kind)kind, loc_of(m));
    if (ni < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    layer_ctx lc = {ni, dl_op_def_of(kind), 0, {0}, NULL};
    attr_defaults(lc.row, &r->g->nodes[ni].params);
    if ((st = each_pair(r, m, layer_pair, &lc)) != DL_OK) return st;
    if ((st = finish_params(r, m, &lc)) != DL_OK) return st;
    int acts[64], nacts;
    if ((st = read_inputs(r, m, &lc, prev, acts, &nacts)) != DL_OK) return st;
    dl_node *n = &r->g->nodes[ni];
    n->inputs = malloc((size_t)(nacts + 4) * sizeof *n->inputs);
    if (!n->inputs) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < nacts; i++) n->inputs[n->n_inputs++] = acts[i];
    for (const dl_weight_def *w = lc.row->weights; w && w->suffix; w++)
        if ((!w->optional || r->g->nodes[ni].params.has_bias) && (st = add_weight(r, ni, w->suffix, w->init)) != DL_OK)
            return st;
    int out = dl_graph_add_value(r->g, name, DL_VALUE_ACTIVATION, loc_of(m));
    if (out < 0) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->values[out].producer = ni;
    r->g->nodes[ni].output = out;
    return DL_OK;
}

/* After the last layer: every shape at the file's batch, weights' fan-in, axes made non-negative.
 * The model is read-only from here on. */
static dl_status finish_model(reader *r) {
    dl_graph *g = r->g;
    dl_shape *shapes = malloc(((size_t)g->n_values + 1) * sizeof *shapes);
    if (!shapes) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    dl_status st = dl_graph_infer(g, 0, shapes, r->err);
    for (int v = 0; st == DL_OK && v < g->n_values; v++) g->values[v].shape = shapes[v];
    free(shapes);
    for (int i = 0; st == DL_OK && i < g->n_nodes; i++) {
        dl_node *n = &g->nodes[i];
        const dl_op_def *row = dl_op_def_of(n->kind);
        int own = dl_op_weight_count(row, &n->params);
        if (own) { /* a layer's weights take its first weight's fan-in (conv: C/groups*KH*KW) */
            const dl_shape *w = &g->values[n->inputs[n->n_inputs - own]].shape;
            double fan = w->d[0] > 0 ? (double)dl_shape_numel(w) / (double)w->d[0] : 0;
            for (int j = n->n_inputs - own; j < n->n_inputs; j++)
                g->values[n->inputs[j]].fan_in = fan < INT_MAX ? (int)fan : INT_MAX;
        }
        if ((row->flags & DL_OPF_AXIS) && n->params.attrs.axis < 0)
            n->params.attrs.axis += g->values[n->inputs[0]].shape.ndim;
        if (row->resolve) row->resolve(&n->params, g->values[n->inputs[0]].shape.ndim);
    }
    if (st == DL_OK && !dl_graph_index(g)) st = dl_fail(r->err, DL_E_NOMEM, "out of memory");
    return st;
}

/* ---- preprocess and labels ---- */

/* The longest class name, and the largest labels file. */
#define MAX_LABEL 1024
#define MAX_LABELS_FILE (16 << 20)
#define MAX_LABELS (1 << 23) /* each at least a byte and a newline in a labels file */

/* A size: an int in [1, DL_IMAGE_MAX_SIDE] (*count 1) or a pair [H, W] of them (*count 2). */
static dl_status get_image_size(reader *r, yaml_node_t *v, const char *what, int32_t hw[2], int *count) {
    int x[4] = {0};
    dl_status st = get_ints(r, v, what, 1, x, 2, count);
    if (st != DL_OK) return st;
    for (int i = 0; i < *count; i++)
        if (x[i] > DL_IMAGE_MAX_SIDE)
            return failat(r, v, "%s must be between 1 and %d pixels, not %d", what, DL_IMAGE_MAX_SIDE, x[i]);
    hw[0] = x[0];
    hw[1] = *count == 2 ? x[1] : x[0];
    return DL_OK;
}

/* `mean:` or `std:` (positive = 1): a list of 1 or 3 numbers, one per channel. */
static dl_status get_channel_values(reader *r, yaml_node_t *v, const char *what, int positive, float out[3],
                                    int32_t *n) {
    if (v->type != YAML_SEQUENCE_NODE)
        return failat(r, v, "%s must be a list of numbers, one per channel, not %s", what, kind_name(v));
    int len = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (len != 1 && len != 3) return failat(r, v, "%s must have 1 or 3 values (one per channel), not %d", what, len);
    for (int i = 0; i < len; i++) {
        yaml_node_t *item = node(r, v->data.sequence.items.start[i]);
        double x = 0;
        dl_status st = get_float(r, item, what, &x);
        if (st != DL_OK) return st;
        if (positive && !(x > 0)) return failat(r, item, "%s must be positive, not %g", what, x);
        if (fabs(x) > 1e30) return failat(r, item, "%s must be within +-1e30, not %g", what, x);
        out[i] = (float)x;
    }
    *n = len;
    return DL_OK;
}

typedef struct pre_ctx {
    yaml_node_t *resize, *crop, *mean, *std;
} pre_ctx;

static dl_status pre_pair(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *vctx) {
    pre_ctx *c = vctx;
    dl_preprocess *p = &r->g->pre;
    int count = 0;
    dl_status st = DL_OK;
    if (!strcmp(key, "resize")) {
        int32_t hw[2] = {0, 0};
        c->resize = v;
        if ((st = get_image_size(r, v, "resize", hw, &count)) != DL_OK) return st;
        if (count == 1) p->resize_short = hw[0];
        else if ((int64_t)hw[0] * hw[1] > DL_IMAGE_MAX_PIXELS)
            return failat(r, v, "resize: [%d, %d] is over %d pixels", hw[0], hw[1], DL_IMAGE_MAX_PIXELS);
        else p->resize_h = hw[0], p->resize_w = hw[1];
    } else if (!strcmp(key, "crop")) {
        int32_t hw[2] = {0, 0};
        c->crop = v;
        if ((st = get_image_size(r, v, "crop", hw, &count)) != DL_OK) return st;
        p->crop_h = hw[0], p->crop_w = hw[1];
    } else if (!strcmp(key, "channels")) {
        const char *s = scalar(v);
        if (s && !strcmp(s, "rgb")) p->channels = DL_IMAGE_RGB;
        else if (s && !strcmp(s, "bgr")) p->channels = DL_IMAGE_BGR;
        else if (s && !strcmp(s, "gray")) p->channels = DL_IMAGE_GRAY;
        else
            return failat(r, v, "channels must be rgb, bgr or gray, not %s%s%s", s ? "'" : "", s ? s : kind_name(v),
                          s ? "'" : "");
    } else if (!strcmp(key, "mean")) {
        c->mean = v;
        st = get_channel_values(r, v, "mean", 0, p->mean, &p->n_mean);
    } else if (!strcmp(key, "std")) {
        c->std = v;
        st = get_channel_values(r, v, "std", 1, p->std, &p->n_std);
    } else if (!strcmp(key, "scale")) {
        double x = 0;
        if ((st = get_float(r, v, "scale", &x)) != DL_OK) return st;
        if (!(x > 0) || x > 1e30) return failat(r, v, "scale must be positive (and at most 1e30), not %g", x);
        p->scale = x;
    } else
        return failat(r, k, "unknown key '%s' in preprocess (expected resize, crop, channels, mean, std, scale)", key);
    return st;
}

/* `preprocess:`, after the shapes are known: its own keys, then whether it fits every 4-D f32
 * input (channels, mean/std per channel, the size it makes). */
static dl_status read_preprocess(reader *r, yaml_node_t *m) {
    if (m->type != YAML_MAPPING_NODE)
        return failat(r, m, "preprocess must be a mapping (resize, crop, channels, mean, std, scale), not %s",
                      kind_name(m));
    dl_preprocess *p = &r->g->pre;
    p->present = 1;
    pre_ctx c = {0};
    dl_status st = each_pair(r, m, pre_pair, &c);
    if (st != DL_OK) return st;
    if (p->resize_short && !p->crop_h)
        return failat(r, c.resize,
                      "resize: %d sets the shorter side and keeps the aspect, so the size varies: add crop: [H, W]",
                      p->resize_short);
    if (p->crop_h && p->resize_short && (p->crop_h > p->resize_short || p->crop_w > p->resize_short))
        return failat(r, c.crop, "crop [%d, %d] is larger than the shorter side (resize: %d)", p->crop_h, p->crop_w,
                      p->resize_short);
    if (p->crop_h && p->resize_h && (p->crop_h > p->resize_h || p->crop_w > p->resize_w))
        return failat(r, c.crop, "crop [%d, %d] is larger than resize [%d, %d]", p->crop_h, p->crop_w, p->resize_h,
                      p->resize_w);
    int fed = 0;
    for (int i = 0; i < r->g->n_inputs; i++) {
        const dl_value *v = &r->g->values[r->g->inputs[i]];
        if (v->shape.ndim != 4 || !dl_dtype_is_f32(v->dtype)) continue;
        fed++;
        int64_t ch = v->shape.d[1], h = 0, w = 0;
        int cc = dl_preprocess_channels(p, ch);
        if (!cc)
            return failat(r, m, "input '%s' has %lld channel%s; preprocess gives %s", v->name, (long long)ch,
                          ch == 1 ? "" : "s",
                          p->channels == DL_IMAGE_GRAY   ? "1 (channels: gray)"
                          : p->channels != DL_IMAGE_AUTO ? "3 (channels: rgb or bgr)"
                                                         : "1 (gray) or 3 (rgb)");
        if (p->n_mean && p->n_mean != cc)
            return failat(r, c.mean, "mean has %d value%s; input '%s' has %d channel%s", p->n_mean,
                          p->n_mean == 1 ? "" : "s", v->name, cc, cc == 1 ? "" : "s");
        if (p->n_std && p->n_std != cc)
            return failat(r, c.std, "std has %d value%s; input '%s' has %d channel%s", p->n_std,
                          p->n_std == 1 ? "" : "s", v->name, cc, cc == 1 ? "" : "s");
        dl_preprocess_size(p, v->shape.d[2], v->shape.d[3], &h, &w);
        if (h != v->shape.d[2] || w != v->shape.d[3])
            return failat(r, c.crop ? c.crop : c.resize, "preprocess makes %lldx%lld images; input '%s' is %lldx%lld",
                          (long long)h, (long long)w, v->name, (long long)v->shape.d[2], (long long)v->shape.d[3]);
    }
    if (!fed) return failat(r, m, "preprocess: the model has no 4-D f32 input [N, C, H, W] an image could feed");
    return DL_OK;
}

/* One label: not empty, at most MAX_LABEL bytes, no control characters (it is printed). */
static const char *label_problem(const char *s, size_t len) {
    if (!len) return "an empty label";
    if (len > MAX_LABEL) return "a label longer than 1024 bytes";
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "a label with a control character";
    return NULL;
}

static dl_status add_label(reader *r, const char *s, size_t len) {
    if (!(r->g->labels[r->g->n_labels] = strndup(s, len))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    r->g->n_labels++;
    return DL_OK;
}

/* `labels: FILE`: one name per line (a final newline optional, "\r\n" accepted), relative to the
 * model file's folder; up to `classes` of them (more is an error). */
static dl_status read_labels_file(reader *r, yaml_node_t *v, const char *file, int64_t classes) {
    const char *slash = strrchr(r->path, '/');
    int dirlen = file[0] == '/' || !slash ? 0 : (int)(slash - r->path + 1);
    size_t plen = (size_t)dirlen + strlen(file) + 1;
    char *path = malloc(plen);
    if (!path) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    snprintf(path, plen, "%.*s%s", dirlen, r->path, file);
    FILE *f = NULL;
    dl_status st = dl_fopen_regular(path, &f, r->err);
    char *text = st == DL_OK ? malloc(MAX_LABELS_FILE + 1) : NULL;
    size_t len = 0;
    if (st == DL_OK && !text) st = dl_fail(r->err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) {
        len = fread(text, 1, MAX_LABELS_FILE + 1, f);
        if (ferror(f)) st = dl_fail(r->err, DL_E_IO, "%s: cannot read: %s", path, strerror(errno));
        else if (len > MAX_LABELS_FILE) st = failat(r, v, "labels file %s is larger than 16 MiB", path);
    }
    if (f) fclose(f);
    int line = 1;
    for (size_t at = 0; st == DL_OK && at < len; line++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, n = end - at;
        if (n && text[at + n - 1] == '\r') n--;
        const char *why = label_problem(text + at, n);
        if (memchr(text + at, 0, n)) why = "a NUL byte";
        if (why) st = failat(r, v, "%s:%d: %s", path, line, why);
        else if (r->g->n_labels == classes)
            st = failat(r, v, "labels file %s has more than %lld lines: the first output has %lld classes", path,
                        (long long)classes, (long long)classes);
        else st = add_label(r, text + at, n);
        at = end + 1;
    }
    free(text);
    if (st == DL_OK && r->g->n_labels != classes)
        st = failat(r, v, "labels file %s has %d names; the first output has %lld classes", path, r->g->n_labels,
                    (long long)classes);
    free(path);
    return st;
}

/* `labels:` a list of class names or a file of them, one per class of the first output, which must
 * be [N, classes] (checked against the shapes inferred at load). */
static dl_status read_labels(reader *r, yaml_node_t *v) {
    const dl_value *out = &r->g->values[r->g->outputs[0]];
    if (out->shape.ndim != 2)
        return failat(r, v, "labels name the classes of a [N, classes] output; the first output '%s' is %d-D",
                      out->name, out->shape.ndim);
    int64_t classes = out->shape.d[1];
    if (classes > MAX_LABELS)
        return failat(r, v, "the first output has %lld classes; labels name at most %d", (long long)classes,
                      MAX_LABELS);
    if (v->type != YAML_SEQUENCE_NODE && v->type != YAML_SCALAR_NODE)
        return failat(r, v, "labels must be a list of class names or a file name, not %s", kind_name(v));
    int64_t n = v->type == YAML_SEQUENCE_NODE ? v->data.sequence.items.top - v->data.sequence.items.start : classes;
    if (n != classes)
        return failat(r, v, "labels has %lld names; the first output '%s' has %lld classes", (long long)n, out->name,
                      (long long)classes);
    if (!(r->g->labels = calloc((size_t)classes, sizeof *r->g->labels)))
        return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    if (v->type == YAML_SCALAR_NODE) {
        const char *file = NULL;
        dl_status st = get_string(r, v, "labels", &file);
        return st != DL_OK ? st : read_labels_file(r, v, file, classes);
    }
    for (int64_t i = 0; i < classes; i++) {
        yaml_node_t *item = node(r, v->data.sequence.items.start[i]);
        const char *s = scalar(item);
        if (!s) return failat(r, item, "each label must be a name, not %s", kind_name(item));
        const char *why = label_problem(s, item->data.scalar.length);
        if (!why && strlen(s) != item->data.scalar.length) why = "a NUL byte";
        if (why) return failat(r, item, "%s", why);
        dl_status st = add_label(r, s, item->data.scalar.length);
        if (st != DL_OK) return st;
    }
    return DL_OK;
}

/* ---- top level ---- */

typedef struct top_ctx {
    yaml_node_t *model, *inputs, *layers, *outputs, *weights, *constants, *preprocess, *labels;
} top_ctx;

static dl_status top_pair(reader *r, const char *key, yaml_node_t *k, yaml_node_t *v, void *vctx) {
    top_ctx *t = vctx;
    if (!strcmp(key, "model")) t->model = v;
    else if (!strcmp(key, "inputs")) t->inputs = v;
    else if (!strcmp(key, "layers")) t->layers = v;
    else if (!strcmp(key, "outputs")) t->outputs = v;
    else if (!strcmp(key, "weights")) t->weights = v;
    else if (!strcmp(key, "constants")) t->constants = v;
    else if (!strcmp(key, "preprocess")) t->preprocess = v;
    else if (!strcmp(key, "labels")) t->labels = v;
    else
        return failat(r, k,
                      "unknown key '%s' (expected model, inputs, constants, layers, outputs, weights, preprocess, "
                      "labels)",
                      key);
    return DL_OK;
}

static dl_status read_document(reader *r, yaml_node_t *root) {
    if (!root) return failat(r, NULL, "empty model file");
    if (root->type != YAML_MAPPING_NODE)
        return failat(r, root, "a model must be a mapping with model, inputs and layers");
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
    if (t.inputs->type != YAML_SEQUENCE_NODE ||
        t.inputs->data.sequence.items.top == t.inputs->data.sequence.items.start)
        return failat(r, t.inputs, "inputs must be a non-empty list");
    size_t n_in = (size_t)(t.inputs->data.sequence.items.top - t.inputs->data.sequence.items.start);
    if (!(r->g->inputs = malloc(n_in * sizeof *r->g->inputs))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
    for (yaml_node_item_t *i = t.inputs->data.sequence.items.start; i < t.inputs->data.sequence.items.top; i++)
        if ((st = read_tensor_decl(r, node(r, *i), 0)) != DL_OK) return st;
    if (t.constants) {
        if (t.constants->type != YAML_SEQUENCE_NODE)
            return failat(r, t.constants, "constants must be a list of {name, shape}");
        for (yaml_node_item_t *i = t.constants->data.sequence.items.start; i < t.constants->data.sequence.items.top;
             i++)
            if ((st = read_tensor_decl(r, node(r, *i), 1)) != DL_OK) return st;
    }
    if (t.layers->type != YAML_SEQUENCE_NODE ||
        t.layers->data.sequence.items.top == t.layers->data.sequence.items.start)
        return failat(r, t.layers, "layers must be a non-empty list");
    if (t.layers->data.sequence.items.top - t.layers->data.sequence.items.start > MAX_LAYERS)
        return failat(r, t.layers, "more than %d layers (%ld)", MAX_LAYERS,
                      (long)(t.layers->data.sequence.items.top - t.layers->data.sequence.items.start));
    int prev = r->g->inputs[0], index = 0;
    for (yaml_node_item_t *i = t.layers->data.sequence.items.start; i < t.layers->data.sequence.items.top;
         i++, index++) {
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
            if (v < 0 || r->g->values[v].kind == DL_VALUE_WEIGHT)
                return failat(r, item, "output '%s' is not a layer or input of this model", nm);
            if (!dl_dtype_is_f32(r->g->values[v].dtype))
                return failat(r, item, "output '%s' is an int64 input; outputs are f32", nm);
            r->g->outputs[r->g->n_outputs++] = v;
        }
    } else {
        if (!(r->g->outputs = malloc(sizeof(int)))) return dl_fail(r->err, DL_E_NOMEM, "out of memory");
        r->g->outputs[r->g->n_outputs++] = prev;
    }
    if ((st = finish_model(r)) != DL_OK) return st;
    if (t.preprocess && (st = read_preprocess(r, t.preprocess)) != DL_OK) return st;
    if (t.labels && (st = read_labels(r, t.labels)) != DL_OK) return st;
    return DL_OK;
}

/* ---- building the document from parser events ---- */

/* One open collection while building. */
typedef struct open_node {
    int id;              /* its node in the document */
    int key;             /* a mapping's key waiting for its value, or 0 */
    yaml_char_t *anchor; /* its anchor, registered when it is complete (so it cannot hold itself) */
} open_node;

typedef struct builder {
    const char *path;
    yaml_document_t *doc;
    open_node open[MAX_DEPTH];
    int depth;
    dl_names anchors; /* anchor -> node id */
    char **names;     /* the anchors' strings (the map's keys) */
    int n_names, cap_names;
    dl_error *err;
} builder;

static dl_status built_fail(builder *b, yaml_mark_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static dl_status built_fail(builder *b, yaml_mark_t at, const char *fmt, ...) {
    char msg[DL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dl_fail(b->err, DL_E_INVALID, "%s:%lu:%lu: %s", b->path, (unsigned long)at.line + 1,
                   (unsigned long)at.column + 1, msg);
}

/* Records anchor -> id for the node at `at`; takes the anchor string. */
static dl_status add_anchor(builder *b, yaml_mark_t at, yaml_char_t *anchor, int id) {
    if (!anchor) return DL_OK;
    if (b->n_names == b->cap_names) {
        int cap = b->cap_names ? 2 * b->cap_names : 16;
        char **p = realloc(b->names, (size_t)cap * sizeof *p);
        if (!p) return free(anchor), dl_fail(b->err, DL_E_NOMEM, "out of memory");
        b->names = p, b->cap_names = cap;
    }
    b->names[b->n_names++] = (char *)anchor;
    int added = dl_names_add(&b->anchors, (const char *)anchor, id);
    if (added < 0) return dl_fail(b->err, DL_E_NOMEM, "out of memory");
    if (!added) return built_fail(b, at, "malformed YAML: anchor '&%s' is defined twice", (const char *)anchor);
    return DL_OK;
}

/* Sets a new node's position in the file (the document API leaves it zero). */
static void place_node(builder *b, int id, const yaml_event_t *e) {
    b->doc->nodes.start[id - 1].start_mark = e->start_mark;
    b->doc->nodes.start[id - 1].end_mark = e->end_mark;
}

/* Appends node id to the open collection, if any (else it is the root, node 1). */
static dl_status attach(builder *b, int id) {
    if (!b->depth) return DL_OK;
    open_node *o = &b->open[b->depth - 1];
    yaml_node_t *parent = yaml_document_get_node(b->doc, o->id);
    int ok = 1;
    if (parent->type == YAML_SEQUENCE_NODE) ok = yaml_document_append_sequence_item(b->doc, o->id, id);
    else if (!o->key) o->key = id;
    else ok = yaml_document_append_mapping_pair(b->doc, o->id, o->key, id), o->key = 0;
    return ok ? DL_OK : dl_fail(b->err, DL_E_NOMEM, "out of memory");
}

/* DL_OK while the document holds fewer than MAX_NODES nodes. */
static dl_status room_for_node(builder *b, const yaml_event_t *e) {
    if (b->doc->nodes.top - b->doc->nodes.start < MAX_NODES) return DL_OK;
    return built_fail(b, e->start_mark, "more than %d YAML values, lists and mappings", MAX_NODES);
}

/* Handles one event of the first document; *done when it has ended. */
static dl_status build_event(builder *b, yaml_event_t *e, int *done) {
    int id = 0;
    dl_status st;
    switch (e->type) {
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_START_EVENT: return DL_OK;
    case YAML_STREAM_END_EVENT:
    case YAML_DOCUMENT_END_EVENT: *done = 1; return DL_OK;
    case YAML_ALIAS_EVENT:
        id = dl_names_find(&b->anchors, (const char *)e->data.alias.anchor);
        if (id <= 0)
            return built_fail(b, e->start_mark, "malformed YAML: alias '*%s' names no complete anchor before it",
                              (const char *)e->data.alias.anchor);
        return attach(b, id);
    case YAML_SCALAR_EVENT: {
        if ((st = room_for_node(b, e)) != DL_OK) return st;
        if (e->data.scalar.length > INT_MAX) return built_fail(b, e->start_mark, "a scalar of over 2 GiB");
        id = yaml_document_add_scalar(b->doc, e->data.scalar.tag, e->data.scalar.value, (int)e->data.scalar.length,
                                      e->data.scalar.style);
        if (!id) return dl_fail(b->err, DL_E_NOMEM, "out of memory");
        place_node(b, id, e);
        yaml_char_t *anchor = e->data.scalar.anchor;
        e->data.scalar.anchor = NULL; /* now b's */
        if ((st = add_anchor(b, e->start_mark, anchor, id)) != DL_OK) return st;
        return attach(b, id);
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        if (b->depth == MAX_DEPTH) return built_fail(b, e->start_mark, "nesting deeper than %d levels", MAX_DEPTH);
        if ((st = room_for_node(b, e)) != DL_OK) return st;
        int seq = e->type == YAML_SEQUENCE_START_EVENT;
        yaml_char_t **anchor = seq ? &e->data.sequence_start.anchor : &e->data.mapping_start.anchor;
        id = seq ? yaml_document_add_sequence(b->doc, e->data.sequence_start.tag, e->data.sequence_start.style)
                 : yaml_document_add_mapping(b->doc, e->data.mapping_start.tag, e->data.mapping_start.style);
        if (!id) return dl_fail(b->err, DL_E_NOMEM, "out of memory");
        place_node(b, id, e);
        if ((st = attach(b, id)) != DL_OK) return st;
        b->open[b->depth++] = (open_node){id, 0, *anchor};
        *anchor = NULL; /* now b's */
        return DL_OK;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        open_node *o = &b->open[--b->depth];
        b->doc->nodes.start[o->id - 1].end_mark = e->end_mark;
        yaml_char_t *anchor = o->anchor;
        o->anchor = NULL;
        return add_anchor(b, b->doc->nodes.start[o->id - 1].start_mark, anchor, o->id);
    }
    default: return DL_OK;
    }
}

/* Parses the first document of text into doc (no root node for an empty stream). */
static dl_status build_document(const char *text, size_t len, const char *path, yaml_document_t *doc, dl_error *err) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return dl_fail(err, DL_E_NOMEM, "out of memory");
    if (!yaml_document_initialize(doc, NULL, NULL, NULL, 1, 1)) {
        yaml_parser_delete(&parser);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    builder b = {.path = path, .doc = doc, .err = err};
    dl_status st = DL_OK;
    for (int done = 0; st == DL_OK && !done;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&parser, &e)) {
            st = dl_fail(err, DL_E_INVALID, "%s:%lu:%lu: malformed YAML: %s%s%s", path,
                         (unsigned long)parser.problem_mark.line + 1, (unsigned long)parser.problem_mark.column + 1,
                         parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
                         parser.context ? parser.context : "");
            break;
        }
        st = build_event(&b, &e, &done);
        yaml_event_delete(&e);
    }
    for (int i = 0; i < b.depth; i++) free(b.open[i].anchor);
    for (int i = 0; i < b.n_names; i++) free(b.names[i]);
    free(b.names);
    dl_names_free(&b.anchors);
    yaml_parser_delete(&parser);
    if (st != DL_OK) yaml_document_delete(doc);
    return st;
}

dl_status dl_model_parse_yaml(const char *text, size_t len, const char *path, dl_graph **out, dl_error *err) {
    *out = NULL;
    yaml_document_t doc;
    dl_status st = build_document(text, len, path, &doc, err);
    if (st != DL_OK) return st;
    dl_graph *g = dl_graph_new();
    if (!g) st = dl_fail(err, DL_E_NOMEM, "out of memory");
    if (g && !(g->path = strdup(path))) st = dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) {
        reader r = {path, &doc, g, err};
        st = read_document(&r, yaml_document_get_root_node(&doc));
    }
    yaml_document_delete(&doc);
    if (st != DL_OK) {
        dl_graph_free(g);
        return st;
    }
    *out = g;
    return DL_OK;
}

dl_status dl_model_read_yaml(const char *path, dl_graph **out, dl_error *err) {
    *out = NULL;
    void *buf;
    size_t len;
    dl_status read = dl_read_regular(path, (size_t)64 << 20, "model file", &buf, &len, err);
    if (read != DL_OK) return read;
    dl_status st = dl_model_parse_yaml(buf, len, path, out, err);
    free(buf);
    return st;
}
