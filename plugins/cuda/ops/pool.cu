// pool.cu — the cuda plugin's pooling kernels: max pooling (with dilation; NaN propagates),
// average pooling (pads counted only with count_include_pad) and global average pooling. NCHW, or
// NHWC where the parameters say cl (one output element per thread either way, in the output's
// memory order, so NHWC's neighbouring threads read neighbouring channels); templates on the
// storage type T (loads widen to float, sums are float, stores round).
#include <cfloat>

#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

// Output element i (in memory order) of a pool: its output row and column, and where its channel's
// input plane starts (tap (r, c) at src[(r w + c) step]).
struct PoolAt {
    int oy, ox;
    int64_t base;
    int step;
};
__device__ inline PoolAt pool_at(const dlk_pool &p, int64_t i) {
    PoolAt a;
    if (p.cl) { // i = ((img oh + oy) ow + ox) c + ch
        const int64_t px = i / p.c;
        a.ox = (int)(px % p.ow), a.oy = (int)(px / p.ow % p.oh);
        a.base = px / ((int64_t)p.oh * p.ow) * p.h * p.w * p.c + i % p.c;
        a.step = p.c;
    } else { // i = (plane oh + oy) ow + ox
        a.ox = (int)(i % p.ow), a.oy = (int)((i / p.ow) % p.oh);
        a.base = (i / ((int64_t)p.oh * p.ow)) * p.h * p.w;
        a.step = 1;
    }
    return a;
}

template <class T> __global__ void maxpool_k(const T *x, T *y, int64_t total, dlk_pool p) {
    const int h = p.h, w = p.w, kh = p.kh, kw = p.kw, sh = p.sh, sw = p.sw;
    const int pt = p.pt, pl = p.pl, dh = p.dh, dw = p.dw;
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        const PoolAt at = pool_at(p, i);
        const int ox = at.ox, oy = at.oy, step = at.step;
        const T *src = x + at.base;
        int y0 = oy * sh - pt, x0 = ox * sw - pl;
        float m = -FLT_MAX; /* taps y0 + r*dh, x0 + c*dw inside the image */
        for (int r = 0; r < kh; r++) {
            int yy = y0 + r * dh;
            if (yy < 0 || yy >= h) continue;
            for (int c = 0; c < kw; c++) {
                int xx = x0 + c * dw;
                if (xx < 0 || xx >= w) continue;
                float v = to_f(src[((int64_t)yy * w + xx) * step]);
                m = (v > m || v != v) ? v : m;
            }
        }
        y[i] = from_f<T>(m);
    }
}

template <class T> __global__ void avgpool_k(const T *x, T *y, int64_t total, dlk_pool p) {
    const int h = p.h, w = p.w, kh = p.kh, kw = p.kw, sh = p.sh, sw = p.sw;
    const int pt = p.pt, pl = p.pl, pb = p.pb, pr = p.pr, cip = p.count_include_pad;
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        const PoolAt at = pool_at(p, i);
        const int ox = at.ox, oy = at.oy, step = at.step;
        const T *src = x + at.base;
        int y0 = oy * sh - pt, y1 = min(y0 + kh, h + pb), x0 = ox * sw - pl, x1 = min(x0 + kw, w + pr);
        int full = (y1 - y0) * (x1 - x0);
        y0 = max(y0, 0), y1 = min(y1, h), x0 = max(x0, 0), x1 = min(x1, w);
        float s = 0.f;
        for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++) s += to_f(src[((int64_t)yy * w + xx) * step]);
        int count = cip ? full : (y1 - y0) * (x1 - x0);
        y[i] = from_f<T>(count > 0 ? s / count : 0.f);
    }
}

/* one block of THREADS per plane: strided partial sums, then a tree reduction in shared memory */
template <class T> __global__ void global_avgpool_k(const T *x, T *y, int64_t plane) {
    __shared__ float part[THREADS];
    const T *src = x + blockIdx.x * plane;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) s += to_f(src[i]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if ((int)threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = from_f<T>(part[0] / (float)plane);
}

/* channels-last: one thread per (image, channel) output, walking the image's pixels; neighbouring
 * threads read neighbouring channels */
template <class T> __global__ void global_avgpool_cl_k(const T *x, T *y, int64_t planes, int64_t plane, int c) {
    for (int64_t i = grid_first(); i < planes; i += grid_step()) {
        const T *src = x + i / c * plane * c + i % c;
        float s = 0.f;
        for (int64_t q = 0; q < plane; q++) s += to_f(src[q * c]);
        y[i] = from_f<T>(s / (float)plane);
    }
}

} // namespace

extern "C" int dlk_maxpool(const dlk_pool *p, int type, const void *x, void *y, cudaStream_t s) {
    int64_t total = p->planes * p->oh * p->ow;
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        maxpool_k<T><<<grid_for(total), THREADS, 0, s>>>((const T *)x, (T *)y, total, *p);
        return launched();
    });
}

extern "C" int dlk_avgpool(const dlk_pool *p, int type, const void *x, void *y, cudaStream_t s) {
    int64_t total = p->planes * p->oh * p->ow;
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        avgpool_k<T><<<grid_for(total), THREADS, 0, s>>>((const T *)x, (T *)y, total, *p);
        return launched();
    });
}

extern "C" int dlk_global_avgpool(int type, const void *x, void *y, int64_t planes, int64_t plane, int c, int cl,
                                  cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        if (planes > 0 && cl && plane > 1)
            global_avgpool_cl_k<T><<<grid_for(planes), THREADS, 0, s>>>((const T *)x, (T *)y, planes, plane, c);
        else if (planes > 0) global_avgpool_k<T><<<(unsigned)planes, THREADS, 0, s>>>((const T *)x, (T *)y, plane);
        return launched();
    });
}
