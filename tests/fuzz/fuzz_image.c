/* fuzz_image.c — libFuzzer harness for image decoding (core/src/image.c): the input is an image
 * file's bytes, decoded by dl_image_decode (stb_image, then stb_image_resize) under four
 * preprocess settings chosen by the input's last byte: gray 28x28 (resized), RGB centre-cropped
 * after a shorter-side resize, BGR normalized at the image's own size when it is small, and a
 * crop without resize; the decoded tensor is read through (ASan checks it is all there). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "image.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const dl_preprocess settings[4] = {
        {.present = 1, .resize_h = 28, .resize_w = 28, .channels = DL_IMAGE_GRAY},
        {.present = 1, .resize_short = 40, .crop_h = 32, .crop_w = 24, .channels = DL_IMAGE_RGB},
        {.present = 1,
         .channels = DL_IMAGE_BGR,
         .n_mean = 3,
         .mean = {0.4f, 0.5f, 0.6f},
         .n_std = 3,
         .std = {0.2f, 0.25f, 0.3f}},
        {.present = 1, .crop_h = 4, .crop_w = 4},
    };
    static const int64_t dims[4][3] = {{1, 28, 28}, {3, 32, 24}, {3, 16, 16}, {3, 4, 4}};
    int k = size ? data[size - 1] % 4 : 0;
    int64_t c = dims[k][0], h = dims[k][1], w = dims[k][2];
    float *out = malloc((size_t)(c * h * w) * sizeof *out);
    if (!out) return 0;
    dl_error err;
    volatile double sink = 0;
    if (dl_image_decode(&settings[k], data, size, "fuzz", c, h, w, out, &err) == DL_OK)
        for (int64_t i = 0; i < c * h * w; i++) sink += out[i];
    (void)sink;
    free(out);
    return 0;
}
