/* test_image.c — images as inputs (core/src/image.c, docs/images.md): dl_image_load on PNG and BMP
 * files this test writes with known pixels, against a naive computation of what the model's
 * `preprocess:` says (channel order, gray weights, mean/std, scale, the centre crop's offsets);
 * malformed and oversized images give one line; `preprocess:` and `labels:` errors in the model
 * file; the label calls; and `dlrun --image` end to end. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dlrun/dlrun.h"
#include "model_yaml.h"
#include "test_util.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

#define SAMPLE(name) DLRUN_SOURCE_DIR "/models/samples/" name

/* ---- writing images and models ---- */

typedef struct membuf {
    unsigned char *p;
    size_t n;
} membuf;

static void to_mem(void *ctx, void *data, int size) {
    membuf *b = ctx;
    b->p = realloc(b->p, b->n + (size_t)size);
    cr_assert(b->p);
    memcpy(b->p + b->n, data, (size_t)size);
    b->n += (size_t)size;
}

/* The bytes of a file in the source tree. */
static membuf read_source(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", DLRUN_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    membuf b = {malloc(1 << 20), 0};
    b.n = fread(b.p, 1, 1 << 20, f);
    fclose(f);
    cr_assert(b.n > 0);
    return b;
}

/* A w x h image of `comp` channels (interleaved) as PNG (bmp = 0) or BMP (1) bytes; 2 and 3: the
 * fuzz seeds' baseline and progressive JPEGs (stb_image_write's JPEG writer has undefined
 * behaviour of its own, which the sanitizer build stops on). */
static membuf encode(const unsigned char *px, int w, int h, int comp, int bmp) {
    if (bmp >= 2)
        return read_source(bmp == 2 ? "tests/fuzz/corpus/image/baseline.jpg"
                                    : "tests/fuzz/corpus/image/progressive.jpg");
    membuf b = {0};
    int ok = bmp ? stbi_write_bmp_to_func(to_mem, &b, w, h, comp, px)
                 : stbi_write_png_to_func(to_mem, &b, w, h, comp, px, w * comp);
    cr_assert(ok && b.n > 0);
    return b;
}

static char *image_file(const unsigned char *px, int w, int h, int comp, int bmp) {
    membuf b = encode(px, w, h, comp, bmp);
    char *path = tu_write_temp(bmp ? ".bmp" : ".png", b.p, b.n);
    free(b.p);
    return path;
}

/* Pixel values that differ per position and channel. */
static unsigned char pattern(int x, int y, int c) { return (unsigned char)((x * 37 + y * 91 + c * 59 + 11) % 256); }

static unsigned char *pattern_image(int w, int h, int comp) {
    unsigned char *px = malloc((size_t)(w * h * comp));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comp; c++) px[(y * w + x) * comp + c] = pattern(x, y, c);
    return px;
}

/* A model with one input [1, c, h, w] and `extra` top-level YAML (preprocess:, labels:). */
static dl_model *model_with(int c, int h, int w, const char *extra) {
    char *text = NULL;
    cr_assert(asprintf(&text,
                       "model: m\ninputs:\n  - {name: x, shape: [1, %d, %d, %d]}\n%s\nlayers:\n  - {op: flatten}\n"
                       "  - {name: fc, op: linear, units: 4}\n",
                       c, h, w, extra) > 0);
    char *path = tu_write_temp(".yaml", text, strlen(text));
    dl_model *m = NULL;
    dl_error err = {{0}};
    cr_assert_eq(dl_model_load(path, &m, &err), DL_OK, "%s\n%s", err.msg, text);
    unlink(path);
    free(path);
    free(text);
    return m;
}

static float *load_ok(const dl_model *m, const char *path, int c, int h, int w) {
    float *x = NULL;
    int64_t shape[8];
    int nd = 0;
    dl_error err = {{0}};
    cr_assert_eq(dl_image_load(m, 0, path, &x, shape, &nd, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(nd, 4);
    cr_assert(shape[0] == 1 && shape[1] == c && shape[2] == h && shape[3] == w, "[%lld, %lld, %lld, %lld]",
              (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3]);
    return x;
}

/* ---- what the preprocess computes ---- */

Test(image, same_size_rgb_is_pixels_over_255_planar) {
    int w = 5, h = 4;
    unsigned char *px = pattern_image(w, h, 3);
    char *path = image_file(px, w, h, 3, 0);
    dl_model *m = model_with(3, h, w, ""); /* no preprocess: resize to H x W (the identity), / 255, rgb */
    float *x = load_ok(m, path, 3, h, w);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < h; y++)
            for (int i = 0; i < w; i++)
                cr_expect_float_eq(x[(c * h + y) * w + i], (float)(pattern(i, y, c) / 255.0), 1e-7, "c %d y %d x %d", c,
                                   y, i);
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
    free(px);
}

Test(image, bgr_mean_std_and_scale_as_documented) {
    int w = 3, h = 2;
    unsigned char *px = pattern_image(w, h, 3);
    char *path = image_file(px, w, h, 3, 1); /* BMP this time */
    dl_model *m =
        model_with(3, h, w, "preprocess: {channels: bgr, mean: [0.1, 0.2, 0.3], std: [0.5, 0.25, 2], scale: 0.5}");
    float *x = load_ok(m, path, 3, h, w);
    const double mean[3] = {0.1, 0.2, 0.3}, std[3] = {0.5, 0.25, 2};
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < h; y++)
            for (int i = 0; i < w; i++) {
                double want = (pattern(i, y, 2 - c) * 0.5 - mean[c]) / std[c]; /* channel 0 is blue */
                cr_expect(fabs(x[(c * h + y) * w + i] - want) <= 1e-5 * fabs(want) + 1e-6, "c %d: %g, want %g", c,
                          x[(c * h + y) * w + i], want);
            }
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
    free(px);
}

Test(image, gray_from_rgb_uses_the_documented_weights) {
    int w = 4, h = 3;
    unsigned char *px = pattern_image(w, h, 3);
    char *path = image_file(px, w, h, 3, 0);
    dl_model *m = model_with(1, h, w, "preprocess: {channels: gray, mean: [0.5], std: [0.25]}");
    float *x = load_ok(m, path, 1, h, w);
    for (int y = 0; y < h; y++)
        for (int i = 0; i < w; i++) {
            int r = pattern(i, y, 0), g = pattern(i, y, 1), b = pattern(i, y, 2);
            double want = (((77 * r + 150 * g + 29 * b) >> 8) / 255.0 - 0.5) / 0.25;
            cr_expect(fabs(x[y * w + i] - want) < 1e-5, "y %d x %d: %g, want %g", y, i, x[y * w + i], want);
        }
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
    free(px);
}

Test(image, gray_image_into_rgb_input_repeats_it) {
    int w = 3, h = 3;
    unsigned char *px = pattern_image(w, h, 1);
    char *path = image_file(px, w, h, 1, 0);
    dl_model *m = model_with(3, h, w, "");
    float *x = load_ok(m, path, 3, h, w);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < w * h; k++) cr_expect_float_eq(x[c * w * h + k], (float)(px[k] / 255.0), 1e-7);
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
    free(px);
}

/* crop without resize takes the centre, its offsets rounded half to even as torchvision's
 * center_crop: (5 - 2) / 2 = 1.5 -> 2, (6 - 3) / 2 = 1.5 -> 2, (7 - 2) / 2 = 2.5 -> 2 */
Test(image, centre_crop_offsets_as_torchvision) {
    static const int cases[][4] = {{6, 5, 3, 2}, {5, 5, 2, 2}, {7, 6, 3, 2}, {8, 8, 4, 4}}; /* w, h, crop h, crop w */
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int w = cases[t][0], h = cases[t][1], ch = cases[t][2], cw = cases[t][3];
        unsigned char *px = pattern_image(w, h, 1);
        char *path = image_file(px, w, h, 1, 0), extra[64];
        snprintf(extra, sizeof extra, "preprocess: {crop: [%d, %d]}", ch, cw);
        dl_model *m = model_with(1, ch, cw, extra);
        float *x = load_ok(m, path, 1, ch, cw);
        int dh = h - ch, dw = w - cw;
        int top = dh / 2 + (dh % 2 && (dh / 2) % 2), left = dw / 2 + (dw % 2 && (dw / 2) % 2);
        for (int y = 0; y < ch; y++)
            for (int i = 0; i < cw; i++)
                cr_expect_float_eq(x[y * cw + i], (float)(pattern(left + i, top + y, 0) / 255.0), 1e-7,
                                   "%dx%d crop [%d, %d]: y %d x %d", w, h, ch, cw, y, i);
        dl_free(x);
        dl_model_free(m);
        unlink(path);
        free(path);
        free(px);
    }
}

/* A uniform image stays uniform through any resize; resize: N keeps the aspect (the shorter side
 * to N, the longer truncated as torchvision's), then the crop takes the centre. */
Test(image, resize_then_crop) {
    int w = 40, h = 20;
    unsigned char *px = malloc((size_t)(w * h * 3));
    for (int k = 0; k < w * h; k++) px[3 * k] = 200, px[3 * k + 1] = 100, px[3 * k + 2] = 0;
    char *path = image_file(px, w, h, 3, 0);
    dl_model *m = model_with(3, 6, 6, "preprocess: {resize: 8, crop: 6}");
    float *x = load_ok(m, path, 3, 6, 6);
    for (int k = 0; k < 36; k++) {
        cr_expect_float_eq(x[k], (float)(200 / 255.0), 1e-6);
        cr_expect_float_eq(x[36 + k], (float)(100 / 255.0), 1e-6);
        cr_expect_float_eq(x[72 + k], 0.0f, 1e-6);
    }
    dl_free(x);
    dl_model_free(m);
    m = model_with(3, 9, 7, "preprocess: {resize: [9, 7]}"); /* upsampling one side, shrinking the other */
    x = load_ok(m, path, 3, 9, 7);
    for (int k = 0; k < 63; k++) cr_expect_float_eq(x[k], (float)(200 / 255.0), 1e-6);
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
    free(px);
}

/* Left half black, right half white, 8 wide: shrunk to 4 wide, the two middle columns straddle
 * nothing (the edge is between them), so the left two are dark and the right two bright. */
Test(image, resize_keeps_where_things_are) {
    int w = 8, h = 8;
    unsigned char px[64];
    for (int k = 0; k < 64; k++) px[k] = k % 8 < 4 ? 0 : 255;
    char *path = image_file(px, w, h, 1, 0);
    dl_model *m = model_with(1, 4, 4, "");
    float *x = load_ok(m, path, 1, 4, 4);
    for (int y = 0; y < 4; y++) {
        cr_expect(x[y * 4 + 0] < 0.1f && x[y * 4 + 1] < 0.5f, "%g %g", x[y * 4], x[y * 4 + 1]);
        cr_expect(x[y * 4 + 2] > 0.5f && x[y * 4 + 3] > 0.9f, "%g %g", x[y * 4 + 2], x[y * 4 + 3]);
    }
    dl_free(x);
    dl_model_free(m);
    unlink(path);
    free(path);
}

/* ---- hostile images ---- */

static void expect_refused(const dl_model *m, const char *path, const char *want) {
    float *x = (float *)1;
    int64_t shape[8];
    int nd = 0;
    dl_error err = {{0}};
    cr_expect_eq(dl_image_load(m, 0, path, &x, shape, &nd, &err), DL_E_INVALID, "%s: %s", want, err.msg);
    cr_expect_null(x);
    cr_expect(strstr(err.msg, want), "want '%s' in: %s", want, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
}

/* A PNG whose header (IHDR) says w x h; stb does not check the CRC, so only the size changes. */
static char *png_claiming(int w, int h) {
    unsigned char px[4] = {1, 2, 3, 4};
    membuf b = encode(px, 2, 2, 1, 0);
    cr_assert(b.n > 24 && !memcmp(b.p + 12, "IHDR", 4));
    unsigned char be[8] = {(unsigned char)(w >> 24), (unsigned char)(w >> 16), (unsigned char)(w >> 8),
                           (unsigned char)w,         (unsigned char)(h >> 24), (unsigned char)(h >> 16),
                           (unsigned char)(h >> 8),  (unsigned char)h};
    memcpy(b.p + 16, be, 8);
    char *path = tu_write_temp(".png", b.p, b.n);
    free(b.p);
    return path;
}

Test(image, malformed_files_give_one_line) {
    dl_model *m = model_with(1, 4, 4, "");
    char *empty = tu_write_temp(".png", "", 0);
    expect_refused(m, empty, "not an image dlrun reads");
    char *text = tu_write_temp(".png", "hello, world\n", 13);
    expect_refused(m, text, "not an image dlrun reads");
    unsigned char *px = pattern_image(16, 16, 3);
    membuf b = encode(px, 16, 16, 3, 0);
    char *half = tu_write_temp(".png", b.p, b.n / 2);
    expect_refused(m, half, "cannot decode the image");
    membuf bmp = encode(px, 16, 16, 3, 1);
    char *short_bmp = tu_write_temp(".bmp", bmp.p, 20); /* a BMP cut in its header (stb reads one cut in its
                                                            pixels as black, docs/images.md) */
    expect_refused(m, short_bmp, "corrupt or too large image: bad BMP");
    /* a BMP whose header claims 2057 x 9479 pixels in 270 bytes (fuzz_image: decoding and resizing
     * it took over 10 s); a whole one of that size holds 1 bit a pixel at least */
    unsigned char claim[270] = {'B', 'M', 0x0e, 1,    0,    0, 0, 0,    0,    0, 54, 0, 0, 0,  40,
                                0,   0,   0,    0x09, 0x08, 0, 0, 0x07, 0x25, 0, 0,  1, 0, 24, 0};
    char *cut = tu_write_temp(".bmp", claim, sizeof claim);
    expect_refused(m, cut, "a 2057x9479 image cannot fit in a file of 270 bytes: the file is cut short");
    unsigned char one[62 + 16 * 4] = {
        'B', 'M', 0, 0,  0, 0, 0, 0,  0, 0, 62, 0, 0, 0, 40,
        0,   0,   0, 16, 0, 0, 0, 16, 0, 0, 0,  1, 0, 1, 0}; /* whole, 1 bit a pixel, rows of 4 bytes */
    one[2] = sizeof one;
    one[54] = one[55] = one[56] = 0, one[58] = one[59] = one[60] = 255; /* the palette: black, white */
    char *mono = tu_write_temp(".bmp", one, sizeof one);
    float *mono_x = NULL;
    int64_t sh[8];
    int nd_mono;
    dl_error e_mono;
    dl_model *m16 = model_with(1, 16, 16, "");
    cr_expect_eq(dl_image_load(m16, 0, mono, &mono_x, sh, &nd_mono, &e_mono), DL_OK, "%s", e_mono.msg);
    free(mono_x);
    dl_model_free(m16);
    unlink(cut), unlink(mono);
    free(cut), free(mono);
    char *huge = png_claiming(100000, 100000);
    expect_refused(m, huge, "corrupt or too large image: too large"); /* stb refuses it in the header */
    char *wide = png_claiming(16384, 16384);                          /* within a side, over the pixel count */
    expect_refused(m, wide, "at most 16384 a side and 67108864 in all");
    float *x = NULL;
    int64_t shape[8];
    int nd;
    dl_error err;
    cr_expect_eq(dl_image_load(m, 0, "/nonexistent.png", &x, shape, &nd, &err), DL_E_IO);
    cr_expect_eq(dl_image_load(m, 1, empty, &x, shape, &nd, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "no model input 1"), "%s", err.msg);
    const char *files[] = {empty, text, half, short_bmp, huge, wide};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        unlink(files[i]);
        free((void *)files[i]);
    }
    free(b.p);
    free(bmp.p);
    free(px);
    dl_model_free(m);
}

/* Found by fuzz_image: a 16-bit gray PNG whose first IDAT chunk is empty. stb_image computed
 * NULL + 0 (undefined behaviour; third_party/stb/README.md has the one-line change); it is refused
 * in one line now, under UBSan too. */
static const unsigned char empty_idat_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x09, 0x00, 0x00, 0x00, 0x07, 0x10, 0x00, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x55, 0xcc, 0xb1, 0x0d, 0x00, 0x21, 0x10, 0x03, 0xc1, 0x45, 0x22, 0xf6, 0x65, 0x14,
    0x70, 0xf4, 0xdf, 0xc4, 0x27, 0x34, 0x02, 0x05, 0x40, 0x05, 0x04, 0xc0, 0x0b, 0x12, 0x07, 0xa3, 0x95, 0x03, 0x20,
    0x0c, 0xed, 0xfd, 0x50, 0xc4, 0xb1, 0x0b, 0x2b, 0x23, 0x92, 0x9f, 0xaa, 0xe0, 0xa7, 0x5a, 0xd0, 0x71, 0xb4, 0xaa,
    0x03, 0xff, 0xd8, 0x02, 0xe9, 0x07, 0x61, 0xf7, 0x7d, 0xdf, 0x75, 0x45, 0x13, 0xfb, 0xcc, 0x0d, 0x5c, 0xf2, 0x34,
    0x02, 0x2e, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

Test(image, empty_idat_and_unprintable_chunk_names) {
    dl_model *m = model_with(1, 7, 9, "");
    char *idat = tu_write_temp(".png", empty_idat_png, sizeof empty_idat_png);
    expect_refused(m, idat, "cannot decode the image");
    /* an unknown critical chunk named "A\nB\x01" after IHDR: stb names it in its reason, dlrun
     * prints it with '?' for each unprintable byte, on one line */
    unsigned char px[4] = {1, 2, 3, 4};
    membuf b = encode(px, 2, 2, 1, 0);
    const size_t at = 8 + 12 + 13; /* signature, then IHDR: length, type, 13 bytes, CRC */
    const unsigned char chunk[12] = {0, 0, 0, 0, 'A', '\n', 'B', 0x01, 0, 0, 0, 0};
    unsigned char *odd = malloc(b.n + sizeof chunk);
    cr_assert(odd);
    memcpy(odd, b.p, at), memcpy(odd + at, chunk, sizeof chunk), memcpy(odd + at + sizeof chunk, b.p + at, b.n - at);
    char *named = tu_write_temp(".png", odd, b.n + sizeof chunk);
    expect_refused(m, named, "A?B? PNG chunk not known");
    unlink(idat), unlink(named);
    free(idat), free(named), free(odd), free(b.p);
    dl_model_free(m);
}

Test(image, corrupting_any_byte_never_crashes, .timeout = 120) {
    int w = 12, h = 10;
    unsigned char *px = pattern_image(w, h, 3);
    dl_model *m = model_with(3, 8, 8, "preprocess: {resize: 9, crop: 8, mean: [0.5, 0.5, 0.5], std: [0.2, 0.2, 0.2]}");
    for (int bmp = 0; bmp < 4; bmp++) { /* PNG, BMP, baseline and progressive JPEG */
        membuf b = encode(px, w, h, 3, bmp);
        for (size_t i = 0; i < b.n; i++) {
            static const unsigned char values[] = {0x00, 0xff, 0x80, 0x7f};
            for (size_t v = 0; v < sizeof values; v++) {
                unsigned char keep = b.p[i];
                b.p[i] = values[v];
                char *path = tu_write_temp(".img", b.p, b.n);
                float *x = NULL;
                int64_t shape[8];
                int nd;
                dl_error err;
                if (dl_image_load(m, 0, path, &x, shape, &nd, &err) != DL_OK)
                    cr_expect_null(strchr(err.msg, '\n'), "%s", err.msg);
                dl_free(x);
                unlink(path);
                free(path);
                b.p[i] = keep;
            }
        }
        free(b.p);
    }
    dl_model_free(m);
    free(px);
}

Test(image, not_an_image_input) {
    dl_model *m = NULL;
    dl_error err;
    cr_assert_eq(dl_model_load(DLRUN_SOURCE_DIR "/models/mlp.yaml", &m, &err), DL_OK, "%s", err.msg);
    float *x = NULL;
    int64_t shape[8];
    int nd;
    cr_expect_eq(dl_image_load(m, 0, SAMPLE("bag.png"), &x, shape, &nd, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "not a 4-D f32 input [N, C, H, W]"), "%s", err.msg);
    dl_model_free(m);
    m = model_with(4, 28, 28, ""); /* 4 channels: no default */
    cr_expect_eq(dl_image_load(m, 0, SAMPLE("bag.png"), &x, shape, &nd, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "an image gives 1 or 3 channels"), "%s", err.msg);
    dl_model_free(m);
}

/* ---- preprocess: and labels: in the model file ---- */

static void expect_model_error(const char *extra, const char *want) {
    char *text = NULL;
    cr_assert(asprintf(&text,
                       "model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\n%s\nlayers:\n  - {op: flatten}\n"
                       "  - {name: fc, op: linear, units: 3}\n",
                       extra) > 0);
    dl_graph *g = NULL;
    dl_error err = {{0}};
    dl_status st = dl_model_parse_yaml(text, strlen(text), "m.yaml", &g, &err);
    cr_expect_eq(st, DL_E_INVALID, "%s: %s", extra, err.msg);
    cr_expect(strstr(err.msg, want), "%s\nwant: %s\ngot:  %s", extra, want, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "%s", err.msg);
    dl_graph_free(g);
    free(text);
}

Test(image, preprocess_errors) {
    expect_model_error("preprocess: {resize: 0}", "m.yaml:4:22: resize must be at least 1, not 0");
    expect_model_error("preprocess: {resize: 20000, crop: 8}", "resize must be between 1 and 16384 pixels, not 20000");
    expect_model_error("preprocess: {resize: [8, 8, 8]}", "resize must have 1 or 2 values, not 3");
    expect_model_error("preprocess: {resize: 16}", "resize: 16 sets the shorter side and keeps the aspect");
    expect_model_error("preprocess: {resize: 6, crop: 8}", "crop [8, 8] is larger than the shorter side (resize: 6)");
    expect_model_error("preprocess: {resize: [8, 4], crop: 6}", "crop [6, 6] is larger than resize [8, 4]");
    expect_model_error("preprocess: {resize: [9, 9]}", "preprocess makes 9x9 images; input 'x' is 8x8");
    expect_model_error("preprocess: {channels: gray}", "input 'x' has 3 channels; preprocess gives 1 (channels: gray)");
    expect_model_error("preprocess: {channels: rgba}", "channels must be rgb, bgr or gray, not 'rgba'");
    expect_model_error("preprocess: {mean: [0.5]}", "mean has 1 value; input 'x' has 3 channels");
    expect_model_error("preprocess: {mean: 0.5}", "mean must be a list of numbers, one per channel, not a scalar");
    expect_model_error("preprocess: {std: [1, 0, 1]}", "std must be positive, not 0");
    expect_model_error("preprocess: {std: [1, nan, 1]}", "std must be a number, not 'nan'");
    expect_model_error("preprocess: {scale: -1}", "scale must be positive");
    expect_model_error("preprocess: {size: 8}", "unknown key 'size' in preprocess");
    expect_model_error("preprocess: {resize: 8, resize: 8}", "duplicate key 'resize'");
    expect_model_error("preprocess: 8", "preprocess must be a mapping");
    expect_model_error("labels: [a, b]", "labels has 2 names; the first output 'fc' has 3 classes");
    expect_model_error("labels: [a, [b], c]", "each label must be a name, not a list");
    expect_model_error("labels: [a, '', c]", "an empty label");
    expect_model_error("labels: [a, \"b\\e[31m\", c]", "a label with a control character");
    expect_model_error("labels: {a: b}", "labels must be a list of class names or a file name, not a mapping");
}

Test(image, preprocess_needs_an_image_input) {
    const char *text = "model: m\ninputs:\n  - {name: x, shape: [1, 3]}\npreprocess: {}\nlayers:\n  - {op: relu}\n";
    dl_graph *g = NULL;
    dl_error err;
    cr_expect_eq(dl_model_parse_yaml(text, strlen(text), "m.yaml", &g, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "m.yaml:4:13: preprocess: the model has no 4-D f32 input"), "%s", err.msg);
    text = "model: m\ninputs:\n  - {name: x, shape: [1, 3, 2, 2]}\nlabels: [a, b]\nlayers:\n  - {op: relu}\n";
    cr_expect_eq(dl_model_parse_yaml(text, strlen(text), "m.yaml", &g, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "labels name the classes of a [N, classes] output; the first output 'relu_1' is 4-D"),
              "%s", err.msg);
}

Test(image, labels_from_a_list_and_from_a_file) {
    dl_model *m = model_with(1, 2, 2, "labels: [zero, 'one two', T-shirt/top, 3]");
    cr_expect_eq(dl_model_label_count(m), 4);
    cr_expect_str_eq(dl_model_label(m, 0), "zero");
    cr_expect_str_eq(dl_model_label(m, 1), "one two");
    cr_expect_str_eq(dl_model_label(m, 2), "T-shirt/top");
    cr_expect_str_eq(dl_model_label(m, 3), "3");
    cr_expect_null(dl_model_label(m, 4));
    cr_expect_null(dl_model_label(m, -1));
    dl_model_free(m);
    m = model_with(1, 2, 2, "");
    cr_expect_eq(dl_model_label_count(m), 0);
    cr_expect_null(dl_model_label(m, 0));
    dl_model_free(m);

    /* a file beside the model, named relative to it; \r\n and a missing final newline are fine */
    char dir[] = "/tmp/dlrun-labels-XXXXXX";
    cr_assert(mkdtemp(dir));
    char labels[256], model[256], bad[256];
    snprintf(labels, sizeof labels, "%s/classes.txt", dir);
    snprintf(model, sizeof model, "%s/m.yaml", dir);
    snprintf(bad, sizeof bad, "%s/bad.txt", dir);
    FILE *f = fopen(labels, "w");
    fputs("cat\r\ndog\nbird\nfish", f);
    fclose(f);
    f = fopen(bad, "w");
    fputs("cat\ndog\n\nfish\n", f);
    fclose(f);
    static const char yaml[] = "model: m\ninputs:\n  - {name: x, shape: [1, 4]}\nlabels: %s\nlayers:\n"
                               "  - {name: fc, op: linear, units: 4}\n";
    f = fopen(model, "w");
    fprintf(f, yaml, "classes.txt");
    fclose(f);
    dl_error err;
    cr_assert_eq(dl_model_load(model, &m, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_model_label_count(m), 4);
    cr_expect_str_eq(dl_model_label(m, 0), "cat");
    cr_expect_str_eq(dl_model_label(m, 3), "fish");
    dl_model_free(m);
    f = fopen(model, "w");
    fprintf(f, yaml, "bad.txt");
    fclose(f);
    cr_expect_eq(dl_model_load(model, &m, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "bad.txt:3: an empty label"), "%s", err.msg);
    f = fopen(model, "w");
    fprintf(f, yaml, "missing.txt");
    fclose(f);
    cr_expect_eq(dl_model_load(model, &m, &err), DL_E_IO);
    cr_expect(strstr(err.msg, "missing.txt: cannot open"), "%s", err.msg);
    unlink(labels);
    unlink(bad);
    unlink(model);
    rmdir(dir);
}

/* ---- the CLI ---- */

#define FASHION DLRUN_SOURCE_DIR "/models/fashion_mnist.yaml"

Test(image, cli_classifies_the_samples_by_name) {
    char *out;
    cr_assert_eq(tu_dlrun(FASHION " --image " SAMPLE("ankle_boot.png"), &out), 0, "%s", out);
    cr_expect(strstr(out, "top-5 (" SAMPLE("ankle_boot.png") "):\n  1. 0.9"), "%s", out);
    cr_expect(strstr(out, "  Ankle boot (9)\n  2. "), "%s", out);
    free(out);
    /* three images: a batch of three, each with its own top-5 */
    cr_assert_eq(tu_dlrun(FASHION " --image " SAMPLE("bag.png") " --image " SAMPLE(
                              "trouser.png") " --image image=" SAMPLE("sneaker.png") " --json",
                          &out),
                 0, "%s", out);
    cJSON *root = cJSON_Parse(out);
    cr_assert(root, "%s", out);
    cJSON *images = cJSON_GetObjectItem(root, "images");
    cr_assert_eq(cJSON_GetArraySize(images), 3, "%s", out);
    const char *want[] = {"Bag", "Trouser", "Sneaker"};
    for (int i = 0; i < 3; i++) {
        cJSON *top = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(images, i), "top5"), 0);
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(top, "label")), want[i]);
    }
    cr_expect_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "input_shape"), 0)->valuedouble, 3);
    cJSON_Delete(root);
    free(out);
}

static void expect_cli_error(const char *args, int status, const char *want) {
    char *out;
    cr_expect_eq(tu_dlrun(args, &out), status, "%s\n%s", args, out);
    cr_expect(strstr(out, want), "%s\nwant: %s\ngot:  %s", args, want, out);
    free(out);
}

Test(image, cli_errors) {
    expect_cli_error(FASHION " --image /nonexistent.png", 2, "dlrun: /nonexistent.png: cannot open");
    expect_cli_error(FASHION " --image " DLRUN_SOURCE_DIR "/models/lenet.yaml", 2, "not an image dlrun reads");
    expect_cli_error(FASHION " --batch 2 --image " SAMPLE("bag.png"), 2,
                     "--batch 2 with 1 image: N images make a batch of N");
    expect_cli_error(FASHION " --image " SAMPLE("bag.png") " --input x.npy", 2,
                     "input 'image' is given twice (--input and --image)");
    expect_cli_error(DLRUN_SOURCE_DIR "/models/mlp.yaml --image " SAMPLE("bag.png"), 2,
                     "is not a 4-D f32 input [N, C, H, W]");
}

Test(image, cli_needs_a_name_with_several_inputs) {
    static const char yaml[] = "model: two\ninputs:\n  - {name: a, shape: [1, 1, 28, 28]}\n"
                               "  - {name: b, shape: [1, 1, 28, 28]}\nlayers:\n  - {op: add, inputs: [a, b]}\n"
                               "  - {op: flatten}\n  - {op: linear, units: 3}\n";
    char *path = tu_write_temp(".yaml", yaml, sizeof yaml - 1), *args = NULL;
    cr_assert(asprintf(&args, "%s --image %s", path, SAMPLE("bag.png")) > 0);
    expect_cli_error(args, 2, "the model has 2 inputs (a, b); use --image NAME=FILE");
    free(args);
    cr_assert(asprintf(&args, "%s --image a=%s --image b=%s --image b=%s", path, SAMPLE("bag.png"), SAMPLE("bag.png"),
                       SAMPLE("coat.png")) > 0);
    expect_cli_error(args, 2, "1 image for one input and 2 for 'b'");
    free(args);
    char *out;
    cr_assert(asprintf(&args, "%s --image a=%s --image b=%s", path, SAMPLE("bag.png"), SAMPLE("coat.png")) > 0);
    cr_expect_eq(tu_dlrun(args, &out), 0, "%s", out);
    free(out);
    free(args);
    unlink(path);
    free(path);
}
