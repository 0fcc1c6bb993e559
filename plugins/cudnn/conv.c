/* conv.c — conv2d in the cudnn plugin: the cuDNN descriptors, the algorithm measured on the real
 * shapes and weights at prepare (cudnnFindConvolutionForwardAlgorithmEx, whose workspace becomes
 * the kernel's), and the run: conv + bias (+ relu) in one fused call where there is a bias.
 *
 * Stored formats (ABI 1.3): x, the filter, the bias and y in the op's dtype (FLOAT, HALF or
 * BFLOAT16 descriptors; the convolution's compute type is FLOAT: cuDNN's "pseudo half" configs)
 * and x, y in NCHW or NHWC. The host gives the filter row-major [O,I,KH,KW]; for NHWC it is
 * reordered once at prepare to KRSC ([O,KH,KW,I], cuDNN's NHWC filter) into memory the kernel owns
 * (the cast kernel). f16/bf16 use tensor-op math. The fused bias + relu call is tried once at
 * prepare on scratch buffers; where cuDNN turns it down, the run is conv, add bias, relu. Where
 * cuDNN finds no algorithm at all for the stored format, the kernel is staged as in ops.c: x is
 * cast to f32 NCHW in the workspace, the filter and bias to f32 once at prepare, and y is cast
 * back at each run. */
#define _POSIX_C_SOURCE 200809L
#include "cudnn_plugin.h"
#include "tensor_convert.h"

/* The descriptors of k's convolution in data type t and layout l (the filter's format follows:
 * KRSC with NHWC), compute type FLOAT, math m. */
static dl_status conv_describe(dl_kernel *k, const dl_op *op, cudnnDataType_t t, dl_layout l, cudnnMathType_t m,
                               dl_error *err) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys, *ws = op->inputs[1].shape;
    cudnnTensorFormat_t f = l == DL_LAYOUT_CHANNELS_LAST ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    dl_status st;
    if ((st = dn_tensor4(&k->x, t, f, xs[0], xs[1], xs[2], xs[3], err)) != DL_OK) return st;
    if ((st = dn_tensor4(&k->y, t, f, ys[0], ys[1], ys[2], ys[3], err)) != DL_OK) return st;
    if ((st = dn_tensor4(&k->b, t, f, 1, ys[1], 1, 1, err)) != DL_OK) return st;
    if (!k->w) DNN_TRY(cudnnCreateFilterDescriptor(&k->w));
    DNN_TRY(cudnnSetFilter4dDescriptor(k->w, t, f, (int)ws[0], (int)ws[1], (int)ws[2], (int)ws[3]));
    if (!k->conv) DNN_TRY(cudnnCreateConvolutionDescriptor(&k->conv));
    DNN_TRY(cudnnSetConvolution2dDescriptor(k->conv, a->pad_begin[0], a->pad_begin[1], a->stride[0], a->stride[1],
                                            a->dilation[0], a->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionGroupCount(k->conv, a->groups));
    DNN_TRY(cudnnSetConvolutionMathType(k->conv, m));
    return DL_OK;
}

/* Fills the kernel's own filter (and, staged, bias) from the op's: the KRSC reorder, or the casts
 * to f32. Queued on the stream. */
static dl_status conv_weights(cudnn_state *s, dl_kernel *k, const void *w, const void *b, dl_error *err) {
    int rc = dl_gpu_cast(k->wbuf, k->staged ? DL_GPU_F32 : k->type, w, k->type, &k->wx, s->gpu.stream);
    if (!rc && k->staged && k->g.has_bias)
        rc = dl_gpu_cast((char *)k->wbuf + k->bias_off, DL_GPU_F32, b, k->type, &k->bx, s->gpu.stream);
    return rc ? dl_gpu_status((cudaError_t)rc, "cast kernel launch", err) : DL_OK;
}

/* The convolution on device pointers, with its epilogue (fused or not); ws holds k->lib_ws bytes. */
static dl_status conv_call(cudnn_state *s, dl_kernel *k, const void *x, const void *w, const void *bias, void *y,
                           void *ws, dl_error *err) {
    const float one = 1.0f, zero = 0.0f; /* scaling factors are float for FLOAT, HALF and BFLOAT16 data */
    if (k->fused) {
        DNN_TRY(cudnnConvolutionBiasActivationForward(s->dnn, &one, k->x, x, k->w, w, k->conv, k->algo, ws, k->lib_ws,
                                                      &zero, k->y, y, k->b, bias, k->act, k->y, y));
        return DL_OK;
    }
    DNN_TRY(cudnnConvolutionForward(s->dnn, &one, k->x, x, k->w, w, k->conv, k->algo, ws, k->lib_ws, &zero, k->y, y));
    if (k->g.has_bias) DNN_TRY(cudnnAddTensor(s->dnn, &one, k->b, bias, &one, k->y, y));
    if (k->g.a.activation == DL_ACT_RELU)
        DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->y, y, &zero, k->y, y));
    return DL_OK;
}

/* 1 if the call with k's algorithm and epilogue as set runs on the scratch buffers. */
static int conv_tried(cudnn_state *s, dl_kernel *k, void *const *buf, size_t ws_cap, const void *w, const void *bias) {
    dl_error ignored;
    int ok = cudnnGetConvolutionForwardWorkspaceSize(s->dnn, k->x, k->w, k->conv, k->y, k->algo, &k->lib_ws) ==
                 CUDNN_STATUS_SUCCESS &&
             k->lib_ws <= ws_cap && conv_call(s, k, buf[0], w, bias, buf[1], buf[2], &ignored) == DL_OK &&
             cudaStreamSynchronize(s->gpu.stream) == cudaSuccess;
    cudaGetLastError(); /* a refused launch must not be reported by a later, unrelated check */
    return ok;
}

/* The fastest algorithm for the descriptors as set, measured on scratch input and output and
 * filter w (scratch where NULL), then the epilogue: the fused call if cuDNN runs it, else the
 * unfused one. DL_E_UNSUPPORTED when cuDNN runs neither for this format. */
static dl_status conv_search(cudnn_state *s, dl_kernel *k, const dl_op *op, const void *w, const void *bias,
                             dl_error *err) {
    dl_gpu_type t = k->staged ? DL_GPU_F32 : k->type;
    dl_dtype dt = k->staged ? DL_F32 : op->outputs[0].dtype;
    size_t es = (size_t)dl_gpu_type_size(t), ws_cap = 256u << 20, free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && ws_cap > free_b / 4) ws_cap = free_b / 4;
    size_t bytes[5] = {(size_t)dl_gpu_prod(k->g.xs, 0, 4) * es, (size_t)k->g.numel * es, ws_cap,
                       w ? 0 : (size_t)dl_tensor_numel(&op->inputs[1]) * es,
                       bias || !k->g.has_bias ? 0 : (size_t)k->g.ys[1] * es};
    void *buf[5];
    dl_status st = dn_scratch(s, 5, bytes, buf, err);
    if (!w) w = buf[3];
    if (!bias) bias = buf[4];
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0, pick = -1;
    if (st == DL_OK) {
        cudnnStatus_t r =
            cudnnFindConvolutionForwardAlgorithmEx(s->dnn, k->x, buf[0], k->w, w, k->conv, k->y, buf[1],
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, buf[2], ws_cap);
        cudaGetLastError();
        if (r == CUDNN_STATUS_ALLOC_FAILED) st = dnn_fail(r, "cudnnFindConvolutionForwardAlgorithmEx", err);
        else if (r != CUDNN_STATUS_SUCCESS) found = 0;
    }
    for (int i = 0; st == DL_OK && i < found && pick < 0; i++) /* sorted fastest first */
        if (perf[i].status == CUDNN_STATUS_SUCCESS && dn_conv_algo_ok(op->precision, dt, perf[i].mathType)) pick = i;
    if (st == DL_OK && pick < 0)
        st = dl_fail(err, DL_E_UNSUPPORTED, "cuDNN found no convolution algorithm for this shape in %s %s",
                     dl_dtype_name(dt), k->staged || k->layout == DL_LAYOUT_ROW_MAJOR ? "NCHW" : "NHWC");
    if (st == DL_OK) {
        cudnnConvolutionFwdAlgo_t best = perf[pick].algo;
        int relu = k->g.a.activation == DL_ACT_RELU;
        k->fused = k->g.has_bias; /* bias (+ relu) in the convolution call; identity needs PRECOMP_GEMM */
        k->algo = k->fused && !relu ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM : best;
        if (!k->fused || !conv_tried(s, k, buf, ws_cap, w, bias)) {
            k->fused = 0;
            k->algo = best;
            if (!conv_tried(s, k, buf, ws_cap, w, bias))
                st = dl_fail(err, DL_E_UNSUPPORTED, "cuDNN turned down its own convolution algorithm %d", (int)best);
        }
    }
    dn_scratch_free(s, 5, buf);
    return st;
}

/* Descriptors, the kernel's own filter where it needs one, and the search, in the stored format or
 * (k->staged) in f32 NCHW. DL_E_UNSUPPORTED when cuDNN takes neither descriptors nor algorithms. */
static dl_status conv_try(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    dl_dtype dt = k->staged ? DL_F32 : op->outputs[0].dtype;
    dl_layout l = k->staged ? DL_LAYOUT_ROW_MAJOR : k->layout;
    dl_status st = conv_describe(k, op, dn_data_type(dt), l, dn_conv_math(op->precision, dt), err);
    if (st != DL_OK) return st == DL_E_RUNTIME ? DL_E_UNSUPPORTED : st; /* cuDNN refused a descriptor */
    const dl_tensor *w = &op->inputs[1], *b = k->g.has_bias ? &op->inputs[2] : NULL;
    const void *wp = w->data, *bp = b ? b->data : NULL;
    if (k->staged || l == DL_LAYOUT_CHANNELS_LAST) { /* the kernel's own filter (and bias) */
        int64_t oc = k->g.ys[1];
        dl_gpu_xform_init(&k->wx, w->shape, 4, l, DL_LAYOUT_ROW_MAJOR);
        k->bx = (dl_gpu_xform){oc, 1, oc, DL_GPU_SAME_ORDER};
        size_t wbytes = (size_t)dl_tensor_numel(w) * (size_t)dl_gpu_type_size(k->staged ? DL_GPU_F32 : k->type);
        k->bias_off = dn_align(wbytes);
        size_t total = k->bias_off + (k->staged && b ? (size_t)oc * sizeof(float) : 0);
        dl_gpu_free(&s->gpu, k->wbuf);
        k->wbuf = NULL;
        if ((st = dl_gpu_alloc(&s->gpu, total, &k->wbuf, err)) != DL_OK) return st;
        k->w_at_run = !w->data || (b && !b->data);
        if (k->w_at_run) DL_GPU_TRY(cudaMemsetAsync(k->wbuf, 0, total, s->gpu.stream), err);
        else if ((st = conv_weights(s, k, w->data, b ? b->data : NULL, err)) != DL_OK) return st;
        wp = k->wbuf;
        if (k->staged && b) bp = (char *)k->wbuf + k->bias_off;
    }
    return conv_search(s, k, op, wp, bp, err);
}

dl_status dn_prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    int relu = k->g.a.activation == DL_ACT_RELU;
    dl_status st = dn_activation(k, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, 0, err);
    if (st == DL_OK) st = conv_try(s, k, op, err);
    if (st == DL_E_UNSUPPORTED && (k->type != DL_GPU_F32 || k->layout != DL_LAYOUT_ROW_MAJOR)) {
        k->staged = 1; /* cuDNN has nothing for the stored format: f32 NCHW copies */
        st = conv_try(s, k, op, err);
    }
    if (st != DL_OK) return st;
    k->workspace = k->staged ? dn_plan_stages(k, op, 1, k->lib_ws) : k->lib_ws;
    return DL_OK;
}

dl_status dn_run_conv(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err) {
    const void *x = in[0].data, *w = in[1].data, *bias = k->g.has_bias ? in[2].data : NULL;
    dl_status st;
    if (k->wbuf) {
        if (k->w_at_run && (st = conv_weights(s, k, w, bias, err)) != DL_OK) return st;
        w = k->wbuf;
        if (k->staged && bias) bias = (char *)k->wbuf + k->bias_off;
    }
    void *yy = y;
    if (k->staged) {
        if ((st = dn_stage_in(s, k, 0, x, ws, &x, err)) != DL_OK) return st;
        yy = (char *)ws + k->out.off;
    }
    if ((st = conv_call(s, k, x, w, bias, yy, ws, err)) != DL_OK) return st;
    return k->staged ? dn_stage_out(s, k, ws, y, err) : DL_OK;
}
