/* matmul.c — batched matrix product y = alpha * op(a) op(b) + beta * c on the CPU (ONNX MatMul
 * and Gemm): leading dimensions broadcast as numpy's matmul, c broadcasts to y. Work is split
 * into (batch, column block) tasks, each one single-threaded sgemm. */
#include <limits.h>

#include "cpu_ops.h"

void cpu_matmul(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const float *a = in[0].data, *b = in[1].data, *c = k->g.n_inputs == 3 ? in[2].data : NULL;
    (void)ws;
    const dl_op_geom *g = &k->g;
    const int ta = g->a.trans_a, tb = g->a.trans_b;
    int64_t m = g->ys[g->ynd - 2];
    const int64_t n = g->ys[g->ynd - 1];
    const int64_t kk = g->xs[g->xnd - (ta ? 2 : 1)];
    const int bat_nd = g->ynd - 2;
    int64_t batches = 1;
    for (int d = 0; d < bat_nd; d++) batches *= g->ys[d];
    /* matrix strides of a and b over y's batch dimensions (0 where an operand repeats) */
    int64_t sa[8], sb[8];
    dl_bcast_strides(g->xnd - 2, g->xs, bat_nd, g->ys, sa);
    dl_bcast_strides(g->bnd - 2, g->bs, bat_nd, g->ys, sb);
    const int64_t amat = g->xs[g->xnd - 2] * g->xs[g->xnd - 1], bmat = g->bs[g->bnd - 2] * g->bs[g->bnd - 1];
    const float alpha = g->a.alpha, beta = c ? g->a.beta : 0.0f;
    if (c) { /* y = beta * c, broadcast; the products then accumulate onto it */
        int64_t sc[8];
        dl_bcast_strides(g->cnd, g->cs, g->ynd, g->ys, sc);
        CPU_PAR("omp parallel for schedule(static)",
                for (int64_t i = 0; i < g->numel; i++) y[i] = beta * c[dl_bcast_offset(i, g->ynd, g->ys, sc)];);
    }
    /* One b for every batch (a weight [K, N] times activations [..., M, K]: a transformer's
     * projections) and a not transposed: a's matrices are consecutive rows, so the batches fold
     * into one product of batches * m rows, which reads b once instead of once per batch. */
    int b_shared = !ta;
    for (int d = 0; d < bat_nd && b_shared; d++) b_shared = sb[d] == 0 || g->ys[d] == 1;
    int a_dense = 1; /* a repeats along no batch dimension of y */
    for (int d = 0; d < bat_nd && a_dense; d++) a_dense = sa[d] != 0 || g->ys[d] == 1;
    if (b_shared && a_dense && batches > 1 && batches * m <= INT_MAX) m *= batches, batches = 1;
    /* column blocks so that one large product still keeps every thread busy */
    int64_t blocks = (k->threads + batches - 1) / batches;
    if (blocks > (n + 63) / 64) blocks = (n + 63) / 64;
    if (blocks < 1) blocks = 1;
    const int64_t width = (n + blocks - 1) / blocks, lda = ta ? m : kk, ldb = tb ? kk : n;
    CPU_PAR(
        "omp parallel for schedule(dynamic)", for (int64_t t = 0; t < batches * blocks; t++) {
            int64_t bi = t / blocks, n0 = (t % blocks) * width, n1 = n0 + width < n ? n0 + width : n;
            if (n1 <= n0) continue;
            const float *pa = a + dl_bcast_offset(bi, bat_nd, g->ys, sa) * amat;
            const float *pb = b + dl_bcast_offset(bi, bat_nd, g->ys, sb) * bmat + (tb ? n0 * kk : n0);
            float *py = y + bi * m * n + n0;
            cpu_sgemm(ta, tb, m, n1 - n0, kk, alpha, pa, lda, pb, ldb, c ? 1.0f : 0.0f, py, n);
        });
}
