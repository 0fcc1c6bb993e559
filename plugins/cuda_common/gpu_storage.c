/* gpu_storage.c — see gpu_storage.h. Plain C: the plugins' supports_convert and the host halves of
 * their staged converting copies, checked without a GPU by tests/test_gpu_formats.c. */
#include "gpu_storage.h"

#include "op_check.h"
#include "tensor_convert.h"

dl_gpu_type dl_gpu_type_of(dl_dtype d) {
    if (dl_dtype_eq(d, DL_F32)) return DL_GPU_F32;
    if (dl_dtype_eq(d, DL_F16)) return DL_GPU_F16;
    if (dl_dtype_eq(d, DL_BF16)) return DL_GPU_BF16;
    return DL_GPU_NOTYPE;
}

int dl_gpu_type_size(dl_gpu_type t) { return t == DL_GPU_F32 ? 4 : t == DL_GPU_NOTYPE ? 0 : 2; }

static dl_dtype dtype_of(dl_gpu_type t) { return t == DL_GPU_F32 ? DL_F32 : t == DL_GPU_F16 ? DL_F16 : DL_BF16; }

int dl_gpu_xform_init(dl_gpu_xform *x, const int64_t *shape, int ndim, int to, int from) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    *x = (dl_gpu_xform){n, 1, n, DL_GPU_SAME_ORDER};
    int ok_to = to == DL_LAYOUT_ROW_MAJOR || (to == DL_LAYOUT_CHANNELS_LAST && ndim == 4);
    int ok_from = from == DL_LAYOUT_ROW_MAJOR || (from == DL_LAYOUT_CHANNELS_LAST && ndim == 4);
    if (!ok_to || !ok_from) return 0;
    if (to == from) return 1;
    x->c = shape[1];
    x->hw = shape[2] * shape[3];
    x->relayout = to == DL_LAYOUT_CHANNELS_LAST ? DL_GPU_TO_CHANNELS_LAST : DL_GPU_TO_ROW_MAJOR;
    return 1;
}

void dl_gpu_filter_krsc(dl_gpu_xform *x, const int64_t *wshape) {
    dl_gpu_xform_init(x, wshape, 4, DL_LAYOUT_CHANNELS_LAST, DL_LAYOUT_ROW_MAJOR);
}

static const char *layout_name(dl_layout l) {
    return l == DL_LAYOUT_ROW_MAJOR ? "row-major" : l == DL_LAYOUT_CHANNELS_LAST ? "channels-last" : "strided";
}

int dl_gpu_one_type(const dl_op *op, dl_gpu_type *t, dl_error *why) {
    dl_dtype d = op->outputs[0].dtype;
    for (int i = 0; i < op->n_inputs; i++)
        if (!dl_dtype_eq(op->inputs[i].dtype, d))
            return dl_fail(why, DL_E_UNSUPPORTED, "mixed dtypes (input %d is %s, the output %s): one dtype per op",
                           i + 1, dl_dtype_name(op->inputs[i].dtype), dl_dtype_name(d)),
                   0;
    if (dl_gpu_type_of(d) == DL_GPU_NOTYPE)
        return dl_fail(why, DL_E_UNSUPPORTED, "dtype %s is not f32, f16 or bf16", dl_dtype_name(d)), 0;
    if (t) *t = dl_gpu_type_of(d);
    return 1;
}

int dl_gpu_same_shape(const dl_tensor *a, const dl_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int dl_gpu_one_layout(const dl_op *op, int n_act, dl_layout *l, dl_error *why) {
    const dl_tensor *y = &op->outputs[0];
    dl_layout yl = dl_tensor_layout(y);
    int r = dl_op_residual(op); /* a fused residual (ABI 1.8) is an activation too */
    for (int i = 0; i < op->n_inputs; i++) {
        dl_layout il = dl_tensor_layout(&op->inputs[i]);
        if (r && i == r) continue; /* dl_op_check_as saw it in the output's layout */
        if (i >= n_act && il != DL_LAYOUT_ROW_MAJOR)
            return dl_fail(why, DL_E_UNSUPPORTED, "weight input %d is %s, weights are taken row-major", i + 1,
                           layout_name(il)),
                   0;
        if (i < n_act && il != yl)
            return dl_fail(why, DL_E_UNSUPPORTED, "input %d is %s, the output %s: one layout per op", i + 1,
                           layout_name(il), layout_name(yl)),
                   0;
    }
    if (l) *l = yl;
    return 1;
}

int dl_gpu_convert_plan_of(const dl_tensor *dst, const dl_tensor *src, int kind, dl_gpu_convert_plan *p,
                           dl_error *why) {
    dl_gpu_convert_plan q;
    if (!p) p = &q;
    if (kind != DL_COPY_HOST_TO_DEVICE && kind != DL_COPY_DEVICE_TO_HOST && kind != DL_COPY_DEVICE_TO_DEVICE)
        return dl_fail(why, DL_E_UNSUPPORTED, "unknown copy direction %d", kind), 0;
    p->dt = dl_gpu_type_of(dst->dtype);
    p->st = dl_gpu_type_of(src->dtype);
    if (p->dt == DL_GPU_NOTYPE || p->st == DL_GPU_NOTYPE)
        return dl_fail(why, DL_E_UNSUPPORTED, "converts f32, f16 and bf16 only, not %s to %s",
                       dl_dtype_name(src->dtype), dl_dtype_name(dst->dtype)),
               0;
    if (dst->byte_offset || src->byte_offset) return dl_fail(why, DL_E_UNSUPPORTED, "byte offsets are not taken"), 0;
    if (dst->ndim != src->ndim || dst->ndim < 0 || dst->ndim > 8)
        return dl_fail(why, DL_E_UNSUPPORTED, "ranks differ (%d and %d)", (int)src->ndim, (int)dst->ndim), 0;
    for (int i = 0; i < dst->ndim; i++)
        if (dst->shape[i] != src->shape[i]) return dl_fail(why, DL_E_UNSUPPORTED, "shapes differ in dim %d", i), 0;
    dl_layout dl = dl_tensor_layout(dst), sl = dl_tensor_layout(src);
    if (!dl_gpu_xform_init(&p->x, dst->shape, dst->ndim, dl, sl))
        return dl_fail(why, DL_E_UNSUPPORTED, "converts row-major and channels-last only, not %s to %s",
                       layout_name(sl), layout_name(dl)),
               0;
    return 1;
}

static float load(const void *p, dl_gpu_type t, int64_t i) {
    if (t == DL_GPU_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DL_GPU_BF16 ? dl_bf16_to_f32(h) : dl_f16_to_f32(h);
}

static void store(void *p, dl_gpu_type t, int64_t i, float v) {
    if (t == DL_GPU_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == DL_GPU_BF16 ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}

/* one element, its bits kept when the types agree (NaN payloads included) */
static void move(void *d, dl_gpu_type dt, int64_t di, const void *s, dl_gpu_type st, int64_t si) {
    if (dt == st && dt != DL_GPU_F32) ((uint16_t *)d)[di] = ((const uint16_t *)s)[si];
    else if (dt == st) ((float *)d)[di] = ((const float *)s)[si];
    else store(d, dt, di, load(s, st, si));
}

void dl_gpu_gather_host(void *chunk, const void *src, const dl_gpu_convert_plan *p, int64_t lo, int64_t count) {
    if (p->x.relayout == DL_GPU_SAME_ORDER) { /* contiguous: tensor_convert's loops */
        dl_convert_elements(chunk, dtype_of(p->dt), (const char *)src + lo * dl_gpu_type_size(p->st), dtype_of(p->st),
                            count);
        return;
    }
    for (int64_t j = 0; j < count; j++) move(chunk, p->dt, j, src, p->st, dl_gpu_src_of(&p->x, lo + j));
}

void dl_gpu_scatter_host(void *dst, const void *chunk, const dl_gpu_convert_plan *p, int64_t lo, int64_t count) {
    if (p->x.relayout == DL_GPU_SAME_ORDER) {
        dl_convert_elements((char *)dst + lo * dl_gpu_type_size(p->dt), dtype_of(p->dt), chunk, dtype_of(p->st), count);
        return;
    }
    for (int64_t j = 0; j < count; j++) move(dst, p->dt, dl_gpu_dst_of(&p->x, lo + j), chunk, p->st, j);
}
