// gemm.cu — the cuda plugin's tiled GEMM and its two problems: conv2d as an implicit GEMM and
// linear, on one machinery (shared-memory tiles, register blocking, bias, residual and relu fused
// in the epilogue) with two tile shapes that cuda_backend.c chooses between by timing.
#include "launch.cuh"

namespace {

using namespace dlk;

// ---- the tiled GEMM: C[M x N] = A[M x K] * B[K x N] per group, with an epilogue ----
// A block computes a BM x BN tile; each of its (BM/TM)*(BN/TN) threads a TM x TN piece held in
// registers; A and B pass through shared memory BK columns/rows at a time. The problem type P
// says where A, B and C live, so convolution gathers B from the input image on the fly
// (implicit GEMM: no im2col buffer) and linear reads x transposed.
template <int BM, int BN, int BK, int TM, int TN, class P> __global__ void gemm_tiles(P p) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ float As[BK][BM + 1];
    __shared__ float Bs[BK][BN];
    const int g = blockIdx.z, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tid = threadIdx.x, tr = tid / (BN / TN), tc = tid % (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < p.K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            int m = i / BK, k = i % BK;
            As[k][m] = (m0 + m < p.M && k0 + k < p.K) ? p.a(g, m0 + m, k0 + k) : 0.f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
            int k = i / BN, n = i % BN;
            Bs[k][n] = (k0 + k < p.K && n0 + n < p.N) ? p.b(g, k0 + k, n0 + n) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) a[i] = As[k][tr * TM + i];
#pragma unroll
            for (int j = 0; j < TN; j++) b[j] = Bs[k][tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int m = m0 + tr * TM + i, n = n0 + tc * TN + j;
            if (m < p.M && n < p.N) p.store(g, m, n, acc[i][j]);
        }
}

struct ConvProblem {
    const float *x, *w;
    float *y;
    dlk_epilogue e;
    dlk_conv c;
    int cg, ocg;
    int M, N, K; // M = filters per group, N = images x output pixels, K = channels per group x kh x kw
    __device__ float a(int g, int m, int k) const { return w[(size_t)(g * ocg + m) * K + k]; }
    __device__ float b(int g, int k, int n) const {
        const int opix = c.oh * c.ow, img = n / opix, pix = n % opix, oy = pix / c.ow, ox = pix % c.ow;
        const int kk = c.kh * c.kw, ci = k / kk, r = k % kk, ky = r / c.kw, kx = r % c.kw;
        const int iy = oy * c.sh - c.ph + ky * c.dh, ix = ox * c.sw - c.pw + kx * c.dw;
        if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) return 0.f;
        return x[(((size_t)img * c.c + (size_t)g * cg + ci) * c.h + iy) * c.w + ix];
    }
    __device__ void store(int g, int m, int n, float v) const {
        const int o = g * ocg + m, opix = c.oh * c.ow, img = n / opix, pix = n % opix;
        const long long at = ((long long)img * c.oc + o) * opix + pix;
        y[at] = epilogue<float>(e, o, at, v);
    }
};

struct LinearProblem {
    const float *x, *w;
    float *y;
    dlk_epilogue e;
    int M, N, K; // M = out features, N = batch, K = in features
    __device__ float a(int, int m, int k) const { return w[(size_t)m * K + k]; }
    __device__ float b(int, int k, int n) const { return x[(size_t)n * K + k]; }
    __device__ void store(int, int m, int n, float v) const {
        const long long at = (long long)n * M + m;
        y[at] = epilogue<float>(e, m, at, v);
    }
};

template <class P> int run_gemm(const P &p, int groups, int variant, cudaStream_t s) {
    if (variant == 1) {
        dim3 grid(blocks_for(p.N, 32), blocks_for(p.M, 32), groups);
        gemm_tiles<32, 32, 16, 2, 2, P><<<grid, 256, 0, s>>>(p);
    } else {
        dim3 grid(blocks_for(p.N, 64), blocks_for(p.M, 64), groups);
        gemm_tiles<64, 64, 16, 4, 4, P><<<grid, 256, 0, s>>>(p);
    }
    return launched();
}

} // namespace

extern "C" int dlk_conv2d(const dlk_conv *c, const float *x, const float *w, const dlk_epilogue *e, float *y,
                          int variant, cudaStream_t s) {
    ConvProblem p{x, w, y, *e, *c, c->c / c->groups, c->oc / c->groups, 0, 0, 0};
    p.M = p.ocg;
    p.N = c->n * c->oh * c->ow;
    p.K = p.cg * c->kh * c->kw;
    return run_gemm(p, c->groups, variant, s);
}

extern "C" int dlk_linear(const dlk_linear_p *l, const float *x, const float *w, const dlk_epilogue *e, float *y,
                          int variant, cudaStream_t s) {
    LinearProblem p{x, w, y, *e, l->out, l->n, l->in};
    return run_gemm(p, 1, variant, s);
}
