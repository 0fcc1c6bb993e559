// pool.cu — the cuda plugin's pooling kernels: max pooling (with dilation; NaN propagates),
// average pooling (pads counted only with count_include_pad) and global average pooling. NCHW;
// templates on the storage type T (loads widen to float, sums are float, stores round).
#include <cfloat>

#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

template <class T> __global__ void maxpool_k(const T *x, T *y, int64_t total, dlk_pool p) {
    const int h = p.h, w = p.w, oh = p.oh, ow = p.ow, kh = p.kh, kw = p.kw, sh = p.sh, sw = p.sw;
    const int pt = p.pt, pl = p.pl, dh = p.dh, dw = p.dw;
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        int ox = (int)(i % ow), oy = (int)((i / ow) % oh);
        const T *src = x + (i / ((int64_t)oh * ow)) * h * w;
        int y0 = oy * sh - pt, x0 = ox * sw - pl;
        float m = -FLT_MAX; /* taps y0 + r*dh, x0 + c*dw inside the image */
        for (int r = 0; r < kh; r++) {
            int yy = y0 + r * dh;
            if (yy < 0 || yy >= h) continue;
            for (int c = 0; c < kw; c++) {
                int xx = x0 + c * dw;
                if (xx < 0 || xx >= w) continue;
                float v = to_f(src[yy * w + xx]);
                m = (v > m || v != v) ? v : m;
            }
        }
        y[i] = from_f<T>(m);
    }
}

template <class T> __global__ void avgpool_k(const T *x, T *y, int64_t total, dlk_pool p) {
    const int h = p.h, w = p.w, oh = p.oh, ow = p.ow, kh = p.kh, kw = p.kw, sh = p.sh, sw = p.sw;
    const int pt = p.pt, pl = p.pl, pb = p.pb, pr = p.pr, cip = p.count_include_pad;
    for (int64_t i = grid_first(); i < total; i += grid_step()) {
        int ox = (int)(i % ow), oy = (int)((i / ow) % oh);
        const T *src = x + (i / ((int64_t)oh * ow)) * h * w;
        int y0 = oy * sh - pt, y1 = min(y0 + kh, h + pb), x0 = ox * sw - pl, x1 = min(x0 + kw, w + pr);
        int full = (y1 - y0) * (x1 - x0);
        y0 = max(y0, 0), y1 = min(y1, h), x0 = max(x0, 0), x1 = min(x1, w);
        float s = 0.f;
        for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++) s += to_f(src[yy * w + xx]);
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

extern "C" int dlk_global_avgpool(int type, const void *x, void *y, int64_t planes, int64_t plane, cudaStream_t s) {
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        if (planes > 0) global_avgpool_k<T><<<(unsigned)planes, THREADS, 0, s>>>((const T *)x, (T *)y, plane);
        return launched();
    });
}
