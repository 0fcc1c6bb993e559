/* conv3d.c — 3-D convolution on the CPU (PyTorch's Conv3d). With a constant weight (a model's),
 * the packed GEMM of gemm.c: the weight packed once per group at prepare, and each image's
 * windows packed straight from the input, 16 output voxels at a time (an im2col over depth,
 * height and width that never materialises), bias and activation in the GEMM's epilogue.
 * Otherwise, for each image, group and output depth, that slice's windows are gathered into
 * columns and one OpenBLAS product per slice writes it; then bias and activation. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "gemm.h"

static int64_t taps_of(const dl_op_geom *g) {
    const int32_t *kk = g->a.kernel3;
    return g->xs[1] / g->a.groups * kk[0] * kk[1] * kk[2];
}

/* The packed path with a constant weight: packs it (its sizes follow from a weight that exists in
 * memory); otherwise sizes the columns of one output depth slice, [C/groups * KD * KH * KW, OH *
 * OW] floats, counted in double first (a hostile model's sizes overflow 64 bits): past 2^50 bytes,
 * or past the int sizes OpenBLAS takes, it is out of memory. */
dl_status cpu_conv3d_prepare(dl_kernel *k, const dl_op *op) {
    const dl_op_geom *g = &k->g;
    const int64_t groups = g->a.groups, kdim = taps_of(g), ocg = g->ys[1] / groups;
    const int64_t ovol = g->ys[2] * g->ys[3] * g->ys[4];
    const float *w = op->inputs[1].data;
    if (w && !getenv("DLRUN_CPU_NO_PACKED")) {
        const size_t per = cpu_gemm_packed_a_floats(ocg, kdim);
        const size_t scratch = cpu_gemm_scratch_floats(ocg, ovol, kdim, 0, 1, 0, k->threads);
        if (per == SIZE_MAX || scratch == SIZE_MAX || per > SIZE_MAX / sizeof(float) / (size_t)groups)
            return DL_E_NOMEM;
        if (!(k->packed = malloc(per * (size_t)groups * sizeof(float)))) return DL_E_NOMEM;
        for (int64_t gi = 0; gi < groups; gi++) {
            const cpu_gemm_strided wg = {w + gi * ocg * kdim, kdim, 1, ocg, kdim};
            cpu_gemm_pack_a(&wg, k->packed + (size_t)gi * per);
        }
        k->workspace = scratch * sizeof(float);
        return DL_OK;
    }
    const int64_t plane = g->ys[3] * g->ys[4];
    if (kdim > INT_MAX || ocg > INT_MAX || ovol > INT_MAX || (double)kdim * (double)plane * sizeof(float) > 0x1p50)
        return DL_E_NOMEM;
    k->workspace = (size_t)(kdim * plane) * sizeof(float);
    return DL_OK;
}

/* One image's group of channels as cpu_gemm's B (kdim x OD*OH*OW): column q is output voxel q,
 * row ((c * KD + td) * KH + ty) * KW + tx its window's tap on channel c, 0 in the padding. */
typedef struct conv3d_windows {
    const dl_op_geom *g;
    const float *x; /* the group's first input channel */
} conv3d_windows;

/* cpu_gemm_pack_fn of B: voxels panel * NR .. of the windows, taps p0 .. p0+kc-1, into dst (kc x
 * NR). The panel's voxels fall into runs along output rows; each tap reads a run's floats a
 * stride apart from one input row, testing bounds per voxel only where the run meets padding. */
static void pack_volumes(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    const conv3d_windows *cw = ctx;
    const dl_op_geom *g = cw->g;
    const dl_op_attrs *a = &g->a;
    const int64_t d = g->xs[2], h = g->xs[3], w = g->xs[4], oh = g->ys[3], ow = g->ys[4];
    const int64_t cols_all = g->ys[2] * oh * ow, sw = a->stride3[2];
    const int kd = a->kernel3[0], kh = a->kernel3[1], kw = a->kernel3[2];
    const int64_t q0 = panel * CPU_GEMM_NR, cols = cols_all - q0 < CPU_GEMM_NR ? cols_all - q0 : CPU_GEMM_NR;
    int t0[CPU_GEMM_NR + 1], runs = 0;
    int64_t iz0[CPU_GEMM_NR], iy0[CPU_GEMM_NR], ix0[CPU_GEMM_NR];
    for (int t = 0; t < cols;) { /* runs: voxels [t0[s], t0[s + 1]) share an output row */
        const int64_t q = q0 + t, ox = q % ow, oy = q / ow % oh, oz = q / (ow * oh);
        const int len = (int)(ow - ox < cols - t ? ow - ox : cols - t);
        t0[runs] = t;
        iz0[runs] = oz * a->stride3[0] - a->pad_begin3[0];
        iy0[runs] = oy * a->stride3[1] - a->pad_begin3[1];
        ix0[runs] = ox * sw - a->pad_begin3[2];
        runs++, t += len;
    }
    t0[runs] = (int)cols;
    int64_t c = p0 / ((int64_t)kd * kh * kw); /* row p0 is tap (td, ty, tx) of channel c */
    int td = (int)(p0 / ((int64_t)kh * kw) % kd), ty = (int)(p0 / kw % kh), tx = (int)(p0 % kw);
    for (int64_t r = 0; r < kc; r++) {
        const float *src = cw->x + c * d * h * w;
        float *o0 = dst + r * CPU_GEMM_NR;
        const int64_t dz = (int64_t)td * a->dilation3[0], dy = (int64_t)ty * a->dilation3[1],
                      dx = (int64_t)tx * a->dilation3[2];
        if (++tx == kw && (tx = 0, ++ty == kh) && (ty = 0, ++td == kd)) td = 0, c++;
        for (int s = 0; s < runs; s++) {
            const int64_t iz = iz0[s] + dz, iy = iy0[s] + dy, ix = ix0[s] + dx, len = t0[s + 1] - t0[s];
            float *o = o0 + t0[s];
            if (iz < 0 || iz >= d || iy < 0 || iy >= h) {
                memset(o, 0, (size_t)len * sizeof *o);
                continue;
            }
            const float *row = src + (iz * h + iy) * w;
            if (ix >= 0 && ix + (len - 1) * sw < w) { /* inside the input */
                const float *restrict run = row + ix;
                if (sw == 1) memcpy(o, run, (size_t)len * sizeof *o);
                else
                    for (int64_t t = 0; t < len; t++) o[t] = run[t * sw];
                continue;
            }
            for (int64_t t = 0, x = ix; t < len; t++, x += sw) o[t] = x >= 0 && x < w ? row[x] : 0.0f;
        }
        for (int64_t t = cols; t < CPU_GEMM_NR; t++) o0[t] = 0.0f;
    }
}

static void conv3d_packed(const dl_kernel *k, const float *x, const float *b, float *y, float *ws) {
    const dl_op_geom *g = &k->g;
    const int64_t n = g->xs[0], c = g->xs[1], vol = g->xs[2] * g->xs[3] * g->xs[4];
    const int64_t oc = g->ys[1], ovol = g->ys[2] * g->ys[3] * g->ys[4];
    const int64_t groups = g->a.groups, cg = c / groups, ocg = oc / groups, kdim = taps_of(g);
    const size_t per = cpu_gemm_packed_a_floats(ocg, kdim);
    for (int64_t i = 0; i < n; i++)
        for (int64_t gi = 0; gi < groups; gi++) {
            const conv3d_windows win = {g, x + (i * c + gi * cg) * vol};
            const cpu_gemm_operand wt = {k->packed + (size_t)gi * per, NULL, NULL};
            const cpu_gemm_operand img = {NULL, pack_volumes, &win};
            const cpu_gemm_epilogue e = {b ? b + gi * ocg : NULL, NULL, &g->a};
            cpu_gemm(ocg, ovol, kdim, &wt, &img, y + (i * oc + gi * ocg) * ovol, ovol, &e, ws, k->threads);
        }
}

/* cols[(c, td, ty, tx)][(oy, ox)] = x[c][od * sd - pd + td * dd][oy * sh - ph + ty * dh][ox * sw - pw + tx * dw],
 * 0 outside the input; x is one group's channels of one image. */
static void im2col3d(const dl_op_geom *g, const float *x, int64_t cg, int64_t od, float *cols) {
    const dl_op_attrs *a = &g->a;
    const int kd = a->kernel3[0], kh = a->kernel3[1], kw = a->kernel3[2];
    const int64_t d = g->xs[2], h = g->xs[3], w = g->xs[4], oh = g->ys[3], ow = g->ys[4], plane = oh * ow;
    const int64_t rows = cg * kd * kh * kw;
    CPU_FOR(rows * plane, r, rows, {
        const int tx = (int)(r % kw), ty = (int)(r / kw % kh), td = (int)(r / ((int64_t)kw * kh) % kd);
        const int64_t c = r / ((int64_t)kw * kh * kd);
        const int64_t z = od * a->stride3[0] - a->pad_begin3[0] + (int64_t)td * a->dilation3[0];
        float *dst = cols + r * plane;
        if (z < 0 || z >= d) {
            memset(dst, 0, (size_t)plane * sizeof *dst);
        } else {
            const float *src = x + (c * d + z) * h * w;
            for (int64_t oy = 0; oy < oh; oy++) {
                const int64_t iy = oy * a->stride3[1] - a->pad_begin3[1] + (int64_t)ty * a->dilation3[1];
                float *row = dst + oy * ow;
                if (iy < 0 || iy >= h) {
                    memset(row, 0, (size_t)ow * sizeof *row);
                    continue;
                }
                const float *in = src + iy * w;
                const int64_t x0 = (int64_t)tx * a->dilation3[2] - a->pad_begin3[2], sw = a->stride3[2];
                for (int64_t ox = 0; ox < ow; ox++) {
                    const int64_t ix = ox * sw + x0;
                    row[ox] = ix >= 0 && ix < w ? in[ix] : 0.0f;
                }
            }
        }
    });
}

void cpu_conv3d(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const dl_op_attrs *a = &g->a;
    const float *x = in[0].data, *w = in[1].data, *b = g->has_bias ? in[2].data : NULL;
    if (k->packed) {
        conv3d_packed(k, x, b, y, ws);
        return;
    }
    const int64_t n = g->xs[0], c = g->xs[1], vol = g->xs[2] * g->xs[3] * g->xs[4];
    const int64_t oc = g->ys[1], od = g->ys[2], plane = g->ys[3] * g->ys[4], ovol = od * plane;
    const int groups = a->groups;
    const int64_t cg = c / groups, ocg = oc / groups;
    const int64_t kdim = taps_of(g);
    for (int64_t i = 0; i < n; i++)
        for (int gi = 0; gi < groups; gi++) {
            const float *xg = x + (i * c + gi * cg) * vol, *wg = w + gi * ocg * kdim;
            for (int64_t z = 0; z < od; z++) {
                im2col3d(g, xg, cg, z, ws);
                /* the slice z of output channels gi * ocg ... : rows ovol apart */
                cpu_sgemm_columns(0, (int)ocg, plane, (int)kdim, wg, ws, y + (i * oc + gi * ocg) * ovol + z * plane,
                                  ovol);
            }
        }
    if (!b && a->activation == DL_ACT_NONE) return;
    CPU_FOR(n * oc * ovol, p, n * oc, cpu_bias_act(y + p * ovol, ovol, b ? b[p % oc] : 0.0f, a););
}
