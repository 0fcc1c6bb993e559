/* linear.c — linear in the cudnn plugin, through cuBLASLt: one matmul with the BIAS, RELU_BIAS or
 * RELU epilogue, its algorithm from cuBLASLt's heuristic at prepare (workspace up to
 * LT_WORKSPACE). A fused residual (ABI 1.8) is the matmul's C with beta = 1: cuBLASLt applies the
 * epilogue to alpha A B + beta C, so y = relu(x W^T + r + b). x, W, the bias, the residual and y
 * share one storage type: f32 (exact 32F compute at f32 precision, FAST_TF32 otherwise), or f16 /
 * bf16 with f32 accumulation (32F compute, float scaling factors; the bias epilogue reads the bias
 * in y's type). */
#define _POSIX_C_SOURCE 200809L
#include "cudnn_plugin.h"

/* linear: y[N,OUT] = x[N,IN] W^T + b. Column-major view: y^T[OUT,N] = W[OUT,IN] x^T, with W seen
 * as the column-major [IN,OUT] matrix transposed; the bias epilogue adds b to every column. */
dl_status dn_prepare_linear(cudnn_state *s, dl_kernel *k, const dl_op *op, dl_error *err) {
    const uint64_t n = (uint64_t)k->g.xs[0], in = (uint64_t)k->g.xs[1], out = (uint64_t)k->g.ys[1];
    dl_dtype dt = op->outputs[0].dtype;
    cudaDataType_t t = dn_lt_type(dt);
    LT_TRY(cublasLtMatmulDescCreate(&k->mm, dn_lt_compute(op->precision, dt), CUDA_R_32F));
    cublasOperation_t tr = CUBLAS_OP_T;
    LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr));
    int relu = k->g.a.activation == DL_ACT_RELU;
    cublasLtEpilogue_t epi = k->g.has_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->la, t, in, out, in));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->lb, t, in, n, in));
    LT_TRY(cublasLtMatrixLayoutCreate(&k->lc, t, out, n, out));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    size_t cap = LT_WORKSPACE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
    /* the host's tensors are 64-byte aligned in its arena, not the 256 bytes cuBLASLt assumes by
     * default: only algorithms that work on 16-byte aligned pointers */
    uint32_t align = 16;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t r = cublasLtMatmulAlgoGetHeuristic(s->lt, k->mm, k->la, k->lb, k->lc, k->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (r != CUBLAS_STATUS_SUCCESS || found < 1)
        return dl_fail(err, DL_E_UNSUPPORTED, "cuBLASLt has no algorithm for this linear layer");
    k->lt_algo = res.algo;
    k->workspace = k->lib_ws = res.workspaceSize;
    return DL_OK;
}

dl_status dn_run_linear(cudnn_state *s, dl_kernel *k, const dl_tensor *in, void *y, void *ws, dl_error *err) {
    const float one = 1.0f, zero = 0.0f; /* the scale type is 32F for every storage type */
    const void *x = in[0].data, *r = k->g.residual ? in[k->g.residual].data : NULL;
    if (k->g.has_bias) {
        const void *bias = in[2].data;
        LT_TRY(cublasLtMatmulDescSetAttribute(k->mm, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    LT_TRY(cublasLtMatmul(s->lt, k->mm, &one, in[1].data, k->la, x, k->lb, r ? &one : &zero, r ? r : y, k->lc, y, k->lc,
                          &k->lt_algo, ws, k->lib_ws, s->gpu.stream));
    return DL_OK;
}
