/* ops.c — the cudnn plugin's ops other than conv2d and linear: pooling, relu/sigmoid/clipped relu
 * activations, same-shape add (cudnnOpTensor), softmax, inference batchnorm, and concat and the
 * view ops as device copies; plus the descriptor, scratch and staging helpers conv.c shares.
 *
 * Stored formats (ABI 1.3). f32 row-major tensors go to cuDNN as before. f16/bf16 tensors and
 * NHWC activations go to cuDNN as they are (HALF / BFLOAT16 descriptors, NHWC format; scaling
 * factors stay float, as cuDNN wants for these types), and the call is tried once at prepare on
 * zeroed scratch buffers. Where cuDNN turns that format down, the kernel is "staged": at each run
 * its activations are cast to f32 NCHW in the workspace (the cast kernel, cast.cu), the cuDNN call
 * runs on those, and the output is cast back. So everything supports() accepts runs. Batchnorm's
 * parameters are f32 in cuDNN whatever the data's type: on f16/bf16 they are cast into the
 * workspace at each run (four vectors of C elements). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "cudnn_plugin.h"

/* ---- descriptors, scratch and staging ---- */

dl_status dn_tensor4(cudnnTensorDescriptor_t *d, cudnnDataType_t t, cudnnTensorFormat_t f, int64_t n, int64_t c,
                     int64_t h, int64_t w, dl_error *err) {
    if (!*d) DNN_TRY(cudnnCreateTensorDescriptor(d));
    if (n > 0x7fffffff || c > 0x7fffffff || h > 0x7fffffff || w > 0x7fffffff || n * c * h * w > 0x7fffffff)
        return dl_fail(err, DL_E_UNSUPPORTED, "tensor too large for a cuDNN descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(*d, f, t, (int)n, (int)c, (int)h, (int)w));
    return DL_OK;
}

dl_status dn_activation(dl_kernel *k, cudnnActivationMode_t mode, double coef, dl_error *err) {
    DNN_TRY(cudnnCreateActivationDescriptor(&k->act));
    DNN_TRY(cudnnSetActivationDescriptor(k->act, mode, CUDNN_PROPAGATE_NAN, coef));
    return DL_OK;
}

dl_status dn_scratch(cudnn_state *s, int n, const size_t *bytes, void **bufs, dl_error *err) {
    for (int i = 0; i < n; i++) bufs[i] = NULL;
    for (int i = 0; i < n; i++) {
        if (!bytes[i]) continue;
        dl_status st = dl_gpu_alloc(&s->gpu, bytes[i], &bufs[i], err);
        if (st != DL_OK) return st;
        DL_GPU_TRY(cudaMemsetAsync(bufs[i], 0, bytes[i], s->gpu.stream), err);
    }
    return DL_OK;
}

void dn_scratch_free(cudnn_state *s, int n, void **bufs) {
    for (int i = 0; i < n; i++) dl_gpu_free(&s->gpu, bufs[i]);
}

/* bytes of a tensor of shape s (nd dims) in storage type t */
static size_t tensor_bytes(const int64_t *s, int nd, dl_gpu_type t) {
    return (size_t)dl_gpu_prod(s, 0, nd) * (size_t)dl_gpu_type_size(t);
}

size_t dn_plan_stages(dl_kernel *k, const dl_op *op, int n_act, size_t off) {
    int n = n_act + (k->g.residual > 0); /* a fused residual: the region after the activations' */
    for (int i = 0; i < n && i < (int)(sizeof k->in / sizeof k->in[0]); i++) {
        const dl_tensor *t = &op->inputs[i < n_act ? i : k->g.residual];
        k->in[i].off = off = dn_align(off);
        dl_gpu_xform_init(&k->in[i].x, t->shape, t->ndim, DL_LAYOUT_ROW_MAJOR, k->layout);
        off += tensor_bytes(t->shape, t->ndim, DL_GPU_F32);
    }
    const dl_tensor *y = &op->outputs[0];
    k->out.off = off = dn_align(off);
    dl_gpu_xform_init(&k->out.x, y->shape, y->ndim, k->layout, DL_LAYOUT_ROW_MAJOR);
    return off + tensor_bytes(y->shape, y->ndim, DL_GPU_F32);
}

dl_status dn_stage_in(cudnn_state *s, const dl_kernel *k, int i, const void *x, void *ws, const void **staged,
                      dl_error *err) {
    void *dst = (char *)ws + k->in[i].off;
    int rc = dl_gpu_cast(dst, DL_GPU_F32, x, k->type, &k->in[i].x, s->gpu.stream);
    if (rc) return dl_gpu_status((cudaError_t)rc, "cast kernel launch", err);
    *staged = dst;
    return DL_OK;
}

dl_status dn_stage_out(cudnn_state *s, const dl_kernel *k, const void *ws, void *y, dl_error *err) {
    int rc = dl_gpu_cast(y, k->type, (const char *)ws + k->out.off, DL_GPU_F32, &k->out.x, s->gpu.stream);
    return rc ? dl_gpu_status((cudaError_t)rc, "cast kernel launch", err) : DL_OK;
}

/* ---- prepare ---- */

static int is_activation(int kind) { return kind == DL_OP_RELU || kind == DL_OP_SIGMOID || kind == DL_OP_CLIP; }
static int is_pool(int kind) {
    return kind == DL_OP_MAXPOOL2D || kind == DL_OP_AVGPOOL2D || kind == DL_OP_GLOBAL_AVGPOOL;
}
/* the kinds that call cuDNN (the others are device copies) */
static int calls_cudnn(int kind) {
    return is_pool(kind) || is_activation(kind) || kind == DL_OP_ADD || kind == DL_OP_SOFTMAX ||
           kind == DL_OP_BATCHNORM;
}

/* The tensor descriptors of k's op in data type t and layout l: x (and y for the pools; the other
 * ops read and write through x's), and batchnorm's f32 parameter descriptor b. */
static dl_status describe(dl_kernel *k, cudnnDataType_t t, dl_layout l, dl_error *err) {
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    cudnnTensorFormat_t f = l == DL_LAYOUT_CHANNELS_LAST ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    dl_status st;
    switch (k->g.kind) {
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL:
        if ((st = dn_tensor4(&k->x, t, f, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
        return dn_tensor4(&k->y, t, f, ys[0], ys[1], ys[2], ys[3], err);
    case DL_OP_SOFTMAX: return dn_tensor4(&k->x, t, CUDNN_TENSOR_NCHW, k->outer, xs[k->g.a.axis], k->inner, 1, err);
    case DL_OP_BATCHNORM:
        if (l == DL_LAYOUT_CHANNELS_LAST) st = dn_tensor4(&k->x, t, f, xs[0], xs[1], xs[2], xs[3], err);
        else st = dn_tensor4(&k->x, t, f, xs[0], xs[1], dl_gpu_prod(xs, 2, k->g.xnd), 1, err);
        if (st != DL_OK) return st;
        return dn_tensor4(&k->b, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, xs[1], 1, 1, err);
    default: /* activations and add: elementwise, so a flat view in any order */
        return dn_tensor4(&k->x, t, CUDNN_TENSOR_NCHW, 1, 1, 1, k->g.numel, err);
    }
}

/* The op's cuDNN call on device pointers: x, b (add's second operand), p (batchnorm's four f32
 * parameters), y. */
static dl_status call_op(cudnn_state *s, dl_kernel *k, const void *x, const void *b, const void *const *p, void *y,
                         dl_error *err) {
    const float one = 1.0f, zero = 0.0f;
    int relu = k->g.a.activation == DL_ACT_RELU;
    switch (k->g.kind) {
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL: DNN_TRY(cudnnPoolingForward(s->dnn, k->pool, &one, k->x, x, &zero, k->y, y)); break;
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP: DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, x, &zero, k->x, y)); break;
    case DL_OP_ADD:
        DNN_TRY(cudnnOpTensor(s->dnn, k->op, &one, k->x, x, &one, k->x, b, &zero, k->x, y));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        break;
    case DL_OP_SOFTMAX:
        DNN_TRY(cudnnSoftmaxForward(s->dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, k->x, x, &zero,
                                    k->x, y));
        break;
    case DL_OP_BATCHNORM:
        DNN_TRY(cudnnBatchNormalizationForwardInference(s->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, k->x, x, k->x, y,
                                                        k->b, p[0], p[1], p[2], p[3], k->g.a.epsilon));
        if (relu) DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->x, y, &zero, k->x, y));
        break;
    default: break;
    }
    return DL_OK;
}

/* Tries the op's cuDNN call once on zeroed scratch buffers in its stored format: 1 if cuDNN ran
 * it, 0 if it turned it down; *st is set (and 0 returned) only when the scratch could not be
 * had. */
static int try_native(cudnn_state *s, dl_kernel *k, dl_status *st, dl_error *err) {
    size_t c = k->g.kind == DL_OP_BATCHNORM ? (size_t)k->g.xs[1] : 0;
    size_t bytes[4] = {tensor_bytes(k->g.xs, k->g.xnd, k->type),
                       k->g.kind == DL_OP_ADD ? tensor_bytes(k->g.xs, k->g.xnd, k->type) : 0,
                       tensor_bytes(k->g.ys, k->g.ynd, k->type), 4 * c * sizeof(float)};
    void *buf[4];
    *st = dn_scratch(s, 4, bytes, buf, err);
    int ok = 0;
    if (*st == DL_OK) {
        dl_error ignored;
        const void *p[4] = {buf[3], (char *)buf[3] + c * 4, (char *)buf[3] + 2 * c * 4, (char *)buf[3] + 3 * c * 4};
        ok = call_op(s, k, buf[0], buf[1], p, buf[2], &ignored) == DL_OK &&
             cudaStreamSynchronize(s->gpu.stream) == cudaSuccess;
    }
    cudaGetLastError(); /* a refused launch must not be reported by a later, unrelated check */
    dn_scratch_free(s, 4, buf);
    return ok;
}

dl_status dn_prepare_op(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs;
    int kind = k->g.kind;
    dl_status st;
    switch (kind) { /* the descriptors that do not depend on the stored format */
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
    case DL_OP_GLOBAL_AVGPOOL: {
        DNN_TRY(cudnnCreatePoolingDescriptor(&k->pool));
        cudnnPoolingMode_t mode = kind == DL_OP_MAXPOOL2D ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : a->count_include_pad  ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
        if (kind == DL_OP_GLOBAL_AVGPOOL)
            DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                CUDNN_PROPAGATE_NAN, (int)xs[2], (int)xs[3], 0, 0, 1, 1));
        else
            DNN_TRY(cudnnSetPooling2dDescriptor(k->pool, mode, CUDNN_PROPAGATE_NAN, a->kernel[0], a->kernel[1],
                                                a->pad_begin[0], a->pad_begin[1], a->stride[0], a->stride[1]));
        break;
    }
    case DL_OP_RELU:
    case DL_OP_SIGMOID:
    case DL_OP_CLIP:
        if (kind == DL_OP_SIGMOID) st = dn_activation(k, CUDNN_ACTIVATION_SIGMOID, 0, err);
        else if (kind == DL_OP_CLIP && a->clip_max < INFINITY) /* clip(0, max): clipped relu */
            st = dn_activation(k, CUDNN_ACTIVATION_CLIPPED_RELU, (double)a->clip_max, err);
        else st = dn_activation(k, CUDNN_ACTIVATION_RELU, 0, err);
        if (st != DL_OK) return st;
        break;
    case DL_OP_ADD:
        DNN_TRY(cudnnCreateOpTensorDescriptor(&k->op));
        DNN_TRY(cudnnSetOpTensorDescriptor(k->op, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
        /* fall through */
    case DL_OP_BATCHNORM:
        if (a->activation == DL_ACT_RELU && (st = dn_activation(k, CUDNN_ACTIVATION_RELU, 0, err)) != DL_OK) return st;
        break;
    case DL_OP_SOFTMAX:
        k->outer = dl_gpu_prod(xs, 0, a->axis);
        k->inner = dl_gpu_prod(xs, a->axis + 1, k->g.xnd);
        break;
    case DL_OP_CONCAT:
        k->outer = dl_gpu_prod(k->g.ys, 0, a->axis);
        k->inner = dl_gpu_prod(k->g.ys, a->axis + 1, k->g.ynd);
        return DL_OK;
    default: return DL_OK; /* flatten, dropout, reshape: copies */
    }
    size_t end = 0;
    if (kind == DL_OP_BATCHNORM && k->type != DL_GPU_F32) { /* its parameters, cast to f32 at each run */
        k->params_off = 0;
        end = 4 * (size_t)xs[1] * sizeof(float);
    }
    if (k->type == DL_GPU_F32 && k->layout == DL_LAYOUT_ROW_MAJOR) /* cuDNN's own format: nothing to try */
        return describe(k, CUDNN_DATA_FLOAT, DL_LAYOUT_ROW_MAJOR, err);
    /* cuDNN's softmax on f16/bf16 data keeps its intermediates in that dtype (measured on an H100:
     * NMSE 2e-8 in f16, 2e-6 in bf16 against the correctly rounded result, 5 to 30 times the bound
     * of docs/check.md): it runs in f32, staged, and rounds once. */
    st = kind == DL_OP_SOFTMAX ? DL_E_UNSUPPORTED : describe(k, dn_data_type(op->outputs[0].dtype), k->layout, err);
    if (st == DL_OK) {
        if (try_native(s, k, &st, err)) {
            k->workspace = end;
            return DL_OK;
        }
        if (st != DL_OK) return st; /* no scratch memory: not cuDNN's answer */
    } else if (st != DL_E_UNSUPPORTED && st != DL_E_RUNTIME) return st;
    /* turned down: stage through f32 NCHW copies */
    k->staged = 1;
    k->workspace = dn_plan_stages(k, op, kind == DL_OP_ADD ? 2 : 1, end);
    return describe(k, CUDNN_DATA_FLOAT, DL_LAYOUT_ROW_MAJOR, err);
}

/* ---- run ---- */

dl_status dn_run_op(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err) {
    const void *x = in[0].data;
    cudaStream_t st = s->gpu.stream;
    size_t esize = (size_t)dl_gpu_type_size(k->type);
    if (k->g.kind == DL_OP_CONCAT) {
        int64_t off = 0, row = k->g.ys[k->g.a.axis] * k->inner * (int64_t)esize;
        for (int i = 0; i < k->g.n_inputs; i++) {
            int64_t part = k->g.cat_len[i] * k->inner * (int64_t)esize;
            DL_GPU_TRY(cudaMemcpy2DAsync((char *)y + off, (size_t)row, in[i].data, (size_t)part, (size_t)part,
                                         (size_t)k->outer, cudaMemcpyDeviceToDevice, st),
                       err);
            off += part;
        }
        return DL_OK;
    }
    if (!calls_cudnn(k->g.kind)) { /* flatten, dropout, reshape */
        if (x != y) DL_GPU_TRY(cudaMemcpyAsync(y, x, (size_t)k->g.numel * esize, cudaMemcpyDeviceToDevice, st), err);
        return DL_OK;
    }
    const void *b = k->g.kind == DL_OP_ADD ? in[1].data : NULL, *p[4] = {NULL, NULL, NULL, NULL};
    void *yy = y;
    dl_status status;
    if (k->g.kind == DL_OP_BATCHNORM) {
        for (int j = 0; j < 4; j++) p[j] = in[1 + j].data;
        if (k->type != DL_GPU_F32) { /* cuDNN's parameters are f32 */
            int64_t c = k->g.xs[1];
            dl_gpu_xform same = {c, 1, c, DL_GPU_SAME_ORDER};
            for (int j = 0; j < 4; j++) {
                void *dst = (char *)ws + k->params_off + (size_t)j * (size_t)c * sizeof(float);
                int rc = dl_gpu_cast(dst, DL_GPU_F32, in[1 + j].data, k->type, &same, st);
                if (rc) return dl_gpu_status((cudaError_t)rc, "cast kernel launch", err);
                p[j] = dst;
            }
        }
    }
    if (k->staged) {
        if ((status = dn_stage_in(s, k, 0, x, ws, &x, err)) != DL_OK) return status;
        if (b && (status = dn_stage_in(s, k, 1, b, ws, &b, err)) != DL_OK) return status;
        yy = (char *)ws + k->out.off;
    }
    if ((status = call_op(s, k, x, b, p, yy, err)) != DL_OK) return status;
    return k->staged ? dn_stage_out(s, k, ws, y, err) : DL_OK;
}
