/* weights.c — gives every weight value of a model its data for one session: from a safetensors
 * file (f32 used in place from the mapping, f16/bf16 converted once) or drawn from a seed as
 * PyTorch initialises. Reads the model, writes only its own dl_weights. */
#define _POSIX_C_SOURCE 200809L
#include "weights.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "safetensors.h"

struct dl_weights {
    dl_safetensors *file; /* NULL for seeded weights */
    const float **data;   /* per value: the weight's host data, NULL for other values */
    float **copies;       /* converted or generated tensors we own */
    int n_copies;
};

static float *own(dl_weights *w, size_t count) {
    float **p = realloc(w->copies, (size_t)(w->n_copies + 1) * sizeof *p);
    if (!p) return NULL;
    w->copies = p;
    float *buf = malloc(count * sizeof(float) + 1);
    if (buf) w->copies[w->n_copies++] = buf;
    return buf;
}

static dl_status seeded(dl_weights *w, const dl_value *v, const dl_shape *shape, uint64_t seed, const float **out,
                        dl_error *err) {
    size_t n = (size_t)dl_shape_numel(shape);
    float *d = own(w, n);
    if (!d) return dl_fail(err, DL_E_NOMEM, "out of memory for weight '%s'", v->name);
    if (v->init == DL_INIT_ONES || v->init == DL_INIT_ZEROS) {
        for (size_t i = 0; i < n; i++) d[i] = v->init == DL_INIT_ONES ? 1.0f : 0.0f;
    } else {
        /* kaiming_uniform_(a=sqrt(5)) and PyTorch's bias rule both give U(-1/sqrt(fan_in), ..) */
        float bound = v->init == DL_INIT_UNIFORM ? 1.0f : v->fan_in > 0 ? (float)(1.0 / sqrt((double)v->fan_in)) : 0.0f;
        dl_rng r;
        dl_rng_seed(&r, dl_rng_derive(seed, v->name));
        for (size_t i = 0; i < n; i++) d[i] = dl_rng_uniform(&r, -bound, bound);
    }
    *out = d;
    return DL_OK;
}

static int same_shape(const dl_st_tensor *t, const dl_shape *s) {
    if (t->ndim != s->ndim) return 0;
    for (int i = 0; i < s->ndim; i++)
        if (t->shape[i] != s->d[i]) return 0;
    return 1;
}

static dl_status from_file(dl_weights *w, const dl_value *v, const dl_shape *shape, const float **out, dl_error *err) {
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
    size_t n = (size_t)dl_shape_numel(shape);
    if (!strcmp(t->dtype, "F32") && ((uintptr_t)t->data & 3u) == 0) {
        *out = (const float *)t->data; /* in place: the mapping is read-only, never written */
        return DL_OK;
    }
    int f32 = !strcmp(t->dtype, "F32"), f16 = !strcmp(t->dtype, "F16"), bf16 = !strcmp(t->dtype, "BF16");
    if (!f32 && !f16 && !bf16)
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s' is %s; weights must be F32, F16 or BF16", w->file->path,
                       v->name, t->dtype);
    float *d = own(w, n);
    if (!d) return dl_fail(err, DL_E_NOMEM, "out of memory for weight '%s'", v->name);
    const unsigned char *b = t->data;
    if (f32) memcpy(d, b, n * sizeof *d);
    for (size_t i = 0; !f32 && i < n; i++) {
        uint16_t h = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
        d[i] = f16 ? dl_f16_to_f32(h) : dl_bf16_to_f32(h);
    }
    *out = d;
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
    if (!w || !(w->data = calloc((size_t)g->n_values + 1, sizeof *w->data))) {
        free(w);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    dl_status st = path ? dl_safetensors_open(path, &w->file, err) : DL_OK;
    for (int i = 0; st == DL_OK && i < g->n_values; i++) {
        const dl_value *v = &g->values[i];
        const dl_shape *shape = shapes ? &shapes[i] : &v->shape;
        if (v->kind != DL_VALUE_WEIGHT) continue;
        st = w->file ? from_file(w, v, shape, &w->data[i], err) : seeded(w, v, shape, seed, &w->data[i], err);
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

const float *dl_weights_data(const dl_weights *w, int v) { return w->data[v]; }

void dl_weights_free(dl_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_copies; i++) free(w->copies[i]);
    free(w->copies);
    free(w->data);
    dl_safetensors_close(w->file);
    free(w);
}
