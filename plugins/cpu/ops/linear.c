/* linear.c — fully connected layer y = x W^T + b on the CPU. With two rows of x or more (a
 * transformer's tokens, a batch) and a constant W, the packed GEMM of gemm.c: W packed once at
 * prepare as cpu_gemm's B, x packed at each run, the bias, a fused residual and the activation applied to each block
 * of y while it is in cache. One row (a CNN's head at batch 1) or a W given at run time: each
 * thread a single-threaded sgemv or sgemm on its slice of W's rows. */
#include <cblas.h>
#include <stdlib.h>

#include "cpu_ops.h"

dl_status cpu_linear_prepare(dl_kernel *k, const dl_op *op) {
    const dl_tensor *w = &op->inputs[1];
    const int64_t n = k->g.xs[0], in = k->g.xs[1], out = k->g.ys[1];
    if (!w->data || n < 2 || getenv("DLRUN_CPU_NO_PACKED")) return DL_OK;
    const size_t packed = cpu_gemm_packed_b_floats(in, out);
    const size_t scratch = cpu_gemm_scratch_floats(n, out, in, 1, 0, 0, k->threads);
    if (packed == SIZE_MAX || scratch == SIZE_MAX || scratch > SIZE_MAX / sizeof(float)) return DL_E_NOMEM;
    if (!(k->packed = malloc(packed * sizeof(float)))) return DL_E_NOMEM;
    /* B(p, j) = W[j][p]: row p of B is column p of W */
    const cpu_gemm_strided b = {w->data, 1, in, in, out};
    cpu_gemm_pack_b(&b, k->packed);
    k->workspace = scratch * sizeof(float);
    return DL_OK;
}

static void linear_packed(const dl_kernel *k, const float *x, const float *b, const float *res, float *y, void *ws) {
    const int64_t n = k->g.xs[0], in = k->g.xs[1], out = k->g.ys[1];
    const cpu_gemm_strided xa = {x, in, 1, n, in};
    const cpu_gemm_operand a = {NULL, cpu_gemm_pack_a_strided, &xa}, w = {k->packed, NULL, NULL};
    const cpu_gemm_epilogue e = {NULL, b, &k->g.a, 0, 0, 0, res};
    cpu_gemm(n, out, in, &a, &w, y, out, &e, ws, k->threads);
}

void cpu_linear(const dl_kernel *k, const dl_tensor *inputs, float *y, void *ws) {
    const float *x = inputs[0].data, *w = inputs[1].data, *b = k->g.has_bias ? inputs[2].data : NULL;
    const float *res = k->g.residual ? inputs[k->g.residual].data : NULL;
    if (k->packed) {
        linear_packed(k, x, b, res, y, ws);
        return;
    }
    const int n = (int)k->g.xs[0], in = (int)k->g.xs[1], out = (int)k->g.ys[1];
    CPU_PAR("omp parallel", {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int chunk = (out + nt - 1) / nt;
        int o0 = t * chunk, o1 = o0 + chunk < out ? o0 + chunk : out;
        if (o1 > o0) {
            if (n == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, o1 - o0, in, 1.0f, w + (size_t)o0 * in, in, x, 1, 0.0f, y + o0,
                            1);
            else cpu_sgemm(0, 1, n, o1 - o0, in, 1.0f, x, in, w + (size_t)o0 * in, in, 0.0f, y + o0, out);
            for (int i = 0; i < n; i++) { /* bias, residual, then the activation's own vectorised loop */
                float *row = y + (size_t)i * out + o0;
                if (b)
                    for (int o = 0; o < o1 - o0; o++) row[o] += b[o0 + o];
                cpu_bias_res_act(row, res ? res + (size_t)i * out + o0 : NULL, o1 - o0, 0.0f, &k->g.a);
            }
        }
    });
}
