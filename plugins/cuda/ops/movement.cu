// movement.cu — the cuda plugin's kernels that move elements (ABI 1.4): transpose and slice (one
// strided gather: each output element's input offset from per-output-dimension strides and a
// base offset computed at prepare, cuda_params.c), pad (constant, reflect, edge), resize
// (nearest and linear, ONNX Resize's coordinate rules in double, as plugins/cpu/ops/movement.c)
// and gather (ONNX Gather by int64 indices; an index out of range reads nothing and is noted for
// the plugin's synchronize). One thread per output element, writes coalesced; the index math is
// cuda_params.h's, shared with the host test. Gathers copy elements as they are; pad and resize
// are templates on the storage type T (pad converts its fill, linear resize interpolates in float).
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

// E: an unsigned type of the element's size (no conversion, NaN payloads kept)
template <class E> __global__ void gather_k(const E *x, E *y, int64_t n, dlk_gather_p p) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) y[i] = x[p.base + dlk_offset(p.nd, p.ys, p.st, i)];
}

// The first bad index wins the record; the host reads it after the stream is done.
__device__ void note_bad_index(dlk_index_error *err, int64_t index, int64_t at, int64_t size) {
    if (atomicCAS(&err->bad, 0u, 1u) == 0u) err->index = index, err->at = at, err->size = size;
}

// gather: E as in gather_k; a bad index gives zero bits (+0 in every storage type)
template <class E> __global__ void take_k(const E *x, const int64_t *idx, E *y, dlk_take_p p, dlk_index_error *err) {
    for (int64_t i = grid_first(); i < p.numel; i += grid_step()) {
        int64_t at, src = dlk_take_source(&p, idx, i, &at);
        if (src >= 0) {
            y[i] = x[src];
        } else {
            note_bad_index(err, idx[at], at, p.n);
            y[i] = 0;
        }
    }
}

template <class T> __global__ void pad_k(const T *x, T *y, int64_t n, dlk_pad_p p) {
    const T fill = from_f<T>(p.value);
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        int64_t src = dlk_pad_source(&p, i);
        y[i] = src < 0 ? fill : x[src];
    }
}

// Linear: the four taps blended as the CPU plugin does (x first, then y), in float.
template <class T> __device__ float resize_linear(const T *plane, const dlk_resize_p &p, double cy, double cx) {
    int64_t y0, y1, x0, x1;
    float wy, wx;
    dl_resample_taps(cy, p.h, &y0, &y1, &wy);
    dl_resample_taps(cx, p.w, &x0, &x1, &wx);
    const T *r0 = plane + y0 * p.w, *r1 = plane + y1 * p.w;
    float a = to_f(r0[x0]), b = to_f(r0[x1]), c = to_f(r1[x0]), d = to_f(r1[x1]);
    float top = a + (b - a) * wx, bottom = c + (d - c) * wx;
    return top + (bottom - top) * wy;
}

template <class T> __global__ void resize_k(const T *x, T *y, int64_t n, dlk_resize_p p) {
    for (int64_t i = grid_first(); i < n; i += grid_step()) {
        int64_t ox = i % p.ow, oy = i / p.ow % p.oh;
        const T *plane = x + i / (p.ow * p.oh) * p.h * p.w;
        double cy = dl_resample_source(oy, p.h, p.oh, p.coord), cx = dl_resample_source(ox, p.w, p.ow, p.coord);
        if (p.mode == DL_RESIZE_LINEAR) y[i] = from_f<T>(resize_linear(plane, p, cy, cx));
        else y[i] = plane[dl_resample_nearest(cy, p.h, p.nearest) * p.w + dl_resample_nearest(cx, p.w, p.nearest)];
    }
}

} // namespace

extern "C" int dlk_gather(const dlk_gather_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s) {
    if (n <= 0) return launched();
    if (dl_gpu_type_size((dl_gpu_type)type) == 4)
        gather_k<uint32_t><<<grid_for(n), THREADS, 0, s>>>((const uint32_t *)x, (uint32_t *)y, n, *p);
    else gather_k<uint16_t><<<grid_for(n), THREADS, 0, s>>>((const uint16_t *)x, (uint16_t *)y, n, *p);
    return launched();
}

extern "C" int dlk_pad(const dlk_pad_p *p, int type, const void *x, void *y, int64_t n, cudaStream_t s) {
    if (n <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        pad_k<T><<<grid_for(n), THREADS, 0, s>>>((const T *)x, (T *)y, n, *p);
        return launched();
    });
}

extern "C" int dlk_resize(const dlk_resize_p *p, int type, const void *x, void *y, cudaStream_t s) {
    int64_t n = p->planes * p->oh * p->ow;
    if (n <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        resize_k<T><<<grid_for(n), THREADS, 0, s>>>((const T *)x, (T *)y, n, *p);
        return launched();
    });
}

extern "C" int dlk_take(const dlk_take_p *p, int type, const void *x, const int64_t *idx, void *y, dlk_index_error *err,
                        cudaStream_t s) {
    const int64_t n = p->numel;
    if (n <= 0) return launched();
    if (dl_gpu_type_size((dl_gpu_type)type) == 4)
        take_k<uint32_t><<<grid_for(n), THREADS, 0, s>>>((const uint32_t *)x, idx, (uint32_t *)y, *p, err);
    else take_k<uint16_t><<<grid_for(n), THREADS, 0, s>>>((const uint16_t *)x, idx, (uint16_t *)y, *p, err);
    return launched();
}
