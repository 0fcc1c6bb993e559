/* cuda_params.c — see cuda_params.h: the launch parameters of the elementwise, movement,
 * reduction, conv_transpose2d and conv3d kernels, computed once at prepare from a prepared op's
 * geometry. */
#include "cuda_params.h"

#include <string.h>

/* Product of the dimensions [from, to) of a shape (gpu.h has one too, but with the CUDA runtime's
 * header, which the host test of this file does without). */
static int64_t prod(const int64_t *s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

int cu_unary_params(const dl_op_geom *g, dlk_unary_p *p) {
    const dl_op_attrs *a = &g->a;
    dlk_unary_p u = {DLK_RELU, 0, 0};
    switch (g->kind) {
    case DL_OP_RELU: break;
    case DL_OP_LEAKY_RELU: u = (dlk_unary_p){DLK_LEAKY_RELU, a->alpha, 0}; break;
    case DL_OP_SIGMOID: u.kind = DLK_SIGMOID; break;
    case DL_OP_CLIP: u = (dlk_unary_p){DLK_CLIP, a->clip_min, a->clip_max}; break;
    case DL_OP_SQRT: u.kind = DLK_SQRT; break;
    case DL_OP_EXP: u.kind = DLK_EXP; break;
    case DL_OP_LOG: u.kind = DLK_LOG; break;
    case DL_OP_TANH: u.kind = DLK_TANH; break;
    case DL_OP_ERF: u.kind = DLK_ERF; break;
    case DL_OP_NEG: u.kind = DLK_NEG; break;
    case DL_OP_ABS: u.kind = DLK_ABS; break;
    case DL_OP_RECIPROCAL: u.kind = DLK_RECIPROCAL; break;
    case DL_OP_HARD_SIGMOID: u = (dlk_unary_p){DLK_HARD_SIGMOID, a->alpha, a->beta}; break;
    case DL_OP_HARD_SWISH: u.kind = DLK_HARD_SWISH; break;
    case DL_OP_SILU: u.kind = DLK_SILU; break;
    case DL_OP_GELU: u.kind = a->mode == DL_GELU_TANH ? DLK_GELU_TANH : DLK_GELU_ERF; break;
    case DL_OP_SOFTPLUS: u.kind = DLK_SOFTPLUS; break;
    default: return 0;
    }
    *p = u;
    return 1;
}

int cu_binary_params(const dl_op_geom *g, dlk_binary_p *p) {
    static const struct {
        dl_op_kind op;
        dlk_binary_kind k;
    } kinds[] = {{DL_OP_ADD, DLK_ADD}, {DL_OP_MUL, DLK_MUL}, {DL_OP_SUB, DLK_SUB}, {DL_OP_DIV, DLK_DIV},
                 {DL_OP_POW, DLK_POW}, {DL_OP_MIN, DLK_MIN}, {DL_OP_MAX, DLK_MAX}};
    int i = 0, n = (int)(sizeof kinds / sizeof kinds[0]);
    while (i < n && kinds[i].op != g->kind) i++;
    if (i == n) return 0;
    memset(p, 0, sizeof *p);
    p->kind = kinds[i].k;
    /* both operands with y's element count have y's shape (the op table checked the broadcast) */
    p->bcast = prod(g->xs, 0, g->xnd) != g->numel || prod(g->bs, 0, g->bnd) != g->numel;
    if (!p->bcast) return 1;
    dlk_bcast *bc = &p->bc;
    memcpy(bc->ys, g->ys, sizeof bc->ys);
    dl_bcast_strides(g->xnd, g->xs, g->ynd, g->ys, bc->sa);
    dl_bcast_strides(g->bnd, g->bs, g->ynd, g->ys, bc->sb);
    bc->nd = dl_merge_dims(g->ynd, bc->ys, (int64_t *const[]){bc->sa, bc->sb}, 2);
    return 1;
}

/* Row-major strides of a shape. */
static void strides_of(int nd, const int64_t *s, int64_t *st) {
    int64_t step = 1;
    for (int d = nd - 1; d >= 0; d--) st[d] = step, step *= s[d];
}

void cu_transpose_params(const dl_op_geom *g, dlk_gather_p *p) {
    int64_t xst[8];
    memset(p, 0, sizeof *p);
    strides_of(g->xnd, g->xs, xst);
    for (int d = 0; d < g->ynd; d++) p->ys[d] = g->ys[d], p->st[d] = xst[g->a.perm[d]];
    p->nd = dl_merge_dims(g->ynd, p->ys, (int64_t *const[]){p->st}, 1);
}

void cu_channel_shuffle_params(const dl_op_geom *g, dlk_gather_p *p) {
    memset(p, 0, sizeof *p);
    const int64_t c = g->xs[1], groups = g->a.groups, per = c / groups, rest = prod(g->xs, 2, g->xnd);
    const int64_t ys[4] = {g->xs[0], per, groups, rest}, st[4] = {c * rest, rest, per * rest, 1};
    memcpy(p->ys, ys, sizeof ys), memcpy(p->st, st, sizeof st);
    p->nd = dl_merge_dims(4, p->ys, (int64_t *const[]){p->st}, 1);
}

/* The first element and step of each sliced dimension from dl_slice_dim (ONNX's normalisation of
 * negative and out-of-range starts and ends), once here rather than per element. */
void cu_slice_params(const dl_op_geom *g, dlk_gather_p *p) {
    memset(p, 0, sizeof *p);
    strides_of(g->xnd, g->xs, p->st);
    for (int i = 0; i < g->a.n_axes; i++) {
        int d = dl_axis_norm(g->a.axes[i], g->xnd);
        int64_t first;
        dl_slice_dim(g->xs[d], g->a.starts[i], g->a.ends[i], g->a.steps[i], &first);
        p->base += first * p->st[d];
        p->st[d] *= g->a.steps[i];
    }
    memcpy(p->ys, g->ys, sizeof p->ys);
    p->nd = dl_merge_dims(g->ynd, p->ys, (int64_t *const[]){p->st}, 1);
}

void cu_pad_params(const dl_op_geom *g, dlk_pad_p *p) {
    memset(p, 0, sizeof *p);
    p->nd = g->ynd, p->mode = g->a.mode, p->value = g->a.value;
    memcpy(p->ys, g->ys, sizeof p->ys);
    memcpy(p->xs, g->xs, sizeof p->xs);
    memcpy(p->before, g->a.pads_before, sizeof p->before);
    strides_of(g->xnd, g->xs, p->xst);
}

void cu_resize_params(const dl_op_geom *g, dlk_resize_p *p) {
    *p = (dlk_resize_p){g->xs[0] * g->xs[1], g->xs[2],   g->xs[3],    g->ys[2], g->ys[3],
                        g->a.mode,           g->a.coord, g->a.nearest};
}

/* The axis is non-negative here (the host resolves it; dl_op_check refuses a negative one). */
void cu_gather_params(const dl_op_geom *g, dlk_take_p *p) {
    const int axis = g->a.axis;
    *p = (dlk_take_p){prod(g->xs, 0, axis), g->xs[axis], prod(g->xs, axis + 1, g->xnd), prod(g->bs, 0, g->bnd), 0};
    p->numel = p->outer * p->m * p->inner;
}

void cu_conv_transpose2d_params(const dl_op_geom *g, dlk_deconv_p *p) {
    const dl_op_attrs *a = &g->a;
    const int64_t groups = a->groups > 0 ? a->groups : 1;
    *p = (dlk_deconv_p){.c = g->xs[1],
                        .h = g->xs[2],
                        .w = g->xs[3],
                        .oc = g->ys[1],
                        .oh = g->ys[2],
                        .ow = g->ys[3],
                        .cg = g->xs[1] / groups,
                        .ocg = g->ys[1] / groups,
                        .kh = a->kernel[0],
                        .kw = a->kernel[1],
                        .sh = a->stride[0],
                        .sw = a->stride[1],
                        .ph = a->pad_begin[0],
                        .pw = a->pad_begin[1],
                        .dh = a->dilation[0],
                        .dw = a->dilation[1],
                        .relu = a->activation == DL_ACT_RELU,
                        .numel = g->numel};
}

void cu_conv3d_params(const dl_op_geom *g, dlk_conv3d_p *p) {
    const dl_op_attrs *a = &g->a;
    const int64_t groups = a->groups > 0 ? a->groups : 1;
    *p = (dlk_conv3d_p){.c = g->xs[1],
                        .d = g->xs[2],
                        .h = g->xs[3],
                        .w = g->xs[4],
                        .oc = g->ys[1],
                        .od = g->ys[2],
                        .oh = g->ys[3],
                        .ow = g->ys[4],
                        .cg = g->xs[1] / groups,
                        .ocg = g->ys[1] / groups,
                        .kd = a->kernel3[0],
                        .kh = a->kernel3[1],
                        .kw = a->kernel3[2],
                        .sd = a->stride3[0],
                        .sh = a->stride3[1],
                        .sw = a->stride3[2],
                        .pd = a->pad_begin3[0],
                        .ph = a->pad_begin3[1],
                        .pw = a->pad_begin3[2],
                        .dd = a->dilation3[0],
                        .dh = a->dilation3[1],
                        .dw = a->dilation3[2],
                        .relu = a->activation == DL_ACT_RELU,
                        .numel = g->numel};
}

void cu_reduce_params(const dl_op_geom *g, dlk_reduce_p *p) {
    const int nd = g->xnd;
    int mask = g->a.n_axes == 0 ? (1 << nd) - 1 : 0;
    for (int i = 0; i < g->a.n_axes; i++) mask |= 1 << dl_axis_norm(g->a.axes[i], nd);
    int64_t st[8];
    memset(p, 0, sizeof *p);
    p->how = g->kind == DL_OP_REDUCE_SUM    ? DLK_REDUCE_SUM
             : g->kind == DL_OP_REDUCE_MEAN ? DLK_REDUCE_MEAN
             : g->kind == DL_OP_REDUCE_MAX  ? DLK_REDUCE_MAX
                                            : DLK_REDUCE_MIN;
    strides_of(nd, g->xs, st);
    p->kept = p->count = 1;
    for (int d = 0; d < nd; d++) {
        if (mask >> d & 1) p->rs[p->nr] = g->xs[d], p->rst[p->nr++] = st[d], p->count *= g->xs[d];
        else p->ks[p->nk] = g->xs[d], p->kst[p->nk++] = st[d], p->kept *= g->xs[d];
    }
    p->inner_reduced = nd > 0 && (mask >> (nd - 1) & 1) && g->xs[nd - 1] > 1;
    p->nk = dl_merge_dims(p->nk, p->ks, (int64_t *const[]){p->kst}, 1);
    p->nr = dl_merge_dims(p->nr, p->rs, (int64_t *const[]){p->rst}, 1);
    p->threads = cu_block_threads(p->count);
}

void cu_layer_norm_params(const dl_op_geom *g, dlk_layer_norm_p *p) {
    int64_t inner = prod(g->xs, g->a.axis, g->xnd);
    *p = (dlk_layer_norm_p){inner ? g->numel / inner : 0, inner, g->a.epsilon, cu_block_threads(inner)};
}

void cu_group_norm_params(const dl_op_geom *g, dlk_group_norm_p *p) {
    const int64_t groups = g->a.groups > 0 ? g->a.groups : 1, per = g->xs[1] / groups, spatial = prod(g->xs, 2, g->xnd);
    *p = (dlk_group_norm_p){
        g->xs[0] * groups, per * spatial, spatial, groups, per, g->a.epsilon, cu_block_threads(per * spatial)};
}

int cu_block_threads(int64_t work) {
    int64_t t = (work + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : (int)t;
}
