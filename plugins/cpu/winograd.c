/* winograd.c — Winograd F(4x4, 3x3) convolution for the CPU plugin; see winograd.h. */
#include "winograd.h"

#include <stdlib.h>
#include <string.h>

#include "activate.h"
#include "cpu_ops.h" /* CPU_PAR */
#include "gemm.h"
#include "vecw.h"

#define TILE 6 /* input tile edge: 4 outputs + 3 - 1 */
#define NPOS 36
#if VW == 16 /* see cpu_winograd_suits */
#define WINOGRAD_MIN_TILES 32
#define WINOGRAD_FEW_CHANNELS 64 /* fewer channels than 64 with 32 tiles or more: none */
#else
#define WINOGRAD_MIN_TILES 16
#define WINOGRAD_FEW_CHANNELS 32
#endif
#define LANES VW /* the transforms work on VW tiles at once, one a vector lane (16 with AVX-512, else 8) */

/* Where a tile of the block lies: its 6x6 input window's top-left in image and channel 0 (in: an
 * offset into x, y0 and x0 its row and column, negative in the padding), whether the window lies
 * wholly inside the image, and its 4x4 output's top-left in channel 0 (out: an offset into y) */
typedef struct tile_at {
    int64_t in, out;
    int y0, x0, inside;
} tile_at;

int cpu_winograd_suits(int kh, int kw, int sh, int sw, int dh, int dw, int groups, int n, int c, int k, int oh,
                       int ow) {
    /* Few channels make the 36 GEMMs too thin to pay for the transforms: below 64 channels the
     * packed GEMM over the image's windows measured 1.2-2.5x faster (SqueezeNet's and GoogLeNet's
     * 16- to 48-channel 3x3 convs; docs/performance.md). Small maps (ResNet's 7x7) give too few
     * tiles to pay for reading the transformed filters, which are 4x larger than the filters:
     * measured slower than im2col there. For the same reason a run needs WINOGRAD_MIN_TILES tiles
     * or more: each float of U (36 c k of them, read from memory in a model's run, where the
     * layers before evicted them) takes part in one multiply-add a tile. With AVX-512 (Zen 5),
     * ResNet-18's 256-channel 3x3 convs on 14x14 at batch 1 (16 tiles, 9.4 MB of U) took 0.30 ms
     * timed alone, where U stays in cache, and 0.64-0.69 ms in the model's run, against 0.45-0.47
     * for oneDNN's direct conv: 32 tiles there. With AVX2 (Zen 3) the direct convs are slower and
     * the same convs, in the model's run, took 0.80-0.85 ms against 1.33-1.39 for oneDNN's and 2.0
     * for the packed GEMM: 16 tiles there. Also on AVX2, since the transforms were made faster,
     * 32 to 63 channels pay where there are 32 tiles or more: SqueezeNet's 32 -> 128 on 27x27 (49
     * tiles) 1.34x (NCHW) and 1.38x (NHWC) the packed GEMM and the NHWC dense kernel in turn; its 48
     * -> 192 on 13x13 (16 tiles) 1.26x in NCHW but 0.89x in NHWC; 16 -> 64 on 55x55 0.94x and 1.07x. */
    const int64_t tiles = (int64_t)n * ((oh + 3) / 4) * ((ow + 3) / 4);
    const int enough = c >= 64 ? tiles >= WINOGRAD_MIN_TILES : c >= WINOGRAD_FEW_CHANNELS && tiles >= 32;
    return kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && groups == 1 && k >= 16 && oh >= 10 &&
           ow >= 10 && enough;
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
                      const float *weight, int cl) {
    memset(wg, 0, sizeof *wg);
    wg->n = n, wg->c = c, wg->h = h, wg->w = w, wg->k = k, wg->cl = cl;
    wg->pad_t = pad_t, wg->pad_l = pad_l, wg->oh = oh, wg->ow = ow;
    wg->tiles_h = (oh + 3) / 4;
    wg->tiles_w = (ow + 3) / 4;
    wg->tiles = (int64_t)n * wg->tiles_h * wg->tiles_w;
    /* Block so V [36][c][block] and M [36][k][block] together stay near 8 MB, but keep the GEMM's
     * N dimension wide enough to run near the kernel's peak. */
    int64_t b = (int64_t)(4u << 20) / ((int64_t)NPOS * (c + k));
    if (b < 128) b = 128;
    if (b > wg->tiles) b = wg->tiles;
    b = (b + CPU_GEMM_NR - 1) / CPU_GEMM_NR * CPU_GEMM_NR; /* whole panels of B (16 tiles: 1 or 2 groups) */
    wg->block = (int)b;
    /* U = G g G^T per position, [36][k][c] row-major, then each position's k x c packed as
     * cpu_gemm's A (channels-last: its transpose, c x k, as cpu_gemm's B) */
    const size_t plane = (size_t)k * (size_t)c,
                 packed = cl ? cpu_gemm_packed_b_floats(c, k) : cpu_gemm_packed_a_floats(k, c);
    float *u = malloc(NPOS * plane * sizeof *u);
    wg->u = malloc(NPOS * packed * sizeof *wg->u);
    if (!u || !wg->u) {
        free(u), free(wg->u), wg->u = NULL;
        return 0;
    }
    for (int ki = 0; ki < k; ki++)
        for (int ci = 0; ci < c; ci++)
            filter_transform(weight + ((size_t)ki * c + ci) * 9, u + (size_t)ki * c + ci, plane);
    for (int p = 0; p < NPOS; p++) {
        const cpu_gemm_strided up = {u + p * plane, c, 1, k, c}, ut = {u + p * plane, 1, c, c, k};
        if (cl) cpu_gemm_pack_b(&ut, wg->u + p * packed);
        else cpu_gemm_pack_a(&up, wg->u + p * packed);
    }
    free(u);
    return 1;
}

/* Floats left between one position's V (and, channels-last, M) and the next past its own: the
 * transforms store to and load from all 36 positions in turn, and at a stride of a multiple of 4
 * KiB (16 tiles x 256 channels, 208 x 64) those fall in one set of the L1 cache, 8 lines of it */
#define POS_PAD 16

/* Floats from one position's V in a block to the next: c x block (channels-last: the block's
 * tiles by c packed as cpu_gemm's A), and POS_PAD */
static size_t v_floats(const cpu_winograd *wg) {
    return (wg->cl ? cpu_gemm_packed_a_floats(wg->block, wg->c) : (size_t)wg->c * (size_t)wg->block) + POS_PAD;
}
/* Floats of M in a block: [k][36][block], or channels-last [block][36][k + POS_PAD] */
static size_t m_floats(const cpu_winograd *wg) {
    return (size_t)NPOS * (size_t)wg->block * (size_t)(wg->k + (wg->cl ? POS_PAD : 0));
}

size_t cpu_winograd_workspace(const cpu_winograd *wg) {
    return ((size_t)NPOS * v_floats(wg) + m_floats(wg)) * sizeof(float) + (size_t)wg->block * sizeof(tile_at);
}

void cpu_winograd_free(cpu_winograd *wg) {
    free(wg->u);
    wg->u = NULL;
}

/* V = B^T d B for LANES tiles; row i/col j of tile l in d[i][j][l]; results to v[pos * stride]. */
static inline void input_transform(const vw d[6][6], float *v, size_t stride) {
    vw t[6][6];
    for (int j = 0; j < 6; j++) {
        vw d0 = d[0][j], d1 = d[1][j], d2 = d[2][j], d3 = d[3][j], d4 = d[4][j], d5 = d[5][j];
        t[0][j] = 4 * d0 - 5 * d2 + d4;
        t[1][j] = -4 * (d1 + d2) + d3 + d4;
        t[2][j] = 4 * (d1 - d2) - d3 + d4;
        t[3][j] = -2 * (d1 - d3) - d2 + d4;
        t[4][j] = 2 * (d1 - d3) - d2 + d4;
        t[5][j] = 4 * d1 - 5 * d3 + d5;
    }
    for (int i = 0; i < 6; i++) {
        vw d0 = t[i][0], d1 = t[i][1], d2 = t[i][2], d3 = t[i][3], d4 = t[i][4], d5 = t[i][5];
        vw r[6] = {4 * d0 - 5 * d2 + d4,     -4 * (d1 + d2) + d3 + d4, 4 * (d1 - d2) - d3 + d4,
                   -2 * (d1 - d3) - d2 + d4, 2 * (d1 - d3) - d2 + d4,  4 * d1 - 5 * d3 + d5};
        for (int j = 0; j < 6; j++) storew(v + (size_t)(i * 6 + j) * stride, r[j]);
    }
}

/* Y = A^T m A for LANES tiles: 6x6 -> 4x4. */
static inline void output_transform(const vw m[6][6], vw y[4][4]) {
    vw t[4][6];
    for (int j = 0; j < 6; j++) {
        vw a = m[1][j] + m[2][j], b = m[1][j] - m[2][j], c = m[3][j] + m[4][j], d = m[3][j] - m[4][j];
        t[0][j] = m[0][j] + a + c;
        t[1][j] = b + 2 * d;
        t[2][j] = a + 4 * c;
        t[3][j] = b + 8 * d + m[5][j];
    }
    for (int i = 0; i < 4; i++) {
        vw a = t[i][1] + t[i][2], b = t[i][1] - t[i][2], c = t[i][3] + t[i][4], d = t[i][3] - t[i][4];
        y[i][0] = t[i][0] + a + c;
        y[i][1] = b + 2 * d;
        y[i][2] = a + 4 * c;
        y[i][3] = b + 8 * d + t[i][5];
    }
}

/* 1 where the fused activation is a clamp (none, relu, clip), applied to vectors with its bounds
 * in *lo and *hi (NaN kept); 0 for the others, which go through cpu_activate */
static int clamp_bounds(const dl_op_attrs *a, float *lo, float *hi) {
    const int act = a->activation;
    *lo = act == DL_ACT_RELU ? 0.0f : act == DL_ACT_CLIP ? a->clip_min : -__builtin_inff();
    *hi = act == DL_ACT_CLIP ? a->clip_max : __builtin_inff();
    return act == DL_ACT_NONE || act == DL_ACT_RELU || act == DL_ACT_CLIP;
}

/* The lanes h * 8 .. h * 8 + 7 of v */
static inline v8 eight_lanes(vw v, int h) {
#if VW == 16
    return h ? __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)
             : __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
#else
    (void)h;
    return v;
#endif
}

/* out[i][j], lane l (row i, column j of tile l's 4x4 outputs) turned tile by tile: rows[q][l] holds
 * tile l's rows 2q and 2q + 1, 4 floats each, by one 8 x 8 transpose per 8 lanes and row pair */
static inline void tile_rows(const vw out[4][4], v8 rows[2][LANES]) {
    for (int q = 0; q < 2; q++)
        for (int h = 0; h < LANES / 8; h++) {
            v8 r[8];
            for (int j = 0; j < 4; j++)
                r[j] = eight_lanes(out[2 * q][j], h), r[4 + j] = eight_lanes(out[2 * q + 1][j], h);
            transpose8(r); /* r[l]: lane h * 8 + l's row 2q, then its row 2q + 1 */
            for (int l = 0; l < 8; l++) rows[q][h * 8 + l] = r[l];
        }
}

/* Tile l's outputs (rows, from tile_rows) to dst, its top-left in y (rows ow apart), with the
 * residual at rp (or NULL) added and the activation applied: nr rows and nc columns of the 4 x 4
 * (fewer at the map's bottom and right edges). A clamp (clamps: clamp_bounds, lo and hi) with no
 * residual was applied to rows already. Two rows a vector where all 4 x 4 lie inside; the same
 * arithmetic in the same order either way. */
static inline void store_tile(const v8 rows[2][LANES], int l, float *dst, const float *rp, int ow, int nr, int nc,
                              int clamps, v8 lo, v8 hi, const dl_op_attrs *a) {
    const int act = a->activation, in_registers = clamps && !rp;
    for (int q = 0; q < 2 && 2 * q < nr; q++) {
        v8 v = rows[q][l];
        float *d0 = dst + (int64_t)2 * q * ow;
        const float *r0 = rp ? rp + (int64_t)2 * q * ow : NULL;
        if (nr == 4 && nc == 4 && (in_registers || clamps)) {
            if (r0) {
                float t[8];
                memcpy(t, r0, 4 * sizeof(float)), memcpy(t + 4, r0 + ow, 4 * sizeof(float));
                v += load8(t);
            }
            if (!in_registers) v = clamp8(v, lo, hi);
            float t[8];
            store8(t, v);
            memcpy(d0, t, 4 * sizeof(float)), memcpy(d0 + ow, t + 4, 4 * sizeof(float));
            continue;
        }
        float t[8];
        store8(t, v);
        for (int i = 0; i < 2 && 2 * q + i < nr; i++)
            for (int j = 0; j < nc; j++)
                d0[i * ow + j] =
                    in_registers ? t[i * 4 + j] : cpu_activate(t[i * 4 + j] + (r0 ? r0[i * ow + j] : 0.0f), act, a);
    }
}

/* Tiles t0 .. t0 + nb - 1, worked out once a block instead of once a channel (channels-last: in
 * and out count pixels' vectors, a pixel c or k floats) */
static void locate_tiles(const cpu_winograd *wg, int64_t t0, int nb, tile_at *at) {
    const int tw = wg->tiles_w, per_image = wg->tiles_h * tw;
    const int64_t c = wg->cl ? wg->c : 1, k = wg->cl ? wg->k : 1;
    for (int tb = 0; tb < nb; tb++) {
        const int64_t t = t0 + tb, img = t / per_image;
        const int r = (int)(t % per_image), oy = r / tw * 4, ox = r % tw * 4;
        const int y0 = oy - wg->pad_t, x0 = ox - wg->pad_l;
        at[tb] = (tile_at){.in = img * wg->c * wg->h * wg->w + ((int64_t)y0 * wg->w + x0) * c,
                           .out = img * wg->k * wg->oh * wg->ow + ((int64_t)oy * wg->ow + ox) * k,
                           .y0 = y0,
                           .x0 = x0,
                           .inside = y0 >= 0 && y0 + 6 <= wg->h && x0 >= 0 && x0 + 6 <= wg->w};
    }
}

/* v's lanes moved by d (-7 .. 7): lane j takes v's lane j + d, or 0 where that lies outside 0 .. 7 */
static inline v8 shift_lanes(v8 v, int d) {
    const v8 z = splat8(0.0f);
    switch (d) {
    case -7: return __builtin_shufflevector(v, z, 8, 8, 8, 8, 8, 8, 8, 0);
    case -6: return __builtin_shufflevector(v, z, 8, 8, 8, 8, 8, 8, 0, 1);
    case -5: return __builtin_shufflevector(v, z, 8, 8, 8, 8, 8, 0, 1, 2);
    case -4: return __builtin_shufflevector(v, z, 8, 8, 8, 8, 0, 1, 2, 3);
    case -3: return __builtin_shufflevector(v, z, 8, 8, 8, 0, 1, 2, 3, 4);
    case -2: return __builtin_shufflevector(v, z, 8, 8, 0, 1, 2, 3, 4, 5);
    case -1: return __builtin_shufflevector(v, z, 8, 0, 1, 2, 3, 4, 5, 6);
    case 0: return __builtin_shufflevector(v, z, 0, 1, 2, 3, 4, 5, 6, 7);
    case 1: return __builtin_shufflevector(v, z, 1, 2, 3, 4, 5, 6, 7, 8);
    case 2: return __builtin_shufflevector(v, z, 2, 3, 4, 5, 6, 7, 8, 8);
    case 3: return __builtin_shufflevector(v, z, 3, 4, 5, 6, 7, 8, 8, 8);
    case 4: return __builtin_shufflevector(v, z, 4, 5, 6, 7, 8, 8, 8, 8);
    case 5: return __builtin_shufflevector(v, z, 5, 6, 7, 8, 8, 8, 8, 8);
    case 6: return __builtin_shufflevector(v, z, 6, 7, 8, 8, 8, 8, 8, 8);
    case 7: return __builtin_shufflevector(v, z, 7, 8, 8, 8, 8, 8, 8, 8);
    default: return z;
    }
}

/* d[i][j], lane l: row i, column j of the 6x6 window of the block's tile tb + l (past the block's
 * nb tiles: its last one) in channel plane x. Each window row is read as 8 floats (columns 0-5 used), then 8 tiles'
 * rows are turned lane-wise by an 8 x 8 transpose. A window that crosses the image's edge reads
 * the 8 floats of each row that lie inside and moves them into place, 0 outside (element by
 * element where the image is under 8 wide): done element by element, through a stack copy, the
 * edges' windows took a third of the transform's time (the store to load forwarding fails). */
static inline void load_windows(const cpu_winograd *wg, const float *x, const tile_at *at, int tb, int nb, vw d[6][6]) {
    const int h = wg->h, w = wg->w;
    v8 rows[LANES][6];
    for (int l = 0; l < LANES; l++) {
        const tile_at *t = &at[tb + l < nb ? tb + l : nb - 1];
        if (t->inside && t->x0 + 8 <= w) {
            for (int i = 0; i < 6; i++) rows[l][i] = load8(x + t->in + (int64_t)i * w);
            continue;
        }
        if (w >= 8) { /* 8 floats of the row inside the image, moved into place, 0 shifted in */
            const int s = t->x0 < 0 ? 0 : t->x0 + 8 > w ? w - 8 : t->x0, shift = t->x0 - s;
            for (int i = 0; i < 6; i++) {
                const int yy = t->y0 + i;
                rows[l][i] = yy < 0 || yy >= h ? splat8(0.0f)
                                               : shift_lanes(load8(x + t->in + (int64_t)i * w + (s - t->x0)), shift);
            }
            continue;
        }
        for (int i = 0; i < 6; i++) {
            float r[8] = {0};
            const int yy = t->y0 + i;
            for (int j = 0; j < 6 && yy >= 0 && yy < h; j++)
                if (t->x0 + j >= 0 && t->x0 + j < w) r[j] = x[t->in + (int64_t)i * w + j];
            rows[l][i] = load8(r);
        }
    }
    for (int i = 0; i < 6; i++) {
        v8 part[LANES / 8][8];
        for (int g = 0; g < LANES / 8; g++) {
            for (int l = 0; l < 8; l++) part[g][l] = rows[g * 8 + l][i];
            transpose8(part[g]); /* part[g][j]: column j of tiles 8g .. 8g + 7 */
        }
        for (int j = 0; j < 6; j++) {
#if VW == 16
            d[i][j] = joinw(part[0][j], part[1][j]);
#else
            d[i][j] = part[0][j];
#endif
        }
    }
}

/* ---- channels-last ---- */

/* d[i][j]: channels ch .. ch + n - 1 of the pixel at row i, column j of tile t's window (0 outside
 * the image, and in the lanes past n) */
static inline void load_window_cl(const cpu_winograd *wg, const float *x, const tile_at *t, int ch, int n, vw d[6][6]) {
    const int64_t c = wg->c;
    for (int i = 0; i < 6; i++) {
        const int yy = t->y0 + i;
        for (int j = 0; j < 6; j++) {
            const int xx = t->x0 + j;
            d[i][j] = yy >= 0 && yy < wg->h && xx >= 0 && xx < wg->w
                          ? load_lanes(x + t->in + (i * (int64_t)wg->w + j) * c + ch, n)
                          : splatw(0.0f);
        }
    }
}

static void run_cl(const cpu_winograd *wg, const float *x, const float *bias, const float *res, const dl_op_attrs *a,
                   float *y, float *workspace) {
    const int act = a->activation;
    const int c = wg->c, k = wg->k, oh = wg->oh, ow = wg->ow;
    const int64_t block = wg->block;
    float lo_f, hi_f;
    const int clamps = clamp_bounds(a, &lo_f, &hi_f);
    const vw lo = splatw(lo_f), hi = splatw(hi_f);
    const size_t packed_u = cpu_gemm_packed_b_floats(c, k), vsize = v_floats(wg);
    float *v = workspace;                        /* [36][block / 6][c][6]: cpu_gemm's packed A */
    const int64_t kp = k + POS_PAD;              /* floats from one position's filters to the next in M */
    float *m = workspace + NPOS * vsize;         /* [block][36][kp]: M^T, a tile's positions together */
    tile_at *at = (tile_at *)(m + m_floats(wg)); /* [block] */
    const int cvecs = (c + VW - 1) / VW, kvecs = (k + VW - 1) / VW;
    for (int64_t t0 = 0; t0 < wg->tiles; t0 += block) {
        const int nb = (int)(wg->tiles - t0 < block ? wg->tiles - t0 : block);
        const int panels = (nb + CPU_GEMM_MR - 1) / CPU_GEMM_MR;
        locate_tiles(wg, t0, nb, at);
        /* V^T: a panel of 6 tiles by VW channels at a time, each position's 6 x VW turned into
         * the panel's 6 floats a channel (tiles past nb: zeros, as cpu_gemm's padded panels) */
        CPU_PAR(
            "omp parallel for collapse(2) schedule(static)", for (int pi = 0; pi < panels; pi++) {
                for (int cv = 0; cv < cvecs; cv++) {
                    const int ch = cv * VW, n = c - ch < VW ? c - ch : VW;
                    vw tv[CPU_GEMM_MR][NPOS];
                    for (int r = 0; r < CPU_GEMM_MR; r++) {
                        const int tb = pi * CPU_GEMM_MR + r;
                        if (tb >= nb) {
                            for (int p = 0; p < NPOS; p++) tv[r][p] = splatw(0.0f);
                            continue;
                        }
                        vw d[6][6];
                        load_window_cl(wg, x, &at[tb], ch, n, d);
                        input_transform(d, (float *)tv[r], VW);
                    }
                    float *panel = v + (size_t)pi * CPU_GEMM_MR * c + (size_t)ch * CPU_GEMM_MR;
                    for (int p = 0; p < NPOS; p++)
                        for (int h8 = 0; h8 < VW / 8 && h8 * 8 < n; h8++) {
                            v8 r8[8];
                            for (int r = 0; r < CPU_GEMM_MR; r++) r8[r] = eight_lanes(tv[r][p], h8);
                            for (int r = CPU_GEMM_MR; r < 8; r++) r8[r] = splat8(0.0f);
                            transpose8(r8); /* r8[l]: channel ch + h8 * 8 + l of the 6 tiles */
                            float *dst = panel + (size_t)p * vsize + (size_t)h8 * 8 * CPU_GEMM_MR;
                            for (int l = 0; l < 8 && h8 * 8 + l < n; l++)
                                memcpy(dst + l * CPU_GEMM_MR, &r8[l], CPU_GEMM_MR * sizeof(float));
                        }
                }
            });
        /* M_p^T = V_p^T U_p^T (nb x c by c x k), one position a thread at a time */
        CPU_PAR(
            "omp parallel for schedule(dynamic, 1)", for (int p = 0; p < NPOS; p++) {
                const cpu_gemm_operand vp = {.packed = v + p * vsize}, up = {.packed = wg->u + p * packed_u};
                float none[1];
                cpu_gemm(nb, k, c, &vp, &up, m + (size_t)p * kp, NPOS * kp, NULL, none, 1);
            });
        /* Y = A^T M A a tile and VW filters at a time, + bias, + residual, the activation */
        CPU_PAR(
            "omp parallel for collapse(2) schedule(static)", for (int tb = 0; tb < nb; tb++) {
                for (int kv = 0; kv < kvecs; kv++) {
                    const int k0 = kv * VW, n = k - k0 < VW ? k - k0 : VW;
                    const tile_at *t = &at[tb];
                    const int oy = t->y0 + wg->pad_t, ox = t->x0 + wg->pad_l;
                    const int nr = oh - oy < 4 ? oh - oy : 4, nc = ow - ox < 4 ? ow - ox : 4;
                    vw mm[6][6], out[4][4];
                    for (int p = 0; p < NPOS; p++)
                        mm[p / 6][p % 6] = load_lanes(m + ((size_t)tb * NPOS + p) * kp + k0, n);
                    output_transform(mm, out);
                    const vw b = bias ? load_lanes(bias + k0, n) : splatw(0.0f);
                    for (int i = 0; i < nr; i++)
                        for (int j = 0; j < nc; j++) {
                            const int64_t at_px = t->out + ((int64_t)i * ow + j) * k + k0;
                            vw o = out[i][j] + b;
                            if (res) o += load_lanes(res + at_px, n);
                            if (clamps) o = clampw(o, lo, hi);
                            else {
                                float e[VW];
                                storew(e, o);
                                for (int l = 0; l < n; l++) e[l] = cpu_activate(e[l], act, a);
                                o = loadw(e);
                            }
                            store_lanes(y + at_px, o, n);
                        }
                }
            });
    }
}

void cpu_winograd_run(const cpu_winograd *wg, const float *x, const float *bias, const float *res, const dl_op_attrs *a,
                      float *y, float *workspace) {
    if (wg->cl) {
        run_cl(wg, x, bias, res, a, y, workspace);
        return;
    }
    const int c = wg->c, k = wg->k, h = wg->h, w = wg->w, oh = wg->oh, ow = wg->ow;
    const int64_t block = wg->block;
    float lo_f, hi_f;
    const int clamps = clamp_bounds(a, &lo_f, &hi_f);
    const int in_registers = clamps && !res; /* the clamp applied to the vectors, NaN kept */
    const vw lo = splatw(lo_f), hi = splatw(hi_f);
    const v8 v8_lo = splat8(lo_f), v8_hi = splat8(hi_f);
    const size_t packed_u = cpu_gemm_packed_a_floats(k, c);
    float *v = workspace; /* [36][block / 16][c][16]: cpu_gemm's packed B */
    const size_t vstride = v_floats(wg);
    float *m = workspace + NPOS * vstride;       /* [k][36][block]: a filter's 36 rows together */
    tile_at *at = (tile_at *)(m + m_floats(wg)); /* [block] */
    for (int64_t t0 = 0; t0 < wg->tiles; t0 += block) {
        const int nb = (int)(wg->tiles - t0 < block ? wg->tiles - t0 : block);
        /* whole panels of B: the tiles past nb repeat the last one (their columns are never stored) */
        const int ngroups = (nb + CPU_GEMM_NR - 1) / CPU_GEMM_NR * CPU_GEMM_NR / LANES;
        locate_tiles(wg, t0, nb, at);
        CPU_PAR(
            "omp parallel for collapse(2) schedule(static)", for (int ci = 0; ci < c; ci++) {
                for (int gi = 0; gi < ngroups; gi++) {
                    vw d[6][6];
                    const int tb = gi * LANES; /* tile tb of the block is column tb of B: panel tb / 16, lane tb % 16 */
                    load_windows(wg, x + (int64_t)ci * h * w, at, tb, nb, d);
                    input_transform(d,
                                    v + (size_t)(tb / CPU_GEMM_NR) * c * CPU_GEMM_NR + (size_t)ci * CPU_GEMM_NR +
                                        tb % CPU_GEMM_NR,
                                    vstride);
                }
            });
        /* The 36 products M_p = U_p V_p (k x c by c x nb) are independent: one a thread at a time,
         * each on the thread that runs it (both operands packed: no scratch) */
        CPU_PAR(
            "omp parallel for schedule(dynamic, 1)", for (int p = 0; p < NPOS; p++) {
                const cpu_gemm_operand up = {.packed = wg->u + p * packed_u}, vp = {.packed = v + p * vstride};
                float none[1];
                cpu_gemm(k, nb, c, &up, &vp, m + p * block, NPOS * block, NULL, none, 1);
            });
        CPU_PAR(
            "omp parallel for collapse(2) schedule(static)", for (int ki = 0; ki < k; ki++) {
                for (int gi = 0; gi < (nb + LANES - 1) / LANES; gi++) {
                    vw mm[6][6], out[4][4];
                    const float *src = m + (size_t)ki * NPOS * block + (size_t)gi * LANES;
                    for (int p = 0; p < NPOS; p++) mm[p / 6][p % 6] = loadw(src + (size_t)p * block);
                    output_transform(mm, out);
                    const vw b = splatw(bias ? bias[ki] : 0.0f);
                    for (int i = 0; i < 4; i++)
                        for (int j = 0; j < 4; j++)
                            out[i][j] = in_registers ? clampw(out[i][j] + b, lo, hi) : out[i][j] + b;
                    v8 rows[2][LANES]; /* rows[q][l]: rows 2q and 2q + 1 of tile gi * LANES + l, 4 floats each */
                    tile_rows(out, rows);
                    const int64_t plane = (int64_t)ki * oh * ow;
                    for (int l = 0; l < LANES && gi * LANES + l < nb; l++) {
                        const tile_at *t = &at[gi * LANES + l];
                        const int oy = t->y0 + wg->pad_t, ox = t->x0 + wg->pad_l;
                        store_tile(rows, l, y + t->out + plane, res ? res + t->out + plane : NULL, ow,
                                   oh - oy < 4 ? oh - oy : 4, ow - ox < 4 ? ow - ox : 4, clamps, v8_lo, v8_hi, a);
                    }
                }
            });
    }
}
