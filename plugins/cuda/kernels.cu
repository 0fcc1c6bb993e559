// kernels.cu — the cuda plugin's own kernels: an implicit-GEMM convolution and a GEMM for
// linear on one tiled machinery (shared-memory tiles, register blocking, bias + relu fused in
// the epilogue), and plain kernels for pooling, softmax, batchnorm and elementwise ops.
#include <cfloat>
#include <cstdint>

#include "kernels.h"

namespace {

inline int launched() { return (int)cudaGetLastError(); }
inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

// ---- the tiled GEMM: C[M x N] = A[M x K] * B[K x N] per group, with an epilogue ----
// A block computes a BM x BN tile; each of its (BM/TM)*(BN/TN) threads a TM x TN piece held in
// registers; A and B pass through shared memory BK columns/rows at a time. The problem type P
// says where A, B and C live, so convolution gathers B from the input image on the fly
// (implicit GEMM: no im2col buffer) and linear reads x transposed.
template <int BM, int BN, int BK, int TM, int TN, class P>
__global__ void gemm_tiles(P p) {
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
    const float *x, *w, *bias;
    float *y;
    dlk_conv c;
    int cg, ocg, relu;
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
        if (bias) v += bias[o];
        if (relu && v < 0.f) v = 0.f;
        y[((size_t)img * c.oc + o) * opix + pix] = v;
    }
};

struct LinearProblem {
    const float *x, *w, *bias;
    float *y;
    int relu;
    int M, N, K; // M = out features, N = batch, K = in features
    __device__ float a(int, int m, int k) const { return w[(size_t)m * K + k]; }
    __device__ float b(int, int k, int n) const { return x[(size_t)n * K + k]; }
    __device__ void store(int, int m, int n, float v) const {
        if (bias) v += bias[m];
        if (relu && v < 0.f) v = 0.f;
        y[(size_t)n * M + m] = v;
    }
};

template <class P>
int run_gemm(const P &p, int groups, int variant, cudaStream_t s) {
    if (variant == 1) {
        dim3 grid(blocks_for(p.N, 32), blocks_for(p.M, 32), groups);
        gemm_tiles<32, 32, 16, 2, 2, P><<<grid, 256, 0, s>>>(p);
    } else {
        dim3 grid(blocks_for(p.N, 64), blocks_for(p.M, 64), groups);
        gemm_tiles<64, 64, 16, 4, 4, P><<<grid, 256, 0, s>>>(p);
    }
    return launched();
}

// ---- the rest ----

__global__ void relu_k(const float *x, float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void unary_k(int kind, const float *x, float *y, int64_t n, float p0, float p1) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        if (kind == 0) y[i] = v >= 0.f ? v : p0 * v;
        else if (kind == 1) {
            float e = expf(-fabsf(v));
            y[i] = v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
        } else y[i] = fminf(fmaxf(v, p0), p1);
    }
}

__global__ void add_k(const float *a, const float *b, float *y, int64_t n, int relu) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = a[i] + b[i];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

/* numpy-broadcast add: the operands' strides over y's dimensions are 0 where they repeat */
__global__ void add_bcast_k(const float *a, const float *b, float *y, int64_t n, dlk_bcast bc, int relu) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t q = r % bc.ys[d];
            oa += q * bc.sa[d], ob += q * bc.sb[d];
            r /= bc.ys[d];
        }
        float v = a[oa] + b[ob];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

__global__ void batchnorm_k(const float *x, const float *gamma, const float *beta, const float *mean, const float *var,
                            float eps, float *y, int64_t total, int c, int64_t inner, int relu) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int ch = (int)((i / inner) % c);
        float scale = gamma[ch] * rsqrtf(var[ch] + eps);
        float v = (x[i] - mean[ch]) * scale + beta[ch];
        y[i] = relu && v < 0.f ? 0.f : v;
    }
}

__global__ void maxpool_k(const float *x, float *y, int64_t total, int h, int w, int oh, int ow, int kh, int kw, int sh,
                          int sw, int pt, int pl, int dh, int dw) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int ox = (int)(i % ow), oy = (int)((i / ow) % oh);
        const float *src = x + (i / ((int64_t)oh * ow)) * h * w;
        int y0 = oy * sh - pt, x0 = ox * sw - pl;
        float m = -FLT_MAX; /* taps y0 + r*dh, x0 + c*dw inside the image */
        for (int r = 0; r < kh; r++) {
            int yy = y0 + r * dh;
            if (yy < 0 || yy >= h) continue;
            for (int c = 0; c < kw; c++) {
                int xx = x0 + c * dw;
                if (xx < 0 || xx >= w) continue;
                float v = src[yy * w + xx];
                m = (v > m || v != v) ? v : m;
            }
        }
        y[i] = m;
    }
}

__global__ void avgpool_k(const float *x, float *y, int64_t total, int h, int w, int oh, int ow, int kh, int kw, int sh,
                          int sw, int pt, int pl, int pb, int pr, int cip) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int ox = (int)(i % ow), oy = (int)((i / ow) % oh);
        const float *src = x + (i / ((int64_t)oh * ow)) * h * w;
        int y0 = oy * sh - pt, y1 = min(y0 + kh, h + pb), x0 = ox * sw - pl, x1 = min(x0 + kw, w + pr);
        int full = (y1 - y0) * (x1 - x0);
        y0 = max(y0, 0), y1 = min(y1, h), x0 = max(x0, 0), x1 = min(x1, w);
        float s = 0.f;
        for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++) s += src[yy * w + xx];
        int count = cip ? full : (y1 - y0) * (x1 - x0);
        y[i] = count > 0 ? s / count : 0.f;
    }
}

__global__ void global_avgpool_k(const float *x, float *y, int64_t plane) {
    __shared__ float part[256];
    const float *src = x + blockIdx.x * plane;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) s += src[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if ((int)threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0] / (float)plane;
}

__global__ void softmax_k(const float *x, float *y, int64_t rows, int64_t len, int64_t inner) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float *src = x + (r / inner) * len * inner + r % inner;
        float *dst = y + (r / inner) * len * inner + r % inner;
        float m = -INFINITY;
        for (int64_t i = 0; i < len; i++) m = fmaxf(m, src[i * inner]);
        float s = 0.f;
        for (int64_t i = 0; i < len; i++) s += expf(src[i * inner] - m);
        for (int64_t i = 0; i < len; i++) dst[i * inner] = expf(src[i * inner] - m) / s;
    }
}

__global__ void concat_k(const float *x, float *y, int64_t total, int64_t chunk, int64_t row, int64_t offset) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[(i / chunk) * row + offset + i % chunk] = x[i];
}

inline unsigned grid_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

} // namespace

extern "C" int dlk_conv2d(const dlk_conv *c, const float *x, const float *w, const float *b, float *y, int relu, int variant,
                          cudaStream_t s) {
    ConvProblem p{x, w, b, y, *c, c->c / c->groups, c->oc / c->groups, relu, 0, 0, 0};
    p.M = p.ocg;
    p.N = c->n * c->oh * c->ow;
    p.K = p.cg * c->kh * c->kw;
    return run_gemm(p, c->groups, variant, s);
}

extern "C" int dlk_linear(int n, int in, int out, const float *x, const float *w, const float *b, float *y, int relu,
                          int variant, cudaStream_t s) {
    LinearProblem p{x, w, b, y, relu, out, n, in};
    return run_gemm(p, 1, variant, s);
}

extern "C" int dlk_relu(const float *x, float *y, int64_t n, cudaStream_t s) {
    relu_k<<<grid_for(n), 256, 0, s>>>(x, y, n);
    return launched();
}

extern "C" int dlk_unary(int kind, const float *x, float *y, int64_t n, float p0, float p1, cudaStream_t s) {
    unary_k<<<grid_for(n), 256, 0, s>>>(kind, x, y, n, p0, p1);
    return launched();
}

extern "C" int dlk_add(const float *a, const float *b, float *y, int64_t n, int relu, cudaStream_t s) {
    add_k<<<grid_for(n), 256, 0, s>>>(a, b, y, n, relu);
    return launched();
}

extern "C" int dlk_add_bcast(const float *a, const float *b, float *y, int64_t n, const dlk_bcast *bc, int relu, cudaStream_t s) {
    add_bcast_k<<<grid_for(n), 256, 0, s>>>(a, b, y, n, *bc, relu);
    return launched();
}

extern "C" int dlk_batchnorm(const float *x, const float *gamma, const float *beta, const float *mean, const float *var,
                             float eps, float *y, int64_t planes, int c, int64_t inner, int relu, cudaStream_t s) {
    int64_t total = planes * inner;
    batchnorm_k<<<grid_for(total), 256, 0, s>>>(x, gamma, beta, mean, var, eps, y, total, c, inner, relu);
    return launched();
}

extern "C" int dlk_maxpool(const float *x, float *y, int64_t planes, int h, int w, int oh, int ow, int kh, int kw, int sh,
                           int sw, int pt, int pl, int dh, int dw, cudaStream_t s) {
    int64_t total = planes * oh * ow;
    maxpool_k<<<grid_for(total), 256, 0, s>>>(x, y, total, h, w, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw);
    return launched();
}

extern "C" int dlk_avgpool(const float *x, float *y, int64_t planes, int h, int w, int oh, int ow, int kh, int kw, int sh,
                           int sw, int pt, int pl, int pb, int pr, int cip, cudaStream_t s) {
    int64_t total = planes * oh * ow;
    avgpool_k<<<grid_for(total), 256, 0, s>>>(x, y, total, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, cip);
    return launched();
}

extern "C" int dlk_global_avgpool(const float *x, float *y, int64_t planes, int64_t plane, cudaStream_t s) {
    if (planes > 0) global_avgpool_k<<<(unsigned)planes, 256, 0, s>>>(x, y, plane);
    return launched();
}

extern "C" int dlk_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, cudaStream_t s) {
    softmax_k<<<grid_for(outer * inner), 256, 0, s>>>(x, y, outer * inner, len, inner);
    return launched();
}

extern "C" int dlk_concat_part(const float *x, float *y, int64_t outer, int64_t chunk, int64_t row, int64_t offset,
                               cudaStream_t s) {
    int64_t total = outer * chunk;
    if (total > 0) concat_k<<<grid_for(total), 256, 0, s>>>(x, y, total, chunk, row, offset);
    return launched();
}
