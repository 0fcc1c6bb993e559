/* conv.c — conv2d in the cudnn plugin: the cuDNN descriptors, the algorithm measured on the real
 * shapes and weights at prepare (cudnnFindConvolutionForwardAlgorithmEx, on a patterned scratch
 * input), run with the math type it was measured with, and the epilogue: conv + bias (+ a fused
 * residual, ABI 1.8) (+ relu) in one fused call (the residual as its z input, alpha2 = 1), or conv
 * then cudnnAddTensor of the bias and of the residual (+ activation), whichever prepare keeps (see
 * conv_choose: the fused call is kept only where it runs on scratch buffers and gives finite
 * values with y zeroed and with y full of NaN, and where there is a bias every way that runs is
 * timed: the fastest wins). The kernel's workspace is the kept plan's.
 *
 * Stored formats (ABI 1.3): x, the filter, the bias and y in the op's dtype (FLOAT, HALF or
 * BFLOAT16 descriptors; the convolution's compute type is FLOAT: cuDNN's "pseudo half" configs)
 * and x, y in NCHW or NHWC. The host gives the filter row-major [O,I,KH,KW]; for NHWC it is
 * reordered once at prepare to KRSC ([O,KH,KW,I], cuDNN's NHWC filter) into memory the kernel owns
 * (the cast kernel). f16/bf16 use tensor-op math. Where cuDNN finds no algorithm at all for the
 * stored format, the kernel is staged as in ops.c: x is cast to f32 NCHW in the workspace, the
 * filter and bias to f32 once at prepare, a residual at each run, and y is cast back. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "choice_store.h"
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

/* The convolution on device pointers, with its epilogue (fused or not); r: the fused residual, of
 * y's shape and descriptor (NULL: none); ws holds k->lib_ws bytes. */
static dl_status conv_call(cudnn_state *s, dl_kernel *k, const void *x, const void *w, const void *bias, const void *r,
                           void *y, void *ws, dl_error *err) {
    const float one = 1.0f, zero = 0.0f; /* scaling factors are float for FLOAT, HALF and BFLOAT16 data */
    /* fused: y = act(conv + alpha2 z + bias), z the residual, or y unread (alpha2 = 0) */
    if (k->fused) {
        DNN_TRY(cudnnConvolutionBiasActivationForward(s->dnn, &one, k->x, x, k->w, w, k->conv, k->algo, ws, k->lib_ws,
                                                      r ? &one : &zero, k->y, r ? r : y, k->b, bias, k->act, k->y, y));
        return DL_OK;
    }
    DNN_TRY(cudnnConvolutionForward(s->dnn, &one, k->x, x, k->w, w, k->conv, k->algo, ws, k->lib_ws, &zero, k->y, y));
    if (k->g.has_bias) DNN_TRY(cudnnAddTensor(s->dnn, &one, k->b, bias, &one, k->y, y));
    if (r) DNN_TRY(cudnnAddTensor(s->dnn, &one, k->y, r, &one, k->y, y));
    if (k->g.a.activation == DL_ACT_RELU)
        DNN_TRY(cudnnActivationForward(s->dnn, k->act, &one, k->y, y, &zero, k->y, y));
    return DL_OK;
}

/* ---- the search at prepare: algorithm, math and epilogue, tried and timed on scratch buffers ---- */

/* One way to run the convolution: its algorithm, the math type set on the descriptor for it, the
 * fused call or conv + cudnnAddTensor (+ activation), its workspace, and its measured time. */
typedef struct conv_plan {
    cudnnConvolutionFwdAlgo_t algo;
    cudnnMathType_t math;
    int fused;
    size_t ws;
    double ms; /* median of the timed runs; < 0: not timed, or it failed */
} conv_plan;

/* Device scratch for the search and the trials: input x and output y of the op's shapes, cuDNN's
 * workspace (ws_cap bytes), the filter and bias: the op's own where they hold data at prepare,
 * else scratch, and a residual of y's shape where the op has one. x, a scratch filter and bias and
 * the residual hold dn_fill_pattern's values, not zeros: a convolution of zeros gives zeros
 * whatever the algorithm computes, so a check of its output would mean nothing. */
enum { CONV_SCRATCH = 6 };
typedef struct conv_scratch {
    void *buf[CONV_SCRATCH]; /* x, y, workspace, scratch filter, scratch bias, residual (dn_scratch;
                                NULL: none) */
    const void *w, *bias;
    size_t x_bytes, y_bytes, ws_cap;
    dl_gpu_type t; /* storage type of x, y, filter and bias in the call */
} conv_scratch;

enum { CONV_TIMED_RUNS = 5 }; /* after one warm-up; their median is kept */

/* Fills `bytes` of device memory p with dn_fill_pattern's values of type t: a small host pattern
 * goes up once, then device-to-device copies double it in place (cheap for any size). */
static dl_status conv_fill(cudnn_state *s, void *p, size_t bytes, dl_gpu_type t, dl_error *err) {
    float host[4096]; /* 16 KiB: 4096 f32 or 8192 16-bit elements */
    size_t have = bytes < sizeof host ? bytes : sizeof host;
    if (!p || !bytes) return DL_OK;
    dn_fill_pattern(host, (int64_t)(have / (size_t)dl_gpu_type_size(t)), t);
    cudaError_t e = cudaMemcpyAsync(p, host, have, cudaMemcpyHostToDevice, s->gpu.stream);
    for (; e == cudaSuccess && have < bytes; have *= 2) {
        size_t n = bytes - have < have ? bytes - have : have;
        e = cudaMemcpyAsync((char *)p + have, p, n, cudaMemcpyDeviceToDevice, s->gpu.stream);
    }
    cudaError_t waited = cudaStreamSynchronize(s->gpu.stream); /* whatever happened: `host` is in this frame */
    if (e == cudaSuccess) e = waited;
    return e == cudaSuccess ? DL_OK : dl_gpu_status(e, "scratch pattern copy", err);
}

/* Sets k to plan p: algorithm, epilogue, the descriptor's math type, and p's workspace (which
 * depends on the math type) as k->lib_ws. 0 if cuDNN refuses that math or algorithm, or the
 * workspace exceeds the scratch's. */
static int conv_set(cudnn_state *s, dl_kernel *k, conv_plan *p, size_t ws_cap) {
    k->algo = p->algo;
    k->math = p->math;
    k->fused = p->fused;
    if (cudnnSetConvolutionMathType(k->conv, p->math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionForwardWorkspaceSize(s->dnn, k->x, k->w, k->conv, k->y, p->algo, &p->ws) !=
            CUDNN_STATUS_SUCCESS)
        return 0;
    k->lib_ws = p->ws;
    return p->ws <= ws_cap;
}

/* 1 if every element of scratch y that is copied down (dn_sample_spans: all of it up to 16 MiB)
 * is finite. The stream is non-blocking, so the copies go on it and it is waited for. */
static int conv_finite(cudnn_state *s, const conv_scratch *sc) {
    size_t off[DN_SAMPLE_SPANS], len[DN_SAMPLE_SPANS], es = (size_t)dl_gpu_type_size(sc->t), total = 0;
    int n = dn_sample_spans(sc->y_bytes, es, off, len);
    for (int i = 0; i < n; i++) total += len[i];
    char *host = malloc(total ? total : 1);
    int ok = host != NULL;
    for (size_t i = 0, at = 0; ok && i < (size_t)n; at += len[i++])
        ok = cudaMemcpyAsync(host + at, (const char *)sc->buf[1] + off[i], len[i], cudaMemcpyDeviceToHost,
                             s->gpu.stream) == cudaSuccess;
    int waited = cudaStreamSynchronize(s->gpu.stream) == cudaSuccess; /* before `host` is read or freed */
    ok = ok && waited && dn_all_finite(host, (int64_t)(total / es), sc->t);
    free(host);
    return ok;
}

/* 1 if plan p runs on the scratch buffers; k is left set to p. The fused call must also give
 * finite values twice: once on a zeroed y, and once on a y full of NaN. Without a residual it is
 * called with z = y and alpha2 = 0, and at run y holds whatever its arena slot held (dlrun check
 * fills it with a NaN poison); cuDNN documents that a zero beta leaves the output unread, but says
 * no such thing of alpha2, so a call that reads z (0 * NaN = NaN) is turned down here, for conv +
 * cudnnAddTensor, whose first call has beta = 0. With a residual, z is the scratch residual (the
 * pattern) and y must still not be read. */
static int conv_tried(cudnn_state *s, dl_kernel *k, conv_plan *p, const conv_scratch *sc) {
    dl_error ignored;
    int ok = conv_set(s, k, p, sc->ws_cap);
    for (int pass = 0; ok && pass < (p->fused ? 2 : 1); pass++)
        ok = cudaMemsetAsync(sc->buf[1], pass ? 0xff : 0, sc->y_bytes, s->gpu.stream) == cudaSuccess &&
             conv_call(s, k, sc->buf[0], sc->w, sc->bias, sc->buf[5], sc->buf[1], sc->buf[2], &ignored) == DL_OK &&
             cudaStreamSynchronize(s->gpu.stream) == cudaSuccess && (!p->fused || conv_finite(s, sc));
    cudaGetLastError(); /* a refused launch must not be reported by a later, unrelated check */
    return ok;
}

/* Times k's call as set (conv_tried has set it) on the scratch buffers: the median of
 * CONV_TIMED_RUNS after one warm-up, each between two CUDA events of its own; -1 if any call,
 * event record or reading failed. (Not dl_gpu_time: that takes the plugin's lock, which prepare
 * already holds.) */
static double conv_time(cudnn_state *s, dl_kernel *k, const conv_scratch *sc) {
    cudaEvent_t ev[2] = {NULL, NULL};
    float t[CONV_TIMED_RUNS];
    dl_error ignored;
    int ok = cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess &&
             conv_call(s, k, sc->buf[0], sc->w, sc->bias, sc->buf[5], sc->buf[1], sc->buf[2], &ignored) == DL_OK;
    for (int i = 0; ok && i < CONV_TIMED_RUNS; i++)
        ok = cudaEventRecord(ev[0], s->gpu.stream) == cudaSuccess &&
             conv_call(s, k, sc->buf[0], sc->w, sc->bias, sc->buf[5], sc->buf[1], sc->buf[2], &ignored) == DL_OK &&
             cudaEventRecord(ev[1], s->gpu.stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&t[i], ev[0], ev[1]) == cudaSuccess;
    ok = cudaStreamSynchronize(s->gpu.stream) == cudaSuccess && ok;
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaGetLastError(); /* as in conv_tried */
    return ok ? (double)dn_median(t, CONV_TIMED_RUNS) : -1.0;
}

/* DLRUN_CUDNN_LOG's line for k's plan as set: shapes, format, algorithm, math, epilogue and
 * workspace, then `tail` (how it was chosen). */
static void conv_log(const dl_kernel *k, dl_dtype dt, const char *tail) {
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    char epi[64];
    snprintf(epi, sizeof epi, "%s%s%s",
             k->fused        ? "fused bias"
             : k->g.has_bias ? "conv + add bias"
                             : "conv",
             k->g.residual ? (k->fused ? " + residual" : " + add residual") : "",
             k->g.a.activation == DL_ACT_RELU ? " + relu" : "");
    fprintf(stderr,
            "dlrun cudnn: conv [%lld,%lld,%lld,%lld] -> [%lld,%lld,%lld,%lld] %s %s%s: %s, math %s, %s, "
            "workspace %zu bytes%s\n",
            (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3], (long long)ys[0], (long long)ys[1],
            (long long)ys[2], (long long)ys[3], dl_dtype_name(dt),
            k->staged || k->layout == DL_LAYOUT_ROW_MAJOR ? "NCHW" : "NHWC", k->staged ? " (staged)" : "",
            dn_conv_algo_name((int)k->algo), dn_math_name((int)k->math), epi, k->lib_ws, tail);
}

/* The epilogue and algorithm kept, from the search's results perf[0..found) (pick: the fastest
 * usable one). No bias, or DLRUN_CUDNN_SEARCH=heuristic: that algorithm, or the next usable one
 * where it does not run (+ cudnnAddTensor of the bias and a residual). With a bias, every way
 * that runs is timed and the fastest kept: that algorithm + cudnnAddTensor of the bias (and of a
 * residual) (+ activation); cuDNN's fused call with it (bias (+ residual as z) + relu;
 * with the identity activation the fused call takes only IMPLICIT_PRECOMP_GEMM); and the fused call
 * with IMPLICIT_PRECOMP_GEMM. The fused call is not always the fastest: measured on an H100 (cuDNN
 * 9.19, VGG-16 at batch 32, f32), some layers ran 2.4x slower fused with the searched algorithm
 * than PyTorch's conv + relu. k is left set to the plan kept (its workspace in k->lib_ws). */
static dl_status conv_choose(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_dtype dt,
                             const cudnnConvolutionFwdAlgoPerf_t *perf, int found, int pick, const conv_scratch *sc,
                             dl_error *err) {
    int prec = op->precision, relu = k->g.a.activation == DL_ACT_RELU;
    conv_plan best = {perf[pick].algo, dn_conv_run_math(prec, dt, perf[pick].mathType), 0, 0, -1}, kept = best;
    conv_plan fused = best, precomp = best; /* fused with the searched algorithm; fused with PRECOMP_GEMM */
    fused.fused = precomp.fused = 1;
    int ok = 0, timed = k->g.has_bias && s->search == DN_SEARCH_FIND; /* heuristic: nothing timed */
    if (!timed) { /* the first usable answer that runs (Find's all ran; the heuristic's may not) */
        for (int i = pick; i < found && !ok; i++)
            if (dn_conv_pick(perf + i, 1, prec, dt, -1) == 0) {
                kept = (conv_plan){perf[i].algo, dn_conv_run_math(prec, dt, perf[i].mathType), 0, 0, -1};
                ok = conv_tried(s, k, &kept, sc);
            }
    } else {
        /* the fused call's math with PRECOMP_GEMM: what the search measured it with, where it did */
        int i = dn_conv_pick(perf, found, prec, dt, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
        precomp.algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        precomp.math = i >= 0 ? dn_conv_run_math(prec, dt, perf[i].mathType) : dn_conv_math(prec, dt);
        conv_plan *cand[3] = {&best, &precomp, &fused};
        int n = relu && best.algo != precomp.algo ? 3 : 2, is_fused[3];
        double ms[3];
        for (int c = 0; c < n; c++) {
            if (conv_tried(s, k, cand[c], sc)) cand[c]->ms = conv_time(s, k, sc);
            ms[c] = cand[c]->ms, is_fused[c] = cand[c]->fused;
        }
        int f = dn_conv_fastest(ms, is_fused, n);
        if (f >= 0) kept = *cand[f];
        ok = f >= 0 && conv_set(s, k, &kept, sc->ws_cap); /* the descriptor back to the plan kept */
    }
    if (!ok)
        return dl_fail(err, DL_E_UNSUPPORTED, "cuDNN turned down its own convolution algorithm %s",
                       dn_conv_algo_name((int)best.algo));
    if (s->log_convs) {
        char times[200] = "", f[32] = "failed", u[32] = "failed", pc[32] = "failed";
        if (fused.ms >= 0) snprintf(f, sizeof f, "%.4f ms", fused.ms);
        if (best.ms >= 0) snprintf(u, sizeof u, "%.4f ms", best.ms);
        if (precomp.ms >= 0) snprintf(pc, sizeof pc, "%.4f ms", precomp.ms);
        if (timed)
            snprintf(times, sizeof times, "; timed: %s + add %s, fused IMPLICIT_PRECOMP_GEMM %s%s%s%s",
                     dn_conv_algo_name((int)best.algo), u, pc, relu && best.algo != precomp.algo ? ", fused " : "",
                     relu && best.algo != precomp.algo ? dn_conv_algo_name((int)best.algo) : "",
                     relu && best.algo != precomp.algo ? (fused.ms >= 0 ? " timed" : " failed") : "");
        conv_log(k, dt, times);
    }
    return DL_OK;
}

/* The plan a previous process kept for this conv (its key in key; "" where it is not kept: the
 * heuristic search, which times nothing, or a key too long), set on k where it is still one
 * prepare could keep and it passes conv_tried on the scratch buffers (it runs, with a workspace
 * within the cap; a fused call gives finite values, y zeroed and y NaN): 1, with the log line;
 * else 0, k's descriptor math back as conv_describe set it, for the search. */
static int conv_kept(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_dtype dt, const conv_scratch *sc, char *key,
                     size_t key_len) {
    char extra[64];
    key[0] = '\0';
    if (s->search != DN_SEARCH_FIND) return 0;
    snprintf(extra, sizeof extra, "staged=%d", k->staged);
    int code, algo, math, fused, relu = k->g.a.activation == DL_ACT_RELU;
    if (!dl_gpu_choice_key(key, key_len, "conv plan v1", op, extra) || !dl_gpu_choice_get(s->gpu.host, key, &code) ||
        !dn_conv_plan_of(code, op->precision, dt, k->g.has_bias, relu, &algo, &math, &fused))
        return 0;
    conv_plan p = {(cudnnConvolutionFwdAlgo_t)algo, (cudnnMathType_t)math, fused, 0, -1};
    if (!conv_tried(s, k, &p, sc)) {
        cudnnSetConvolutionMathType(k->conv, dn_conv_math(op->precision, dt)); /* the search's, as described */
        return 0;
    }
    if (s->log_convs) conv_log(k, dt, "; from the timing cache");
    return 1;
}

/* The fastest algorithm for the descriptors as set, measured on scratch input and output and
 * filter w and bias (the op's, or scratch where NULL or where they are filled only at run), then
 * the epilogue (conv_choose); or the plan a previous process kept (conv_kept, tried on the same
 * scratch), and the plan kept for the next. DL_E_UNSUPPORTED when cuDNN runs nothing for this format. */
static dl_status conv_search(cudnn_state *s, dl_kernel *k, const dl_op *op, const void *w, const void *bias,
                             dl_error *err) {
    dl_gpu_type t = k->staged ? DL_GPU_F32 : k->type;
    dl_dtype dt = k->staged ? DL_F32 : op->outputs[0].dtype;
    /* Winograd and FFT need room for transformed tiles: VGG-16's 256- and 512-channel 3x3 convs at
     * batch 32 need ~270-470 MiB, and at 256 MiB cuDNN's search never saw them (2.5x slower) */
    size_t es = (size_t)dl_gpu_type_size(t), ws_cap = (size_t)1 << 30, free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && ws_cap > free_b / 4) ws_cap = free_b / 4;
    int w_scratch = !w || k->w_at_run, b_scratch = k->g.has_bias && (!bias || k->w_at_run);
    conv_scratch sc = {.x_bytes = (size_t)dl_gpu_prod(k->g.xs, 0, 4) * es,
                       .y_bytes = (size_t)k->g.numel * es,
                       .ws_cap = ws_cap,
                       .t = t};
    size_t bytes[CONV_SCRATCH] = {sc.x_bytes,
                                  sc.y_bytes,
                                  ws_cap,
                                  w_scratch ? (size_t)dl_tensor_numel(&op->inputs[1]) * es : 0,
                                  b_scratch ? (size_t)k->g.ys[1] * es : 0,
                                  k->g.residual ? sc.y_bytes : 0};
    dl_status st = dn_scratch(s, CONV_SCRATCH, bytes, sc.buf, err);
    for (int i = 0; i < CONV_SCRATCH; i++) /* x, the scratch filter and bias, the residual: the pattern */
        if (st == DL_OK && i != 1 && i != 2) st = conv_fill(s, sc.buf[i], bytes[i], t, err);
    sc.w = w_scratch ? sc.buf[3] : w;
    sc.bias = b_scratch ? sc.buf[4] : bias;
    char key[DL_GPU_CHOICE_KEY_LEN] = "";
    if (st == DL_OK && conv_kept(s, k, op, dt, &sc, key, sizeof key)) {
        dn_scratch_free(s, CONV_SCRATCH, sc.buf);
        return DL_OK;
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0, pick = -1;
    if (st == DL_OK && s->search == DN_SEARCH_HEURISTIC) { /* cuDNN's guess, ordered, nothing run */
        if (cudnnGetConvolutionForwardAlgorithm_v7(s->dnn, k->x, k->w, k->conv, k->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                   &found, perf) != CUDNN_STATUS_SUCCESS)
            found = 0;
        dn_conv_drop_oversized(perf, found, ws_cap);
    } else if (st == DL_OK) {
        cudnnStatus_t r =
            cudnnFindConvolutionForwardAlgorithmEx(s->dnn, k->x, sc.buf[0], k->w, sc.w, k->conv, k->y, sc.buf[1],
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, sc.buf[2], ws_cap);
        cudaGetLastError();
        if (r == CUDNN_STATUS_ALLOC_FAILED) st = dnn_fail(r, "cudnnFindConvolutionForwardAlgorithmEx", err);
        else if (r != CUDNN_STATUS_SUCCESS) found = 0;
    }
    if (st == DL_OK && (pick = dn_conv_pick(perf, found, op->precision, dt, -1)) < 0)
        st = dl_fail(err, DL_E_UNSUPPORTED, "cuDNN found no convolution algorithm for this shape in %s %s",
                     dl_dtype_name(dt), k->staged || k->layout == DL_LAYOUT_ROW_MAJOR ? "NCHW" : "NHWC");
    if (st == DL_OK) st = conv_choose(s, k, op, dt, perf, found, pick, &sc, err);
    if (st == DL_OK) /* the math the plan runs with, as conv_set left it on the descriptor */
        dl_gpu_choice_put(s->gpu.host, key, dn_conv_plan_code((int)k->algo, (int)k->math, k->fused));
    dn_scratch_free(s, CONV_SCRATCH, sc.buf);
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

/* Where a previous process found that cuDNN has nothing for this conv in its stored format (the
 * search failed and the staged f32 NCHW copy ran), it kept that under "conv staged v1", so that
 * this one goes staged at once rather than run the failing search again (its descriptors and
 * Find over every algorithm). The key holds the op whole, and the host adds cuDNN's version. */
static int staged_before(const cudnn_state *s, const dl_op *op, char *key, size_t len) {
    int code;
    key[0] = '\0';
    return s->search == DN_SEARCH_FIND && dl_gpu_choice_key(key, len, "conv staged v1", op, "") &&
           dl_gpu_choice_get(s->gpu.host, key, &code) && code == 1;
}

dl_status dn_prepare_conv(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    int relu = k->g.a.activation == DL_ACT_RELU;
    dl_status st = dn_activation(k, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, 0, err);
    const int stageable = k->type != DL_GPU_F32 || k->layout != DL_LAYOUT_ROW_MAJOR;
    char key[DL_GPU_CHOICE_KEY_LEN] = "";
    const int kept = st == DL_OK && stageable && staged_before(s, op, key, sizeof key);
    if (kept) k->staged = 1;
    if (st == DL_OK) st = conv_try(s, k, op, err);
    if (st != DL_OK && kept) k->staged = 0, st = conv_try(s, k, op, err); /* kept wrongly: as if not kept */
    if (st == DL_E_UNSUPPORTED && stageable && !k->staged) {
        k->staged = 1; /* cuDNN has nothing for the stored format: f32 NCHW copies */
        st = conv_try(s, k, op, err);
        if (st == DL_OK && key[0]) dl_gpu_choice_put(s->gpu.host, key, 1);
    }
    if (st != DL_OK) return st;
    k->workspace = k->staged ? dn_plan_stages(k, op, 1, k->lib_ws) : k->lib_ws;
    return DL_OK;
}

dl_status dn_run_conv(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err) {
    const void *x = in[0].data, *w = in[1].data, *bias = k->g.has_bias ? in[2].data : NULL;
    const void *r = k->g.residual ? in[k->g.residual].data : NULL;
    dl_status st;
    if (k->wbuf) {
        if (k->w_at_run && (st = conv_weights(s, k, w, bias, err)) != DL_OK) return st;
        w = k->wbuf;
        if (k->staged && bias) bias = (char *)k->wbuf + k->bias_off;
    }
    void *yy = y;
    if (k->staged) {
        if ((st = dn_stage_in(s, k, 0, x, ws, &x, err)) != DL_OK) return st;
        if (r && (st = dn_stage_in(s, k, 1, r, ws, &r, err)) != DL_OK) return st;
        yy = (char *)ws + k->out.off;
    }
    if ((st = conv_call(s, k, x, w, bias, r, yy, ws, err)) != DL_OK) return st;
    return k->staged ? dn_stage_out(s, k, ws, y, err) : DL_OK;
}
