// conv3d.cu — the cuda plugin's 3-D convolution (ABI 1.7, PyTorch's Conv3d: stride, padding
// before and after, dilation, groups, bias, fused relu), a direct kernel: one thread per output
// element sums, in float, its group's input channels times the weights over every tap whose input
// position lies inside x (dlk_conv_src in cuda_params.h, shared with the host test; taps in the
// padding are skipped), then adds the bias and applies relu, as plugins/cpu/ops/conv3d.c computes
// it by im2col and GEMM. Correct first: not tiled, no shared memory, no implicit GEMM. A template on
// the storage type T (f32, f16, bf16): loads widen to float, the store rounds.
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

// The sum for output (img, oc, oz, oy, ox), bias and relu left out: for each tap inside the input,
// the group's cg input channels at the input position it reads times the tap's weights.
template <class T>
__device__ float conv3d_sum(const T *x, const T *w, const dlk_conv3d_p &p, int64_t img, int64_t oc, int64_t oz,
                            int64_t oy, int64_t ox) {
    const int64_t g = oc / p.ocg, vol = p.d * p.h * p.w, taps = (int64_t)p.kd * p.kh * p.kw;
    const T *xg = x + (img * p.c + g * p.cg) * vol; // the group's first input channel
    const T *wo = w + oc * p.cg * taps;             // weight [oc][ci][tz][ty][tx] at ci = 0
    float acc = 0.f;
    for (int tz = 0; tz < p.kd; tz++) {
        int64_t iz;
        if (!dlk_conv_src(oz, tz, p.sd, p.pd, p.dd, p.d, &iz)) continue;
        for (int ty = 0; ty < p.kh; ty++) {
            int64_t iy;
            if (!dlk_conv_src(oy, ty, p.sh, p.ph, p.dh, p.h, &iy)) continue;
            for (int tx = 0; tx < p.kw; tx++) {
                int64_t ix;
                if (!dlk_conv_src(ox, tx, p.sw, p.pw, p.dw, p.w, &ix)) continue;
                const T *xp = xg + (iz * p.h + iy) * p.w + ix, *wp = wo + (tz * p.kh + ty) * p.kw + tx;
                for (int64_t ci = 0; ci < p.cg; ci++) acc = fmaf(to_f(xp[ci * vol]), to_f(wp[ci * taps]), acc);
            }
        }
    }
    return acc;
}

template <class T> __global__ void conv3d_k(const T *x, const T *w, const T *b, T *y, dlk_conv3d_p p) {
    for (int64_t i = grid_first(); i < p.numel; i += grid_step()) {
        const int64_t ox = i % p.ow, oy = i / p.ow % p.oh, oz = i / (p.ow * p.oh) % p.od,
                      oc = i / (p.ow * p.oh * p.od) % p.oc, img = i / (p.ow * p.oh * p.od * p.oc);
        float v = conv3d_sum(x, w, p, img, oc, oz, oy, ox);
        if (b) v += to_f(b[oc]);
        if (p.relu && v < 0.f) v = 0.f;
        y[i] = from_f<T>(v);
    }
}

} // namespace

extern "C" int dlk_conv3d(const dlk_conv3d_p *p, int type, const void *x, const void *w, const void *b, void *y,
                          cudaStream_t s) {
    if (p->numel <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        conv3d_k<T><<<grid_for(p->numel), THREADS, 0, s>>>((const T *)x, (const T *)w, (const T *)b, (T *)y, *p);
        return launched();
    });
}
