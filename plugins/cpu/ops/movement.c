/* movement.c — the CPU kernels that move elements: transpose and slice (one strided gather:
 * each output dimension steps through the input by its own stride), pad (constant, reflect,
 * edge), resize (nearest and linear, ONNX Resize's coordinate rules) and gather (rows picked by
 * int64 indices, each checked first). */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "resample.h"

/* y[i] = x[base + sum over d of coord_d(i) * st[d]], i over the output shape ys (nd dims). */
static void strided_gather(const float *x, float *y, int nd, const int64_t *ys, const int64_t *st, int64_t base,
                           int64_t numel) {
    const int64_t len = ys[nd - 1], rows = numel / len, step = st[nd - 1];
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < rows; r++) {
            const float *src = x + base + dl_bcast_offset(r, nd - 1, ys, st);
            float *dst = y + r * len;
            if (step == 1) memcpy(dst, src, (size_t)len * sizeof *dst);
            else
                for (int64_t j = 0; j < len; j++) dst[j] = src[j * step];
        });
}

static int64_t count(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* Row-major strides of a shape. */
static void strides_of(int nd, const int64_t *s, int64_t *st) {
    int64_t step = 1;
    for (int d = nd - 1; d >= 0; d--) st[d] = step, step *= s[d];
}

void cpu_transpose(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    int64_t xst[8], st[8];
    (void)ws;
    strides_of(g->xnd, g->xs, xst);
    for (int d = 0; d < g->ynd; d++) st[d] = xst[g->a.perm[d]];
    strided_gather(in[0].data, y, g->ynd, g->ys, st, 0, g->numel);
}

void cpu_slice(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    int64_t st[8], base = 0;
    (void)ws;
    strides_of(g->xnd, g->xs, st);
    for (int i = 0; i < g->a.n_axes; i++) {
        int d = dl_axis_norm(g->a.axes[i], g->xnd);
        int64_t first, taken = dl_slice_dim(g->xs[d], g->a.starts[i], g->a.ends[i], g->a.steps[i], &first);
        base += first * st[d];
        if (taken > 1) st[d] *= g->a.steps[i]; /* one element: no step (a huge one would overflow) */
    }
    strided_gather(in[0].data, y, g->ynd, g->ys, st, base, g->numel);
}

/* Where output coordinate o of a padded dimension reads the input (size n, `before` added in
 * front), or -1 for the constant. */
static inline int64_t pad_source(int64_t o, int64_t before, int64_t n, int mode) {
    int64_t i = o - before;
    if (i >= 0 && i < n) return i;
    if (mode == DL_PAD_EDGE) return i < 0 ? 0 : n - 1;
    if (mode == DL_PAD_REFLECT) return i < 0 ? -i : 2 * (n - 1) - i; /* pads are below n */
    return -1;
}

void cpu_pad(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int nd = g->ynd, mode = g->a.mode;
    const float value = g->a.value;
    const int64_t len = g->ys[nd - 1], rows = g->numel / len, n_last = g->xs[nd - 1], b_last = g->a.pads_before[nd - 1];
    int64_t xst[8];
    (void)ws;
    strides_of(g->xnd, g->xs, xst);
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < rows; r++) {
            float *dst = y + r * len;
            int64_t off = 0, rest = r;
            for (int d = nd - 2; d >= 0 && off >= 0; d--) { /* the input row this output row reads */
                int64_t i = pad_source(rest % g->ys[d], g->a.pads_before[d], g->xs[d], mode);
                rest /= g->ys[d];
                off = i < 0 ? -1 : off + i * xst[d];
            }
            if (off < 0) {
                for (int64_t j = 0; j < len; j++) dst[j] = value;
                continue;
            }
            const float *src = x + off;
            for (int64_t j = 0; j < len; j++) {
                int64_t i = pad_source(j, b_last, n_last, mode);
                dst[j] = i < 0 ? value : src[i];
            }
        });
}

void cpu_resize(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int64_t planes = g->xs[0] * g->xs[1], H = g->xs[2], W = g->xs[3], OH = g->ys[2], OW = g->ys[3];
    const int linear = g->a.mode == DL_RESIZE_LINEAR, coord = g->a.coord, nm = g->a.nearest;
    (void)ws;
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t p = 0; p < planes * OH; p++) {
            const int64_t oy = p % OH;
            const float *src = x + p / OH * H * W;
            float *dst = y + p * OW;
            double cy = dl_resample_source(oy, H, OH, coord);
            if (!linear) {
                const float *row = src + dl_resample_nearest(cy, H, nm) * W;
                for (int64_t ox = 0; ox < OW; ox++)
                    dst[ox] = row[dl_resample_nearest(dl_resample_source(ox, W, OW, coord), W, nm)];
                continue;
            }
            int64_t y0, y1, x0, x1;
            float wy, wx;
            dl_resample_taps(cy, H, &y0, &y1, &wy);
            const float *r0 = src + y0 * W, *r1 = src + y1 * W;
            for (int64_t ox = 0; ox < OW; ox++) {
                dl_resample_taps(dl_resample_source(ox, W, OW, coord), W, &x0, &x1, &wx);
                float top = r0[x0] + (r0[x1] - r0[x0]) * wx, bottom = r1[x0] + (r1[x1] - r1[x0]) * wx;
                dst[ox] = top + (bottom - top) * wy;
            }
        });
}

/* Every index inside [-n, n) for a gather along a dimension of size n: checked before the kernel
 * runs, since the indices are the user's (token ids), not something shapes vouch for. */
dl_status cpu_gather_check(const dl_kernel *k, const dl_tensor *in, dl_error *err) {
    const dl_op_geom *g = &k->g;
    const int64_t *idx = in[1].data, n = g->xs[g->a.axis], m = count(g->bnd, g->bs);
    for (int64_t j = 0; j < m; j++)
        if (idx[j] < -n || idx[j] >= n)
            return dl_fail(err, DL_E_INVALID,
                           "gather: index %lld (at %lld) is out of range for a dimension of size %lld",
                           (long long)idx[j], (long long)j, (long long)n);
    return DL_OK;
}

void cpu_gather(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int64_t *idx = in[1].data;
    const int axis = g->a.axis;
    const int64_t n = g->xs[axis], m = count(g->bnd, g->bs);
    int64_t outer = 1, inner = 1;
    (void)ws;
    for (int d = 0; d < axis; d++) outer *= g->xs[d];
    for (int d = axis + 1; d < g->xnd; d++) inner *= g->xs[d];
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < outer * m; r++) {
            int64_t o = r / m, i = idx[r % m];
            if (i < 0) i += n;
            memcpy(y + r * inner, x + (o * n + i) * inner, (size_t)inner * sizeof *y);
        });
}

/* ShuffleNet's channel shuffle: output channel j * groups + i is input channel i * (C / groups) + j.
 * Row-major: whole planes moved; channels-last ([N, H, W, C] in memory, nhwc.c): each pixel's
 * channels dealt out in place of the planes. */
void cpu_channel_shuffle(const dl_kernel *k, const dl_tensor *in, float *y, void *ws) {
    const dl_op_geom *g = &k->g;
    const float *x = in[0].data;
    const int axis = k->cl ? g->xnd - 1 : 1;
    const int64_t c = g->xs[axis], groups = g->a.groups, per = c / groups;
    int64_t outer = 1, inner = 1;
    (void)ws;
    for (int d = 0; d < axis; d++) outer *= g->xs[d];
    for (int d = axis + 1; d < g->xnd; d++) inner *= g->xs[d];
    if (inner == 1) {
        CPU_PAR(
            "omp parallel for schedule(static)", for (int64_t o = 0; o < outer; o++) {
                const float *src = x + o * c;
                float *dst = y + o * c;
                if (groups == 2) { /* two halves interleaved: a loop the compiler vectorises */
                    const float *lo = src, *hi = src + per;
                    for (int64_t j = 0; j < per; j++) dst[2 * j] = lo[j], dst[2 * j + 1] = hi[j];
                    continue;
                }
                for (int64_t j = 0; j < per; j++)
                    for (int64_t i = 0; i < groups; i++) dst[j * groups + i] = src[i * per + j];
            });
        return;
    }
    CPU_PAR(
        "omp parallel for schedule(static)", for (int64_t r = 0; r < outer * c; r++) {
            const int64_t o = r / c, q = r % c;
            memcpy(y + r * inner, x + (o * c + q % groups * per + q / groups) * inner, (size_t)inner * sizeof *y);
        });
}
