/* phase.c — phase planes, the layout that turns a strided window (max pooling) into
 * unit-stride loops over a whole plane.
 *
 * With equal strides s (and no dilation when s > 1), the padded input plane is split into s x s
 * phase planes, phase (a, b) holding the padded plane's rows a, a + s, ... and columns b, b + s, ...,
 * all of pitch P. Output (oy, ox) then reads tap (i, j) at row oy + i / s, column ox + j / s of phase
 * (i % s, j % s): at a fixed offset from q = oy * P + ox. So a whole output plane is one loop over q
 * (the P - ow extra columns per row computed and dropped), long enough to vectorise even on a 7x7
 * map, where a loop per 7-wide row would run scalar, and with no strided loads at stride 2. */
#include <string.h>

#include "cpu_ops.h"

int cpu_phase_init(cpu_phase *p, const dl_op_geom *g) {
    const dl_op_attrs *a = &g->a;
    const int64_t oh = g->ys[2], ow = g->ys[3], kh = a->kernel[0], kw = a->kernel[1];
    const int64_t s = a->stride[0], dh = a->dilation[0], dw = a->dilation[1];
    memset(p, 0, sizeof *p);
    if (s != a->stride[1] || (s > 1 && (dh != 1 || dw != 1)) || kh * kw > CPU_PHASE_MAX_TAPS) return 0;
    p->s = s;
    /* the last output row reads phase rows up to oh - 1 + (kh - 1) dh / s; the dropped columns of
     * the last row read one row past that */
    p->ph = oh + (kh - 1) * dh / s + 1;
    p->pw = ow + (kw - 1) * dw / s;
    p->taps = kh * kw;
    for (int64_t t = 0; t < p->taps; t++) { /* tap (i, j): phase (i % s, j % s), (i / s, j / s) in */
        const int64_t i = t / kw * dh, j = t % kw * dw;
        p->off[t] = ((i % s) * s + j % s) * p->ph * p->pw + i / s * p->pw + j / s;
    }
    p->planes_end = s * s * p->ph * p->pw;
    p->nq = (oh * p->pw + 7) / 8 * 8;
    p->per_thread = p->planes_end + CPU_PHASE_SLACK + p->nq;
    return 1;
}

void cpu_phase_fill(const cpu_phase *p, const float *restrict x, int64_t h, int64_t w, int64_t pt, int64_t pl,
                    float fill, float *restrict out) {
    const int64_t s = p->s, ph = p->ph, pw = p->pw;
    for (int64_t a = 0; a < s; a++)
        for (int64_t b = 0; b < s; b++) {
            float *plane = out + (a * s + b) * ph * pw;
            /* columns c with 0 <= c s + b - pl < w: [c0, c1) */
            int64_t c0 = pl > b ? (pl - b + s - 1) / s : 0, c1 = (w + pl - b + s - 1) / s;
            if (c0 > pw) c0 = pw;
            if (c1 > pw) c1 = pw;
            if (c1 < c0) c1 = c0;
            for (int64_t r = 0; r < ph; r++) {
                float *dst = plane + r * pw;
                const int64_t iy = r * s + a - pt;
                if (iy < 0 || iy >= h) {
                    for (int64_t c = 0; c < pw; c++) dst[c] = fill;
                    continue;
                }
                const float *src = x + iy * w + (c0 * s + b - pl);
                for (int64_t c = 0; c < c0; c++) dst[c] = fill;
                if (s == 1)
                    for (int64_t c = c0; c < c1; c++) dst[c] = src[c - c0];
                else
                    for (int64_t c = c0; c < c1; c++) dst[c] = src[(c - c0) * s];
                for (int64_t c = c1; c < pw; c++) dst[c] = fill;
            }
        }
    for (int i = 0; i < CPU_PHASE_SLACK; i++) out[p->planes_end + i] = fill;
}

void cpu_phase_store(const cpu_phase *p, const float *restrict tmp, float *restrict y, int64_t oh, int64_t ow) {
    if (p->pw == ow) {
        memcpy(y, tmp, (size_t)(oh * ow) * sizeof *y);
        return;
    }
    for (int64_t oy = 0; oy < oh; oy++) {
        const float *src = tmp + oy * p->pw;
        float *dst = y + oy * ow;
        for (int64_t ox = 0; ox < ow; ox++) dst[ox] = src[ox];
    }
}
