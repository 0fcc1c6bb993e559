/* weights.c — gives every weight value of a model its data for one session: from a safetensors
 * file (kept in the file's dtype, F32, F16 or BF16, in place from the mapping when aligned) or
 * drawn from a seed as PyTorch initialises. f32 copies of f16/bf16 weights are made only when
 * dl_weights_data asks for one. Reads the model, writes only its own dl_weights. */
#define _POSIX_C_SOURCE 200809L
#include "weights.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "safetensors.h"
#include "tensor_convert.h"

struct dl_weights {
    dl_safetensors *file; /* NULL for seeded weights */
    const void **raw;     /* per value: the weight's data as stored, NULL for other values */
    dl_dtype *dtype;      /* per value: the dtype of raw */
    const float **f32;    /* per value: f32 data (raw itself for f32), NULL until converted */
    size_t *numel;        /* per value: elements of a weight */
    void **copies;        /* buffers we own: converted, generated, or copied for alignment */
    int n_copies, cap_copies;
    size_t f32_bytes;   /* f32 data in copies (dl_weights_f32_bytes) */
    size_t owned_bytes; /* everything in copies (dl_weights_owned_bytes) */
};

static void *own(dl_weights *w, size_t bytes) {
    if (w->n_copies == w->cap_copies) {
        int cap = w->cap_copies ? 2 * w->cap_copies : 16;
        void **p = realloc(w->copies, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        w->copies = p, w->cap_copies = cap;
    }
    void *buf = malloc(bytes + 1);
    if (buf) w->copies[w->n_copies++] = buf, w->owned_bytes += bytes;
    return buf;
}

static dl_status seeded(dl_weights *w, const dl_value *v, const dl_shape *shape, uint64_t seed, int i, dl_error *err) {
    size_t n = (size_t)dl_shape_numel(shape);
    float *d = own(w, n * sizeof *d);
    if (!d) return dl_fail(err, DL_E_NOMEM, "out of memory for weight '%s'", v->name);
    w->f32_bytes += n * sizeof *d;
    if (v->init == DL_INIT_ONES || v->init == DL_INIT_ZEROS) {
        for (size_t j = 0; j < n; j++) d[j] = v->init == DL_INIT_ONES ? 1.0f : 0.0f;
    } else {
        /* kaiming_uniform_(a=sqrt(5)) and PyTorch's bias rule both give U(-1/sqrt(fan_in), ..) */
        float bound = v->init == DL_INIT_UNIFORM ? 1.0f : v->fan_in > 0 ? (float)(1.0 / sqrt((double)v->fan_in)) : 0.0f;
        dl_rng r;
        dl_rng_seed(&r, dl_rng_derive(seed, v->name));
        for (size_t j = 0; j < n; j++) d[j] = dl_rng_uniform(&r, -bound, bound);
    }
    w->raw[i] = w->f32[i] = d;
    w->dtype[i] = DL_F32;
    return DL_OK;
}

static int same_shape(const dl_st_tensor *t, const dl_shape *s) {
    if (t->ndim != s->ndim) return 0;
    for (int i = 0; i < s->ndim; i++)
        if (t->shape[i] != s->d[i]) return 0;
    return 1;
}

static dl_status from_file(dl_weights *w, const dl_value *v, const dl_shape *shape, int i, dl_error *err) {
    const dl_st_tensor *t = dl_safetensors_find(w->file, v->name);
    char want[160], got[160];
    dl_shape_str(shape->d, shape->ndim, want, sizeof want);
    if (!t)
        return dl_fail(err, DL_E_INVALID, "%s: model needs tensor '%s' %s, not in the file", w->file->path, v->name,
                       want);
    if (!same_shape(t, shape)) {
        dl_shape_str(t->shape, t->ndim, got, sizeof got);
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s' has shape %s, the model needs %s", w->file->path, v->name,
                       got, want);
    }
    dl_dtype dt;
    if (!strcmp(t->dtype, "F32")) dt = DL_F32;
    else if (!strcmp(t->dtype, "F16")) dt = DL_F16;
    else if (!strcmp(t->dtype, "BF16")) dt = DL_BF16;
    else
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s' is %s; weights must be F32, F16 or BF16", w->file->path,
                       v->name, t->dtype);
    size_t size = dl_dtype_size(dt), bytes = (size_t)dl_shape_numel(shape) * size;
    const void *data = t->data;   /* in place: the mapping is read-only, never written */
    if ((uintptr_t)data % size) { /* an odd offset: an aligned copy, still in the file's dtype */
        void *d = own(w, bytes);
        if (!d) return dl_fail(err, DL_E_NOMEM, "out of memory for weight '%s'", v->name);
        memcpy(d, t->data, bytes);
        if (dl_dtype_is_f32(dt)) w->f32_bytes += bytes;
        data = d;
    }
    w->raw[i] = data;
    w->dtype[i] = dt;
    if (dl_dtype_is_f32(dt)) w->f32[i] = data;
    return DL_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

dl_status dl_weights_bind(const dl_graph *g, const dl_shape *shapes, const char *path, uint64_t seed, dl_weights **out,
                          dl_error *err) {
    *out = NULL;
    dl_weights *w = calloc(1, sizeof *w);
    size_t nv = (size_t)g->n_values + 1;
    if (!w || !(w->raw = calloc(nv, sizeof *w->raw)) || !(w->dtype = calloc(nv, sizeof *w->dtype)) ||
        !(w->f32 = calloc(nv, sizeof *w->f32)) || !(w->numel = calloc(nv, sizeof *w->numel))) {
        dl_weights_free(w);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    dl_status st = path ? dl_safetensors_open(path, &w->file, err) : DL_OK;
    for (int i = 0; st == DL_OK && i < g->n_values; i++) {
        const dl_value *v = &g->values[i];
        const dl_shape *shape = shapes ? &shapes[i] : &v->shape;
        if (v->kind != DL_VALUE_WEIGHT) continue;
        w->numel[i] = (size_t)dl_shape_numel(shape);
        st = w->file ? from_file(w, v, shape, i, err) : seeded(w, v, shape, seed, i, err);
    }
    for (int i = 0; st == DL_OK && w->file && i < w->file->n_tensors; i++) {
        const char *name = w->file->tensors[i].name;
        int v = dl_graph_find_value(g, name);
        if ((v < 0 || g->values[v].kind != DL_VALUE_WEIGHT) && !ends_with(name, ".num_batches_tracked"))
            st = dl_fail(err, DL_E_INVALID,
                         "%s: tensor '%s' is not a weight of model '%s' (wrong file, or a layer name differs?)", path,
                         name, g->name ? g->name : "?");
    }
    if (st != DL_OK) {
        dl_weights_free(w);
        return st;
    }
    *out = w;
    return DL_OK;
}

const void *dl_weights_raw(const dl_weights *w, int v, dl_dtype *dtype) {
    if (w->raw[v] && dtype) *dtype = w->dtype[v];
    return w->raw[v];
}

const float *dl_weights_data(dl_weights *w, int v) {
    if (w->f32[v] || !w->raw[v]) return w->f32[v];
    /* an f16/bf16 weight asked for in f32 the first time: convert it once (exact) and keep it */
    size_t n = w->numel[v];
    float *d = own(w, n * sizeof *d);
    if (!d) return NULL;
    dl_convert_elements(d, DL_F32, w->raw[v], w->dtype[v], (int64_t)n);
    w->f32_bytes += n * sizeof *d;
    return w->f32[v] = d;
}

size_t dl_weights_f32_bytes(const dl_weights *w) { return w->f32_bytes; }
size_t dl_weights_owned_bytes(const dl_weights *w) { return w ? w->owned_bytes : 0; }

size_t dl_weights_seeded_bytes(const dl_graph *g, const dl_shape *shapes) {
    size_t bytes = 0; /* saturating: one weight (within the tensor limit) added below SIZE_MAX / 2 cannot wrap */
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].kind == DL_VALUE_WEIGHT && bytes < SIZE_MAX / 2)
            bytes += (size_t)dl_shape_numel(&shapes[i]) * sizeof(float);
    return bytes;
}

void dl_weights_free(dl_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_copies; i++) free(w->copies[i]);
    free(w->copies);
    free(w->raw);
    free(w->dtype);
    free(w->f32);
    free(w->numel);
    dl_safetensors_close(w->file);
    free(w);
}
