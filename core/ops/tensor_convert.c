/* tensor_convert.c — dtype and layout conversion of host tensors (see tensor_convert.h). Casts
 * are contiguous loops; a layout change of f32 transposes each image in tiles (SSE shuffles for an
 * RGB image to NHWC), of other dtypes walks the pixels in order, each pixel's channels inside. */
#include "tensor_convert.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

int dl_dtype_is_float(dl_dtype d) {
    return dl_dtype_eq(d, DL_F32) || dl_dtype_eq(d, DL_F16) || dl_dtype_eq(d, DL_BF16);
}

const char *dl_dtype_name(dl_dtype d) {
    if (dl_dtype_eq(d, DL_F32)) return "f32";
    if (dl_dtype_eq(d, DL_F16)) return "f16";
    if (dl_dtype_eq(d, DL_BF16)) return "bf16";
    return "?";
}

static float load(const void *p, dl_dtype t, int64_t i) {
    if (t.bits == 32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t.code == DL_DTYPE_BFLOAT ? dl_bf16_to_f32(h) : dl_f16_to_f32(h);
}

static void store(void *p, dl_dtype t, int64_t i, float v) {
    if (t.bits == 32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t.code == DL_DTYPE_BFLOAT ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}

int dl_convert_elements(void *dst, dl_dtype dt, const void *src, dl_dtype st, int64_t n) {
    if (!dl_dtype_is_float(dt) || !dl_dtype_is_float(st)) return 0;
    if (dl_dtype_eq(dt, st)) {
        memmove(dst, src, (size_t)n * dl_dtype_size(dt));
        return 1;
    }
    if (dl_dtype_is_f32(st)) { /* the common casts get their own loops */
        const float *x = src;
        uint16_t *y = dst;
        if (dt.code == DL_DTYPE_BFLOAT)
            for (int64_t i = 0; i < n; i++) y[i] = dl_f32_to_bf16(x[i]);
        else
            for (int64_t i = 0; i < n; i++) y[i] = dl_f32_to_f16(x[i]);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) store(dst, dt, i, load(src, st, i));
    return 1;
}

/* d = the transpose of s, rows x cols: d[j * rows + i] = s[i * cols + j]. In tiles of 32 x 32
 * (4 KiB read, 4 KiB written: both in L1), each 4 x 4 of a tile transposed in registers (SSE):
 * walking one pixel's channels at a time wrote each float to another line of the planes (NHWC to
 * NCHW), 1.4 GB/s for 64 x 112 x 112. */
static void transpose_tiles(float *d, const float *s, int64_t rows, int64_t cols) {
    enum { T = 32 };
    for (int64_t i0 = 0; i0 < rows; i0 += T)
        for (int64_t j0 = 0; j0 < cols; j0 += T) {
            const int64_t i1 = i0 + T < rows ? i0 + T : rows, j1 = j0 + T < cols ? j0 + T : cols;
            int64_t i = i0;
#if defined(__SSE2__)
            for (; i + 4 <= i1; i += 4) {
                int64_t j = j0;
                for (; j + 4 <= j1; j += 4) {
                    __m128 r0 = _mm_loadu_ps(s + i * cols + j), r1 = _mm_loadu_ps(s + (i + 1) * cols + j);
                    __m128 r2 = _mm_loadu_ps(s + (i + 2) * cols + j), r3 = _mm_loadu_ps(s + (i + 3) * cols + j);
                    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                    _mm_storeu_ps(d + j * rows + i, r0);
                    _mm_storeu_ps(d + (j + 1) * rows + i, r1);
                    _mm_storeu_ps(d + (j + 2) * rows + i, r2);
                    _mm_storeu_ps(d + (j + 3) * rows + i, r3);
                }
                for (; j < j1; j++)
                    for (int64_t k = i; k < i + 4; k++) d[j * rows + k] = s[k * cols + j];
            }
#endif
            for (; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) d[j * rows + i] = s[i * cols + j];
        }
}

/* One f32 image [c, hw] <-> [hw, c], with no dtype dispatch per element (1.3-1.7 ms for 8 images
 * of 16 x 112 x 112 against 2.5-2.8 through load() and store(), the 2-core AMD EPYC VM). */
static void transpose_f32(float *d, const float *s, int64_t c, int64_t hw, int to_last) {
    int64_t p = 0;
#if defined(__SSE2__)
    /* An RGB image to NHWC, the input of every channels-last CNN (3-4 % of MobileNetV2's or
     * SqueezeNet's run at batch 1): four pixels of each plane, r0..r3 g0..g3 b0..b3, become
     * r0 g0 b0 r1 | g1 b1 r2 g2 | b2 r3 g3 b3. 0.012 ms for 224 x 224 against 0.059 below (a standalone
     * loop; in dlrun's profile 0.015 against 0.052). */
    if (c == 3 && to_last) {
        const float *r = s, *g = s + hw, *b = s + 2 * hw;
        for (; p + 4 <= hw; p += 4) {
            const __m128 x = _mm_loadu_ps(r + p), y = _mm_loadu_ps(g + p), z = _mm_loadu_ps(b + p);
            const __m128 lo = _mm_unpacklo_ps(x, y), hi = _mm_unpackhi_ps(x, y); /* r0 g0 r1 g1, r2 g2 r3 g3 */
            const __m128 b0r1 = _mm_shuffle_ps(z, lo, _MM_SHUFFLE(2, 2, 0, 0));  /* b0 b0 r1 r1 */
            const __m128 g1b1 = _mm_shuffle_ps(lo, z, _MM_SHUFFLE(1, 1, 3, 3));  /* g1 g1 b1 b1 */
            const __m128 b2r3 = _mm_shuffle_ps(z, hi, _MM_SHUFFLE(2, 2, 2, 2));  /* b2 b2 r3 r3 */
            const __m128 g3b3 = _mm_shuffle_ps(hi, z, _MM_SHUFFLE(3, 3, 3, 3));  /* g3 g3 b3 b3 */
            _mm_storeu_ps(d + 3 * p, _mm_shuffle_ps(lo, b0r1, _MM_SHUFFLE(2, 0, 1, 0)));
            _mm_storeu_ps(d + 3 * p + 4, _mm_shuffle_ps(g1b1, hi, _MM_SHUFFLE(1, 0, 2, 0)));
            _mm_storeu_ps(d + 3 * p + 8, _mm_shuffle_ps(b2r3, g3b3, _MM_SHUFFLE(2, 0, 2, 0)));
        }
    }
    if (p == hw) return;
#endif
    if (to_last && c == 3) { /* the pixels the SSE loop above left (or all, without SSE) */
        for (; p < hw; p++)
            for (int64_t k = 0; k < c; k++) d[p * c + k] = s[k * hw + p];
        return;
    }
    if (to_last) transpose_tiles(d, s, c, hw);
    else transpose_tiles(d, s, hw, c);
}

int dl_convert_host(const dl_tensor *dst, const dl_tensor *src) {
    dl_layout dl = dl_tensor_layout(dst), sl = dl_tensor_layout(src);
    if (dl == DL_LAYOUT_OTHER || sl == DL_LAYOUT_OTHER || dst->ndim != src->ndim) return 0;
    if (!dl_dtype_is_float(dst->dtype) || !dl_dtype_is_float(src->dtype)) return 0;
    for (int i = 0; i < dst->ndim; i++)
        if (dst->shape[i] != src->shape[i]) return 0;
    const char *s = (const char *)src->data + src->byte_offset;
    char *d = (char *)dst->data + dst->byte_offset;
    if (dl == sl) return dl_convert_elements(d, dst->dtype, s, src->dtype, dl_tensor_numel(src));
    /* NCHW <-> NHWC: for each image, element (c, p) of the [C, HW] view is element (p, c) of [HW, C] */
    int64_t n = src->shape[0], c = src->shape[1], hw = src->shape[2] * src->shape[3];
    int to_last = dl == DL_LAYOUT_CHANNELS_LAST;
    if (dl_dtype_eq(dst->dtype, DL_F32) && dl_dtype_eq(src->dtype, DL_F32)) {
        for (int64_t b = 0; b < n; b++) /* each image a rows x cols matrix, transposed */
            transpose_f32((float *)d + b * c * hw, (const float *)s + b * c * hw, c, hw, to_last);
        return 1;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t p = 0; p < hw; p++)
            for (int64_t k = 0; k < c; k++) {
                int64_t rm = b * c * hw + k * hw + p, cl = b * c * hw + p * c + k;
                store(d, dst->dtype, to_last ? cl : rm, load(s, src->dtype, to_last ? rm : cl));
            }
    return 1;
}
