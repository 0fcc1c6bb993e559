/* cuda_backend.c — the cuda plugin: dlrun's own CUDA kernels (one family per .cu file in ops/,
 * launched through kernels.h) behind the backend table: exact supports() (the storage formats each
 * kind takes are in cuda_formats.c), prepare (launch parameters built once; a GEMM's variant, SIMT
 * tile, tensor-core tile or GEMV, chosen by timing among those gemm_plan.c allows) and dispatch.
 * Memory, copies, converting copies (ABI 1.3: f32/f16/bf16, row-major/channels-last), the stream,
 * the lock and errors come from plugins/cuda_common (shared with the cudnn plugin). Every kernel
 * runs on the plugin's stream; the host orders work with synchronize, never a device-wide sync per
 * op. gather's indices are the user's: its kernel notes an index out of range in a device record
 * instead of reading with it, and synchronize reports it (docs/gpu.md).
 *
 * Threads (see gpu.h): prepare and run make the device current on the calling thread; run only
 * queues kernels on the stream, which needs no lock; the tile tuning at prepare times with the
 * shared events, under the lock that dl_gpu_time takes. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choice_store.h"
#include "cuda_formats.h"
#include "gemm_plan.h"
#include "gpu.h"
#include "kernels.h"
#include "tensor_convert.h"

typedef struct cuda_state {
    dl_gpu gpu; /* first: the dl_gpu_be_* table members take the state as a dl_gpu */
    dl_backend table;
    dlk_index_error *index_err; /* device: the first gather index out of range since the last check */
    atomic_int index_armed;     /* a gather ran since synchronize last read index_err */
    cu_gemm_switch sw;          /* DLRUN_CUDA_MMA, _GEMM_VARIANT, _NHWC, _WGMMA, read at load */
    int sms;                    /* multiprocessors: when split-K is worth timing */
    int smem_optin;             /* shared memory a block may opt in to: which tensor-core tiles fit */
    int sm90;                   /* compute capability 9.0: the warpgroup tile's sm_90a code runs */
    int log_gemms;              /* DLRUN_CUDA_LOG=1: each GEMM's timed variants on stderr at prepare */
} cuda_state;

struct dl_kernel {
    dl_op_geom g;           /* the op's kind, attributes and shapes */
    int variant;            /* GEMM variant chosen by timing at prepare (gemm_plan.h) */
    int gm, gn, gk, groups; /* the GEMM: M (filters or output features per group), N, K, groups */
    int splits;             /* tensor-core and warpgroup tiles: split-K slices (1: none), chosen with the variant */
    size_t ws;              /* the workspace split-K's partial sums take (0: none) */
    mma_ktap *ktab;         /* conv2d on the tensor cores: its k-table on the device, or NULL */
    int cl;                 /* the activations are channels-last (DLRUN_CUDA_NHWC) */
    void *wcl;              /* a channels-last conv's weights reordered to KRSC (its k order) at
                             * prepare, the kernel's own */
    int relu;               /* relu fused after the op (conv2d, linear, add, batchnorm) */
    int type;               /* dl_gpu_type of all the op's tensors (f32 for the GEMMs; gather's indices are int64) */
    dlk_index_error *index_err; /* gather: where its kernel notes a bad index (the plugin's record) */
    union {                     /* launch parameters by kind, built once at prepare (launch_params) */
        dlk_conv conv;
        dlk_linear_p linear;
        dlk_unary_p unary;
        dlk_binary_p binary;
        dlk_batchnorm_p bn;
        dlk_pool pool;
        dlk_softmax_p softmax;
        struct {
            int64_t outer, inner; /* dims before and after the axis */
        } concat;
        dlk_gather_p gather; /* transpose, slice */
        dlk_pad_p pad;
        dlk_resize_p resize;
        dlk_reduce_p reduce;
        dlk_layer_norm_p layer_norm;
        dlk_group_norm_p group_norm;
        dlk_take_p take;     /* gather */
        dlk_deconv_p deconv; /* conv_transpose2d */
        dlk_conv3d_p conv3d;
    } p;
};

static void cu_release(void *self, dl_kernel *k) {
    cuda_state *s = self;
    if (!k) return;
    if (k->ktab) dl_gpu_free(&s->gpu, k->ktab);
    if (k->wcl) dl_gpu_free(&s->gpu, k->wcl);
    dl_op_geom_free(&k->g);
    free(k);
}

static void cu_destroy(void *self) {
    cuda_state *s = self;
    if (s->index_err) dl_gpu_free(&s->gpu, s->index_err);
    dl_gpu_close(&s->gpu);
    free(s);
}

/* Queues kernel k's work on stream st: 0, or the cudaError_t of the launch. */
typedef int (*cu_launch_fn)(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st);
static const cu_launch_fn launchers[DL_OP_COUNT]; /* by kind, at "run" below */

_Static_assert((int)CU_GEMM_MMA == (int)DLK_VARIANTS && (int)CU_GEMM_GEMV == DLK_VARIANTS + DLK_MMA_TILES &&
                   (int)CU_GEMM_WGMMA == CU_GEMM_GEMV + 1 &&
                   (int)CU_GEMM_VARIANTS == CU_GEMM_WGMMA + CU_GEMM_WGMMA_TILES &&
                   (int)CU_GEMV_ROWS == (int)DLK_GEMV_ROWS,
               "gemm_plan.h's variants are kernels.h's SIMT tiles, its tensor-core tiles, the GEMV, then the "
               "warpgroup tiles");

static int is_gemm(int kind) { return kind == DL_OP_CONV2D || kind == DL_OP_LINEAR; }

/* DLRUN_CUDA_NHWC in effect: channels-last convs run on the tensor-core tiles only */
static int nhwc_on(const cuda_state *s) { return s->sw.nhwc && s->sw.mma; }

/* cuda_formats.c's flags from the switches */
static unsigned check_flags(const cuda_state *s) {
    return (s->sw.mma ? CU_CHECK_GEMM16 : 0u) | (nhwc_on(s) ? CU_CHECK_NHWC : 0u);
}

static int is_cl(const dl_tensor *t) { return dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST; }

/* 1 if GEMM variant v may run op (stored as type): gemm_plan.c's rule, and for a conv on the
 * tensor cores, offsets that fit its 32-bit table. */
/* The GEMM's M, N, K and groups from the op's shapes: M filters per group or output features, N
 * output pixels or batch rows, K (c / groups) kh kw or input features. */
static void op_gemm_dims(const dl_op *op, int64_t d[4]) {
    const int64_t *xs = op->inputs[0].shape, *ys = op->outputs[0].shape;
    if (op->kind == DL_OP_CONV2D) {
        const dl_op_attrs *a = op->attrs;
        d[3] = a->groups;
        d[0] = ys[1] / a->groups, d[1] = ys[0] * ys[2] * ys[3], d[2] = xs[1] / a->groups * a->kernel[0] * a->kernel[1];
    } else {
        d[0] = ys[1], d[1] = xs[0], d[2] = xs[1], d[3] = 1;
    }
}

/* 1 if GEMM variant v may run op (stored as type) without split-K: gemm_plan.c's rules, the limits
 * of its launch on this device, and for a conv on the tensor cores, offsets that fit its 32-bit
 * table. */
static int gemm_variant_ok(const cuda_state *s, const dl_op *op, int v, dl_gpu_type type) {
    int64_t d[4];
    op_gemm_dims(op, d);
    int rows = op->kind != DL_OP_LINEAR ? 0 : d[1] > CU_GEMV_ROWS ? CU_GEMV_ROWS + 1 : (int)d[1]; /* for the GEMV */
    if (!cu_gemm_variant_ok(&s->sw, v, type, op->precision, rows)) return 0;
    if (!cu_gemm_fits(v, dl_gpu_type_size(type), d[0], d[1], d[2], d[3], 1, s->smem_optin)) return 0;
    const dl_op_attrs *a = op->attrs;
    const int64_t *xs = op->inputs[0].shape;
    int conv = op->kind == DL_OP_CONV2D;
    if (cu_gemm_is_wgmma(v) &&
        (!s->sm90 || !cu_wgmma_ok(dl_gpu_type_size(type), conv, is_cl(&op->outputs[0]), conv ? (int)xs[1] : 0,
                                  conv ? (int)(xs[1] / a->groups) : 0, d[2])))
        return 0;
    if (op->kind == DL_OP_CONV2D && is_cl(&op->outputs[0])) /* the tensor-core tiles' channels-last gather */
        return cu_mma_conv_cl_ok(v, (int)xs[1], (int)(xs[1] / a->groups), (int)xs[3], a->kernel[0], a->kernel[1],
                                 a->dilation[0], a->dilation[1]);
    if (v < CU_GEMM_MMA || op->kind != DL_OP_CONV2D) return 1;
    return cu_mma_conv_fits((int)(xs[1] / a->groups), (int)xs[2], (int)xs[3], a->kernel[0], a->kernel[1],
                            a->dilation[0], a->dilation[1]);
}

/* Every precision is accepted and computed in f32, which is at least as accurate as asked, except
 * on the tensor-core tiles (gemm_plan.h: tf32 where the precision allows it, f16/bf16 products with
 * f32 sums); f16 and bf16 tensors are stored so (cuda_formats.c says which kinds take them). A kind
 * without a launcher below is refused with its name, a GEMM that no variant may run with why. */
static int cu_supports(void *self, const dl_op *op, dl_error *why) {
    cuda_state *s = self;
    if (op->kind >= 0 && op->kind < DL_OP_COUNT && !launchers[op->kind])
        return dl_fail(why, DL_E_UNSUPPORTED, "%s: no kernel in the cuda plugin yet", dl_op_kind_name(op->kind)), 0;
    dl_gpu_type type;
    if (!cu_op_check_sw(op, check_flags(s), &type, NULL, why)) return 0;
    if (!is_gemm(op->kind)) return 1;
    for (int v = 0; v < CU_GEMM_VARIANTS; v++)
        if (gemm_variant_ok(s, op, v, type)) return 1;
    return dl_fail(why, DL_E_UNSUPPORTED, "%s: no GEMM variant of the cuda plugin takes these %s tensors",
                   dl_op_kind_name(op->kind), dl_dtype_name(op->outputs[0].dtype)),
           0;
}

static int cu_in_place(void *self, const dl_op *op) { return dl_op_is_elementwise(op->kind); }

/* With DLRUN_CUDA_NHWC, channels-last for the 4-D convs and pools at tf32, f16 and bf16 (the
 * precisions the tensor-core tiles run; their channels-last gather reads 16-byte chunks of a
 * pixel's channels, or elements where the channels are fewer, as an RGB stem's); the rest, and
 * everything without the switch, as their input. */
static int cu_preferred(void *self, const dl_op *op) {
    const cuda_state *s = self;
    int k = op->kind;
    if (!nhwc_on(s) || op->precision == DL_PRECISION_F32 || op->n_inputs < 1 || op->inputs[0].ndim != 4 ||
        op->outputs[0].ndim != 4 || (k != DL_OP_CONV2D && k != DL_OP_MAXPOOL2D && k != DL_OP_AVGPOOL2D))
        return DL_LAYOUT_AS_INPUT;
    return DL_LAYOUT_CHANNELS_LAST;
}

typedef struct gemm_trial {
    dl_kernel *k;
    const void *x, *w;
    dlk_epilogue e;
    void *y, *ws;
    cudaStream_t s;
} gemm_trial;

/* A GEMM's epilogue from its kernel and inputs: the bias and the fused residual (ABI 1.8), each
 * where the op has one, and relu. */
static dlk_epilogue gemm_epilogue(const dl_kernel *k, const dl_tensor *in) {
    return (dlk_epilogue){k->g.has_bias ? in[2].data : NULL, k->g.residual ? in[k->g.residual].data : NULL, k->relu};
}

/* The weights a GEMM's kernels read: the kernel's KRSC copy for a channels-last conv, else the
 * op's own. */
static const void *gemm_weights(const dl_kernel *k, const void *w) { return k->wcl ? k->wcl : w; }

/* ws: k->ws bytes (split-K's partial sums) */
static int launch_gemm(const dl_kernel *k, const void *x, const void *w, const dlk_epilogue *e, void *y, void *ws,
                       cudaStream_t s) {
    int conv = k->g.kind == DL_OP_CONV2D, v = k->variant, t = v - CU_GEMM_MMA, splits = k->splits;
    if (cu_gemm_is_wgmma(v) && !dlk_wgmma_aligned(x, w)) /* an input 16-byte misaligned (a view): the mma tile */
        v = CU_GEMM_MMA, t = 0, splits = 1;
    if (cu_gemm_is_wgmma(v) && conv)
        return dlk_wgmma_conv2d(&k->p.conv, k->type, x, w, e, y, k->ktab, wg_bn(v - CU_GEMM_WGMMA), splits, ws, s);
    if (cu_gemm_is_wgmma(v))
        return dlk_wgmma_linear(&k->p.linear, k->type, x, w, e, y, wg_bn(v - CU_GEMM_WGMMA), splits, ws, s);
    if (v == CU_GEMM_GEMV) return dlk_gemv(&k->p.linear, k->type, x, w, e, y, s);
    if (v >= CU_GEMM_MMA && conv) return dlk_mma_conv2d(&k->p.conv, k->type, x, w, e, y, k->ktab, t, splits, ws, s);
    if (v >= CU_GEMM_MMA) return dlk_mma_linear(&k->p.linear, k->type, x, w, e, y, t, splits, ws, s);
    if (conv) return dlk_conv2d(&k->p.conv, x, w, e, y, v, s);
    return dlk_linear(&k->p.linear, x, w, e, y, v, s);
}

static int trial_run(void *arg) {
    gemm_trial *t = arg;
    return launch_gemm(t->k, t->x, t->w, &t->e, t->y, t->ws, t->s);
}

/* A conv's k-table for the tensor-core gather, on the device (k->ktab). */
static dl_status ktab_upload(cuda_state *s, dl_kernel *k, dl_error *err) {
    const dlk_conv *c = &k->p.conv;
    size_t n = (size_t)(c->c / c->groups) * (size_t)c->kh * (size_t)c->kw;
    mma_ktap *t = malloc(n * sizeof *t);
    if (!t) return dl_fail(err, DL_E_NOMEM, "out of memory");
    if (c->cl) cu_mma_ktab_cl(c->c, c->c / c->groups, c->kh, c->kw, c->w, c->dh, c->dw, t);
    else cu_mma_ktab(c->c / c->groups, c->kh, c->kw, c->h, c->w, c->dh, c->dw, t);
    dl_status st = dl_gpu_alloc(&s->gpu, n * sizeof *t, (void **)&k->ktab, err);
    if (st == DL_OK) st = dl_gpu_copy(&s->gpu, k->ktab, t, n * sizeof *t, DL_COPY_HOST_TO_DEVICE, err);
    if (st == DL_OK) st = dl_gpu_synchronize(&s->gpu, err); /* t is freed next */
    free(t);
    return st;
}

/* The split counts to time for variant v: 1 but for a tensor-core or warpgroup tile, where the
 * forced one or those cu_splitk_tries finds worth it (and whose workspace is not too big). */
static int split_tries(const cuda_state *s, const dl_kernel *k, int v, int *out) {
    if (!cu_gemm_is_tile(v)) return out[0] = 1, 1;
    int m = k->gm, n = k->gn, kk = k->gk, groups = k->groups, bm, bn, bk;
    int es = dl_gpu_type_size(k->type), c, kept = 0;
    if (s->sw.forced == v && s->sw.forced_splits) {
        out[0] = s->sw.forced_splits, c = 1;
    } else {
        cu_tile_of(v, es, &bm, &bn, &bk);
        long long blocks = (long long)((n + bn - 1) / bn) * ((m + bm - 1) / bm) * groups;
        c = cu_splitk_tries(blocks, (kk + bk - 1) / bk, s->sms, out);
    }
    /* a split whose workspace or grid would be too big is not tried (a forced one falls back to 1) */
    for (int i = 0; i < c; i++)
        if (cu_splitk_bytes(out[i], groups, m, n) != (size_t)-1 &&
            cu_gemm_fits(v, es, m, n, kk, groups, out[i], s->smem_optin))
            out[kept++] = out[i];
    if (!kept) out[kept++] = 1;
    return kept;
}

/* 1 if variant v in `splits` k-slices is one of the op's candidates for timing (as tune counts
 * them): a choice read back from the timing cache is used only then. */
static int gemm_candidate(const cuda_state *s, const dl_kernel *k, const dl_op *op, int v, int splits) {
    int tries[CU_SPLITK_TRIES];
    if (!gemm_variant_ok(s, op, v, k->type)) return 0;
    for (int i = 0, c = split_tries(s, k, v, tries); i < c; i++)
        if (tries[i] == splits) return 1;
    return 0;
}

/* The choice's line for DLRUN_CUDA_LOG: how it was made (`how`: "the only candidate", "from the
 * timing cache", "timed, ms: ..."). */
static void log_choice(const cuda_state *s, const dl_kernel *k, const dl_op *op, const char *how) {
    if (s->log_gemms)
        fprintf(stderr, "dlrun cuda: %s M %d N %d K %d groups %d, %s: variant %d, %d k-slice%s (%s)\n",
                dl_op_kind_name(op->kind), k->gm, k->gn, k->gk, k->groups, dl_dtype_name(op->outputs[0].dtype),
                k->variant, k->splits, k->splits > 1 ? "s" : "", how);
}

/* Times each GEMM variant that may run the op (gemm_variant_ok; only the forced one where
 * DLRUN_CUDA_GEMM_VARIANT names one that may), with each split worth trying, once on its real
 * shapes and weights; keeps the fastest. Unforced, the choice is kept in the host's timing cache
 * and read back from it by the next process (where it is still a candidate: the file is the
 * user's), instead of timing again. */
static dl_status tune(cuda_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    size_t es = (size_t)dl_gpu_type_size(k->type);
    size_t xb = (size_t)dl_tensor_numel(&op->inputs[0]) * es, yb = (size_t)k->g.numel * es, wsb = 0;
    int forced = s->sw.forced >= 0 && gemm_variant_ok(s, op, s->sw.forced, k->type);
    int m = k->gm, n = k->gn, groups = k->groups, tries[CU_SPLITK_TRIES], candidates = 0;
    for (int v = 0; v < CU_GEMM_VARIANTS; v++) {
        if (forced ? v != s->sw.forced : !gemm_variant_ok(s, op, v, k->type)) continue;
        for (int i = 0, c = split_tries(s, k, v, tries); i < c; i++, candidates++) {
            size_t b = cu_splitk_bytes(tries[i], groups, m, n);
            if (b > wsb) wsb = b;
            k->variant = v, k->splits = tries[i];
        }
    }
    if (candidates == 1) { /* nothing to choose between (a forced variant): no timing */
        log_choice(s, k, op, "the only candidate");
        return DL_OK;
    }
    char key[DL_GPU_CHOICE_KEY_LEN] = "", extra[128];
    int code, kv, ks;
    if (!forced && cu_gemm_choice_extra(&s->sw, s->sms, s->smem_optin, s->sm90, extra, sizeof extra))
        dl_gpu_choice_key(key, sizeof key, "gemm v1", op, extra);
    if (dl_gpu_choice_get(s->gpu.host, key, &code) && cu_gemm_choice_of(code, &kv, &ks) &&
        gemm_candidate(s, k, op, kv, ks)) {
        k->variant = kv, k->splits = ks;
        log_choice(s, k, op, "from the timing cache");
        return DL_OK;
    }
    void *x = NULL, *y = NULL, *ws = NULL;
    dl_status st = dl_gpu_alloc(&s->gpu, xb, &x, err);
    if (st == DL_OK) st = dl_gpu_alloc(&s->gpu, yb, &y, err);
    if (st == DL_OK && wsb) st = dl_gpu_alloc(&s->gpu, wsb, &ws, err);
    if (st == DL_OK && (cudaMemsetAsync(x, 0x3c, xb, s->gpu.stream) != cudaSuccess ||
                        cudaMemsetAsync(y, 0, yb, s->gpu.stream) != cudaSuccess)) /* y: a residual's too */
        st = dl_fail(err, DL_E_RUNTIME, "cudaMemsetAsync failed");
    double best = -1;
    int best_v = k->variant, best_s = k->splits;
    char timed[320] = "";
    size_t used = 0;
    for (int v = 0; st == DL_OK && v < CU_GEMM_VARIANTS; v++) {
        if (forced ? v != s->sw.forced : !gemm_variant_ok(s, op, v, k->type)) continue;
        for (int i = 0, c = split_tries(s, k, v, tries); st == DL_OK && i < c; i++) {
            k->variant = v, k->splits = tries[i];
            /* a fused residual is read from y itself: the same traffic as a tensor of its own */
            dlk_epilogue epi = gemm_epilogue(k, op->inputs);
            if (k->g.residual) epi.residual = y;
            gemm_trial t = {k, x, gemm_weights(k, op->inputs[1].data), epi, y, ws, s->gpu.stream};
            cudaError_t e = cudaSuccess;
            double ms = dl_gpu_time(&s->gpu, 3, trial_run, &t, &e);
            /* the error dl_gpu_time saw: the launch's status is consumed where it is read
             * (launched()), so asking cudaGetLastError here would say "no error" */
            if (ms < 0) st = dl_gpu_status(e, "gemm tile timing", err);
            else if (best < 0 || ms < best) best = ms, best_v = v, best_s = tries[i];
            if (ms >= 0 && used < sizeof timed) /* "v:splits ms" each, for DLRUN_CUDA_LOG */
                used += (size_t)snprintf(timed + used, sizeof timed - used, "%s%d:%d %.4f", used ? ", " : "", v,
                                         tries[i], ms);
        }
    }
    k->variant = best_v, k->splits = best_s;
    if (st == DL_OK) {
        char how[sizeof timed + 16];
        snprintf(how, sizeof how, "timed, ms: %s", timed);
        log_choice(s, k, op, how);
        dl_gpu_choice_put(s->gpu.host, key, cu_gemm_choice_code(best_v, best_s));
    }
    dl_gpu_free(&s->gpu, x);
    dl_gpu_free(&s->gpu, y);
    if (ws) dl_gpu_free(&s->gpu, ws);
    return st;
}

/* A channels-last conv's own KRSC weights (k->wcl), reordered from the op's at prepare. A weight
 * that is an input of the model (not constant) is not here: it is an activation to the host, laid
 * out channels-last like x, which dl_gpu_one_layout refuses, so such a conv runs NCHW. */
static dl_status krsc_setup(cuda_state *s, dl_kernel *k, const dl_tensor *w, dl_error *err) {
    if (!w->data) return dl_fail(err, DL_E_UNSUPPORTED, "conv2d: channels-last needs its weights at prepare");
    dl_gpu_xform wx;
    dl_gpu_filter_krsc(&wx, w->shape);
    size_t bytes = (size_t)dl_tensor_numel(w) * (size_t)dl_gpu_type_size(k->type);
    dl_status st = dl_gpu_alloc(&s->gpu, bytes, &k->wcl, err);
    if (st != DL_OK) return st;
    if (dl_gpu_cast(k->wcl, k->type, w->data, k->type, &wx, s->gpu.stream))
        return dl_fail(err, DL_E_RUNTIME, "conv2d: reordering the weights to KRSC failed");
    return DL_OK;
}

/* A GEMM's variant: the forced one where it may run, else the first that may, then by timing
 * where the weights are known (constant); and a conv's k-table where a tensor-core tile may run. */
static dl_status gemm_setup(cuda_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    int mma = 0;
    int64_t d[4];
    op_gemm_dims(op, d); /* supports() saw that they fit int */
    k->gm = (int)d[0], k->gn = (int)d[1], k->gk = (int)d[2], k->groups = (int)d[3];
    k->variant = -1; /* supports() saw that one may */
    for (int v = 0; v < CU_GEMM_VARIANTS; v++)
        if (gemm_variant_ok(s, op, v, k->type)) {
            if (k->variant < 0) k->variant = v;
            mma |= cu_gemm_is_tile(v); /* the tiles gather through a k-table */
        }
    if (s->sw.forced >= 0 && gemm_variant_ok(s, op, s->sw.forced, k->type)) k->variant = s->sw.forced;
    /* without timing: the forced split where it fits (split_tries), else none */
    int tries[CU_SPLITK_TRIES];
    k->splits = 1;
    if (s->sw.forced == k->variant && s->sw.forced_splits && split_tries(s, k, k->variant, tries) == 1)
        k->splits = tries[0];
    dl_status st = DL_OK;
    if (mma && k->g.kind == DL_OP_CONV2D) st = ktab_upload(s, k, err);
    if (st == DL_OK && k->cl && k->g.kind == DL_OP_CONV2D) st = krsc_setup(s, k, &op->inputs[1], err);
    if (st == DL_OK && op->inputs[1].data) st = tune(s, k, op, err);
    if (st == DL_OK) k->ws = cu_splitk_bytes(k->splits, k->groups, k->gm, k->gn); /* split_tries kept those that fit */
    return st;
}

/* The launch parameters of k's op, from its attributes and shapes (k->g), once for every run. */
static void launch_params(dl_kernel *k, dl_layout layout) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t *xs = k->g.xs, *ys = k->g.ys;
    k->relu = a->activation == DL_ACT_RELU;
    /* the unary and binary kinds, and those of ABI 1.4 and conv3d: builders in cuda_params.c
     * (host-tested) */
    if (cu_unary_params(&k->g, &k->p.unary) || cu_binary_params(&k->g, &k->p.binary)) return;
    switch (k->g.kind) {
    case DL_OP_CONV2D:
        k->p.conv =
            (dlk_conv){(int)xs[0],      (int)xs[1],     (int)xs[2],     (int)xs[3],   (int)ys[1],   (int)ys[2],
                       (int)ys[3],      a->kernel[0],   a->kernel[1],   a->stride[0], a->stride[1], a->pad_begin[0],
                       a->pad_begin[1], a->dilation[0], a->dilation[1], a->groups,    k->cl};
        break;
    case DL_OP_LINEAR: k->p.linear = (dlk_linear_p){(int)xs[0], (int)xs[1], (int)ys[1]}; break;
    case DL_OP_BATCHNORM:
        k->p.bn = (dlk_batchnorm_p){.planes = xs[0] * xs[1],
                                    .c = (int)xs[1],
                                    .inner = dl_gpu_prod(xs, 2, k->g.xnd),
                                    .eps = a->epsilon,
                                    .relu = k->relu,
                                    .cl = layout == DL_LAYOUT_CHANNELS_LAST};
        break;
    case DL_OP_MAXPOOL2D:
    case DL_OP_AVGPOOL2D:
        k->p.pool = (dlk_pool){xs[0] * xs[1],        (int)xs[2],    (int)xs[3],    (int)ys[2],     (int)ys[3],
                               a->kernel[0],         a->kernel[1],  a->stride[0],  a->stride[1],   a->pad_begin[0],
                               a->pad_begin[1],      a->pad_end[0], a->pad_end[1], a->dilation[0], a->dilation[1],
                               a->count_include_pad, (int)xs[1],    k->cl};
        break;
    case DL_OP_SOFTMAX:
    case DL_OP_LOG_SOFTMAX:
        k->p.softmax = (dlk_softmax_p){dl_gpu_prod(xs, 0, a->axis), xs[a->axis], dl_gpu_prod(xs, a->axis + 1, k->g.xnd),
                                       k->g.kind == DL_OP_LOG_SOFTMAX};
        break;
    case DL_OP_CONCAT:
        k->p.concat.outer = dl_gpu_prod(ys, 0, a->axis);
        k->p.concat.inner = dl_gpu_prod(ys, a->axis + 1, k->g.ynd);
        break;
    case DL_OP_TRANSPOSE: cu_transpose_params(&k->g, &k->p.gather); break;
    case DL_OP_SLICE: cu_slice_params(&k->g, &k->p.gather); break;
    case DL_OP_CHANNEL_SHUFFLE: cu_channel_shuffle_params(&k->g, &k->p.gather); break;
    case DL_OP_PAD: cu_pad_params(&k->g, &k->p.pad); break;
    case DL_OP_RESIZE: cu_resize_params(&k->g, &k->p.resize); break;
    case DL_OP_REDUCE_MEAN:
    case DL_OP_REDUCE_SUM:
    case DL_OP_REDUCE_MAX:
    case DL_OP_REDUCE_MIN: cu_reduce_params(&k->g, &k->p.reduce); break;
    case DL_OP_LAYER_NORM: cu_layer_norm_params(&k->g, &k->p.layer_norm); break;
    case DL_OP_GROUP_NORM: cu_group_norm_params(&k->g, &k->p.group_norm); break;
    case DL_OP_GATHER: cu_gather_params(&k->g, &k->p.take); break;
    case DL_OP_CONV_TRANSPOSE2D: cu_conv_transpose2d_params(&k->g, &k->p.deconv); break;
    case DL_OP_CONV3D: cu_conv3d_params(&k->g, &k->p.conv3d); break;
    default: break; /* global avgpool reads k->g; the views are copies */
    }
}

static dl_status cu_prepare(void *self, const dl_op *op, dl_kernel **out, size_t *ws, dl_error *err) {
    cuda_state *s = self;
    dl_gpu_type type;
    dl_layout layout;
    if (!cu_supports(self, op, err) || !cu_op_check_sw(op, check_flags(s), &type, &layout, err))
        return DL_E_UNSUPPORTED;
    dl_status st = dl_gpu_use(&s->gpu, err);
    if (st != DL_OK) return st;
    dl_kernel *k = calloc(1, sizeof *k);
    if (!k) return dl_fail(err, DL_E_NOMEM, "out of memory");
    *ws = 0;
    st = dl_op_geom_init(&k->g, op) ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    k->type = type;
    k->index_err = op->kind == DL_OP_GATHER ? s->index_err : NULL;
    k->cl = layout == DL_LAYOUT_CHANNELS_LAST;
    if (st == DL_OK) launch_params(k, layout);
    if (st == DL_OK && is_gemm(k->g.kind)) st = gemm_setup(s, k, op, err);
    if (st == DL_OK) *ws = k->ws;
    if (st != DL_OK) {
        cu_release(s, k);
        return st;
    }
    *out = k;
    return DL_OK;
}

/* ---- run: one launcher per kernel family, chosen by kind ---- */

/* conv2d and linear: cu_run calls launch_gemm itself, with the workspace; the entry in the table
 * below says the kinds have a kernel */
static int run_gemm(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    dlk_epilogue e = gemm_epilogue(k, in);
    return launch_gemm(k, in[0].data, gemm_weights(k, in[1].data), &e, y, NULL, st);
}
static int run_unary(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_unary(&k->p.unary, k->type, in[0].data, y, k->g.numel, st);
}
static int run_binary(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_binary(&k->p.binary, k->type, in[0].data, in[1].data, y, k->g.numel, k->relu, st);
}
static int run_copy(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) { /* the views */
    if (in[0].data == y) return 0;
    size_t bytes = (size_t)k->g.numel * (size_t)dl_gpu_type_size(k->type);
    return (int)cudaMemcpyAsync(y, in[0].data, bytes, cudaMemcpyDeviceToDevice, st);
}
static int run_batchnorm(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_batchnorm(&k->p.bn, k->type, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, y, st);
}
static int run_maxpool(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_maxpool(&k->p.pool, k->type, in[0].data, y, st);
}
static int run_avgpool(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_avgpool(&k->p.pool, k->type, in[0].data, y, st);
}
static int run_global_avgpool(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_global_avgpool(k->type, in[0].data, y, k->g.xs[0] * k->g.xs[1], k->g.xs[2] * k->g.xs[3], (int)k->g.xs[1],
                              k->cl, st);
}
static int run_softmax(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_softmax(&k->p.softmax, k->type, in[0].data, y, st);
}
static int run_gather(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_gather(&k->p.gather, k->type, in[0].data, y, k->g.numel, st);
}
static int run_take(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_take(&k->p.take, k->type, in[0].data, in[1].data, y, k->index_err, st);
}
static int run_conv_transpose2d(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    const void *b = k->g.has_bias ? in[2].data : NULL;
    return dlk_conv_transpose2d(&k->p.deconv, k->type, in[0].data, in[1].data, b, y, st);
}
static int run_conv3d(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    const void *b = k->g.has_bias ? in[2].data : NULL;
    return dlk_conv3d(&k->p.conv3d, k->type, in[0].data, in[1].data, b, y, st);
}
static int run_pad(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_pad(&k->p.pad, k->type, in[0].data, y, k->g.numel, st);
}
static int run_resize(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_resize(&k->p.resize, k->type, in[0].data, y, st);
}
static int run_reduce(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_reduce(&k->p.reduce, k->type, in[0].data, y, st);
}
static int run_group_norm(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_group_norm(&k->p.group_norm, k->type, in[0].data, in[1].data, in[2].data, y, st);
}
static int run_layer_norm(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    return dlk_layer_norm(&k->p.layer_norm, k->type, in[0].data, in[1].data, in[2].data, y, st);
}
static int run_concat(const dl_kernel *k, const dl_tensor *in, void *y, cudaStream_t st) {
    int64_t inner = k->p.concat.inner, off = 0, row = k->g.ys[k->g.a.axis] * inner;
    int rc = 0;
    for (int i = 0; i < k->g.n_inputs && rc == 0; i++) {
        rc = dlk_concat_part(k->type, in[i].data, y, k->p.concat.outer, k->g.cat_len[i] * inner, row, off, st);
        off += k->g.cat_len[i] * inner;
    }
    return rc;
}

/* The launcher of each kind. matmul (ABI 1.2) has no kernel of ours yet, nor has any kind the op
 * table gains before its kernel is written: supports() refuses them, and the placer runs them on
 * another backend. The kinds of ABI 1.4 (all 32 now, gather and conv_transpose2d the last) and
 * conv3d (1.7) were written without a GPU at hand: first run in the next GPU round
 * (tools/gpu-check correct, whose test-ops covers them). */
static const cu_launch_fn launchers[DL_OP_COUNT] = {
    [DL_OP_CONV2D] = run_gemm,
    [DL_OP_LINEAR] = run_gemm,
    [DL_OP_RELU] = run_unary,
    [DL_OP_LEAKY_RELU] = run_unary,
    [DL_OP_SIGMOID] = run_unary,
    [DL_OP_CLIP] = run_unary,
    [DL_OP_ADD] = run_binary,
    [DL_OP_FLATTEN] = run_copy,
    [DL_OP_DROPOUT] = run_copy,
    [DL_OP_RESHAPE] = run_copy,
    [DL_OP_BATCHNORM] = run_batchnorm,
    [DL_OP_MAXPOOL2D] = run_maxpool,
    [DL_OP_AVGPOOL2D] = run_avgpool,
    [DL_OP_GLOBAL_AVGPOOL] = run_global_avgpool,
    [DL_OP_SOFTMAX] = run_softmax,
    [DL_OP_CONCAT] = run_concat,
    /* ABI 1.4 */
    [DL_OP_MUL] = run_binary,
    [DL_OP_SUB] = run_binary,
    [DL_OP_DIV] = run_binary,
    [DL_OP_POW] = run_binary,
    [DL_OP_MIN] = run_binary,
    [DL_OP_MAX] = run_binary,
    [DL_OP_SQRT] = run_unary,
    [DL_OP_EXP] = run_unary,
    [DL_OP_LOG] = run_unary,
    [DL_OP_TANH] = run_unary,
    [DL_OP_ERF] = run_unary,
    [DL_OP_NEG] = run_unary,
    [DL_OP_ABS] = run_unary,
    [DL_OP_RECIPROCAL] = run_unary,
    [DL_OP_HARD_SIGMOID] = run_unary,
    [DL_OP_HARD_SWISH] = run_unary,
    [DL_OP_SILU] = run_unary,
    [DL_OP_GELU] = run_unary,
    [DL_OP_SOFTPLUS] = run_unary,
    [DL_OP_TRANSPOSE] = run_gather,
    [DL_OP_SLICE] = run_gather,
    [DL_OP_CHANNEL_SHUFFLE] = run_gather,
    [DL_OP_PAD] = run_pad,
    [DL_OP_RESIZE] = run_resize,
    [DL_OP_REDUCE_MEAN] = run_reduce,
    [DL_OP_REDUCE_SUM] = run_reduce,
    [DL_OP_REDUCE_MAX] = run_reduce,
    [DL_OP_REDUCE_MIN] = run_reduce,
    [DL_OP_LAYER_NORM] = run_layer_norm,
    [DL_OP_LOG_SOFTMAX] = run_softmax,
    [DL_OP_GROUP_NORM] = run_group_norm,
    [DL_OP_GATHER] = run_take,
    [DL_OP_CONV_TRANSPOSE2D] = run_conv_transpose2d,
    /* ABI 1.7 */
    [DL_OP_CONV3D] = run_conv3d,
};

static dl_status cu_run(void *self, dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err) {
    cuda_state *s = self;
    dl_status status = dl_gpu_use(&s->gpu, err); /* launches need no lock: one stream, thread-safe queuing */
    if (status != DL_OK) return status;
    if (k->index_err) atomic_store(&s->index_armed, 1); /* before the launch: synchronize must look */
    int rc;
    if (is_gemm(k->g.kind)) { /* the one kind with a workspace (split-K) */
        dlk_epilogue e = gemm_epilogue(k, in);
        rc = launch_gemm(k, in[0].data, gemm_weights(k, in[1].data), &e, out[0].data, ws, s->gpu.stream);
    } else {
        rc = launchers[k->g.kind](k, in, out[0].data, s->gpu.stream);
    }
    if (rc) return dl_gpu_status((cudaError_t)rc, "kernel launch", err);
    return DL_OK;
}

/* The gather kernels' record of a bad index, read once the stream is done, then cleared: DL_OK, or
 * the first bad index as the cpu plugin words it. */
static dl_status index_check(cuda_state *s, dl_error *err) {
    dlk_index_error e;
    DL_GPU_TRY(cudaMemcpyAsync(&e, s->index_err, sizeof e, cudaMemcpyDeviceToHost, s->gpu.stream), err);
    DL_GPU_TRY(cudaStreamSynchronize(s->gpu.stream), err);
    if (!e.bad) return DL_OK;
    DL_GPU_TRY(cudaMemsetAsync(s->index_err, 0, sizeof e, s->gpu.stream), err);
    return dl_fail(err, DL_E_INVALID, "gather: index %lld (at %lld) is out of range for a dimension of size %lld",
                   (long long)e.index, (long long)e.at, (long long)e.size);
}

/* The shared synchronize, then the gathers' index record where a gather ran since the last look. */
static dl_status cu_synchronize(void *self, dl_error *err) {
    cuda_state *s = self;
    dl_status st = dl_gpu_synchronize(&s->gpu, err);
    if (st != DL_OK || !atomic_exchange(&s->index_armed, 0)) return st;
    return index_check(s, err);
}

/* The zeroed device record the gather kernels write a bad index into. */
static dl_status index_record_new(cuda_state *s, dl_error *err) {
    dl_status st = dl_gpu_alloc(&s->gpu, sizeof *s->index_err, (void **)&s->index_err, err);
    if (st != DL_OK) return st;
    DL_GPU_TRY(cudaMemsetAsync(s->index_err, 0, sizeof *s->index_err, s->gpu.stream), err);
    DL_GPU_TRY(cudaStreamSynchronize(s->gpu.stream), err);
    return DL_OK;
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    cu_gemm_switch sw;                          /* first: a bad value is reported with or without a device */
    const char *log = getenv("DLRUN_CUDA_LOG"); /* read once: getenv is not safe beside setenv */
    char why[160];
    if (!cu_gemm_switch_parse(getenv("DLRUN_CUDA_MMA"), getenv("DLRUN_CUDA_GEMM_VARIANT"), getenv("DLRUN_CUDA_NHWC"),
                              getenv("DLRUN_CUDA_WGMMA"), &sw, why, sizeof why)) {
        dl_fail(err, DL_E_INVALID, "%s", why);
        return NULL;
    }
    cuda_state *s = dl_gpu_plugin_new(host, sizeof *s, err);
    if (!s) return NULL;
    s->sw = sw;
    s->log_gemms = log && *log && strcmp(log, "0") != 0;
    if (cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, s->gpu.device) != cudaSuccess) s->sms = 1;
    if (cudaDeviceGetAttribute(&s->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s->gpu.device) != cudaSuccess)
        s->smem_optin = 48 << 10;
    int major = 0, minor = 0; /* the warpgroup tile is sm_90a code: it runs on 9.0 alone */
    s->sm90 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s->gpu.device) == cudaSuccess &&
              cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, s->gpu.device) == cudaSuccess &&
              major == 9 && minor == 0;
    atomic_init(&s->index_armed, 0);
    if (index_record_new(s, err) != DL_OK) {
        cu_destroy(s);
        return NULL;
    }
    s->table = dl_gpu_table(&s->gpu, "cuda", s->gpu.description);
    s->table.destroy = cu_destroy;
    s->table.supports = cu_supports;
    s->table.prepare = cu_prepare;
    s->table.run = cu_run;
    s->table.release = cu_release;
    s->table.synchronize = cu_synchronize;
    s->table.supports_in_place = cu_in_place;
    s->table.preferred_layout = cu_preferred;
    return &s->table;
}
