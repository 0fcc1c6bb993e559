/* image.h — images as model inputs: a model's `preprocess:` section (docs/model-format.md), read
 * by model_yaml.c, and the decoder that turns an image file into the [1, C, H, W] f32 tensor it
 * describes (image.c, on stb_image and stb_image_resize; docs/images.md). */
#ifndef DLRUN_IMAGE_H
#define DLRUN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dlrun/plugin.h"

/* The largest image dlrun decodes or resizes to: this many pixels a side, and DL_IMAGE_MAX_PIXELS
 * in all (a 64-megapixel photo passes; 192 MiB decoded as RGB). Larger ones are refused from
 * their header, before anything is allocated. */
#define DL_IMAGE_MAX_SIDE 16384
#define DL_IMAGE_MAX_PIXELS (1 << 26)
/* The largest image file read (bytes). */
#define DL_IMAGE_MAX_FILE (256 << 20)

typedef enum dl_image_channels {
    DL_IMAGE_AUTO = 0, /* from the input's channel count: 1 gray, 3 rgb */
    DL_IMAGE_RGB = 1,
    DL_IMAGE_BGR = 2,
    DL_IMAGE_GRAY = 3
} dl_image_channels;

/* What the model does to an image before it feeds an input; all zero is the default (resize to
 * the input's H x W, pixels scaled by 1/255, channels from the input). */
typedef struct dl_preprocess {
    int present;                /* 1: the model file has a `preprocess:` section */
    int32_t resize_h, resize_w; /* `resize: [H, W]`; 0: not given */
    int32_t resize_short;       /* `resize: N`: the shorter side to N, the aspect kept; 0: not given */
    int32_t crop_h, crop_w;     /* `crop: [H, W]`: centre crop after resizing; 0: none */
    int32_t channels;           /* dl_image_channels */
    int32_t n_mean, n_std;      /* 0 (none: mean 0, std 1) or one per channel */
    float mean[3], std[3];      /* per channel, in the model's channel order */
    double scale;               /* pixel (0..255) times scale before mean/std; 0: 1/255 */
} dl_preprocess;

/* The channel count a preprocess gives an input of c channels (1 or 3), or 0 when it cannot feed
 * it (a 4-channel input, or `channels: gray` for a 3-channel input). */
int dl_preprocess_channels(const dl_preprocess *p, int64_t c);
/* The output size the preprocess makes for an input of h x w: the crop, else the [H, W] resize,
 * else h x w itself; 0 x 0 for a shorter-side resize without a crop (the aspect decides). */
void dl_preprocess_size(const dl_preprocess *p, int64_t h, int64_t w, int64_t *out_h, int64_t *out_w);

/* Decodes an image file's bytes (PNG, JPEG, BMP, PNM), converts its channels, resizes, crops and
 * normalizes it as p says, into out: c x h x w f32, planar (the [1, C, H, W] tensor of one image).
 * `what` names the image in errors (its path). Errors are one line: DL_E_INVALID for a corrupt,
 * truncated or too large image (stb_image's reason) or one the preprocess cannot make h x w. */
dl_status dl_image_decode(const dl_preprocess *p, const void *bytes, size_t len, const char *what, int64_t c, int64_t h,
                          int64_t w, float *out, dl_error *err);
#endif
