// conv_transpose.cu — the cuda plugin's transposed 2-D convolution (ABI 1.4, PyTorch's
// ConvTranspose2d: stride, padding, output_padding, dilation, groups, bias, fused relu), a direct
// kernel: one thread per output element sums, in float, every (input pixel, tap) pair that lands
// on it (dlk_deconv_src in cuda_params.h, shared with the host test), then adds the bias and
// applies relu, as plugins/cpu/ops/conv_transpose.c computes it by GEMM and col2im. No scatter, so
// no atomics and every output written once. Correct first: not tiled, no shared memory; a tap whose
// stride residue misses the output is skipped by a test, not stepped over. A template on the
// storage type T (f32, f16, bf16): loads widen to float, the store rounds.
#include "launch.cuh"

namespace {

using namespace dlk;
using dlg::from_f;
using dlg::to_f;

// The sum for output (img, oc, oy, ox), bias and relu left out: for each tap that lands here, the
// group's cg input channels at that input pixel times the tap's weights.
template <class T>
__device__ float deconv_sum(const T *x, const T *w, const dlk_deconv_p &p, int64_t img, int64_t oc, int64_t oy,
                            int64_t ox) {
    const int64_t g = oc / p.ocg, o = oc % p.ocg, plane = p.h * p.w, taps = (int64_t)p.kh * p.kw;
    const T *xg = x + (img * p.c + g * p.cg) * plane; // the group's first input channel
    const T *wg = w + (g * p.cg * p.ocg + o) * taps;  // weight [g * cg + ci][o][ty][tx] at ci = 0
    const int64_t wstep = p.ocg * taps;               // to the next input channel's weights
    float acc = 0.f;
    for (int ty = 0; ty < p.kh; ty++) {
        int64_t iy;
        if (!dlk_deconv_src(oy, ty, p.sh, p.ph, p.dh, p.h, &iy)) continue;
        for (int tx = 0; tx < p.kw; tx++) {
            int64_t ix;
            if (!dlk_deconv_src(ox, tx, p.sw, p.pw, p.dw, p.w, &ix)) continue;
            const T *xp = xg + iy * p.w + ix, *wp = wg + ty * p.kw + tx;
            for (int64_t ci = 0; ci < p.cg; ci++) acc = fmaf(to_f(xp[ci * plane]), to_f(wp[ci * wstep]), acc);
        }
    }
    return acc;
}

template <class T> __global__ void deconv_k(const T *x, const T *w, const T *b, T *y, dlk_deconv_p p) {
    for (int64_t i = grid_first(); i < p.numel; i += grid_step()) {
        const int64_t ox = i % p.ow, oy = i / p.ow % p.oh, oc = i / (p.ow * p.oh) % p.oc,
                      img = i / (p.ow * p.oh * p.oc);
        float v = deconv_sum(x, w, p, img, oc, oy, ox);
        if (b) v += to_f(b[oc]);
        if (p.relu && v < 0.f) v = 0.f;
        y[i] = from_f<T>(v);
    }
}

} // namespace

extern "C" int dlk_conv_transpose2d(const dlk_deconv_p *p, int type, const void *x, const void *w, const void *b,
                                    void *y, cudaStream_t s) {
    if (p->numel <= 0) return launched();
    return dlg::by_type(type, [&](auto z) {
        using T = decltype(z);
        deconv_k<T><<<grid_for(p->numel), THREADS, 0, s>>>((const T *)x, (const T *)w, (const T *)b, (T *)y, *p);
        return launched();
    });
}
