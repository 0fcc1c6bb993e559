/* kernel.c — a prepared oneDNN kernel: its steps built from primitive descriptors (with reorders
 * where oneDNN wants another layout than the tensor's own, row-major or channels-last f32), run by
 * binding each argument to the op's tensors or the workspace, and released. Also the small helpers
 * the op builders share. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

dl_status odn_fail(odn_build *b, dnnl_status_t st, const char *what) {
    return dl_fail(b->err, st == dnnl_unimplemented ? DL_E_UNSUPPORTED : DL_E_RUNTIME, "%s: oneDNN %s: %s", b->what,
                   what, dnnl_status2str(st));
}

dnnl_status_t odn_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *shape) {
    dnnl_dims_t dims, strides;
    if (ndim == 0) {
        dims[0] = 1, strides[0] = 1;
        return dnnl_memory_desc_init_by_strides(md, 1, dims, dnnl_f32, strides);
    }
    if (ndim > DNNL_MAX_NDIMS) return dnnl_invalid_arguments;
    int64_t step = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        dims[d] = shape[d];
        strides[d] = step;
        step *= shape[d];
    }
    return dnnl_memory_desc_init_by_strides(md, ndim, dims, dnnl_f32, strides);
}

dnnl_status_t odn_tensor_md(dnnl_memory_desc_t *md, const dl_tensor *t) {
    if (!t->strides) return odn_plain_md(md, t->ndim, t->shape);
    if (t->ndim < 1 || t->ndim > DNNL_MAX_NDIMS) return dnnl_invalid_arguments;
    dnnl_dims_t dims, strides;
    for (int d = 0; d < t->ndim; d++) dims[d] = t->shape[d], strides[d] = t->strides[d];
    return dnnl_memory_desc_init_by_strides(md, t->ndim, dims, dnnl_f32, strides);
}

int odn_activation_ok(int activation) { return activation >= DL_ACT_NONE && activation <= DL_ACT_SIGMOID; }

dnnl_status_t odn_attr_create(dnnl_primitive_attr_t *attr, const dl_op_attrs *a, const dnnl_memory_desc_t *residual,
                              int sum) {
    dnnl_alg_kind_t alg = dnnl_alg_kind_undef;
    float alpha = 0, beta = 0;
    switch (a ? a->activation : DL_ACT_NONE) {
    case DL_ACT_NONE: break;
    case DL_ACT_RELU: alg = dnnl_eltwise_relu; break;
    case DL_ACT_SILU: alg = dnnl_eltwise_swish, alpha = 1.0f; break; /* x * sigmoid(1 * x) */
    case DL_ACT_HARD_SWISH: alg = dnnl_eltwise_hardswish; break;
    case DL_ACT_GELU: alg = dnnl_eltwise_gelu_erf; break;
    case DL_ACT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
    case DL_ACT_CLIP: alg = dnnl_eltwise_clip, alpha = a->clip_min, beta = a->clip_max; break; /* as the clip op */
    case DL_ACT_LEAKY_RELU: alg = dnnl_eltwise_relu, alpha = a->alpha; break; /* relu's alpha: the slope */
    case DL_ACT_SIGMOID: alg = dnnl_eltwise_logistic; break;
    default: return dnnl_unimplemented;
    }
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && (alg != dnnl_alg_kind_undef || residual)) {
        dnnl_post_ops_t po;
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) {
            if (residual && sum) st = dnnl_post_ops_append_sum(po, 1.0f); /* post-op 0: dst += result */
            else if (residual) st = dnnl_post_ops_append_binary(po, dnnl_binary_add, residual); /* post-op 0 */
            if (st == dnnl_success && alg != dnnl_alg_kind_undef)
                st = dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta);
            if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    if (st != dnnl_success) dnnl_primitive_attr_destroy(*attr);
    return st;
}

static size_t reserve(dl_kernel *k, size_t bytes) {
    size_t at = k->workspace;
    k->workspace += (bytes + 63) & ~(size_t)63;
    return at;
}

/* Appends a step running pd's primitive with these arguments (layouts mds), its scratchpad in the
 * workspace. pd stays the caller's. */
static dl_status push_step(odn_build *b, const_dnnl_primitive_desc_t pd, const odn_arg *args,
                           const dnnl_memory_desc_t *mds, int n) {
    dl_kernel *k = b->k;
    if (k->n_steps == ODN_MAX_STEPS) return dl_fail(b->err, DL_E_RUNTIME, "%s: too many oneDNN steps", b->what);
    odn_step *st = &k->steps[k->n_steps];
    memset(st, 0, sizeof *st);
    st->args = calloc((size_t)n + 1, sizeof *st->args);
    st->xargs = calloc((size_t)n + 1, sizeof *st->xargs);
    if (!st->args || !st->xargs) {
        free(st->args), free(st->xargs);
        return dl_fail(b->err, DL_E_NOMEM, "%s: out of memory", b->what);
    }
    k->n_steps++; /* counted now, so that release frees what follows even if a call below fails */
    st->unless_at = -1;
    memcpy(st->args, args, (size_t)n * sizeof *args);
    const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
    for (int i = 0; i <= n; i++) {
        const dnnl_memory_desc_t *md = i < n ? &mds[i] : scratch;
        if (i == n) {
            if (!scratch_bytes) break;
            st->args[n] = (odn_arg){DNNL_ARG_SCRATCHPAD, ODN_WORKSPACE, 0, reserve(k, scratch_bytes)};
        }
        void *handle = st->args[i].bind == ODN_OWNED ? k->owned[st->args[i].index] : DNNL_MEMORY_NONE;
        st->xargs[i].arg = st->args[i].arg;
        ODN_TRY(b, "memory", dnnl_memory_create(&st->xargs[i].memory, md, b->s->engine, handle));
        st->n_args = i + 1;
    }
    ODN_TRY(b, "primitive", dnnl_primitive_create(&st->prim, pd));
    return DL_OK;
}

/* A reorder between two layouts as a step. */
static dl_status push_reorder(odn_build *b, odn_arg from, const dnnl_memory_desc_t *from_md, odn_arg to,
                              const dnnl_memory_desc_t *to_md) {
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, NULL, NULL, 0));
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from_md, b->s->engine, to_md, b->s->engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return odn_fail(b, s, "reorder");
    from.arg = DNNL_ARG_FROM, to.arg = DNNL_ARG_TO;
    odn_arg args[2] = {from, to};
    dnnl_memory_desc_t mds[2] = {*from_md, *to_md};
    dl_status st = push_step(b, pd, args, mds, 2);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

/* Weights known at prepare, reordered once into a buffer the kernel owns (its slot in *slot). */
static dl_status reorder_once(odn_build *b, const dnnl_memory_desc_t *from_md, const void *src,
                              const dnnl_memory_desc_t *to_md, int *slot) {
    dl_kernel *k = b->k;
    if (k->n_owned == ODN_MAX_OWNED) return dl_fail(b->err, DL_E_RUNTIME, "%s: too many reordered weights", b->what);
    size_t bytes = dnnl_memory_desc_get_size(to_md);
    void *dst = NULL;
    if (posix_memalign(&dst, 64, bytes ? bytes : 64) != 0)
        return dl_fail(b->err, DL_E_NOMEM, "%s: cannot allocate %zu bytes", b->what, bytes);
    k->owned_bytes[k->n_owned] = bytes;
    k->owned[ *slot = k->n_owned++] = dst;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m[2] = {NULL, NULL};
    const char *what = "weights reorder";
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from_md, b->s->engine, to_md, b->s->engine, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&prim, pd);
    if (s == dnnl_success) s = dnnl_memory_create(&m[0], from_md, b->s->engine, (void *)src);
    if (s == dnnl_success) s = dnnl_memory_create(&m[1], to_md, b->s->engine, dst);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, m[0]}, {DNNL_ARG_TO, m[1]}};
        s = dnnl_primitive_execute(prim, k->stream, 2, args);
        if (s == dnnl_success) s = dnnl_stream_wait(k->stream);
    }
    for (int i = 0; i < 2; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return s == dnnl_success ? DL_OK : odn_fail(b, s, what);
}

dl_status odn_add_primitive(odn_build *b, dnnl_primitive_desc_t pd, const odn_tensor_arg *args, int n) {
    if (!b->k) {
        dnnl_primitive_desc_destroy(pd);
        return DL_OK;
    }
    enum { MAX = 64 };
    if (n > MAX) {
        dnnl_primitive_desc_destroy(pd);
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: more than %d oneDNN arguments", b->what, MAX);
    }
    odn_arg bound[MAX] = {{0}};
    dnnl_memory_desc_t want[MAX] = {{0}};
    dl_status st = DL_OK;
    const odn_tensor_arg *residual = NULL, *orig[MAX];
    int dst = -1, m = 0; /* m: the primitive's own arguments, the residual left out */
    for (int j = 0; j < n && st == DL_OK; j++) {
        if (args[j].arg == ODN_ARG_RESIDUAL_IN_DST) {
            residual = &args[j];
            continue;
        }
        const int i = m++;
        const odn_tensor_arg *a = orig[i] = &args[j];
        if (a->arg == DNNL_ARG_DST) dst = i;
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, a->arg);
        if (!md) {
            st = dl_fail(b->err, DL_E_RUNTIME, "%s: oneDNN primitive has no argument %d", b->what, a->arg);
            break;
        }
        want[i] = *md;
        bound[i] = (odn_arg){a->arg, a->bind, a->index, 0};
        if (dnnl_memory_desc_equal(md, &a->md)) continue;
        if (a->bind == ODN_OUTPUT) { /* written in oneDNN's layout to the workspace, reordered after */
            bound[i] = (odn_arg){a->arg, ODN_WORKSPACE, 0, reserve(b->k, dnnl_memory_desc_get_size(md))};
            continue;
        }
        const void *known = b->op->inputs[a->index].data;
        int slot = 0;
        if (known && (st = reorder_once(b, &a->md, known, md, &slot)) == DL_OK) {
            bound[i] = (odn_arg){a->arg, ODN_OWNED, slot, 0};
        } else if (!known) { /* an activation: reordered into the workspace before each run */
            bound[i] = (odn_arg){a->arg, ODN_WORKSPACE, 0, reserve(b->k, dnnl_memory_desc_get_size(md))};
            st = push_reorder(b, (odn_arg){0, ODN_INPUT, a->index, 0}, &a->md, bound[i], md);
        }
    }
    /* the sum post-op adds what dst holds: the residual, copied there (in the primitive's layout) */
    if (st == DL_OK && residual && dst < 0)
        st = dl_fail(b->err, DL_E_RUNTIME, "%s: a residual with no destination", b->what);
    if (st == DL_OK && residual) {
        st = push_reorder(b, (odn_arg){0, ODN_INPUT, residual->index, 0}, &residual->md, bound[dst], &want[dst]);
        b->k->in_place = residual->index;
        if (st == DL_OK && bound[dst].bind == ODN_OUTPUT) b->k->steps[b->k->n_steps - 1].unless_at = residual->index;
    }
    if (st == DL_OK) st = push_step(b, pd, bound, want, m);
    for (int i = 0; i < m && st == DL_OK; i++)
        if (orig[i]->bind == ODN_OUTPUT && bound[i].bind == ODN_WORKSPACE)
            st = push_reorder(b, bound[i], &want[i], (odn_arg){0, ODN_OUTPUT, 0, 0}, &orig[i]->md);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

dl_status odn_kernel_run(dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    for (int s = 0; s < k->n_steps; s++) {
        odn_step *st = &k->steps[s];
        if (st->unless_at >= 0 && in[st->unless_at].data == out[0].data) continue; /* there already */
        for (int i = 0; i < st->n_args; i++) {
            const odn_arg *a = &st->args[i];
            void *p, *cur = NULL;
            switch (a->bind) {
            case ODN_INPUT: p = in[a->index].data; break;
            case ODN_OUTPUT: p = out[0].data; break;
            case ODN_WORKSPACE: p = (char *)ws + a->offset; break;
            default: continue;
            }
            /* set only when it changes: a session passes the same addresses every run */
            dnnl_status_t r = dnnl_memory_get_data_handle(st->xargs[i].memory, &cur);
            if (r == dnnl_success && cur != p) r = dnnl_memory_set_data_handle(st->xargs[i].memory, p);
            if (r != dnnl_success)
                return dl_fail(err, DL_E_RUNTIME, "%s: oneDNN memory handle: %s", k->name, dnnl_status2str(r));
        }
        dnnl_status_t r = dnnl_primitive_execute(st->prim, k->stream, st->n_args, st->xargs);
        if (r != dnnl_success) return dl_fail(err, DL_E_RUNTIME, "%s: oneDNN execute: %s", k->name, dnnl_status2str(r));
    }
    dnnl_status_t r = dnnl_stream_wait(k->stream);
    if (r != dnnl_success) return dl_fail(err, DL_E_RUNTIME, "%s: oneDNN stream wait: %s", k->name, dnnl_status2str(r));
    return DL_OK;
}

void odn_kernel_free(dl_kernel *k) {
    if (!k) return;
    for (int s = 0; s < k->n_steps; s++) {
        odn_step *st = &k->steps[s];
        if (st->prim) dnnl_primitive_destroy(st->prim);
        for (int i = 0; i < st->n_args; i++)
            if (st->xargs[i].memory) dnnl_memory_destroy(st->xargs[i].memory);
        free(st->args);
        free(st->xargs);
    }
    for (int i = 0; i < k->n_owned; i++) free(k->owned[i]);
    if (k->stream) dnnl_stream_destroy(k->stream);
    free(k);
}
