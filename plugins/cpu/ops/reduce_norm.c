/* reduce_norm.c — the CPU kernels that combine many elements into one: reduce_mean, reduce_sum,
 * reduce_max, reduce_min over any axes (sums in double), layer_norm over the trailing dimensions
 * and group_norm over groups of channels (mean and variance in double, two passes). */
#include <math.h>

#include "cpu_ops.h"

enum { R_SUM, R_MEAN, R_MAX, R_MIN };

/* Each output element combines the input elements that share its kept coordinates: the kept
 * dimensions give its first element, an odometer over the reduced ones the rest (the innermost
 * reduced dimension as a tight loop). NaN propagates through max and min. */
static void reduce(const dl_kernel *k, const float *x, float *y, int how) {
    const dl_op_geom *g = &k->g;
    const int nd = g->xnd;
    int mask = 0;
    for (int i = 0; i < g->a.n_axes; i++) mask |= 1 << dl_axis_norm(g->a.axes[i], nd);
    if (g->a.n_axes == 0) mask = (1 << nd) - 1;
    int64_t st[8], ks[8], kst[8], rs[8], rst[8], step = 1, kept = 1, count = 1;
    int nk = 0, nr = 0;
    for (int d = nd - 1; d >= 0; d--) st[d] = step, step *= g->xs[d];
    for (int d = 0; d < nd; d++) {
        if (mask >> d & 1) rs[nr] = g->xs[d], rst[nr++] = st[d], count *= g->xs[d];
        else ks[nk] = g->xs[d], kst[nk++] = st[d], kept *= g->xs[d];
    }
    if (nr == 0) rs[0] = 1, rst[0] = 1, nr = 1;
    const int64_t inner = rs[nr - 1], inner_st = rst[nr - 1], outer = count / inner;
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t o = 0; o < kept; o++) {
            const float *base = x + dl_bcast_offset(o, nk, ks, kst);
            double sum = 0;
            float best = how == R_MAX ? -INFINITY : INFINITY;
            for (int64_t q = 0; q < outer; q++) {
                const float *p = base + dl_bcast_offset(q, nr - 1, rs, rst);
                for (int64_t j = 0; j < inner; j++) {
                    float v = p[j * inner_st];
                    if (how <= R_MEAN) sum += v;
                    else if (how == R_MAX ? (v > best || isnan(v)) : (v < best || isnan(v)))
                        best = isnan(best) ? best : v;
                }
            }
            y[o] = how == R_SUM ? (float)sum : how == R_MEAN ? (float)(sum / (double)count) : best;
        });
}

void cpu_reduce_sum(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, reduce(k, in[0].data, y, R_SUM);
}
void cpu_reduce_mean(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, reduce(k, in[0].data, y, R_MEAN);
}
void cpu_reduce_max(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, reduce(k, in[0].data, y, R_MAX);
}
void cpu_reduce_min(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    (void)ws, reduce(k, in[0].data, y, R_MIN);
}

/* The sum of n floats, and of their squared distances from `mean`, in double: 16 partial sums
 * side by side, which the compiler keeps in vector registers (one running total waits 4 cycles
 * on each add: a ViT's 25 layer norms over rows of 768 took 2.4 ms of 82), then added up. */
#define PARTS 16
static double sum_of(const float *x, int64_t n) {
    double part[PARTS] = {0}, s = 0;
    int64_t i = 0;
    for (; i + PARTS <= n; i += PARTS)
        for (int l = 0; l < PARTS; l++) part[l] += x[i + l];
    for (; i < n; i++) s += x[i];
    for (int l = 0; l < PARTS; l++) s += part[l];
    return s;
}
static double squares_of(const float *x, int64_t n, double mean) {
    double part[PARTS] = {0}, s = 0;
    int64_t i = 0;
    for (; i + PARTS <= n; i += PARTS)
        for (int l = 0; l < PARTS; l++) part[l] += (x[i + l] - mean) * (x[i + l] - mean);
    for (; i < n; i++) s += (x[i] - mean) * (x[i] - mean);
    for (int l = 0; l < PARTS; l++) s += part[l];
    return s;
}
#undef PARTS

/* The mean of n floats and 1 / sqrt(variance + eps), in double, two passes. */
static void moments(const float *x, int64_t n, double eps, double *mean, double *inv) {
    *mean = sum_of(x, n) / (double)n;
    *inv = 1.0 / sqrt(squares_of(x, n, *mean) / (double)n + eps);
}

void cpu_layer_norm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data, *w = in[1].data, *b = in[2].data;
    int64_t inner = 1;
    (void)ws;
    for (int d = g->a.axis; d < g->xnd; d++) inner *= g->xs[d];
    const int64_t rows = g->numel / inner;
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < rows; r++) {
            const float *src = x + r * inner;
            float *dst = y + r * inner;
            double mean, inv;
            moments(src, inner, g->a.epsilon, &mean, &inv);
            for (int64_t i = 0; i < inner; i++) dst[i] = (float)((src[i] - mean) * inv) * w[i] + b[i];
        });
}

void cpu_group_norm(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data, *w = in[1].data, *b = in[2].data;
    const int64_t c = g->xs[1], groups = g->a.groups, per = c / groups;
    int64_t spatial = 1;
    (void)ws;
    for (int d = 2; d < g->xnd; d++) spatial *= g->xs[d];
    const int64_t len = per * spatial; /* one group's elements, contiguous */
    const double eps = g->a.epsilon;
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < g->xs[0] * groups; r++) {
            const float *src = x + r * len;
            float *dst = y + r * len;
            double mean, inv;
            moments(src, len, eps, &mean, &inv);
            for (int64_t i = 0; i < len; i++) {
                int64_t ch = r % groups * per + i / spatial;
                dst[i] = (float)((src[i] - mean) * inv) * w[ch] + b[ch];
            }
        });
}
