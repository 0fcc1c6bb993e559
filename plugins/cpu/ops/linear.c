/* linear.c — fully connected layer y = x W^T + b on the CPU: the output features are split
 * across threads, each a single-threaded sgemv (batch 1) or sgemm call on its slice of W. */
#include <cblas.h>

#include "cpu_ops.h"

void cpu_linear(const dl_kernel *k, const dl_tensor *inputs, float *y, void *ws) {
    const float *x = inputs[0].data, *w = inputs[1].data, *b = k->g.has_bias ? inputs[2].data : NULL;
    (void)ws;
    const int n = (int)k->g.xs[0], in = (int)k->g.xs[1], out = (int)k->g.ys[1];
    const int act = k->g.a.activation;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int chunk = (out + nt - 1) / nt;
        int o0 = t * chunk, o1 = o0 + chunk < out ? o0 + chunk : out;
        if (o1 > o0) {
            if (n == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, o1 - o0, in, 1.0f, w + (size_t)o0 * in, in, x, 1, 0.0f, y + o0,
                            1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o1 - o0, in, 1.0f, x, in, w + (size_t)o0 * in,
                            in, 0.0f, y + o0, out);
            for (int i = 0; i < n; i++)
                for (int o = o0; o < o1; o++) {
                    float v = y[(size_t)i * out + o] + (b ? b[o] : 0.0f);
                    y[(size_t)i * out + o] = cpu_activate(v, act, &k->g.a);
                }
        }
    }
}
