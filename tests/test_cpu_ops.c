/* test_cpu_ops.c — every CPU op against an independent naive loop (in double) on random inputs
 * with odd sizes, driven through the plugin ABI exactly as the host drives it (dlopen,
 * supports, prepare, run with the workspace it asked for). Every op test runs in f32 row-major
 * (suite cpu_ops) and again with the ABI 1.3 storage formats (suite cpu_storage: f16, bf16,
 * channels-last), where the plugin converts, computes in f32 and rounds once. Also: supports()
 * says no, with a reason, to what the plugin cannot run; in place and the workspace with storage
 * formats. */
#define _GNU_SOURCE
#include "op_check.h"
#include "op_harness.h"

/* ---- conv2d ---- */

typedef struct conv_case {
    int n, c, h, w, oc, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, groups, bias, act; /* act: dl_activation */
    int res; /* 1: a fused residual added before the activation (ABI 1.8) */
} conv_case;

/* A fused activation in double, with the bounds and slope check_conv gives its op. */
static double conv_act_ref(int act, double s) {
    switch (act) {
    case DL_ACT_RELU: return s < 0 ? 0 : s;
    case DL_ACT_CLIP: return s < -0.25 ? -0.25 : s > 0.5 ? 0.5 : s;
    case DL_ACT_LEAKY_RELU: return s >= 0 ? s : 0.125 * s;
    case DL_ACT_SIGMOID: return 1 / (1 + exp(-s));
    default: return s;
    }
}

static void check_conv(conv_case cc) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = cc.kh, a.kernel[1] = cc.kw, a.stride[0] = cc.sh, a.stride[1] = cc.sw;
    a.pad_begin[0] = cc.pt, a.pad_begin[1] = cc.pl, a.pad_end[0] = cc.pb, a.pad_end[1] = cc.pr;
    a.dilation[0] = cc.dh, a.dilation[1] = cc.dw, a.groups = cc.groups, a.activation = cc.act, a.clip_min = -0.25f,
    a.clip_max = 0.5f, a.alpha = 0.125f, a.residual = cc.res;
    int oh = (cc.h + cc.pt + cc.pb - cc.dh * (cc.kh - 1) - 1) / cc.sh + 1;
    int ow = (cc.w + cc.pl + cc.pr - cc.dw * (cc.kw - 1) - 1) / cc.sw + 1;
    int cg = cc.c / cc.groups, ocg = cc.oc / cc.groups;
    tt in[4] = {MAKE(-1, 1, cc.n, cc.c, cc.h, cc.w), MAKE(-0.5f, 0.5f, cc.oc, cg, cc.kh, cc.kw), MAKE(-1, 1, cc.oc)};
    const int n_in = (cc.bias ? 3 : 2) + cc.res;
    tt *res = &in[n_in - 1]; /* the residual, after the bias if any */
    if (cc.res) {
        if (!cc.bias) in[3] = in[2];
        *res = MAKE(-1, 1, cc.n, cc.oc, oh, ow);
    }
    tt y = MAKE(0, 1, cc.n, cc.oc, oh, ow);
    run_op(DL_OP_CONV2D, &a, in, n_in, &y);
    double *ref = calloc((size_t)y.n, sizeof *ref);
    for (int i = 0; i < cc.n; i++)
        for (int o = 0; o < cc.oc; o++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    double s = cc.bias ? in[2].data[o] : 0;
                    int g = o / ocg;
                    for (int ci = 0; ci < cg; ci++)
                        for (int ky = 0; ky < cc.kh; ky++)
                            for (int kx = 0; kx < cc.kw; kx++) {
                                int iy = oy * cc.sh - cc.pt + ky * cc.dh, ix = ox * cc.sw - cc.pl + kx * cc.dw;
                                if (iy < 0 || iy >= cc.h || ix < 0 || ix >= cc.w) continue;
                                s += (double)in[0].data[(((size_t)i * cc.c + g * cg + ci) * cc.h + iy) * cc.w + ix] *
                                     in[1].data[(((size_t)o * cg + ci) * cc.kh + ky) * cc.kw + kx];
                            }
                    const size_t at = (((size_t)i * cc.oc + o) * oh + oy) * ow + ox;
                    ref[at] = conv_act_ref(cc.act, s + (cc.res ? res->data[at] : 0));
                }
    char what[160];
    snprintf(what, sizeof what, "conv n%d c%d %dx%d oc%d k%dx%d s%d,%d p%d,%d,%d,%d d%d,%d g%d b%d a%d r%d", cc.n, cc.c,
             cc.h, cc.w, cc.oc, cc.kh, cc.kw, cc.sh, cc.sw, cc.pt, cc.pl, cc.pb, cc.pr, cc.dh, cc.dw, cc.groups,
             cc.bias, cc.act, cc.res);
    expect_close(&y, ref, 1e-8, what);
    free(ref);
    for (int i = 0; i < 3 + cc.res; i++) free(in[i].data);
    free(y.data);
}

OP_TEST(conv2d_im2col_cases) {
    check_conv((conv_case){1, 3, 11, 13, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0});
    check_conv((conv_case){2, 4, 9, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1});   /* stride 2, batch 2 */
    check_conv((conv_case){1, 5, 13, 11, 7, 3, 5, 1, 2, 2, 0, 1, 3, 1, 1, 1, 0, 0}); /* asymmetric pads */
    check_conv((conv_case){1, 3, 15, 15, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 0}); /* dilation 2 */
    check_conv((conv_case){3, 6, 8, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1});   /* groups 3 */
    check_conv((conv_case){2, 8, 7, 7, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 8, 1, 0});   /* depthwise */
    check_conv((conv_case){1, 3, 17, 19, 8, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 0, 1}); /* resnet stem */
    check_conv((conv_case){2, 9, 5, 6, 11, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0});  /* 1x1 gemm */
    check_conv((conv_case){1, 9, 9, 7, 4, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0, 0});   /* 1x1 stride 2 */
    /* the packed GEMM (cpu_gemm_conv_form) and, for small maps with many taps, OpenBLAS */
    check_conv((conv_case){2, 19, 5, 5, 32, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1});   /* 1x1, few taps */
    check_conv((conv_case){1, 7, 9, 11, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0});   /* windows, stride 2 */
    check_conv((conv_case){1, 10, 5, 5, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 0});   /* groups 2 */
    check_conv((conv_case){1, 40, 47, 47, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1}); /* 360 taps: 2 passes */
    check_conv((conv_case){2, 4, 13, 11, 7, 3, 5, 2, 1, 2, 0, 1, 3, 1, 1, 1, 1, 0});   /* asymmetric, 2x1 */
    check_conv((conv_case){1, 3, 37, 35, 8, 3, 3, 1, 3, 2, 2, 2, 2, 2, 1, 1, 0, 1});   /* dilation 2, stride 3 */
    check_conv((conv_case){1, 300, 7, 7, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0});  /* 1x1 narrowing */
}

OP_TEST(conv2d_pointwise_cases) {
    /* 1x1 convs that narrow the channels: the pixels as the product's rows, read in place from the
     * image 6 at a time (CONV_POINTWISE_T), the partial last 6 packed, C stored transposed from
     * the kernel's registers (or, past 1024 channels, through the block's sums); and 1x1 convs on
     * maps of a multiple of 64 pixels, which keep the filters as rows */
    const int clip = DL_ACT_CLIP, sig = DL_ACT_SIGMOID;
    check_conv((conv_case){1, 96, 7, 7, 33, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, clip});  /* 49 = 8 x 6 + 1 */
    check_conv((conv_case){2, 57, 5, 7, 19, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1});     /* batch 2, no bias */
    check_conv((conv_case){1, 40, 9, 11, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 2, 1, sig});  /* groups 2, sigmoid */
    check_conv((conv_case){1, 21, 2, 2, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0});      /* 4 pixels: one partial 6 */
    check_conv((conv_case){1, 1100, 3, 5, 18, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1});   /* two passes over k */
    check_conv((conv_case){1, 36, 23, 29, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1});   /* threads, 667 pixels */
    check_conv((conv_case){1, 48, 8, 16, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, clip}); /* 128 pixels: filter rows */
    check_conv((conv_case){1, 24, 16, 16, 40, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0});   /* widening: filter rows */
    check_conv((conv_case){1, 1100, 3, 3, 240, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1});  /* weight > 1 MiB: OpenBLAS */
}

OP_TEST(conv2d_direct_cases) {
    /* stride 1: the windows read in place from a zero-padded copy of the image (CONV_DIRECT), the
     * product's gutter columns dropped as it is stored into y (none where the rows have no gutter: 3x1) */
    check_conv((conv_case){2, 5, 23, 21, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0});  /* batch 2 */
    check_conv((conv_case){1, 6, 30, 31, 10, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1});  /* dilation 2 */
    check_conv((conv_case){1, 8, 20, 22, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 1});  /* groups 2 */
    check_conv((conv_case){1, 7, 19, 25, 9, 3, 5, 1, 1, 0, 2, 2, 1, 1, 1, 1, 1, 0});   /* asymmetric */
    check_conv((conv_case){1, 40, 21, 23, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}); /* 360 taps */
    /* 1080 taps: two passes over k, the first pass's sums reloaded through the gutter map */
    check_conv((conv_case){1, 120, 12, 25, 20, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, DL_ACT_SIGMOID});
    check_conv((conv_case){2, 19, 9, 11, 70, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0}); /* 3x1, no gutter */
    check_conv((conv_case){1, 6, 10, 12, 7, 1, 3, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1});  /* 1x3 */
    check_conv((conv_case){1, 3, 64, 66, 17, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, 0}); /* 5x5, threads */
    /* in NHWC, with the harness's 2 threads: a task per output row (70 rows of 40 columns: 16
     * columns and 32 rows or more), and (most maps of these tests) blocks of 6 pixels running on
     * across rows and images; a 4x2 output of 2 images: 16 pixels, the second block crossing
     * from one image to the next, the last a partial block over two rows */
    check_conv((conv_case){1, 21, 70, 40, 35, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, DL_ACT_CLIP});
    check_conv((conv_case){2, 5, 4, 3, 9, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0});
    /* strided, windows of 5x5 and more: the padded image in stride x stride phase planes */
    check_conv((conv_case){1, 3, 45, 47, 16, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1}); /* a stem */
    check_conv((conv_case){1, 4, 40, 41, 9, 5, 5, 3, 3, 2, 1, 2, 3, 1, 1, 1, 0, 0});  /* stride 3, asymmetric */
    check_conv((conv_case){1, 5, 37, 60, 6, 5, 5, 2, 2, 4, 4, 4, 4, 2, 2, 1, 1, 0});  /* dilation 2 */
    check_conv((conv_case){2, 6, 30, 33, 8, 5, 5, 2, 1, 2, 2, 2, 2, 1, 1, 2, 1, 0});  /* strides 2, 1; groups */
}

OP_TEST(conv2d_pixel_rows_cases) {
    /* small maps with 512 taps or more: the pixels as the product's rows (CONV_PACKED_T), the
     * windows packed as A through a table of tap offsets (or by runs past 64 taps), C stored
     * transposed with the filters' bias by column */
    const int sig = DL_ACT_SIGMOID;
    check_conv((conv_case){1, 64, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});   /* ResNet's 7x7 stage */
    check_conv((conv_case){2, 70, 9, 9, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, sig}); /* stride 2, batch 2 */
    check_conv((conv_case){1, 60, 7, 8, 16, 3, 3, 1, 1, 2, 1, 0, 2, 2, 1, 1, 0, 0});   /* asymmetric, dilation */
    check_conv((conv_case){1, 128, 7, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1});  /* groups 2 */
    check_conv((conv_case){2, 520, 5, 5, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0});  /* 1x1: the image as it lies */
    check_conv((conv_case){1, 7, 9, 9, 16, 9, 9, 1, 1, 4, 4, 4, 4, 1, 1, 1, 1, 0});    /* 81 taps: packed by runs */
}

OP_TEST(conv2d_grouped_small_cases) {
    /* groups of 2 or 4 channels in and out (ResNeXt's 32 x 4): channels-last, nhwc.c's grouped
     * kernel, the last channels a partial vector where C is not a multiple of it; 8 a group (the
     * row-major path) beside them */
    check_conv((conv_case){1, 128, 9, 11, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 32, 1, 0});        /* 4 a group */
    check_conv((conv_case){2, 24, 7, 10, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, 1, DL_ACT_RELU}); /* 8, stride 2 */
    check_conv((conv_case){1, 12, 8, 9, 12, 3, 3, 1, 1, 2, 1, 0, 2, 2, 1, 6, 0, 0});            /* 2, dilation, pads */
    check_conv((conv_case){1, 20, 9, 8, 20, 5, 5, 1, 2, 2, 2, 2, 2, 1, 1, 5, 1, 0});            /* 4, 5x5 */
    check_conv((conv_case){1, 32, 6, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 1, DL_ACT_RELU, 1}); /* residual */
}

OP_TEST(conv2d_depthwise_cases) {
    /* groups == channels: the direct kernel (window8.c), 8 channels per task in bands of output
     * rows; odd sizes, every window attribute, each fused activation */
    const int clip = DL_ACT_CLIP, leaky = DL_ACT_LEAKY_RELU, sig = DL_ACT_SIGMOID;
    check_conv((conv_case){1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 1, clip});      /* flat, 7x7 map */
    check_conv((conv_case){2, 6, 20, 23, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6, 1, 1});       /* flat, stride 2 */
    check_conv((conv_case){1, 5, 37, 41, 5, 3, 3, 2, 2, 0, 1, 1, 0, 1, 1, 5, 0, 0});       /* rows, stride 2 */
    check_conv((conv_case){1, 4, 33, 35, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 4, 1, leaky});   /* strides 2, 1 */
    check_conv((conv_case){1, 6, 15, 17, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, sig});    /* multiplier 2 */
    check_conv((conv_case){1, 3, 19, 21, 3, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 3, 1, 0});       /* 5x5, flat */
    check_conv((conv_case){1, 4, 17, 18, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 4, 0, 1});       /* dilation 2 */
    check_conv((conv_case){1, 3, 21, 40, 3, 1, 7, 1, 2, 0, 3, 0, 3, 1, 1, 3, 1, 0});       /* 1x7, rows */
    check_conv((conv_case){1, 4, 9, 9, 4, 3, 3, 1, 1, 5, 4, 3, 6, 1, 1, 4, 1, clip});      /* wide padding */
    check_conv((conv_case){1, 5, 12, 13, 5, 3, 3, 3, 3, 0, 0, 2, 2, 1, 1, 5, 1, 0});       /* flat, stride 3 */
    check_conv((conv_case){1, 32, 56, 57, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 32, 1, clip}); /* threads */
    /* the last task's partial lanes (13 = 8 + 5), rows narrower than 8 (the interleave reads into
     * the next row, the plane's last row one float at a time) */
    check_conv((conv_case){1, 13, 9, 7, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 13, 1, clip});
    check_conv((conv_case){2, 6, 15, 17, 18, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0});     /* multiplier 3 */
    check_conv((conv_case){1, 11, 40, 197, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 11, 1, 1});  /* 8 bands */
    check_conv((conv_case){1, 9, 61, 150, 9, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 9, 1, 0});     /* bands, 5x5/2 */
    check_conv((conv_case){1, 8, 10, 10, 8, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, 8, 0, 0});      /* unread edge */
    check_conv((conv_case){1, 10, 2, 3, 10, 3, 3, 1, 1, 4, 4, 4, 4, 1, 1, 10, 1, 0});     /* mostly pad */
    check_conv((conv_case){1, 16, 23, 29, 16, 3, 3, 1, 2, 1, 0, 2, 1, 2, 3, 16, 1, sig}); /* mixed */
    /* channels past whole vectors: in NHWC 40 is two vectors of 16 and a partial one, or five of 8;
     * 24 is one of 16 and a partial one, or three of 8 */
    check_conv((conv_case){1, 40, 13, 15, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 40, 1, clip});
    check_conv((conv_case){2, 24, 11, 12, 24, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 24, 1, 0});
}

OP_TEST(conv2d_depthwise_blocks) {
    /* nhwc.c's register blocks (AVX-512 builds; elsewhere dw_four, checked the same): 7 pixels x
     * 16 channels of one output row, or of two where the stride and dilation down are 1; windows
     * 3, 5 and 7 wide at strides 1 and 2. Rows wider and narrower than a block and not a whole
     * number of them, odd heights (a last row alone), channels past whole vectors, pads that
     * leave whole blocks or both rows of a pair outside the image, batch 2 (pairs per image),
     * residuals and the activations applied after the rows (sigmoid, leaky relu). */
    const int relu = DL_ACT_RELU, clip = DL_ACT_CLIP, leaky = DL_ACT_LEAKY_RELU, sig = DL_ACT_SIGMOID;
    check_conv((conv_case){1, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 32, 1, clip});   /* MobileNet's */
    check_conv((conv_case){2, 33, 15, 23, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 33, 1, relu});   /* odd rows, 33 */
    check_conv((conv_case){1, 17, 9, 6, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 17, 0, 0});        /* 6 wide */
    check_conv((conv_case){1, 16, 8, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, leaky});    /* one block */
    check_conv((conv_case){1, 40, 11, 29, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 40, 1, clip});   /* stride 2 */
    check_conv((conv_case){2, 24, 13, 31, 24, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 24, 1, sig});    /* 5x5 pairs */
    check_conv((conv_case){1, 48, 17, 33, 48, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 48, 1, relu});   /* 5x5 / 2 */
    check_conv((conv_case){1, 19, 12, 20, 19, 7, 7, 1, 1, 3, 3, 3, 3, 1, 1, 19, 1, 0});      /* ConvNeXt's 7x7 */
    check_conv((conv_case){1, 32, 15, 37, 32, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 32, 0, clip});   /* 7x7 / 2 */
    check_conv((conv_case){1, 20, 11, 19, 20, 5, 3, 1, 1, 2, 1, 2, 1, 1, 1, 20, 1, 0});      /* 5 x 3 */
    check_conv((conv_case){1, 18, 10, 16, 18, 1, 3, 1, 1, 0, 1, 0, 1, 1, 1, 18, 1, relu});   /* 1 x 3 */
    check_conv((conv_case){1, 21, 19, 17, 21, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 21, 1, 0});      /* 2 down, 1 across */
    check_conv((conv_case){1, 16, 13, 18, 16, 3, 3, 1, 1, 2, 1, 2, 1, 2, 1, 16, 1, leaky});  /* dilation 2 down */
    check_conv((conv_case){1, 23, 6, 9, 23, 3, 5, 1, 2, 4, 9, 3, 8, 1, 1, 23, 1, clip});     /* wide pads */
    check_conv((conv_case){1, 16, 3, 4, 16, 3, 3, 1, 1, 3, 3, 3, 3, 1, 1, 16, 1, sig});      /* mostly pad */
    check_conv((conv_case){2, 35, 9, 16, 35, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 35, 1, clip, 1}); /* residual */
    check_conv((conv_case){1, 64, 7, 8, 64, 5, 5, 2, 1, 2, 2, 2, 2, 1, 1, 64, 0, sig, 1});   /* residual, sigmoid */
}

OP_TEST(conv2d_fused_activations) {
    /* each epilogue (im2col, 1x1 GEMM, Winograd) with the activations of ABI 1.5 */
    for (int act = DL_ACT_CLIP; act <= DL_ACT_SIGMOID; act++) {
        check_conv((conv_case){1, 3, 11, 13, 5, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, act});
        check_conv((conv_case){2, 9, 5, 6, 11, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, act});
        check_conv((conv_case){3, 67, 9, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, act});  /* Winograd: 36 tiles */
        check_conv((conv_case){1, 64, 13, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, act}); /* the packed GEMM */
        check_conv((conv_case){1, 12, 6, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, act});   /* OpenBLAS */
        check_conv((conv_case){1, 40, 47, 47, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, act}); /* packed, 2 passes */
        check_conv((conv_case){1, 12, 16, 17, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, act});  /* direct, gutter */
    }
}

OP_TEST(conv2d_fused_residual) {
    /* y = act(conv(x) + b + r) (ABI 1.8): every path's epilogue adds r where it stores y: the
     * packed GEMM (filter rows, pixel rows, in place, two passes over k, transposed block sums),
     * the direct form through its gutter map, Winograd, depthwise, OpenBLAS (1x1 and im2col) */
    const int relu = DL_ACT_RELU, clip = DL_ACT_CLIP, sig = DL_ACT_SIGMOID;
    check_conv((conv_case){1, 19, 5, 5, 32, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, relu, 1});   /* 1x1, filter rows */
    check_conv((conv_case){1, 96, 7, 7, 33, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, clip, 1});   /* pixel rows in place */
    check_conv((conv_case){2, 9, 9, 7, 20, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1});       /* 1x1 stride 2 */
    check_conv((conv_case){1, 40, 47, 47, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, relu, 1}); /* 2 passes */
    check_conv((conv_case){1, 64, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, sig, 1});    /* pixels as rows */
    check_conv((conv_case){1, 1100, 3, 5, 18, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, relu, 1}); /* transposed sums */
    check_conv((conv_case){2, 5, 23, 21, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, relu, 1});  /* direct, gutter */
    check_conv((conv_case){1, 8, 20, 22, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, sig, 1});   /* direct, groups */
    check_conv((conv_case){1, 3, 45, 47, 16, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, relu, 1});  /* direct stem */
    check_conv((conv_case){3, 67, 9, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, relu, 1});  /* Winograd */
    check_conv((conv_case){2, 64, 13, 17, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, clip, 1}); /* its tiles' rows */
    check_conv((conv_case){3, 64, 15, 13, 17, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1});    /* as vectors */
    check_conv((conv_case){1, 64, 13, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, clip, 1});
    check_conv((conv_case){1, 13, 9, 7, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 13, 1, relu, 1}); /* depthwise */
    check_conv((conv_case){2, 6, 15, 17, 18, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, sig, 1});
    check_conv((conv_case){1, 12, 6, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, relu, 1}); /* OpenBLAS */
    check_conv((conv_case){1, 1100, 3, 3, 240, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, relu, 1});
    check_conv((conv_case){3, 6, 8, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 0, 0, 1}); /* groups 3, im2col */
    weights_late = 1; /* no packed weight: OpenBLAS over the image or an im2col buffer */
    check_conv((conv_case){2, 9, 5, 6, 11, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, relu, 1});
    check_conv((conv_case){1, 5, 13, 11, 7, 3, 5, 1, 2, 2, 0, 1, 3, 1, 1, 1, 0, clip, 1});
    weights_late = 0;
}

OP_TEST(conv2d_weight_known_only_at_run_time) {
    /* no packed weight: OpenBLAS over the image (1x1) or an im2col buffer */
    weights_late = 1;
    check_conv((conv_case){2, 9, 5, 6, 11, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1});
    check_conv((conv_case){1, 5, 13, 11, 7, 3, 5, 1, 2, 2, 0, 1, 3, 1, 1, 1, 0, DL_ACT_CLIP});
    check_conv((conv_case){3, 6, 8, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 0});
    weights_late = 0;
}

OP_TEST(conv2d_winograd_cases) {
    /* 3x3 stride 1 with >= 64 channels and 16 tiles or more (32 with AVX-512) goes through Winograd F(4x4,3x3);
     * odd sizes leave partial tiles, batch > 1 mixes images within a tile block. */
    check_conv((conv_case){3, 64, 13, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    check_conv((conv_case){3, 67, 9, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0});
    check_conv((conv_case){4, 70, 12, 12, 24, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0}); /* no padding */
    check_conv((conv_case){3, 64, 12, 12, 16, 3, 3, 1, 1, 2, 0, 1, 2, 1, 1, 1, 1, 1}); /* asymmetric */
    /* 32 to 63 channels with 32 tiles or more (AVX2 builds): 37 and 20 leave partial vectors of
     * channels and of filters on channels-last tensors */
    check_conv((conv_case){1, 37, 25, 23, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    /* 12 tiles (too few: the packed GEMM, not Winograd) */
    check_conv((conv_case){1, 64, 13, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    check_conv((conv_case){1, 64, 57, 61, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}); /* 240 tiles */
    /* 441 tiles in two blocks of at most 368 (the block shrinks as channels grow) */
    check_conv((conv_case){1, 300, 84, 83, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

/* ---- linear ---- */

static double gelu_ref(double s) { return 0.5 * s * (1 + erf(s / sqrt(2))); }

/* act: a dl_activation (the bounds and slope of conv_act_ref), or DL_ACT_GELU / DL_ACT_SILU */
/* res: with a fused residual of y's shape added before the activation (ABI 1.8) */
static void check_linear_res(int n, int in_f, int out_f, int bias, int act, int res) {
    dl_op_attrs a;
    attrs(&a);
    a.activation = act, a.clip_min = -0.25f, a.clip_max = 0.5f, a.alpha = 0.125f, a.residual = res;
    tt in[4] = {MAKE(-1, 1, n, in_f), MAKE(-0.3f, 0.3f, out_f, in_f), MAKE(-1, 1, out_f)};
    const int n_in = (bias ? 3 : 2) + res;
    if (res) {
        if (!bias) in[3] = in[2];
        in[n_in - 1] = MAKE(-1, 1, n, out_f);
    }
    tt y = MAKE(0, 1, n, out_f);
    run_op(DL_OP_LINEAR, &a, in, n_in, &y);
    double *ref = calloc((size_t)y.n, sizeof *ref);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out_f; o++) {
            double s = bias ? in[2].data[o] : 0;
            for (int j = 0; j < in_f; j++) s += (double)in[0].data[i * in_f + j] * in[1].data[o * in_f + j];
            if (res) s += in[n_in - 1].data[i * out_f + o];
            ref[i * out_f + o] = act == DL_ACT_GELU   ? gelu_ref(s)
                                 : act == DL_ACT_SILU ? s / (1 + exp(-s))
                                                      : conv_act_ref(act, s);
        }
    expect_close(&y, ref, 1e-8, res ? "linear + residual" : "linear");
    free(ref);
    for (int i = 0; i < 3 + res; i++) free(in[i].data);
    free(y.data);
}
static void check_linear(int n, int in_f, int out_f, int bias, int act) {
    check_linear_res(n, in_f, out_f, bias, act, 0);
}

OP_TEST(linear) {
    check_linear(1, 37, 23, 1, 0);
    check_linear(5, 129, 67, 1, DL_ACT_RELU);
    check_linear(3, 7, 1, 0, 0);
    check_linear(1, 513, 1001, 0, DL_ACT_RELU);
}

/* Two rows or more and a constant weight: the packed GEMM (ops/linear.c), with partial panels of
 * rows (not a multiple of 6) and of features (not of 16), k in several passes of 256, and every
 * activation in its epilogue. */
OP_TEST(linear_packed) {
    check_linear(2, 3, 5, 1, 0);
    check_linear(7, 600, 37, 1, DL_ACT_GELU);
    check_linear(13, 257, 131, 0, DL_ACT_SILU);
    check_linear(97, 70, 290, 1, DL_ACT_CLIP);
    check_linear(31, 33, 17, 1, DL_ACT_LEAKY_RELU);
    check_linear(6, 512, 16, 1, DL_ACT_SIGMOID);
    check_linear(19, 100, 45, 0, DL_ACT_RELU);
}

OP_TEST(linear_fused_residual) {
    /* y = act(x W^T + b + r) (ABI 1.8): sgemv, OpenBLAS by slices, the packed GEMM's epilogue */
    check_linear_res(1, 37, 23, 1, DL_ACT_RELU, 1);
    check_linear_res(3, 7, 5, 0, 0, 1);
    check_linear_res(7, 600, 37, 1, DL_ACT_GELU, 1);
    check_linear_res(97, 70, 290, 0, DL_ACT_CLIP, 1);
    check_linear_res(19, 100, 45, 1, 0, 1);
    weights_late = 1;
    check_linear_res(5, 129, 67, 1, DL_ACT_RELU, 1);
    weights_late = 0;
}

OP_TEST(linear_weight_known_only_at_run_time) {
    weights_late = 1; /* sgemm per slice of features */
    check_linear(7, 600, 37, 1, DL_ACT_GELU);
    check_linear(13, 57, 31, 0, DL_ACT_CLIP);
    weights_late = 0;
}

/* ---- pooling ---- */

static void check_pool(int maxp, int n, int c, int h, int w, int k, int s, int p, int ceil_mode, int cip, int dil) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = a.kernel[1] = k, a.stride[0] = a.stride[1] = s, a.dilation[0] = a.dilation[1] = dil;
    a.pad_begin[0] = a.pad_begin[1] = a.pad_end[0] = a.pad_end[1] = p;
    a.ceil_mode = ceil_mode, a.count_include_pad = cip;
    int o[2], sz[2] = {h, w};
    for (int d = 0; d < 2; d++) { /* PyTorch's formula, written out independently */
        int span = sz[d] + 2 * p - (dil * (k - 1) + 1);
        o[d] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
        if (ceil_mode && (o[d] - 1) * s >= sz[d] + p) o[d]--;
    }
    tt x = MAKE(-1, 1, n, c, h, w), y = MAKE(0, 1, n, c, o[0], o[1]);
    run_op(maxp ? DL_OP_MAXPOOL2D : DL_OP_AVGPOOL2D, &a, &x, 1, &y);
    double *ref = calloc((size_t)y.n, sizeof *ref);
    for (int pl = 0; pl < n * c; pl++)
        for (int oy = 0; oy < o[0]; oy++)
            for (int ox = 0; ox < o[1]; ox++) {
                double m = -DBL_MAX, sum = 0;
                int cnt = 0, cnt_pad = 0;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int iy = oy * s - p + ky * dil, ix = ox * s - p + kx * dil;
                        if (iy < h + p && ix < w + p) cnt_pad++; /* inside the padded border */
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        double v = x.data[((size_t)pl * h + iy) * w + ix];
                        m = v > m ? v : m;
                        sum += v;
                        cnt++;
                    }
                ref[((size_t)pl * o[0] + oy) * o[1] + ox] = maxp ? m : sum / (cip ? cnt_pad : cnt);
            }
    char what[96];
    snprintf(what, sizeof what, "%s k%d s%d p%d ceil%d cip%d d%d", maxp ? "maxpool" : "avgpool", k, s, p, ceil_mode,
             cip, dil);
    expect_close(&y, ref, 1e-10, what);
    free(ref);
    free(x.data);
    free(y.data);
}

OP_TEST(pooling) {
    for (int maxp = 0; maxp < 2; maxp++) {
        check_pool(maxp, 2, 3, 11, 13, 2, 2, 0, 0, 1, 1);
        check_pool(maxp, 1, 5, 9, 9, 3, 2, 1, 0, 1, 1);
        check_pool(maxp, 1, 4, 10, 7, 3, 2, 1, 1, 1, 1);
        check_pool(maxp, 2, 2, 8, 11, 3, 2, 1, 1, 0, 1);
        check_pool(maxp, 1, 3, 7, 7, 3, 3, 0, 1, 1, 1);
        check_pool(maxp, 1, 3, 6, 9, 2, 1, 1, 0, 0, 1);
        check_pool(maxp, 1, 2, 9, 8, 3, 2, 2, 1, 1, 1);   /* padding beyond half the kernel (ONNX allows it) */
        check_pool(maxp, 2, 6, 55, 55, 3, 2, 0, 1, 1, 1); /* SqueezeNet's: ceil_mode adds a window */
        check_pool(maxp, 1, 3, 12, 14, 5, 1, 2, 0, 1, 1); /* 5x5 stride 1: 25 taps */
    }
    /* average pooling channels-last on more channels than it sums at a time (64): 70, 2x2 stride 2
     * (DenseNet's transitions), and 3x3 with padding counted and not */
    check_pool(0, 2, 70, 9, 8, 2, 2, 0, 0, 1, 1);
    check_pool(0, 1, 70, 7, 9, 3, 2, 1, 1, 0, 1);
    check_pool(0, 1, 70, 7, 9, 3, 2, 1, 0, 1, 1);
    /* max pooling 8 planes at a time (window8.c): a last task of 5 planes and 7-wide rows, then a
     * map wide enough for several bands of rows */
    check_pool(1, 1, 13, 7, 7, 3, 1, 1, 0, 1, 1);
    check_pool(1, 2, 13, 37, 150, 3, 2, 1, 1, 1, 1);
    /* channels-last max pooling: 83 channels, blocks of 4 vectors, single ones and a partial one;
     * a dilated window with a stride; and 9x9 (81 taps), more than its fast path lists */
    check_pool(1, 2, 83, 15, 17, 3, 2, 1, 1, 1, 1);
    check_pool(1, 1, 83, 13, 12, 3, 2, 2, 0, 1, 2);
    check_pool(1, 1, 83, 12, 14, 9, 1, 4, 0, 1, 1);
    /* dilated max pooling (ONNX MaxPool dilations) */
    check_pool(1, 1, 3, 13, 11, 3, 1, 0, 0, 1, 2);
    check_pool(1, 2, 2, 12, 9, 2, 2, 1, 1, 1, 3);
    check_pool(1, 1, 2, 10, 10, 3, 3, 3, 1, 1, 2);
}

OP_TEST(global_avgpool) {
    /* a plane of 63 (7 blocks of 8 and a tail), then enough planes of 4087 for the threads */
    const int shapes[2][4] = {{3, 5, 7, 9}, {2, 9, 61, 67}};
    for (int c = 0; c < 2; c++) {
        const int *d = shapes[c], planes = d[0] * d[1], plane = d[2] * d[3];
        dl_op_attrs a;
        attrs(&a);
        tt x = MAKE(-1, 1, d[0], d[1], d[2], d[3]), y = MAKE(0, 1, d[0], d[1], 1, 1);
        run_op(DL_OP_GLOBAL_AVGPOOL, &a, &x, 1, &y);
        double ref[18];
        for (int p = 0; p < planes; p++) {
            double s = 0;
            for (int i = 0; i < plane; i++) s += x.data[(size_t)p * plane + i];
            ref[p] = s / plane;
        }
        expect_close(&y, ref, 1e-10, "global_avgpool");
        free(x.data);
        free(y.data);
    }
}

/* ---- elementwise, data movement ---- */

OP_TEST(relu_flatten_dropout_reshape) {
    dl_op_attrs a;
    attrs(&a);
    a.axis = 1; /* flatten [2, 3, 5, 7] from dim 1: [2, 105] */
    tt x = MAKE(-1, 1, 2, 3, 5, 7);
    double *ref = malloc((size_t)x.n * sizeof *ref);
    const dl_op_kind kinds[4] = {DL_OP_RELU, DL_OP_FLATTEN, DL_OP_DROPOUT, DL_OP_RESHAPE};
    for (int t = 0; t < 4; t++) {
        tt y = kinds[t] == DL_OP_FLATTEN   ? MAKE(0, 1, 2, 105)
               : kinds[t] == DL_OP_RESHAPE ? MAKE(0, 1, 7, 30)
                                           : MAKE(0, 1, 2, 3, 5, 7);
        run_op(kinds[t], &a, &x, 1, &y);
        for (int64_t i = 0; i < x.n; i++) ref[i] = kinds[t] == DL_OP_RELU && x.data[i] < 0 ? 0 : x.data[i];
        expect_close(&y, ref, 1e-12, kinds[t] == DL_OP_RELU ? "relu" : "copy");
        free(y.data);
    }
    free(ref);
    free(x.data);
}

OP_TEST(add_with_and_without_relu) {
    for (int relu = 0; relu < 2; relu++) {
        dl_op_attrs a;
        attrs(&a);
        a.activation = relu ? DL_ACT_RELU : DL_ACT_NONE;
        tt in[2] = {MAKE(-1, 1, 3, 7, 5, 3), MAKE(-1, 1, 3, 7, 5, 3)};
        tt y = MAKE(0, 1, 3, 7, 5, 3);
        run_op(DL_OP_ADD, &a, in, 2, &y);
        double *ref = malloc((size_t)y.n * sizeof *ref);
        for (int64_t i = 0; i < y.n; i++) {
            double v = (double)in[0].data[i] + in[1].data[i];
            ref[i] = relu && v < 0 ? 0 : v;
        }
        expect_close(&y, ref, 1e-12, "add");
        free(ref);
        free(in[0].data);
        free(in[1].data);
        free(y.data);
    }
}

static void check_add_broadcast(tt a, tt b, tt y, int relu) {
    dl_op_attrs at;
    attrs(&at);
    at.activation = relu ? DL_ACT_RELU : DL_ACT_NONE;
    tt in[2] = {a, b};
    run_op(DL_OP_ADD, &at, in, 2, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t c[8];
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, c);
        double v = (double)a.data[bcast_index(&a, y.nd, c)] + b.data[bcast_index(&b, y.nd, c)];
        ref[i] = relu && v < 0 ? 0 : v;
    }
    expect_close(&y, ref, 1e-12, "broadcast add");
    free(ref);
    free(a.data);
    free(b.data);
    free(y.data);
}

OP_TEST(add_broadcasting) {
    check_add_broadcast(MAKE(-1, 1, 3, 7, 5, 3), MAKE(-1, 1, 7, 1, 3), MAKE(0, 1, 3, 7, 5, 3), 0);
    check_add_broadcast(MAKE(-1, 1, 2, 1, 5), MAKE(-1, 1, 3, 1), MAKE(0, 1, 2, 3, 5), 1);
    check_add_broadcast(MAKE(-1, 1, 1), MAKE(-1, 1, 4, 3), MAKE(0, 1, 4, 3), 0);
    check_add_broadcast(MAKE(-1, 1, 5, 1, 1), MAKE(-1, 1, 2, 5, 3, 4), MAKE(0, 1, 2, 5, 3, 4), 0);
    /* operands of fewer dims that channels-last reads in place too (nhwc.c): ones in C, a scalar */
    check_add_broadcast(MAKE(-1, 1, 2, 5, 3, 4), MAKE(-1, 1, 1, 3, 4), MAKE(0, 1, 2, 5, 3, 4), 1);
    check_add_broadcast(MAKE(-1, 1, 2, 5, 3, 4), MAKE(-1, 1, 1), MAKE(0, 1, 2, 5, 3, 4), 0);
}

/* ---- matmul ---- */

static void check_matmul(tt a, tt b, tt *c, tt y, int ta, int tb, float alpha, float beta) {
    dl_op_attrs at;
    attrs(&at);
    at.trans_a = ta, at.trans_b = tb, at.alpha = alpha, at.beta = beta;
    tt in[3] = {a, b, c ? *c : a};
    run_op(DL_OP_MATMUL, &at, in, c ? 3 : 2, &y);
    const int64_t m = y.shape[y.nd - 2], n = y.shape[y.nd - 1], k = a.shape[a.nd - (ta ? 2 : 1)];
    const int64_t ar = a.shape[a.nd - 2], ac = a.shape[a.nd - 1], br = b.shape[b.nd - 2], bc = b.shape[b.nd - 1];
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t co[8];
    for (int64_t i = 0; i < y.n; i++) {
        coords(&y, i, co);
        int64_t row = co[y.nd - 2], col = co[y.nd - 1];
        /* the first element of each operand's matrix: coordinates with the last two set to 0 */
        co[y.nd - 2] = co[y.nd - 1] = 0;
        tt a2 = a, b2 = b; /* batch dims only: index the matrices by hand below */
        a2.nd -= 2, b2.nd -= 2;
        int64_t abase = bcast_index(&a2, y.nd - 2, co) * ar * ac, bbase = bcast_index(&b2, y.nd - 2, co) * br * bc;
        double s = 0;
        for (int64_t kk = 0; kk < k; kk++) {
            double av = a.data[abase + (ta ? kk * ac + row : row * ac + kk)];
            double bv = b.data[bbase + (tb ? col * bc + kk : kk * bc + col)];
            s += av * bv;
        }
        co[y.nd - 2] = row, co[y.nd - 1] = col;
        ref[i] = alpha * s + (c ? beta * (double)c->data[bcast_index(c, y.nd, co)] : 0);
    }
    char what[64];
    snprintf(what, sizeof what, "matmul %lldx%lldx%lld ta%d tb%d", (long long)m, (long long)k, (long long)n, ta, tb);
    expect_close(&y, ref, 1e-10, what);
    free(ref);
    free(a.data);
    free(b.data);
    if (c) free(c->data);
    free(y.data);
}

OP_TEST(matmul) {
    check_matmul(MAKE(-1, 1, 3, 5), MAKE(-1, 1, 5, 7), NULL, MAKE(0, 1, 3, 7), 0, 0, 1, 1);
    tt c1 = MAKE(-1, 1, 5);
    check_matmul(MAKE(-1, 1, 2, 1, 4, 6), MAKE(-1, 1, 3, 6, 5), &c1, MAKE(0, 1, 2, 3, 4, 5), 0, 0, 1, 1);
    tt c2 = MAKE(-1, 1, 4, 1);
    check_matmul(MAKE(-1, 1, 6, 4), MAKE(-1, 1, 9, 6), &c2, MAKE(0, 1, 4, 9), 1, 1, 0.25f, -0.5f);
    tt c3 = MAKE(-1, 1, 37, 301);
    check_matmul(MAKE(-1, 1, 37, 129), MAKE(-1, 1, 301, 129), &c3, MAKE(0, 1, 37, 301), 0, 1, 1.5f, 2);
    check_matmul(MAKE(-1, 1, 3, 11, 2), MAKE(-1, 1, 3, 11, 13), NULL, MAKE(0, 1, 3, 2, 13), 1, 0, 1, 1);
    /* one weight for every batch, the batches folded into one product: [17, 1, 9] x [9, 6] (a
     * sequence-first transformer's projection), with a bias, b transposed or not */
    tt c4 = MAKE(-1, 1, 6);
    check_matmul(MAKE(-1, 1, 17, 1, 9), MAKE(-1, 1, 9, 6), &c4, MAKE(0, 1, 17, 1, 6), 0, 0, 1, 1);
    check_matmul(MAKE(-1, 1, 2, 5, 3, 9), MAKE(-1, 1, 6, 9), NULL, MAKE(0, 1, 2, 5, 3, 6), 0, 1, 0.5f, 1);
    check_matmul(MAKE(-1, 1, 4, 3, 9), MAKE(-1, 1, 1, 9, 7), NULL, MAKE(0, 1, 4, 3, 7), 0, 0, 1, 1);
}

OP_TEST(batchnorm) {
    /* 5 channels, and 37: in NHWC two whole vectors of 16 and a partial one (or four of 8 and 5) */
    const int64_t shapes[2][4] = {{2, 5, 3, 7}, {3, 37, 4, 3}};
    for (int v = 0; v < 2; v++) {
        const int64_t *sh = shapes[v], c = sh[1], plane = sh[2] * sh[3];
        dl_op_attrs a;
        attrs(&a);
        a.epsilon = 1e-3f;
        tt in[5] = {MAKE(-2, 2, sh[0], c, sh[2], sh[3]), MAKE(0.5f, 1.5f, c), MAKE(-1, 1, c), MAKE(-1, 1, c),
                    MAKE(0.1f, 2, c)};
        tt y = MAKE(0, 1, sh[0], c, sh[2], sh[3]);
        run_op(DL_OP_BATCHNORM, &a, in, 5, &y);
        double *ref = malloc((size_t)y.n * sizeof *ref);
        for (int64_t i = 0; i < y.n; i++) {
            int64_t ch = i / plane % c;
            ref[i] = (in[0].data[i] - (double)in[3].data[ch]) / sqrt((double)in[4].data[ch] + 1e-3) * in[1].data[ch] +
                     in[2].data[ch];
        }
        expect_close(&y, ref, 1e-10, "batchnorm");
        free(ref);
        free(y.data);
        for (int i = 0; i < 5; i++) free(in[i].data);
    }
}

static void check_softmax(int axis, float scale, int last) {
    dl_op_attrs a;
    attrs(&a);
    a.axis = axis;
    tt x = MAKE(-scale, scale, 3, 5, 4, last), y = MAKE(0, 1, 3, 5, 4, last);
    run_op(DL_OP_SOFTMAX, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    int64_t inner = 1;
    for (int d = axis + 1; d < 4; d++) inner *= x.shape[d];
    int64_t len = x.shape[axis];
    for (int64_t i = 0; i < y.n; i++) {
        int64_t base = i - ((i / inner) % len) * inner; /* same row, position 0 along axis */
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++) m = fmax(m, x.data[base + j * inner]);
        for (int64_t j = 0; j < len; j++) s += exp(x.data[base + j * inner] - m);
        ref[i] = exp(x.data[i] - m) / s;
    }
    expect_close(&y, ref, 1e-10, "softmax");
    free(ref);
    free(x.data);
    free(y.data);
}

OP_TEST(softmax_axes_and_stability) {
    check_softmax(1, 3, 7);
    check_softmax(3, 3, 7);
    check_softmax(3, 1000, 7); /* exp(1000) overflows without subtracting the max */
    check_softmax(0, 50, 7);
    check_softmax(3, 3, 37);  /* a contiguous row: whole vectors and a masked tail (16 lanes: 32 + 5) */
    check_softmax(3, 90, 37); /* exps below the float range (0) beside the max (1) */
}

OP_TEST(softmax_propagates_nan) {
    /* a NaN anywhere in a row (in the 8-lane part or the tail) makes the whole row NaN */
    for (int at = 0; at < 2; at++) {
        dl_op_attrs a;
        attrs(&a);
        a.axis = 1;
        tt x = MAKE(-3, 3, 3, 37), y = MAKE(0, 1, 3, 37);
        x.data[37 + (at ? 35 : 12)] = NAN; /* row 1 */
        run_op(DL_OP_SOFTMAX, &a, &x, 1, &y);
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < 37; i++)
                cr_expect(r == 1 ? isnan(y.data[r * 37 + i]) : y.data[r * 37 + i] > 0, "row %d [%d] = %g (NaN at %s)",
                          r, i, y.data[r * 37 + i], at ? "the tail" : "a lane");
        free(x.data);
        free(y.data);
    }
}

/* Small shapes along every axis, then larger ones (odd sizes) where the runs copied are a vector
 * and a tail, under one vector, and past 256 floats, over rows shared out in tasks */
OP_TEST(concat_all_axes) {
    static const int64_t bases[2][4] = {{2, 3, 4, 5}, {3, 5, 41, 7}}, exts[2][3] = {{1, 3, 2}, {37, 5, 300}};
    for (int big = 0; big < 2; big++)
        for (int axis = 0; axis < 4; axis++) {
            dl_op_attrs a;
            attrs(&a);
            a.axis = axis;
            const int64_t *base = bases[big], *ext = exts[big];
            tt in[3];
            int64_t outs[4] = {base[0], base[1], base[2], base[3]};
            outs[axis] = ext[0] + ext[1] + ext[2];
            for (int i = 0; i < 3; i++) {
                int64_t s[4] = {base[0], base[1], base[2], base[3]};
                s[axis] = ext[i];
                in[i] = make(4, s, -1, 1);
            }
            tt y = make(4, outs, 0, 1);
            run_op(DL_OP_CONCAT, &a, in, 3, &y);
            double *ref = malloc((size_t)y.n * sizeof *ref);
            int64_t idx[4];
            for (int64_t i = 0; i < y.n; i++) {
                int64_t r = i;
                for (int d = 3; d >= 0; d--) idx[d] = r % outs[d], r /= outs[d];
                int src = 0;
                int64_t pos = idx[axis];
                while (pos >= ext[src]) pos -= ext[src++];
                int64_t s[4] = {base[0], base[1], base[2], base[3]};
                s[axis] = ext[src];
                idx[axis] = pos;
                ref[i] = in[src].data[((idx[0] * s[1] + idx[1]) * s[2] + idx[2]) * s[3] + idx[3]];
            }
            expect_close(&y, ref, 1e-12, "concat");
            free(ref);
            for (int i = 0; i < 3; i++) free(in[i].data);
            free(y.data);
        }
}

/* ---- supports() says no, with a reason ---- */

static void expect_refused(dl_op *op, const char *reason) {
    load();
    dl_error why = {{0}};
    cr_expect_not(be->supports(be->self, op, &why), "should refuse (%s)", reason);
    cr_expect(strstr(why.msg, reason), "reason '%s' lacks '%s'", why.msg, reason);
}

/* A fused residual (ABI 1.8): refused where its tensor is not the output's shape; and a host of
 * ABI 1.7 (attrs of its size) is never read as asking for one, whatever lies past its struct. */
Test(cpu_ops, residual_attribute_checked_and_versioned) {
    load();
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = a.kernel[1] = 1, a.residual = 1;
    int64_t xs[4] = {1, 4, 5, 5}, ws[4] = {6, 4, 1, 1}, ys[4] = {1, 6, 5, 5}, rs[4] = {1, 6, 5, 4};
    dl_tensor in[3] = {{NULL, {1, 0}, 4, DL_F32, xs, NULL, 0},
                       {NULL, {1, 0}, 4, DL_F32, ws, NULL, 0},
                       {NULL, {1, 0}, 4, DL_F32, rs, NULL, 0}};
    dl_tensor out = {NULL, {1, 0}, 4, DL_F32, ys, NULL, 0};
    dl_op op = {sizeof op, DL_OP_CONV2D, "c", &a, 3, in, 1, &out, 0};
    dl_error why = {{0}};
    cr_expect(!be->supports(be->self, &op, &why) && strstr(why.msg, "differs from the output"), "%s", why.msg);
    rs[3] = 5;
    cr_expect(be->supports(be->self, &op, &why), "a conv + residual refused: %s", why.msg);
    in[2].dtype = DL_F16;
    cr_expect(!be->supports(be->self, &op, &why) && strstr(why.msg, "differs from the output"), "%s", why.msg);
    /* a 1.7 host: its attrs end where `residual` starts; the third input is the bias again */
    cr_assert_eq(dl_op_attrs_size(7), offsetof(dl_op_attrs, residual));
    a.struct_size = (uint32_t)dl_op_attrs_size(7);
    int64_t bs[1] = {6};
    in[2] = (dl_tensor){NULL, {1, 0}, 1, DL_F32, bs, NULL, 0};
    cr_expect(be->supports(be->self, &op, &why), "a 1.7 host's conv with bias refused: %s", why.msg);
    cr_expect_eq(dl_op_residual(&op), 0);
    cr_expect_eq(dl_op_min_minor(&op), 0);
}

Test(cpu_ops, supports_refuses_with_reasons) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel[0] = a.kernel[1] = 3;
    int64_t xs[4] = {1, 4, 8, 8}, ws[4] = {6, 3, 3, 3}, ys[4] = {1, 6, 6, 6};
    dl_tensor in[2] = {{NULL, {1, 0}, 4, DL_F32, xs, NULL, 0}, {NULL, {1, 0}, 4, DL_F32, ws, NULL, 0}};
    dl_tensor out = {NULL, {1, 0}, 4, DL_F32, ys, NULL, 0};
    dl_op op = {sizeof op, DL_OP_CONV2D, "c", &a, 2, in, 1, &out, 0};
    expect_refused(&op, "input channels"); /* weight says 3 channels, x has 4 */
    ws[1] = 4;
    dl_error why;
    cr_expect(be->supports(be->self, &op, &why), "a correct conv is refused: %s", why.msg);
    /* storage formats: f16 and bf16 anywhere, channels-last 4-D tensors; not other dtypes or strides */
    in[0].dtype = DL_F16, in[1].dtype = DL_BF16;
    cr_expect(be->supports(be->self, &op, &why), "f16 x, bf16 weight refused: %s", why.msg);
    int64_t cl[4], odd[4] = {256, 1, 4, 32}; /* [1,4,8,8] as N, C, W-major then H: not channels-last */
    dl_channels_last_strides(xs, cl);
    in[0].strides = cl;
    cr_expect(be->supports(be->self, &op, &why), "channels-last f16 x refused: %s", why.msg);
    in[0].dtype = (dl_dtype){DL_DTYPE_INT, 32, 1};
    expect_refused(&op, "input 1 is int32, not a dtype this backend takes");
    in[0].dtype = DL_F32, in[1].dtype = (dl_dtype){DL_DTYPE_UINT, 8, 1};
    expect_refused(&op, "input 2 is uint8, not a dtype this backend takes");
    in[1].dtype = DL_F32, out.dtype = (dl_dtype){DL_DTYPE_FLOAT, 64, 1};
    expect_refused(&op, "the output is float64, not a dtype this backend takes");
    out.dtype = DL_F32;
    in[0].strides = odd;
    expect_refused(&op, "input 1 is not in a layout this backend takes (strided)");
    in[0].strides = NULL, out.strides = odd;
    expect_refused(&op, "the output is not in a layout this backend takes (strided)");
    out.strides = NULL;
    ys[2] = 7;
    expect_refused(&op, "does not follow from the inputs (expected [1, 6, 6, 6])");
    ys[2] = 6;
    op.kind = 99;
    expect_refused(&op, "unknown");
    op.kind = DL_OP_RELU;
    a.activation = DL_ACT_RELU;
    op.n_inputs = 1;
    expect_refused(&op, "fused activation");
    a.activation = DL_ACT_NONE;
    int64_t lx[2] = {2, 10}, lw[2] = {5, 11}, ly[2] = {2, 5};
    dl_tensor lin[2] = {{NULL, {1, 0}, 2, DL_F32, lx, NULL, 0}, {NULL, {1, 0}, 2, DL_F32, lw, NULL, 0}};
    dl_tensor lout = {NULL, {1, 0}, 2, DL_F32, ly, NULL, 0};
    dl_op lop = {sizeof lop, DL_OP_LINEAR, "l", &a, 2, lin, 1, &lout, 0};
    expect_refused(&lop, "weight [5, 11] does not take 10 features");
    lop.kind = DL_OP_MATMUL; /* [2,10] x [5,11]: inner dimensions differ */
    expect_refused(&lop, "inner dimensions differ: #1 [2, 10] has 10, #2 [5, 11] has 5");
    lop.kind = DL_OP_ADD; /* [2,10] + [5,11] does not broadcast */
    expect_refused(&lop, "do not broadcast to one shape");
    int64_t rm2[2] = {10, 1}; /* strides on a 2-D tensor, even row-major ones: only NULL is row-major */
    lin[0].strides = rm2;
    expect_refused(&lop, "input 1 is not in a layout this backend takes (strided)");
    lin[0].strides = NULL;
    lop.kind = DL_OP_SOFTMAX; /* the ABI's axes are non-negative */
    lop.n_inputs = 1;
    ly[1] = 10;
    a.axis = -1;
    expect_refused(&lop, "axis -1 is negative");
    a.axis = 1;
    dl_error ok;
    cr_expect(be->supports(be->self, &lop, &ok), "softmax along axis 1 is refused: %s", ok.msg);
}

/* ---- ABI 1.1 activations ---- */

static void check_unary(dl_op_kind kind, float scale, float p0, float p1, const char *what) {
    dl_op_attrs a;
    attrs(&a);
    a.alpha = p0;
    a.clip_min = p0;
    a.clip_max = p1;
    tt x = MAKE(-scale, scale, 3, 5, 7, 11), y = MAKE(0, 1, 3, 5, 7, 11);
    run_op(kind, &a, &x, 1, &y);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t i = 0; i < y.n; i++) {
        double v = x.data[i];
        ref[i] = kind == DL_OP_LEAKY_RELU ? (v >= 0 ? v : p0 * v)
                 : kind == DL_OP_SIGMOID  ? 1.0 / (1.0 + exp(-v))
                                          : fmin(fmax(v, p0), p1);
    }
    expect_close(&y, ref, kind == DL_OP_SIGMOID ? 1e-12 : 1e-14, what);
    for (int64_t i = 0; i < y.n; i++) cr_assert(isfinite(y.data[i]), "%s: non-finite output", what);
    free(ref);
    free(x.data);
    free(y.data);
}

OP_TEST(leaky_relu_sigmoid_clip) {
    check_unary(DL_OP_LEAKY_RELU, 1, 0.2f, 0, "leaky_relu");
    check_unary(DL_OP_LEAKY_RELU, 3, -1.5f, 0, "leaky_relu negative slope");
    check_unary(DL_OP_SIGMOID, 3, 0, 0, "sigmoid");
    check_unary(DL_OP_SIGMOID, 100, 0, 0, "sigmoid far from zero"); /* exp(100) would overflow a naive form */
    check_unary(DL_OP_CLIP, 1, -0.5f, 0.25f, "clip");
    check_unary(DL_OP_CLIP, 1, -INFINITY, 0.1f, "clip max only");
}

/* Max pooling lets NaN through (PyTorch's semantics) on each of its paths: 2x2/2 (VGG), and the
 * 8-channel one (window8.c) with a stride and with a dilation. */
OP_TEST(maxpool_propagates_nan) {
    const int cfg[3][4] = {{2, 2, 0, 1}, {3, 2, 1, 1}, {3, 1, 2, 2}}; /* kernel, stride, pad, dilation */
    for (int c = 0; c < 3; c++) {
        dl_op_attrs a;
        attrs(&a);
        a.kernel[0] = a.kernel[1] = cfg[c][0], a.stride[0] = a.stride[1] = cfg[c][1];
        a.pad_begin[0] = a.pad_begin[1] = a.pad_end[0] = a.pad_end[1] = cfg[c][2];
        a.dilation[0] = a.dilation[1] = cfg[c][3];
        int ext = cfg[c][3] * (cfg[c][0] - 1) + 1, o = (9 + 2 * cfg[c][2] - ext) / cfg[c][1] + 1;
        /* 83 channels, the NaN in 2, 20 and 24 (in NHWC lanes of the first block of 4 vectors),
         * 70 (a single vector after the blocks) and 82 (the partial last vector) */
        enum { C = 83 };
        tt x = MAKE(-1, 1, 1, C, 9, 9), y = MAKE(0, 1, 1, C, o, o);
        const int nan_ch[5] = {2, 20, 24, 70, 82};
        for (int i = 0; i < 5; i++) x.data[(nan_ch[i] * 9 + 4) * 9 + 5] = NAN; /* at (4, 5) */
        run_op(DL_OP_MAXPOOL2D, &a, &x, 1, &y);
        for (int ch = 0; ch < C; ch++)
            for (int oy = 0; oy < o; oy++)
                for (int ox = 0; ox < o; ox++) {
                    int hit = 0; /* does this output's window hold (4, 5) of a channel with the NaN? */
                    for (int i = 0; i < cfg[c][0]; i++)
                        for (int j = 0; j < cfg[c][0]; j++)
                            hit |= (ch == 2 || ch == 20 || ch == 24 || ch == 70 || ch == 82) &&
                                   oy * cfg[c][1] - cfg[c][2] + i * cfg[c][3] == 4 &&
                                   ox * cfg[c][1] - cfg[c][2] + j * cfg[c][3] == 5;
                    float v = y.data[(ch * o + oy) * o + ox];
                    cr_expect(hit ? isnan(v) : !isnan(v), "config %d channel %d output (%d, %d): %g, window %s the NaN",
                              c, ch, oy, ox, v, hit ? "holds" : "does not hold");
                }
        free(x.data);
        free(y.data);
    }
}

/* ---- storage formats: in place, workspace, mixed formats ---- */

/* In place (output over input 0, as the memory plan does for elementwise ops) gives the same bits
 * as out of place in every format: input 0 is read in full before the output is written, also
 * when one of them is converted and the other is not. */
Test(cpu_storage, in_place_matches_out_of_place) {
    const dl_op_kind kinds[] = {DL_OP_RELU, DL_OP_LEAKY_RELU, DL_OP_SIGMOID,   DL_OP_CLIP,    DL_OP_DROPOUT,
                                DL_OP_ADD,  DL_OP_ADD,        DL_OP_BATCHNORM, DL_OP_FLATTEN, DL_OP_RESHAPE};
    for (int m = -1; m < 5; m++) {
        mode = m < 0 ? f32_mode : modes[m];
        for (size_t t = 0; t < sizeof kinds / sizeof *kinds; t++) {
            dl_op_attrs a;
            attrs(&a);
            a.alpha = 0.1f, a.clip_min = -0.5f, a.clip_max = 0.5f, a.axis = 1;
            dl_op_kind kind = kinds[t];
            tt in[5] = {MAKE(-2, 2, 3, 5, 7, 9)};
            int n_in = 1;
            if (kind == DL_OP_ADD) /* same shape, then broadcasting [5, 1, 9] */
                in[n_in++] = t == 5 ? MAKE(-2, 2, 3, 5, 7, 9) : MAKE(-2, 2, 5, 1, 9);
            if (kind == DL_OP_BATCHNORM) {
                in[n_in++] = MAKE(0.5f, 1.5f, 5), in[n_in++] = MAKE(-1, 1, 5), in[n_in++] = MAKE(-1, 1, 5);
                in[n_in++] = MAKE(0.1f, 2, 5);
            }
            tt y1 = kind == DL_OP_FLATTEN   ? MAKE(0, 1, 3, 315)
                    : kind == DL_OP_RESHAPE ? MAKE(0, 1, 45, 21)
                                            : MAKE(0, 1, 3, 5, 7, 9);
            tt y2 = y1;
            y2.data = malloc((size_t)y1.n * sizeof(float));
            run_op_as(kind, &a, in, n_in, &y1, 0);
            run_op_as(kind, &a, in, n_in, &y2, 1);
            int64_t nan = 0;
            for (int64_t i = 0; i < y1.n; i++) nan += isnan(y1.data[i]);
            cr_expect_eq(nan, 0, "op %d (%s): %lld outputs not written", kind, mode.name, (long long)nan);
            cr_expect(memcmp(y1.data, y2.data, (size_t)y1.n * sizeof(float)) == 0,
                      "op %d (%s): in place differs from out of place", kind, mode.name);
            for (int i = 0; i < n_in; i++) free(in[i].data);
            free(y1.data);
            free(y2.data);
        }
    }
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* The workspace grows by the f32 staging of the converted activations and output only (weights
 * are converted once, at prepare, outside it); all f32 row-major, or f32 channels-last for an op
 * with an NHWC kernel: exactly the f32 kernel's. */
Test(cpu_storage, workspace_is_the_kernels_plus_staging) {
    const size_t x = align64(3 * 5 * 11 * 13 * 4), y = align64(3 * 7 * 11 * 13 * 4), r = align64(3 * 5 * 11 * 13 * 4);
    size_t conv_ws = 0; /* the f32 kernel's own, from the first round */
    for (int m = -1; m < 5; m++) {
        mode = m < 0 ? f32_mode : modes[m];
        int staged = mode.dtype.bits == 16 || mode.nhwc; /* the activations and output are converted */
        /* conv 3x3 pad 1 on 5 channels (its own workspace: the GEMM's buffers for the windows, the
         * same in every format), and relu (none) */
        dl_op_attrs a;
        attrs(&a);
        a.kernel[0] = a.kernel[1] = 3, a.stride[0] = a.stride[1] = 1;
        a.pad_begin[0] = a.pad_begin[1] = a.pad_end[0] = a.pad_end[1] = 1;
        tt in[3] = {MAKE(-1, 1, 3, 5, 11, 13), MAKE(-1, 1, 7, 5, 3, 3), MAKE(-1, 1, 7)};
        tt out = MAKE(0, 1, 3, 7, 11, 13);
        size_t ws = run_op_as(DL_OP_CONV2D, &a, in, 3, &out, 0);
        if (m < 0) conv_ws = ws;
        cr_expect(conv_ws > 0);
        /* f32 channels-last: the NHWC kernel, with no workspace of its own and nothing staged */
        const size_t want = mode.nhwc && mode.dtype.bits == 32 ? 0 : conv_ws + (staged ? x + y : 0);
        cr_expect_eq(ws, want, "conv workspace %zu (%s)", ws, mode.name);
        attrs(&a);
        tt rout = MAKE(0, 1, 3, 5, 11, 13);
        ws = run_op_as(DL_OP_RELU, &a, in, 1, &rout, 0);
        /* relu has an NHWC kernel: f32 channels-last is not staged */
        cr_expect_eq(ws, mode.dtype.bits == 16 ? 2 * r : 0, "relu workspace %zu (%s)", ws, mode.name);
        for (int i = 0; i < 3; i++) free(in[i].data);
        free(out.data);
        free(rout.data);
    }
}

/* The ops with NHWC kernels (ops/nhwc.c) run on f32 channels-last tensors where they lie: no
 * staging in their workspace (the NCHW depthwise kernel's own workspace is not asked for either).
 * Their results are checked against the naive references by every OP_TEST in "f32 nhwc" mode. */
Test(cpu_storage, nhwc_kernels_run_in_place_of_staging) {
    mode = modes[4];
    dl_op_attrs a;
    attrs(&a);
    a.groups = 6, a.kernel[0] = a.kernel[1] = 3, a.pad_begin[0] = a.pad_begin[1] = a.pad_end[0] = a.pad_end[1] = 1;
    tt dw[3] = {MAKE(-1, 1, 2, 6, 9, 7), MAKE(-1, 1, 6, 1, 3, 3), MAKE(-1, 1, 6)};
    tt y = MAKE(0, 1, 2, 6, 9, 7);
    cr_expect_eq(run_op_as(DL_OP_CONV2D, &a, dw, 3, &y, 0), 0, "depthwise staged or in NCHW");
    attrs(&a);
    a.activation = DL_ACT_HARD_SWISH, a.kernel[0] = a.kernel[1] = 1;
    tt pw[3] = {MAKE(-1, 1, 2, 6, 9, 7), MAKE(-1, 1, 17, 6, 1, 1), MAKE(-1, 1, 17)};
    tt y2 = MAKE(0, 1, 2, 17, 9, 7);
    cr_expect_eq(run_op_as(DL_OP_CONV2D, &a, pw, 3, &y2, 0), 0, "1x1 conv staged");
    attrs(&a);
    tt gp = MAKE(0, 1, 2, 6, 1, 1), mul[2] = {MAKE(-1, 1, 2, 6, 9, 7), MAKE(-1, 1, 2, 6, 1, 1)};
    cr_expect_eq(run_op_as(DL_OP_GLOBAL_AVGPOOL, &a, dw, 1, &gp, 0), 0, "global_avgpool staged");
    cr_expect_eq(run_op_as(DL_OP_MUL, &a, mul, 2, &y, 0), 0, "mul staged");
    /* ConvNeXt's layer scale [C, 1, 1] before the activation: channels-last where it lies */
    tt scale[2] = {MAKE(-1, 1, 6, 1, 1), dw[0]};
    cr_expect_eq(run_op_as(DL_OP_MUL, &a, scale, 2, &y, 0), 0, "mul by [C, 1, 1] staged");
    free(scale[0].data);
    /* a 3x3 conv, max pooling and a concat of 4-D tensors run in place too */
    attrs(&a);
    a.kernel[0] = a.kernel[1] = 3;
    tt c3[2] = {MAKE(-1, 1, 1, 6, 9, 7), MAKE(-1, 1, 4, 6, 3, 3)};
    tt y3 = MAKE(0, 1, 1, 4, 7, 5);
    cr_expect_eq(run_op_as(DL_OP_CONV2D, &a, c3, 2, &y3, 0), 0, "3x3 conv staged");
    a.stride[0] = a.stride[1] = 2;
    tt mp = MAKE(0, 1, 2, 6, 4, 3);
    cr_expect_eq(run_op_as(DL_OP_MAXPOOL2D, &a, dw, 1, &mp, 0), 0, "maxpool staged or in NCHW");
    attrs(&a);
    a.axis = 1;
    tt cat = MAKE(0, 1, 2, 12, 9, 7);
    cr_expect_eq(run_op_as(DL_OP_CONCAT, &a, (tt[]){dw[0], mul[0]}, 2, &cat, 0), 0, "concat staged");
    /* average pooling and batchnorm run in place; softmax has no NHWC kernel: converted around
     * the NCHW one */
    a.kernel[0] = a.kernel[1] = 3, a.stride[0] = a.stride[1] = 2;
    cr_expect_eq(run_op_as(DL_OP_AVGPOOL2D, &a, dw, 1, &mp, 0), 0, "avgpool staged");
    attrs(&a);
    tt bn[5] = {dw[0], MAKE(0.5f, 1.5f, 6), MAKE(-1, 1, 6), MAKE(-1, 1, 6), MAKE(0.1f, 2, 6)};
    cr_expect_eq(run_op_as(DL_OP_BATCHNORM, &a, bn, 5, &y, 0), 2 * 6 * sizeof(float), /* each channel's scale, shift */
                 "batchnorm staged");
    a.axis = 1;
    cr_expect_eq(run_op_as(DL_OP_SOFTMAX, &a, dw, 1, &y, 0), 2 * align64(2 * 6 * 9 * 7 * 4), "softmax not staged");
    for (int i = 1; i < 5; i++) free(bn[i].data);
    for (int i = 0; i < 3; i++) free(dw[i].data), free(pw[i].data);
    for (int i = 0; i < 2; i++) free(mul[i].data), free(c3[i].data);
    free(y.data), free(y2.data), free(y3.data), free(gp.data), free(mp.data), free(cat.data);
}

/* The plugin's preferred_layout (ABI 1.9): it never asks for channels-last itself (the host does,
 * seeing the model: dl_session_options.layout). A depthwise conv 3x3 on 16 channels and the same
 * op as a 3x3 conv, max and average pooling and a hard_swish follow their input; a softmax (no NHWC
 * kernel) and anything at 16 bits are row-major. */
Test(cpu_storage, preferred_layouts) {
    load();
    dl_op_attrs a;
    attrs(&a);
    a.groups = 16, a.kernel[0] = a.kernel[1] = 3;
    int64_t xs[4] = {1, 16, 30, 28}, ws[4] = {16, 1, 3, 3}, ys[4] = {1, 16, 28, 26};
    dl_tensor in[2] = {{NULL, {1, 0}, 4, DL_F32, xs, NULL, 0}, {NULL, {1, 0}, 4, DL_F32, ws, NULL, 0}};
    dl_tensor out = {NULL, {1, 0}, 4, DL_F32, ys, NULL, 0};
    dl_op op = {sizeof op, DL_OP_CONV2D, "c", &a, 2, in, 1, &out, DL_PRECISION_F32};
    cr_assert(DL_BACKEND_HAS(be, preferred_layout));
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_AS_INPUT, "depthwise");
    op.precision = DL_PRECISION_BF16;
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_ROW_MAJOR, "bf16");
    op.precision = DL_PRECISION_F32, a.groups = 1, ws[1] = 16; /* a 3x3 conv */
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_AS_INPUT, "3x3 conv");
    op.kind = DL_OP_MAXPOOL2D, op.n_inputs = 1;
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_AS_INPUT, "maxpool");
    op.kind = DL_OP_AVGPOOL2D;
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_AS_INPUT, "avgpool");
    op.kind = DL_OP_SOFTMAX;
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_ROW_MAJOR, "softmax");
    op.kind = DL_OP_HARD_SWISH;
    cr_expect_eq(be->preferred_layout(be->self, &op), DL_LAYOUT_AS_INPUT, "hard_swish");
}

/* Every tensor in its own format: each input is converted on its own, the output rounded once. */
Test(cpu_storage, mixed_formats) {
    mode = f32_mode;
    dl_op_attrs a;
    attrs(&a);
    a.activation = DL_ACT_RELU;
    /* add: f16 NHWC + bf16 NCHW (broadcast over N) -> f16 NHWC, with a fused relu */
    tt in[3] = {MAKE(-2, 2, 3, 5, 7, 9), MAKE(-2, 2, 1, 5, 7, 9)};
    tt y = MAKE(0, 1, 3, 5, 7, 9);
    const dl_dtype f16 = DL_F16, bf16 = DL_BF16, f32 = DL_F32;
    run_formats(DL_OP_ADD, &a, in, 2, &y, (dl_dtype[]){f16, bf16}, (int[]){1, 0}, f16, 1, 0);
    double *ref = malloc((size_t)y.n * sizeof *ref);
    for (int64_t i = 0; i < y.n; i++) {
        double v = (double)in[0].data[i] + in[1].data[i % in[1].n];
        ref[i] = v < 0 ? 0 : v;
    }
    expect_rounded(&y, ref, 0x1p-11, "add f16 nhwc + bf16 -> f16 nhwc");
    free(ref);
    free(in[0].data), free(in[1].data), free(y.data);
    /* linear: f32 x, bf16 weight, f16 bias -> bf16 */
    attrs(&a);
    in[0] = MAKE(-1, 1, 3, 37), in[1] = MAKE(-0.3f, 0.3f, 11, 37), in[2] = MAKE(-1, 1, 11);
    y = MAKE(0, 1, 3, 11);
    run_formats(DL_OP_LINEAR, &a, in, 3, &y, (dl_dtype[]){f32, bf16, f16}, (int[]){0, 0, 0}, bf16, 0, 0);
    ref = malloc((size_t)y.n * sizeof *ref);
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 11; o++) {
            double s = in[2].data[o];
            for (int j = 0; j < 37; j++) s += (double)in[0].data[i * 37 + j] * in[1].data[o * 37 + j];
            ref[i * 11 + o] = s;
        }
    expect_rounded(&y, ref, 0x1p-8, "linear f32 x, bf16 w, f16 b -> bf16");
    free(ref);
    for (int i = 0; i < 3; i++) free(in[i].data);
    free(y.data);
}
