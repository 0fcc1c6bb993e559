// softmax_concat.cu — the cuda plugin's softmax along an axis (max-subtracted, one thread per
// row) and the copy of one input of a concat into its place in the output.
#include "launch.cuh"

namespace {

using namespace dlk;

__global__ void softmax_k(const float *x, float *y, int64_t rows, int64_t len, int64_t inner) {
    for (int64_t r = grid_first(); r < rows; r += grid_step()) {
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
    for (int64_t i = grid_first(); i < total; i += grid_step()) y[(i / chunk) * row + offset + i % chunk] = x[i];
}

} // namespace

extern "C" int dlk_softmax(const dlk_softmax_p *p, const float *x, float *y, cudaStream_t s) {
    softmax_k<<<grid_for(p->outer * p->inner), THREADS, 0, s>>>(x, y, p->outer * p->inner, p->len, p->inner);
    return launched();
}

extern "C" int dlk_concat_part(const float *x, float *y, int64_t outer, int64_t chunk, int64_t row, int64_t offset,
                               cudaStream_t s) {
    int64_t total = outer * chunk;
    if (total > 0) concat_k<<<grid_for(total), THREADS, 0, s>>>(x, y, total, chunk, row, offset);
    return launched();
}
