/* image.c — images as model inputs: decodes an image file (PNG, JPEG, BMP, PNM) with stb_image,
 * converts its channels, resizes it with stb_image_resize (triangle filter: bilinear, averaging
 * over the footprint when shrinking), centre-crops it and normalizes it as the model's
 * `preprocess:` says, into the [1, C, H, W] f32 tensor of one image (docs/images.md).
 *
 * stb is compiled into this file rather than linked as a shared library: the decoders are what a
 * hostile file reaches, so they are built with our flags, which puts them under the ASan/UBSan
 * test build and gives the fuzz build's libFuzzer coverage of them (an uninstrumented libstb.so is
 * opaque to both); only the four formats dlrun reads are compiled (no GIF, TGA, PSD, HDR, PIC
 * decoders to attack); STBI_MAX_DIMENSIONS makes stb itself refuse a side over DL_IMAGE_MAX_SIDE;
 * and libdlrun needs no libstb at run time. stb_image.h is upstream's v2.30, vendored in
 * third_party/stb/ (its README says why: Debian 12's v2.27 overflows a JPEG Huffman table, which
 * fuzz_image found at once); stb_image_resize.h is Debian's (libstb-dev). The image's size is read
 * from its header (stbi_info) and checked before stb decodes anything. libdlrun is built with
 * hidden visibility, so nothing of stb is exported (STB_IMAGE_STATIC would leave the calls of the
 * formats compiled out declared static and never defined, a warning). stb keeps no state between
 * calls but the failure reason, which is thread-local: decoding is safe on any number of threads.
 * The sanitizer builds compile this file without UBSan's nonnull-attribute check (core/CMakeLists.txt):
 * stb_image passes memcpy a NULL destination with a length of 0 for an empty PNG IDAT chunk. */
#define _POSIX_C_SOURCE 200809L
#include "image.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/dlrun.h"
#include "files.h"
#include "session.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO /* dlrun opens and reads the file itself (files.h: never blocks on a FIFO) */
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_PNM
#define STBI_MAX_DIMENSIONS DL_IMAGE_MAX_SIDE
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
/* stb_image_resize's asserts check its own float arithmetic (a downsampling filter's weights adding
 * up to within 10% of 1, which extreme ratios of a hostile image's size miss, and which the next
 * line renormalizes anyway); they are compiled out of release builds, so that a Debug build does
 * not abort where a release build (and the fuzz build, which runs it under ASan) carries on. */
#define STBIR_ASSERT(x) ((void)0)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include "stb_image.h" /* third_party/stb: v2.30 */
#include <stb/stb_image_resize.h>
#pragma GCC diagnostic pop

int dl_preprocess_channels(const dl_preprocess *p, int64_t c) {
    switch (p->channels) {
    case DL_IMAGE_GRAY: return c == 1 ? 1 : 0;
    case DL_IMAGE_RGB:
    case DL_IMAGE_BGR: return c == 3 ? 3 : 0;
    default: return c == 1 || c == 3 ? (int)c : 0;
    }
}

void dl_preprocess_size(const dl_preprocess *p, int64_t h, int64_t w, int64_t *out_h, int64_t *out_w) {
    if (p->crop_h) *out_h = p->crop_h, *out_w = p->crop_w;
    else if (p->resize_h) *out_h = p->resize_h, *out_w = p->resize_w;
    else if (p->resize_short) *out_h = *out_w = 0;
    else *out_h = h, *out_w = w;
}

/* The offset of a centred crop of `keep` out of `size`: (size - keep) / 2 rounded half to even,
 * as torchvision's center_crop rounds it (Python's round). */
static int64_t centre(int64_t size, int64_t keep) {
    int64_t d = size - keep, o = d / 2;
    return d % 2 && o % 2 ? o + 1 : o;
}

/* The size an ih x iw image is resized to (*rh x *rw), before any crop. */
static void resized_size(const dl_preprocess *p, int64_t ih, int64_t iw, int64_t h, int64_t w, int64_t *rh,
                         int64_t *rw) {
    if (p->resize_h) *rh = p->resize_h, *rw = p->resize_w;
    else if (p->resize_short && ih <= iw) *rh = p->resize_short, *rw = p->resize_short * iw / ih;
    else if (p->resize_short) *rw = p->resize_short, *rh = p->resize_short * ih / iw;
    else if (p->crop_h) *rh = ih, *rw = iw; /* a crop alone: from the image as it is */
    else *rh = h, *rw = w;
}

/* The most pixels one byte of a whole file in this format can hold: more in the header means a
 * file cut short (stb_image reads a BMP or JPEG cut in its pixels as black) or made to have us
 * decode and resize a huge image from a few bytes (fuzz_image: a 270-byte BMP claiming 2057 x 9479
 * pixels took over 10 s). BMP: stb_image reads no RLE, so 1 bit a pixel at least. PNM (P5, P6): a
 * byte a pixel. JPEG: each 8x8 block needs at least a 1-bit DC code. PNG: 1-bit pixels, and
 * deflate expands a byte 1032 times at most. */
static int64_t max_pixels_per_byte(const unsigned char *b, size_t len) {
    if (len >= 2 && b[0] == 'B' && b[1] == 'M') return 8;
    if (len >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) return 1;
    if (len >= 2 && b[0] == 0xFF && b[1] == 0xD8) return 512;
    return 8 * 1032;
}

/* stb's reason for a failure, printable: a PNG chunk's reason carries the chunk's 4 type bytes
 * as they are in the file (any byte, a newline among them), and errors are one line. */
static const char *stb_reason(char *buf, size_t len) {
    const char *r = stbi_failure_reason();
    size_t i = 0;
    for (; r && r[i] && i + 1 < len; i++) buf[i] = r[i] >= 0x20 && r[i] < 0x7f ? r[i] : '?';
    buf[i] = 0;
    return r ? buf : NULL;
}

dl_status dl_image_decode(const dl_preprocess *p, const void *bytes, size_t len, const char *what, int64_t c, int64_t h,
                          int64_t w, float *out, dl_error *err) {
    int want = dl_preprocess_channels(p, c);
    if (!want) {
        if (p->channels == DL_IMAGE_GRAY || (p->channels != DL_IMAGE_AUTO && c != 3))
            return dl_fail(err, DL_E_INVALID, "%s: the input has %lld channels; preprocess gives %d", what,
                           (long long)c, p->channels == DL_IMAGE_GRAY ? 1 : 3);
        return dl_fail(err, DL_E_INVALID, "%s: the input has %lld channels; an image gives 1 (gray) or 3 (rgb)", what,
                       (long long)c);
    }
    if (len > INT_MAX) return dl_fail(err, DL_E_INVALID, "%s: image file larger than 2 GiB", what);
    int iw = 0, ih = 0, comp = 0;
    if (!stbi_info_from_memory(bytes, (int)len, &iw, &ih, &comp)) {
        /* stbi_info's reason is its last probe's ("unknown image type"); loading names what is
         * wrong in the format the file has: it reads the same header first, and fails there */
        unsigned char *px = stbi_load_from_memory(bytes, (int)len, &iw, &ih, &comp, 1);
        char reason[64];
        const char *why = px ? "inconsistent header" : stb_reason(reason, sizeof reason);
        stbi_image_free(px);
        if (!why || !strcmp(why, "unknown image type"))
            return dl_fail(err, DL_E_INVALID, "%s: not an image dlrun reads (PNG, JPEG, BMP, PNM)", what);
        return dl_fail(err, DL_E_INVALID, "%s: corrupt or too large image: %s", what, why);
    }
    if (iw < 1 || ih < 1 || iw > DL_IMAGE_MAX_SIDE || ih > DL_IMAGE_MAX_SIDE || (int64_t)iw * ih > DL_IMAGE_MAX_PIXELS)
        return dl_fail(err, DL_E_INVALID, "%s: image of %dx%d pixels; at most %d a side and %d in all", what, iw, ih,
                       DL_IMAGE_MAX_SIDE, DL_IMAGE_MAX_PIXELS);
    if ((int64_t)iw * ih > (int64_t)len * max_pixels_per_byte(bytes, len))
        return dl_fail(err, DL_E_INVALID, "%s: a %dx%d image cannot fit in a file of %zu bytes: the file is cut short",
                       what, iw, ih, len);
    int64_t rh = 0, rw = 0;
    resized_size(p, ih, iw, h, w, &rh, &rw);
    if (rh < 1 || rw < 1 || rh > DL_IMAGE_MAX_SIDE || rw > DL_IMAGE_MAX_SIDE || rh * rw > DL_IMAGE_MAX_PIXELS)
        return dl_fail(err, DL_E_INVALID, "%s: a %dx%d image resized to %lldx%lld; at most %d a side and %d in all",
                       what, iw, ih, (long long)rw, (long long)rh, DL_IMAGE_MAX_SIDE, DL_IMAGE_MAX_PIXELS);
    int64_t ch = p->crop_h ? p->crop_h : rh, cw = p->crop_h ? p->crop_w : rw;
    if (ch > rh || cw > rw)
        return dl_fail(err, DL_E_INVALID, "%s: the image is %lldx%lld (width x height), smaller than crop [%lld, %lld]",
                       what, (long long)rw, (long long)rh, (long long)ch, (long long)cw);
    if (ch != h || cw != w)
        return dl_fail(err, DL_E_INVALID, "%s: preprocess makes %lldx%lld images; the input is %lldx%lld", what,
                       (long long)ch, (long long)cw, (long long)h, (long long)w);

    int dw = 0, dh = 0;
    unsigned char *px = stbi_load_from_memory(bytes, (int)len, &dw, &dh, &comp, want);
    char reason[64];
    if (!px)
        return dl_fail(err, DL_E_INVALID, "%s: cannot decode the image: %s", what, stb_reason(reason, sizeof reason));
    if (dw != iw || dh != ih) { /* the header read twice must agree */
        stbi_image_free(px);
        return dl_fail(err, DL_E_INVALID, "%s: cannot decode the image: its size changed", what);
    }
    if (rh != ih || rw != iw) { /* the same size is left as it is: resizing it would be the identity */
        unsigned char *sized = malloc((size_t)(rh * rw * want));
        int ok = sized &&
                 stbir_resize_uint8_generic(px, iw, ih, 0, sized, (int)rw, (int)rh, 0, want, STBIR_ALPHA_CHANNEL_NONE,
                                            0, STBIR_EDGE_CLAMP, STBIR_FILTER_TRIANGLE, STBIR_COLORSPACE_LINEAR, NULL);
        stbi_image_free(px);
        if (!ok) {
            free(sized);
            return dl_fail(err, DL_E_NOMEM, "%s: out of memory resizing the image to %lldx%lld", what, (long long)rw,
                           (long long)rh);
        }
        px = sized;
    }
    /* px is rh x rw x want bytes, from stbi_image_free's allocator or ours: both are malloc */
    int64_t top = centre(rh, ch), left = centre(rw, cw);
    double scale = p->scale > 0 ? p->scale : 1.0 / 255.0;
    for (int k = 0; k < want; k++) {
        int src = p->channels == DL_IMAGE_BGR ? want - 1 - k : k;
        double mean = p->n_mean ? p->mean[k] : 0.0, std = p->n_std ? p->std[k] : 1.0;
        float *dst = out + (size_t)k * (size_t)(h * w);
        for (int64_t y = 0; y < h; y++) {
            const unsigned char *row = px + ((top + y) * rw + left) * want;
            for (int64_t x = 0; x < w; x++)
                dst[y * w + x] = (float)(((double)row[x * want + src] * scale - mean) / std);
        }
    }
    free(px);
    return DL_OK;
}

/* ---- the public calls (dlrun.h) ---- */

dl_status dl_image_load(const dl_model *m, int input, const char *path, float **data, int64_t *shape, int *ndim,
                        dl_error *err) {
    *data = NULL;
    *ndim = 0;
    if (!m || input < 0 || input >= m->g->n_inputs)
        return dl_fail(err, DL_E_INVALID, "%s: no model input %d", path, input);
    const dl_value *v = &m->g->values[m->g->inputs[input]];
    if (v->shape.ndim != 4 || !dl_dtype_is_f32(v->dtype))
        return dl_fail(err, DL_E_INVALID, "%s: input '%s' is not a 4-D f32 input [N, C, H, W] an image could feed",
                       path, v->name);
    int64_t c = v->shape.d[1], h = v->shape.d[2], w = v->shape.d[3];
    if (c < 1 || c > 3 || h * w > DL_IMAGE_MAX_PIXELS)
        return dl_fail(err, DL_E_INVALID, "%s: input '%s' is [N, %lld, %lld, %lld]; an image gives 1 or 3 channels",
                       path, v->name, (long long)c, (long long)h, (long long)w);
    void *buf;
    size_t len;
    dl_status st = dl_read_regular(path, DL_IMAGE_MAX_FILE, "image file", &buf, &len, err);
    if (st != DL_OK) return st;
    float *x = malloc((size_t)(c * h * w) * sizeof *x);
    if (!x) st = dl_fail(err, DL_E_NOMEM, "out of memory");
    else st = dl_image_decode(&m->g->pre, buf, len, path, c, h, w, x, err);
    free(buf);
    if (st != DL_OK) {
        free(x);
        return st;
    }
    shape[0] = 1, shape[1] = c, shape[2] = h, shape[3] = w;
    *ndim = 4;
    *data = x;
    return DL_OK;
}
