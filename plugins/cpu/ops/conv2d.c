/* conv2d.c — 2-D convolution on the CPU: a direct kernel for depthwise convs (window8.c), Winograd
 * F(4x4,3x3) for 3x3 stride-1 convs with enough channels; for the rest, the packed GEMM of gemm.c
 * with the weight packed once at prepare, and the image's windows
 *   - read in place from a zero-padded copy of the image (CONV_DIRECT: stride-1 convs with a
 *     window, strided ones with a large window), or
 *   - packed straight from the image (no im2col buffer), with the filters as the product's rows
 *     (CONV_PACKED) or, on small maps with many taps, the pixels (CONV_PACKED_T),
 * where that measured faster than OpenBLAS (cpu_gemm_conv_form). Otherwise, and for a weight
 * known only at run time, OpenBLAS: a plain GEMM for 1x1 stride-1 unpadded convs, im2col + GEMM
 * for the others. Bias, a fused residual and the fused activation are applied to each block of
 * output as the GEMM produces it. */
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

int cpu_conv_plain_1x1(const dl_op_attrs *a) {
    return a->kernel[0] == 1 && a->kernel[1] == 1 && a->stride[0] == 1 && a->stride[1] == 1 && a->pad_begin[0] == 0 &&
           a->pad_begin[1] == 0 && a->pad_end[0] == 0 && a->pad_end[1] == 0;
}

/* A 1x1 conv of m filters over k channels and n pixels (its weight constant) with its pixels as
 * the product's rows and the image read in place (CONV_POINTWISE_T), or else with its filters as
 * the rows (CONV_PACKED). Measured (the 2-core AMD EPYC VM, 2 threads, cpu_gemm alone, forms
 * alternated): the pixel rows are faster where the conv narrows the channels (576 -> 96 on 14x14:
 * 0.137 against 0.163 ms; 192 -> 32 on 28x28: 0.064 against 0.091; 960 -> 160 on 7x7), the filter
 * rows where it widens them (32 -> 192 on 28x28: 0.067 against 0.088) and on maps whose channel
 * planes lie a multiple of 256 bytes apart (56x56, 112x112): a panel's k steps then fall into a
 * quarter of the L1 cache's sets or fewer (144 -> 24 on 56x56: 0.23 against 0.19 ms). */
static int pixel_rows_in_place(int64_t m, int64_t n, int64_t k) { return k > m && n % 64 != 0; }

/* CONV_DIRECT suits a conv with a window (not 1x1: its image is already the product's operand)
 * whose phase planes' rows (below) are at most 1.2 times its output rows, the gutter's columns
 * being computed and dropped: stride 1 (3x3 on maps of 10x10 and more), or strides up to 4 with
 * windows of 5x5 or more (the 7x7 stride-2 stem). With smaller windows a strided conv measured
 * faster with its windows packed (the padded copy and the dropped gutter cost more than the
 * packing saves). Winograd, where it applies, comes first. */
static int direct_suits(const dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    const int64_t sh = a->stride[0], sw = a->stride[1],
                  wq = (k->g.xs[3] + a->pad_begin[1] + a->pad_end[1] + sw - 1) / sw;
    const int strided = sh > 1 || sw > 1;
    return sh <= 4 && sw <= 4 && a->kernel[0] * a->kernel[1] > (strided ? 24 : 1) && 5 * wq <= 6 * k->g.ys[3];
}

/* CONV_DIRECT's geometry (k->dc, its row_at table) and the floats of workspace it needs: the
 * padded image in phase planes (a tail of 16 floats: a last panel reads up to 15 past the last
 * pixel's window). SIZE_MAX: too large. */
static size_t direct_plan(dl_kernel *k) {
    const dl_op_attrs *a = &k->g.a;
    cpu_direct *d = &k->dc;
    const int64_t c = k->g.xs[1], cg = c / a->groups, kh = a->kernel[0], kw = a->kernel[1];
    const int64_t oh = k->g.ys[2], ow = k->g.ys[3];
    const int64_t sh = a->stride[0], sw = a->stride[1];
    d->hq = (k->g.xs[2] + a->pad_begin[0] + a->pad_end[0] + sh - 1) / sh;
    d->wq = (k->g.xs[3] + a->pad_begin[1] + a->pad_end[1] + sw - 1) / sw;
    if (d->wq > INT64_MAX / 16 / d->hq - 32) return SIZE_MAX;
    /* channels an odd number of cache lines apart, so that one tap's 16 pixels in successive
     * channels fall in different sets of the L1 cache */
    d->cs = (sh * sw * d->hq * d->wq + 15) / 16 * 16;
    if (d->cs / 16 % 2 == 0) d->cs += 16;
    d->n = (oh - 1) * d->wq + ow;
    if (d->cs > (INT64_MAX - 16) / c) return SIZE_MAX;
    const size_t taps = (size_t)(cg * kh * kw);
    if (!(d->row_at = malloc(taps * sizeof *d->row_at))) return SIZE_MAX;
    for (int64_t p = 0; p < (int64_t)taps; p++) { /* tap (i, j) of channel ci: its phase plane, then the shift */
        const int64_t ci = p / (kh * kw), di = p / kw % kh * a->dilation[0], dj = p % kw * a->dilation[1];
        d->row_at[p] = ci * d->cs + ((di % sh) * sw + dj % sw) * d->hq * d->wq + di / sh * d->wq + dj / sw;
    }
    const uint64_t image = (uint64_t)(c * d->cs + 16);
    if (image > SIZE_MAX / sizeof(float)) return SIZE_MAX;
    return (size_t)image;
}

dl_status cpu_conv2d_prepare(dl_kernel *k, const dl_op *op) {
    const dl_op_attrs *a = &k->g.a;
    const dl_tensor *w = &op->inputs[1];
    int64_t c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3], oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3];
    if (cpu_depthwise_suits(k)) {
        k->conv_mode = CONV_DEPTHWISE;
        k->workspace = cpu_window8_workspace(k);
        return k->workspace == SIZE_MAX ? DL_E_NOMEM : DL_OK;
    }
    if (w->data && cpu_winograd_suits(a->kernel[0], a->kernel[1], a->stride[0], a->stride[1], a->dilation[0],
                                      a->dilation[1], a->groups, (int)k->g.xs[0], (int)c, (int)oc, (int)oh, (int)ow)) {
        if (!cpu_winograd_init(&k->wg, (int)k->g.xs[0], (int)c, (int)h, (int)wd, (int)oc, a->pad_begin[0],
                               a->pad_begin[1], (int)oh, (int)ow, w->data, 0))
            return DL_E_NOMEM;
        k->conv_mode = CONV_WINOGRAD;
        k->workspace = cpu_winograd_workspace(&k->wg);
        return DL_OK;
    }
    const int64_t g = a->groups, kdim = (c / g) * a->kernel[0] * a->kernel[1], ocg = oc / g, plane = oh * ow;
    const int packs = w->data && !getenv("DLRUN_CPU_NO_PACKED"); /* a constant weight, packed at prepare */
    cpu_gemm_form form = packs ? cpu_gemm_conv_form(ocg, plane, kdim) : CPU_GEMM_NOT;
    const int direct = packs && form != CPU_GEMM_PIXEL_ROWS && direct_suits(k);
    if (direct) form = CPU_GEMM_FILTER_ROWS;
    /* a 1x1 conv whose weight is at most 1 MiB: never OpenBLAS (cpu_gemm alone measured 1.5-2x
     * faster on 7x7 and 14x14 maps); a larger weight, read from memory at each run, keeps the
     * choice above (ResNet-50's 1024 -> 512 on 14x14 measured 15 % slower in place) */
    const int own_1x1 = packs && cpu_conv_plain_1x1(a) && kdim > 0 && ocg <= 262144 / kdim;
    const int pointwise = own_1x1 && pixel_rows_in_place(ocg, plane, kdim);
    if (own_1x1) form = pointwise ? CPU_GEMM_PIXEL_ROWS : CPU_GEMM_FILTER_ROWS;
    if (form != CPU_GEMM_NOT) {
        /* the weight packed once per group: as A (y = W windows) or, pixels as rows, as B (y^T = windows^T W^T) */
        const int t = form == CPU_GEMM_PIXEL_ROWS;
        const size_t per = t ? cpu_gemm_packed_b_floats(kdim, ocg) : cpu_gemm_packed_a_floats(ocg, kdim);
        const size_t scratch = direct ? direct_plan(k)
                               : t    ? cpu_gemm_scratch_floats(plane, ocg, kdim, pointwise ? 2 : 1, 0, 1, k->threads)
                                      : cpu_gemm_scratch_floats(ocg, plane, kdim, 0, 1, 0, k->threads);
        if (per == SIZE_MAX || scratch == SIZE_MAX || scratch > SIZE_MAX / sizeof(float) ||
            per > SIZE_MAX / sizeof(float) / (size_t)g)
            return DL_E_NOMEM;
        if (!(k->packed = malloc(per * (size_t)g * sizeof(float)))) return DL_E_NOMEM;
        for (int64_t gi = 0; gi < g; gi++) {
            const float *wg = (const float *)w->data + gi * ocg * kdim;
            if (t) { /* B(p, j) = W[j][p] */
                const cpu_gemm_strided b = {wg, 1, kdim, kdim, ocg};
                cpu_gemm_pack_b(&b, k->packed + (size_t)gi * per);
            } else {
                const cpu_gemm_strided am = {wg, kdim, 1, ocg, kdim};
                cpu_gemm_pack_a(&am, k->packed + (size_t)gi * per);
            }
        }
        k->conv_mode = pointwise ? CONV_POINTWISE_T : direct ? CONV_DIRECT : t ? CONV_PACKED_T : CONV_PACKED;
        k->workspace = scratch * sizeof(float);
        return DL_OK;
    }
    if (cpu_conv_plain_1x1(a)) {
        k->conv_mode = CONV_GEMM_1X1;
        k->workspace = 0;
        return DL_OK;
    }
    k->conv_mode = CONV_IM2COL;
    int64_t rows = (c / a->groups) * a->kernel[0] * a->kernel[1];
    k->workspace = (size_t)(rows * oh * ow) * sizeof(float);
    return DL_OK;
}

/* col[(ci*kh + i)*kw + j][oy*ow + ox] = x[ci][oy*sh - pt + i*dh][ox*sw - pl + j*dw] (0 outside). */
static void im2col(const dl_kernel *k, const float *x, int cg, float *col) {
    const dl_op_attrs *a = &k->g.a;
    const int h = (int)k->g.xs[2], w = (int)k->g.xs[3], oh = (int)k->g.ys[2], ow = (int)k->g.ys[3];
    const int kh = a->kernel[0], kw = a->kernel[1];
    const int rows = cg * kh * kw;
    CPU_PAR(
        "omp parallel for schedule(static)", for (int r = 0; r < rows; r++) {
            int ci = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
            const float *plane = x + (size_t)ci * h * w;
            float *dst = col + (size_t)r * oh * ow;
            for (int oy = 0; oy < oh; oy++) {
                int iy = oy * a->stride[0] - a->pad_begin[0] + i * a->dilation[0];
                float *drow = dst + (size_t)oy * ow;
                if (iy < 0 || iy >= h) {
                    memset(drow, 0, (size_t)ow * sizeof *drow);
                    continue;
                }
                const float *srow = plane + (size_t)iy * w;
                int ix = -a->pad_begin[1] + j * a->dilation[1];
                if (a->stride[1] == 1) {
                    for (int ox = 0; ox < ow; ox++, ix++) drow[ox] = (ix >= 0 && ix < w) ? srow[ix] : 0.0f;
                } else {
                    for (int ox = 0; ox < ow; ox++, ix += a->stride[1])
                        drow[ox] = (ix >= 0 && ix < w) ? srow[ix] : 0.0f;
                }
            }
        });
}

/* y[m x n] = act(w[m x kdim] * b[kdim x n] + bias) with single-threaded sgemm calls in parallel:
 * the output is split along its longer side, so that small spatial maps (late layers) split the
 * filters and each thread reads only its share of them. Each thread applies bias and the fused
 * activation to its own share (no second parallel region). bias may be NULL. */
static void gemm_bias_act(int m, int64_t n, int kdim, const float *w, const float *b, float *y, const float *bias,
                          const float *res, const dl_op_attrs *a) {
    const int epilogue = bias || res || a->activation != DL_ACT_NONE;
    CPU_PAR("omp parallel", {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (n >= m) {
            int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
            int64_t c0 = (int64_t)t * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
            if (c1 > c0) {
                cpu_sgemm(0, 0, m, c1 - c0, kdim, 1.0f, w, kdim, b + c0, n, 0.0f, y + c0, n);
                if (epilogue)
                    for (int r = 0; r < m; r++)
                        cpu_bias_res_act(y + (size_t)r * n + c0, res ? res + (size_t)r * n + c0 : NULL, c1 - c0,
                                         bias ? bias[r] : 0.0f, a);
            }
        } else {
            int chunk = ((m + nt - 1) / nt + 7) / 8 * 8;
            int r0 = t * chunk, r1 = r0 + chunk < m ? r0 + chunk : m;
            if (r1 > r0) {
                cpu_sgemm(0, 0, r1 - r0, n, kdim, 1.0f, w + (size_t)r0 * kdim, kdim, b, n, 0.0f, y + (size_t)r0 * n, n);
                if (epilogue)
                    for (int r = r0; r < r1; r++)
                        cpu_bias_res_act(y + (size_t)r * n, res ? res + (size_t)r * n : NULL, n, bias ? bias[r] : 0.0f,
                                         a);
            }
        }
    });
}

/* One image's group of channels as the windows operand of cpu_gemm (kdim taps by oh*ow pixels):
 * pixel q's tap (ci * kh + i) * kw + j is its window's (i, j) on channel ci, 0 in the padding. */
typedef struct conv_windows {
    const dl_kernel *k;
    const float *x; /* the group's first input channel */
    int64_t kdim, plane;
} conv_windows;

/* Pixels panel * width .. (width <= CPU_GEMM_NR) of the windows, taps p0 .. p0+kc-1, into dst
 * (kc x width, zero past the map's last pixel). The panel's pixels fall into runs along output
 * rows; each tap reads a run's floats `sw` apart from one input row, with a bounds test per pixel
 * only where the run meets the padding. */
static void pack_windows(const conv_windows *cw, int64_t panel, int64_t p0, int64_t kc, float *dst, int width) {
    const dl_op_attrs *a = &cw->k->g.a;
    const int64_t h = cw->k->g.xs[2], w = cw->k->g.xs[3], ow = cw->k->g.ys[3];
    const int kh = a->kernel[0], kw = a->kernel[1], dh = a->dilation[0], dw = a->dilation[1];
    const int64_t sw = a->stride[1];
    const int64_t q0 = panel * width, cols = cw->plane - q0 < width ? cw->plane - q0 : width;
    /* runs: pixels [t0[s], t0[s + 1]) of the panel share output row; iy0, ix0 of their first */
    int t0[CPU_GEMM_NR + 1], runs = 0;
    int64_t iy0[CPU_GEMM_NR], ix0[CPU_GEMM_NR];
    for (int t = 0; t < cols;) {
        const int64_t q = q0 + t, oy = q / ow, ox = q % ow;
        const int len = (int)(ow - ox < cols - t ? ow - ox : cols - t);
        t0[runs] = t, iy0[runs] = oy * a->stride[0] - a->pad_begin[0], ix0[runs] = ox * sw - a->pad_begin[1];
        runs++, t += len;
    }
    t0[runs] = (int)cols;
    int64_t ci = p0 / (kh * kw); /* row p0 is tap (i, j) of channel ci */
    int i = (int)(p0 / kw % kh), j = (int)(p0 % kw);
    for (int64_t r = 0; r < kc; r++) {
        const float *src = cw->x + ci * h * w;
        float *d = dst + r * width;
        const int64_t di = (int64_t)i * dh, dj = (int64_t)j * dw;
        if (++j == kw && (j = 0, ++i == kh)) i = 0, ci++;
        for (int s = 0; s < runs; s++) {
            const int64_t iy = iy0[s] + di, ix = ix0[s] + dj, len = t0[s + 1] - t0[s];
            float *o = d + t0[s];
            if (iy < 0 || iy >= h) {
                memset(o, 0, (size_t)len * sizeof *o);
                continue;
            }
            const float *row = src + iy * w;
            if (ix >= 0 && ix + (len - 1) * sw < w) { /* inside the image */
                const float *restrict run = row + ix;
                if (sw == 1) memcpy(o, run, (size_t)len * sizeof *o);
                else if (sw == 2) /* a constant stride: the loop vectorises as loads and shuffles */
                    for (int64_t t = 0; t < len; t++) o[t] = run[2 * t];
                else
                    for (int64_t t = 0; t < len; t++) o[t] = run[t * sw];
                continue;
            }
            for (int64_t t = 0, x = ix; t < len; t++, x += sw) o[t] = x >= 0 && x < w ? row[x] : 0.0f;
        }
        for (int64_t t = cols; t < width; t++) d[t] = 0.0f;
    }
}

/* cpu_gemm_pack_fn: the windows as B (panels of 16 pixels), or as A (panels of 6, pixels as rows) */
static void pack_windows_b(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    pack_windows(ctx, panel, p0, kc, dst, CPU_GEMM_NR);
}
#define TABLE_TAPS 64 /* kernels of up to 64 taps (8 x 8) pack A through a table */

/* The windows as A: 6 pixels a panel, on a small map (a run along an output row is a few pixels).
 * A table gives each tap (i, j) of the kernel and each pixel of the panel the pixel's input in a
 * channel's plane, or none (padding, or past the map's end), so that each channel's taps are a
 * branch-free gather of 6 floats. */
static void pack_windows_a(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    const conv_windows *cw = ctx;
    const dl_op_attrs *a = &cw->k->g.a;
    const int taps = a->kernel[0] * a->kernel[1];
    if (taps > TABLE_TAPS) {
        pack_windows(cw, panel, p0, kc, dst, CPU_GEMM_MR);
        return;
    }
    const int64_t h = cw->k->g.xs[2], w = cw->k->g.xs[3], ow = cw->k->g.ys[3];
    int64_t at[TABLE_TAPS][CPU_GEMM_MR]; /* offset in the plane; 0 where `in` is 0 */
    int in[TABLE_TAPS][CPU_GEMM_MR];
    for (int tap = 0; tap < taps; tap++)
        for (int t = 0; t < CPU_GEMM_MR; t++) {
            const int64_t q = panel * CPU_GEMM_MR + t, oy = q / ow, ox = q % ow;
            const int64_t iy = oy * a->stride[0] - a->pad_begin[0] + (int64_t)(tap / a->kernel[1]) * a->dilation[0];
            const int64_t ix = ox * a->stride[1] - a->pad_begin[1] + (int64_t)(tap % a->kernel[1]) * a->dilation[1];
            in[tap][t] = q < cw->plane && iy >= 0 && iy < h && ix >= 0 && ix < w;
            at[tap][t] = in[tap][t] ? iy * w + ix : 0;
        }
    int64_t ci = p0 / taps;
    int tap = (int)(p0 % taps);
    for (int64_t r = 0; r < kc; r++) {
        const float *src = cw->x + ci * h * w;
        float *d = dst + r * CPU_GEMM_MR;
        for (int t = 0; t < CPU_GEMM_MR; t++) d[t] = in[tap][t] ? src[at[tap][t]] : 0.0f;
        if (++tap == taps) tap = 0, ci++;
    }
}

static void conv_packed(const dl_kernel *k, const float *x, const float *b, const float *res, float *y, float *ws) {
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], plane = k->g.ys[2] * k->g.ys[3];
    const int64_t g = k->g.a.groups, cg = c / g, ocg = oc / g, kdim = cg * k->g.a.kernel[0] * k->g.a.kernel[1];
    const int t = k->conv_mode != CONV_PACKED; /* the pixels as the product's rows */
    const int in_place = k->conv_mode == CONV_POINTWISE_T;
    const size_t per = t ? cpu_gemm_packed_b_floats(kdim, ocg) : cpu_gemm_packed_a_floats(ocg, kdim);
    const int plain = cpu_conv_plain_1x1(&k->g.a);
    for (int64_t i = 0; i < n; i++)
        for (int64_t gi = 0; gi < g; gi++) {
            const float *xg = x + (i * c + gi * cg) * h * wd;
            float *yg = y + (i * oc + gi * ocg) * plane;
            const float *rg = res ? res + (i * oc + gi * ocg) * plane : NULL;
            /* the image: its channels' rows as they lie (a 1x1 conv), or the windows tap by tap */
            const cpu_gemm_strided rows = {xg, plane, 1, cg, plane}, cols = {xg, 1, plane, plane, cg};
            const conv_windows win = {k, xg, kdim, plane};
            const cpu_gemm_operand wt = {k->packed + (size_t)gi * per, NULL, NULL};
            const float *bg = b ? b + gi * ocg : NULL;
            if (t) { /* in place: A(pixel, ci) = xg[ci * plane + pixel], each step's 6 pixels side by side */
                const cpu_gemm_operand img =
                    in_place ? (cpu_gemm_operand){NULL, NULL, NULL, xg, NULL, plane}
                             : (cpu_gemm_operand){NULL, plain ? cpu_gemm_pack_a_strided : pack_windows_a,
                                                  plain ? (const void *)&cols : (const void *)&win};
                const cpu_gemm_epilogue e = {NULL, bg, &k->g.a, 1, 0, 0, rg};
                cpu_gemm(plane, ocg, kdim, &img, &wt, yg, plane, &e, ws, k->threads);
            } else {
                const cpu_gemm_operand img = {NULL, plain ? cpu_gemm_pack_b_strided : pack_windows_b,
                                              plain ? (const void *)&rows : (const void *)&win};
                const cpu_gemm_epilogue e = {bg, NULL, &k->g.a, 0, 0, 0, rg};
                cpu_gemm(ocg, plane, kdim, &wt, &img, yg, plane, &e, ws, k->threads);
            }
        }
}

/* One image zero-padded into dst in CONV_DIRECT's layout: padded pixel (r, x) of channel ci at
 * dst[ci * cs + ((r % sh) * sw + x % sw) * hq * wq + (r / sh) * wq + x / sw], the rest zero. */
static void pad_image(const dl_kernel *k, const float *x, float *dst) {
    const cpu_direct *d = &k->dc;
    const int64_t c = k->g.xs[1], h = k->g.xs[2], w = k->g.xs[3], pt = k->g.a.pad_begin[0], pl = k->g.a.pad_begin[1];
    const int64_t sh = k->g.a.stride[0], sw = k->g.a.stride[1], plane = d->hq * d->wq;
    CPU_FOR(c * d->cs, ci, c, {
        float *o = dst + ci * d->cs;
        const float *src = x + ci * h * w;
        if (sh == 1 && sw == 1) { /* one plane: zero only around the rows copied */
            const int64_t gap = d->wq - w;
            memset(o, 0, (size_t)(pt * d->wq + pl) * sizeof *o);
            for (int64_t r = 0; r < h; r++) {
                float *row = o + (pt + r) * d->wq + pl;
                memcpy(row, src + r * w, (size_t)w * sizeof *row);
                memset(row + w, 0, (size_t)(r + 1 < h ? gap : d->cs - (pt + h - 1) * d->wq - pl - w) * sizeof *row);
            }
            continue;
        }
        memset(o, 0, (size_t)d->cs * sizeof *o);
        for (int64_t r = pt; r < pt + h; r++) {
            float *row = o + (r % sh) * sw * plane + r / sh * d->wq;
            const float *in = src + (r - pt) * w;
            if (sw == 1) {
                memcpy(row + pl, in, (size_t)w * sizeof *row);
                continue;
            }
            for (int64_t b = 0; b < sw; b++) { /* phase b: the pixels x = pl + t with x % sw == b */
                float *out = row + b * plane;
                for (int64_t t = (b - pl % sw + sw) % sw; t < w; t += sw) out[(pl + t) / sw] = in[t];
            }
        }
    });
    memset(dst + c * d->cs, 0, 16 * sizeof *dst);
}

/* CONV_DIRECT: the packed weight times the padded image read in place (cpu_gemm's B by row_at),
 * stored straight into y: the product's rows are wq long, and the gutter past each output row's ow
 * pixels is dropped by cpu_gemm's store (its gutter map). */
static void conv_direct(const dl_kernel *k, const float *x, const float *b, const float *res, float *y, float *ws) {
    const cpu_direct *d = &k->dc;
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], oh = k->g.ys[2], ow = k->g.ys[3], plane = oh * ow;
    const int64_t g = k->g.a.groups, cg = c / g, ocg = oc / g, kdim = cg * k->g.a.kernel[0] * k->g.a.kernel[1];
    const size_t per = cpu_gemm_packed_a_floats(ocg, kdim);
    float *img = ws;
    for (int64_t i = 0; i < n; i++) {
        pad_image(k, x + i * c * h * wd, img);
        for (int64_t gi = 0; gi < g; gi++) {
            float *yg = y + (i * oc + gi * ocg) * plane;
            const cpu_gemm_operand wt = {k->packed + (size_t)gi * per, NULL, NULL, NULL, NULL};
            const cpu_gemm_operand win = {NULL, NULL, NULL, img + gi * cg * d->cs, d->row_at};
            const cpu_gemm_epilogue e = {
                b ? b + gi * ocg : NULL, NULL, &k->g.a, 0, d->wq, ow, res ? res + (i * oc + gi * ocg) * plane : NULL};
            cpu_gemm(ocg, d->n, kdim, &wt, &win, yg, plane, &e, ws, k->threads);
        }
    }
}

void cpu_conv2d(const dl_kernel *k, const dl_tensor *in, float *y, void *workspace) {
    const float *x = in[0].data, *w = in[1].data, *b = k->g.has_bias ? in[2].data : NULL;
    const float *res = k->g.residual ? in[k->g.residual].data : NULL;
    float *ws = workspace;
    if (k->conv_mode == CONV_WINOGRAD) { /* NCHW or NHWC (k->wg.cl) */
        cpu_winograd_run(&k->wg, x, b, res, &k->g.a, y, ws);
        return;
    }
    if (k->cl) {
        cpu_conv2d_nhwc(k, in, y, workspace);
        return;
    }
    if (k->conv_mode == CONV_DEPTHWISE) {
        cpu_depthwise(k, in, y, ws);
        return;
    }
    if (k->conv_mode == CONV_DIRECT) {
        conv_direct(k, x, b, res, y, ws);
        return;
    }
    if (k->conv_mode == CONV_PACKED || k->conv_mode == CONV_PACKED_T || k->conv_mode == CONV_POINTWISE_T) {
        conv_packed(k, x, b, res, y, ws);
        return;
    }
    const int64_t n = k->g.xs[0], c = k->g.xs[1], h = k->g.xs[2], wd = k->g.xs[3];
    const int64_t oc = k->g.ys[1], plane = k->g.ys[2] * k->g.ys[3];
    const int g = k->g.a.groups;
    const int cg = (int)(c / g), ocg = (int)(oc / g);
    const int kdim = cg * k->g.a.kernel[0] * k->g.a.kernel[1];
    for (int64_t i = 0; i < n; i++) {
        for (int gi = 0; gi < g; gi++) {
            const float *xg = x + ((size_t)i * c + (size_t)gi * cg) * (size_t)(h * wd);
            const float *wg = w + (size_t)gi * ocg * kdim;
            float *yg = y + ((size_t)i * oc + (size_t)gi * ocg) * (size_t)plane;
            const float *bg = b ? b + (size_t)gi * ocg : NULL;
            const float *rg = res ? res + (yg - y) : NULL;
            if (k->conv_mode != CONV_GEMM_1X1) im2col(k, xg, cg, ws);
            gemm_bias_act(ocg, plane, kdim, wg, k->conv_mode == CONV_GEMM_1X1 ? xg : ws, yg, bg, rg, &k->g.a);
        }
    }
}
