/* storage.c — f16/bf16 storage and channels-last layouts for the CPU plugin: convert to f32
 * row-major, compute in f32, round once into the output's format (see storage.h). */
#include "storage.h"

#include <stdlib.h>

#include "tensor_convert.h"

/* What a kernel reads where it is: f32 row-major, or integers (gather's int64 indices, which are
 * never converted). */
static int is_native(const dl_tensor *t) {
    return (dl_dtype_is_f32(t->dtype) || t->dtype.code == DL_DTYPE_INT) && dl_tensor_layout(t) == DL_LAYOUT_ROW_MAJOR;
}
/* ... or, for an op with an NHWC kernel (keep_cl), an f32 channels-last activation */
static int is_native_for(const dl_tensor *t, int keep_cl) {
    return is_native(t) ||
           (keep_cl && !t->data && dl_dtype_is_f32(t->dtype) && dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST);
}

/* t as an f32 row-major tensor of the same shape, at data (an integer tensor keeps its dtype). */
static dl_tensor f32_view(const dl_tensor *t, void *data) {
    dl_tensor v = *t;
    v.data = data;
    if (t->dtype.code != DL_DTYPE_INT) v.dtype = DL_F32;
    v.strides = NULL;
    v.byte_offset = 0;
    return v;
}

static size_t staging_bytes(const dl_tensor *t) {
    return ((size_t)dl_tensor_numel(t) * sizeof(float) + 63) & ~(size_t)63;
}

void cpu_storage_free(cpu_storage *s) {
    if (s->weights)
        for (int i = 0; i < s->n_inputs; i++) free(s->weights[i]);
    free(s->weights);
    free(s->stage);
    free(s->t32);
    *s = (cpu_storage){0};
}

dl_status cpu_storage_prepare(cpu_storage *s, const dl_op *op, dl_op *op32, int keep_cl, dl_error *err) {
    *s = (cpu_storage){0};
    *op32 = *op;
    int active = !is_native_for(&op->outputs[0], keep_cl);
    for (int i = 0; i < op->n_inputs; i++) active |= !is_native_for(&op->inputs[i], keep_cl);
    if (!active) return DL_OK; /* today's path, untouched */
    const int n = op->n_inputs;
    s->active = 1;
    s->n_inputs = n;
    s->weights = calloc((size_t)n, sizeof *s->weights);
    s->stage = malloc((size_t)n * sizeof *s->stage);
    s->t32 = malloc((size_t)n * sizeof *s->t32);
    if (!s->weights || !s->stage || !s->t32) {
        cpu_storage_free(s);
        return dl_fail(err, DL_E_NOMEM, "out of memory preparing %s", op->name ? op->name : "op");
    }
    for (int i = 0; i < n; i++) {
        const dl_tensor *t = &op->inputs[i];
        s->stage[i] = CPU_NO_STAGE;
        s->t32[i] = f32_view(t, t->data);
        if (is_native_for(t, keep_cl)) continue; /* the kernel reads it where it is */
        if (!t->data) {                          /* an activation: staged at run */
            s->stage[i] = s->staging;
            s->staging += staging_bytes(t);
            continue;
        }
        /* a weight: its f32 row-major copy, converted once */
        s->weights[i] = malloc(staging_bytes(t) ? staging_bytes(t) : 64);
        s->t32[i].data = s->weights[i];
        if (!s->weights[i] || !dl_convert_host(&s->t32[i], t)) {
            dl_status st = s->weights[i] ? DL_E_INVALID : DL_E_NOMEM;
            cpu_storage_free(s);
            return dl_fail(err, st, "%s: cannot convert weight %d to f32 row-major", op->name ? op->name : "op", i + 1);
        }
    }
    s->out_stage = CPU_NO_STAGE;
    if (!is_native_for(&op->outputs[0], keep_cl)) {
        s->out_stage = s->staging;
        s->staging += staging_bytes(&op->outputs[0]);
    }
    s->out32 = f32_view(&op->outputs[0], NULL);
    op32->inputs = s->t32;
    op32->outputs = &s->out32;
    return DL_OK;
}

size_t cpu_storage_workspace(cpu_storage *s, size_t kernel_ws) {
    s->kernel_ws = kernel_ws;
    return s->active ? s->staging + kernel_ws : kernel_ws;
}

dl_status cpu_storage_run(const cpu_storage *s, const dl_kernel *k,
                          void (*fn)(const dl_kernel *k, const dl_tensor *in, float *y, void *ws), const dl_tensor *in,
                          const dl_tensor *out, void *ws, dl_error *err) {
    char *w = ws;
    dl_tensor *x = s->t32; /* one kernel is never in two calls at once: its views are free to reuse */
    for (int i = 0; i < s->n_inputs; i++) {
        x[i] = f32_view(&in[i], s->weights[i] ? (void *)s->weights[i] : in[i].data);
        if (s->stage[i] == CPU_NO_STAGE) continue;
        x[i].data = w + s->stage[i];
        if (!dl_convert_host(&x[i], &in[i]))
            return dl_fail(err, DL_E_RUNTIME, "input %d: cannot convert %s to f32 row-major", i + 1,
                           dl_dtype_name(in[i].dtype));
    }
    float *y = s->out_stage == CPU_NO_STAGE ? out[0].data : (float *)(w + s->out_stage);
    fn(k, x, y, s->kernel_ws ? w + s->staging : NULL);
    if (s->out_stage == CPU_NO_STAGE) return DL_OK;
    dl_tensor y32 = f32_view(&out[0], y);
    if (!dl_convert_host(&out[0], &y32))
        return dl_fail(err, DL_E_RUNTIME, "cannot convert the output to %s", dl_dtype_name(out[0].dtype));
    return DL_OK;
}
