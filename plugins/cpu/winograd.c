/* winograd.c — Winograd F(4x4, 3x3) convolution for the CPU plugin; see winograd.h. */
#include "winograd.h"

#include <stdlib.h>
#include <string.h>

#include "activate.h"
#include "blas.h"

#define TILE 6 /* input tile edge: 4 outputs + 3 - 1 */
#define NPOS 36

int cpu_winograd_suits(int kh, int kw, int sh, int sw, int dh, int dw, int groups, int c, int k, int oh, int ow) {
    /* Few channels make the 36 GEMMs too thin to pay for the transforms: below 64 channels the
     * packed GEMM over the image's windows measured 1.2-2.5x faster (SqueezeNet's and GoogLeNet's
     * 16- to 48-channel 3x3 convs; docs/performance.md). Small maps (ResNet's 7x7) give too few
     * tiles to pay for reading the transformed filters, which are 4x larger than the filters:
     * measured slower than im2col there. */
    return kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && groups == 1 && c >= 64 && k >= 16 &&
           oh >= 10 && ow >= 10;
}

/* U = G g G^T for one 3x3 filter, in double for accuracy. */
static void filter_transform(const float *g, float *u, size_t stride) {
    double t[6][3];
    for (int j = 0; j < 3; j++) {
        double g0 = g[0 * 3 + j], g1 = g[1 * 3 + j], g2 = g[2 * 3 + j];
        t[0][j] = g0 / 4;
        t[1][j] = -(g0 + g1 + g2) / 6;
        t[2][j] = -(g0 - g1 + g2) / 6;
        t[3][j] = g0 / 24 + g1 / 12 + g2 / 6;
        t[4][j] = g0 / 24 - g1 / 12 + g2 / 6;
        t[5][j] = g2;
    }
    for (int i = 0; i < 6; i++) {
        double g0 = t[i][0], g1 = t[i][1], g2 = t[i][2];
        double r[6] = {
            g0 / 4, -(g0 + g1 + g2) / 6, -(g0 - g1 + g2) / 6, g0 / 24 + g1 / 12 + g2 / 6, g0 / 24 - g1 / 12 + g2 / 6,
            g2};
        for (int j = 0; j < 6; j++) u[(size_t)(i * 6 + j) * stride] = (float)r[j];
    }
}

int cpu_winograd_init(cpu_winograd *wg, int n, int c, int h, int w, int k, int pad_t, int pad_l, int oh, int ow,
                      const float *weight) {
    memset(wg, 0, sizeof *wg);
    wg->n = n, wg->c = c, wg->h = h, wg->w = w, wg->k = k;
    wg->pad_t = pad_t, wg->pad_l = pad_l, wg->oh = oh, wg->ow = ow;
    wg->tiles_h = (oh + 3) / 4;
    wg->tiles_w = (ow + 3) / 4;
    wg->tiles = (int64_t)n * wg->tiles_h * wg->tiles_w;
    /* Block so V [36][c][block] and M [36][k][block] together stay near 8 MB, but keep the GEMM's
     * N dimension wide enough to run near sgemm's peak. */
    int64_t b = (int64_t)(4u << 20) / ((int64_t)NPOS * (c + k));
    if (b < 128) b = 128;
    if (b > wg->tiles) b = wg->tiles;
    b = (b + 7) / 8 * 8; /* whole groups of 8 tiles (vector lanes) */
    wg->block = (int)b;
    size_t ucount = (size_t)NPOS * (size_t)k * (size_t)c;
    wg->u = malloc(ucount * sizeof *wg->u);
    if (!wg->u) return 0;
    size_t plane = (size_t)k * (size_t)c;
    for (int ki = 0; ki < k; ki++)
        for (int ci = 0; ci < c; ci++)
            filter_transform(weight + ((size_t)ki * c + ci) * 9, wg->u + (size_t)ki * c + ci, plane);
    return 1;
}

size_t cpu_winograd_workspace(const cpu_winograd *wg) {
    return (size_t)NPOS * (size_t)(wg->c + wg->k) * (size_t)wg->block * sizeof(float);
}

void cpu_winograd_free(cpu_winograd *wg) {
    free(wg->u);
    wg->u = NULL;
}

/* The transforms work on 8 tiles at once, one per vector lane (GCC vector extension). */
typedef float v8 __attribute__((vector_size(32)));
#define LANES 8

/* V = B^T d B for 8 tiles; row i/col j of tile l in d[i][j][l]; results to v[pos * stride]. */
static inline void input_transform(const v8 d[6][6], float *v, size_t stride) {
    v8 t[6][6];
    for (int j = 0; j < 6; j++) {
        v8 d0 = d[0][j], d1 = d[1][j], d2 = d[2][j], d3 = d[3][j], d4 = d[4][j], d5 = d[5][j];
        t[0][j] = 4 * d0 - 5 * d2 + d4;
        t[1][j] = -4 * (d1 + d2) + d3 + d4;
        t[2][j] = 4 * (d1 - d2) - d3 + d4;
        t[3][j] = -2 * (d1 - d3) - d2 + d4;
        t[4][j] = 2 * (d1 - d3) - d2 + d4;
        t[5][j] = 4 * d1 - 5 * d3 + d5;
    }
    for (int i = 0; i < 6; i++) {
        v8 d0 = t[i][0], d1 = t[i][1], d2 = t[i][2], d3 = t[i][3], d4 = t[i][4], d5 = t[i][5];
        v8 r[6] = {4 * d0 - 5 * d2 + d4,     -4 * (d1 + d2) + d3 + d4, 4 * (d1 - d2) - d3 + d4,
                   -2 * (d1 - d3) - d2 + d4, 2 * (d1 - d3) - d2 + d4,  4 * d1 - 5 * d3 + d5};
        for (int j = 0; j < 6; j++) memcpy(v + (size_t)(i * 6 + j) * stride, &r[j], sizeof(v8));
    }
}

/* Y = A^T m A for 8 tiles: 6x6 -> 4x4. */
static inline void output_transform(const v8 m[6][6], v8 y[4][4]) {
    v8 t[4][6];
    for (int j = 0; j < 6; j++) {
        v8 a = m[1][j] + m[2][j], b = m[1][j] - m[2][j], c = m[3][j] + m[4][j], d = m[3][j] - m[4][j];
        t[0][j] = m[0][j] + a + c;
        t[1][j] = b + 2 * d;
        t[2][j] = a + 4 * c;
        t[3][j] = b + 8 * d + m[5][j];
    }
    for (int i = 0; i < 4; i++) {
        v8 a = t[i][1] + t[i][2], b = t[i][1] - t[i][2], c = t[i][3] + t[i][4], d = t[i][3] - t[i][4];
        y[i][0] = t[i][0] + a + c;
        y[i][1] = b + 2 * d;
        y[i][2] = a + 4 * c;
        y[i][3] = b + 8 * d + t[i][5];
    }
}

void cpu_winograd_run(const cpu_winograd *wg, const float *x, const float *bias, const float *res, const dl_op_attrs *a,
                      float *y, float *workspace) {
    const int act = a->activation;
    const int c = wg->c, k = wg->k, h = wg->h, w = wg->w, oh = wg->oh, ow = wg->ow;
    const int tw = wg->tiles_w, per_image = wg->tiles_h * tw;
    const int64_t block = wg->block;
    float *v = workspace;                            /* [36][c][block] */
    float *m = workspace + (size_t)NPOS * c * block; /* [36][k][block] */
    for (int64_t t0 = 0; t0 < wg->tiles; t0 += block) {
        const int nb = (int)(wg->tiles - t0 < block ? wg->tiles - t0 : block);
        const int ngroups = (nb + LANES - 1) / LANES;
        const size_t vstride = (size_t)c * block, mstride = (size_t)k * block;
#pragma omp parallel for collapse(2) schedule(static)
        for (int ci = 0; ci < c; ci++) {
            for (int gi = 0; gi < ngroups; gi++) {
                v8 d[6][6];
                for (int l = 0; l < LANES; l++) {
                    int tb = gi * LANES + l;
                    int64_t t = t0 + (tb < nb ? tb : nb - 1); /* pad the last group by repeating */
                    int img = (int)(t / per_image), r = (int)(t % per_image);
                    int y0 = (r / tw) * 4 - wg->pad_t, x0 = (r % tw) * 4 - wg->pad_l;
                    const float *plane = x + ((size_t)img * c + ci) * (size_t)h * w;
                    int inside = y0 >= 0 && y0 + 6 <= h && x0 >= 0 && x0 + 6 <= w;
                    for (int i = 0; i < 6; i++) {
                        int yy = y0 + i;
                        for (int j = 0; j < 6; j++) {
                            int xx = x0 + j;
                            d[i][j][l] =
                                inside || (yy >= 0 && yy < h && xx >= 0 && xx < w) ? plane[(size_t)yy * w + xx] : 0.0f;
                        }
                    }
                }
                input_transform(d, v + (size_t)ci * block + (size_t)gi * LANES, vstride);
            }
        }
        /* The 36 GEMMs are independent: one per thread at a time, each single-threaded BLAS (the
         * plugin runs OpenBLAS with one thread so that only OpenMP's pool is ever busy). */
#pragma omp parallel for schedule(dynamic, 1)
        for (int p = 0; p < NPOS; p++)
            cpu_sgemm(0, 0, k, nb, c, 1.0f, wg->u + (size_t)p * k * c, c, v + (size_t)p * vstride, block, 0.0f,
                      m + (size_t)p * mstride, block);
#pragma omp parallel for collapse(2) schedule(static)
        for (int ki = 0; ki < k; ki++) {
            for (int gi = 0; gi < ngroups; gi++) {
                v8 mm[6][6], out[4][4];
                const float *src = m + (size_t)ki * block + (size_t)gi * LANES;
                for (int p = 0; p < NPOS; p++) memcpy(&mm[p / 6][p % 6], src + (size_t)p * mstride, sizeof(v8));
                output_transform(mm, out);
                const float b = bias ? bias[ki] : 0.0f;
                for (int l = 0; l < LANES && gi * LANES + l < nb; l++) {
                    int64_t t = t0 + gi * LANES + l;
                    int img = (int)(t / per_image), r = (int)(t % per_image);
                    int y0 = (r / tw) * 4, x0 = (r % tw) * 4;
                    const size_t plane = ((size_t)img * k + ki) * (size_t)oh * ow;
                    float *dst = y + plane;
                    const float *rp = res ? res + plane : NULL;
                    for (int i = 0; i < 4 && y0 + i < oh; i++)
                        for (int j = 0; j < 4 && x0 + j < ow; j++) {
                            const size_t o = (size_t)(y0 + i) * ow + x0 + j;
                            float val = out[i][j][l] + b;
                            if (rp) val += rp[o];
                            dst[o] = cpu_activate(val, act, a);
                        }
                }
            }
        }
    }
}
