/* fuse.c — fusion, one stage in two passes around placement, filling the session's dl_fusion:
 *
 * Before placement, each batchnorm is folded into the conv2d or conv3d before it (inference only):
 *   y = gamma * (conv(x, W) + b - mean) / sqrt(var + eps) + beta
 *     = conv(x, W * s) + (b - mean) * s + beta,   s = gamma / sqrt(var + eps) per channel,
 * so the batchnorm's pass over memory disappears and a relu after it can fuse into the conv. The
 * scaled weights are the session's own host copies (the model's weights are shared and may be
 * mapped read-only); a conv without bias takes the batchnorm's beta value as its bias, its data
 * replaced by the folded bias. Arithmetic in double, rounded once to f32.
 *
 * After placement (it needs both ops on one backend, or two backends of one memory domain, the
 * activation then moving to its producer's), each activation (relu, silu, hard_swish, gelu; from
 * ABI 1.5 clip, leaky relu, sigmoid, their parameters copied into the producer's attrs) is fused
 * into the op before it as that op's epilogue, where the backend accepts the fused op (the cpu
 * plugin takes them all, the onednn plugin those oneDNN computes exactly; the GPU plugins relu
 * only, for now). The ops that fuse (conv2d, conv_transpose2d, conv3d, linear, add, batchnorm) read none
 * of clip_min, clip_max or alpha themselves, so those members are free to carry the activation's.
 *
 * Before the activations (ABI 1.8), a residual connection's add y = a + r is fused into the conv2d
 * or linear p that computes a, as p's attrs.residual with r appended to p's inputs: p then computes
 * y = act(op(x) + b + r) in its epilogue, and the relu after the add fuses into p as well (an add
 * that already carries an activation is left alone). Allowed where a has no other reader and no
 * activation yet, r is an activation of a's shape and dtype already computed when p runs (its
 * producer comes before p: in ResNet's downsampling blocks that picks the shortcut's conv, which
 * comes last), both ops share a memory domain (dl_same_domain) and p's backend accepts the fused
 * op: the cpu and onednn plugins, and the cuda and cudnn plugins (their GEMM epilogues; cuDNN's z
 * input, cuBLASLt's C). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

/* readers of v: the nodes that take it, and the model's outputs */
static int uses(const dl_graph *g, int v) { return dl_graph_consumers(g, v) + dl_graph_is_output(g, v); }

static int is_weight(const dl_graph *g, int v) { return g->values[v].kind == DL_VALUE_WEIGHT; }

static float *owned(dl_fusion *f, size_t n) {
    if (f->n_owned == f->cap_owned) {
        int cap = f->cap_owned ? 2 * f->cap_owned : 16;
        float **list = realloc(f->owned, (size_t)cap * sizeof *list);
        if (!list) return NULL;
        f->owned = list, f->cap_owned = cap;
    }
    float *p = malloc(n * sizeof *p);
    if (p) f->owned[f->n_owned++] = p, f->owned_bytes += n * sizeof *p;
    return p;
}

/* Nothing fused: every node runs as the model declares it. */
static dl_status fusion_init(dl_session *s, dl_error *err) {
    const dl_graph *g = s->g;
    dl_fusion *f = &s->fuse;
    size_t nn = (size_t)g->n_nodes + 1;
    f->attrs = calloc(nn, sizeof *f->attrs);
    f->into = malloc(nn * sizeof *f->into);
    f->extra_input = malloc(nn * sizeof *f->extra_input);
    f->residual = malloc(nn * sizeof *f->residual);
    f->via = calloc(nn, sizeof *f->via);
    f->weight = calloc((size_t)g->n_values + 1, sizeof *f->weight);
    if (!f->attrs || !f->into || !f->extra_input || !f->residual || !f->via || !f->weight)
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        f->attrs[i] = g->nodes[i].params.attrs;
        f->into[i] = f->extra_input[i] = f->residual[i] = -1;
    }
    return DL_OK;
}

void dl_fusion_free(dl_fusion *f) {
    for (int i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    free(f->attrs);
    free(f->into);
    free(f->extra_input);
    free(f->residual);
    free(f->via);
    free(f->weight);
    memset(f, 0, sizeof *f);
}

/* The conv node that batchnorm node `b` can fold into, or -1. */
static int foldable(const dl_session *s, int b) {
    const dl_graph *g = s->g;
    const dl_node *bn = &g->nodes[b];
    if (bn->kind != DL_OP_BATCHNORM || bn->params.attrs.activation != DL_ACT_NONE) return -1;
    int v = bn->inputs[0], p = g->values[v].producer;
    if (p < 0 || s->fuse.into[p] >= 0) return -1;
    const dl_node *c = &g->nodes[p];
    if ((c->kind != DL_OP_CONV2D && c->kind != DL_OP_CONV3D) || c->params.attrs.activation != DL_ACT_NONE ||
        uses(g, v) != 1)
        return -1;
    /* a pin on either must agree: folding must not move work off a pinned backend */
    if ((bn->backend || c->backend) && (!bn->backend || !c->backend || strcmp(bn->backend, c->backend))) return -1;
    for (int j = 1; j < c->n_inputs; j++) /* weight and bias: constants used by this conv only */
        if (!is_weight(g, c->inputs[j]) || uses(g, c->inputs[j]) != 1) return -1;
    for (int j = 1; j < 5; j++)
        if (!is_weight(g, bn->inputs[j])) return -1;
    if (!c->params.has_bias && uses(g, bn->inputs[2]) != 1) return -1; /* beta becomes the bias */
    return p;
}

dl_status dl_fold_batchnorm(dl_session *s, dl_error *err) {
    dl_status st = fusion_init(s, err);
    if (st != DL_OK || s->opt.no_fuse) return st;
    const dl_graph *g = s->g;
    dl_fusion *f = &s->fuse;
    for (int b = 0; b < g->n_nodes; b++) {
        int p = foldable(s, b);
        if (p < 0) continue;
        const dl_node *bn = &g->nodes[b], *c = &g->nodes[p];
        const dl_shape *w = &s->shape[c->inputs[1]];
        int64_t oc = w->d[0], per = dl_shape_numel(w) / oc;
        const float *gamma = dl_session_weight(s, bn->inputs[1]), *beta = dl_session_weight(s, bn->inputs[2]);
        const float *mean = dl_session_weight(s, bn->inputs[3]), *var = dl_session_weight(s, bn->inputs[4]);
        const float *w0 = dl_session_weight(s, c->inputs[1]);
        const float *b0 = c->params.has_bias ? dl_session_weight(s, c->inputs[2]) : NULL;
        float *w1 = owned(f, (size_t)(oc * per)), *b1 = owned(f, (size_t)oc);
        if (!w1 || !b1 || !gamma || !beta || !mean || !var || !w0 || (c->params.has_bias && !b0))
            return dl_fail(err, DL_E_NOMEM, "out of memory folding batchnorm '%s'", bn->name);
        for (int64_t o = 0; o < oc; o++) {
            double sc = gamma[o] / sqrt((double)var[o] + bn->params.attrs.epsilon);
            for (int64_t i = 0; i < per; i++) w1[o * per + i] = (float)(w0[o * per + i] * sc);
            b1[o] = (float)(((b0 ? b0[o] : 0.0) - mean[o]) * sc + beta[o]);
        }
        f->weight[c->inputs[1]] = w1;
        int bias = c->params.has_bias ? c->inputs[2] : bn->inputs[2];
        f->weight[bias] = b1;
        if (!c->params.has_bias) f->extra_input[p] = bias;
        f->into[b] = p;
    }
    return DL_OK;
}

static int same_shape(const dl_shape *a, const dl_shape *b) {
    return a->ndim == b->ndim && !memcmp(a->d, b->d, (size_t)a->ndim * sizeof *a->d);
}

/* The node whose step computes value v: its producer, or the conv its batchnorm was folded into. */
static int computed_by(const dl_session *s, int v) {
    int p = s->g->values[v].producer;
    if (p >= 0 && s->g->nodes[p].kind == DL_OP_BATCHNORM && s->fuse.into[p] >= 0) p = s->fuse.into[p];
    return p;
}

/* The graph's side of fusing add node i's operand j (value a) into the conv2d or linear p that
 * computes it, with the other operand r as p's residual: allowed (above) as far as the graph and
 * the fusions so far say. Returns p, or -1. Whether p's backend takes the fused op is asked where
 * it runs (fuse_residual); placement asks this first, to time p as it will run
 * (dl_fuse_residual_of). */
static int residual_target(const dl_session *s, int i, int j) {
    const dl_graph *g = s->g;
    const dl_node *n = &g->nodes[i];
    const dl_fusion *f = &s->fuse;
    if (n->kind != DL_OP_ADD || n->n_inputs != 2 || n->backend || f->into[i] >= 0 ||
        f->attrs[i].activation != DL_ACT_NONE) /* (activations fuse after this pass) */
        return -1;
    const char *off = getenv("DLRUN_FUSE_RESIDUAL"); /* "0": off, for A/B runs (docs/architecture.md) */
    if ((off && !strcmp(off, "0")) || s->opt.no_fuse) return -1;
    const int a = n->inputs[j], r = n->inputs[1 - j], p = computed_by(s, a);
    if (p < 0 || a == r || f->into[p] >= 0 || f->residual[p] >= 0 || f->attrs[p].residual) return -1;
    if (!(dl_op_def_of(g->nodes[p].kind)->flags & DL_OPF_RESIDUAL) || f->attrs[p].activation != DL_ACT_NONE) return -1;
    if (dl_graph_is_output(g, a) || dl_graph_consumers(g, a) != 1 || g->values[r].kind == DL_VALUE_WEIGHT) return -1;
    const int q = g->values[r].producer; /* r must exist when p runs */
    if (q >= p || !same_shape(&s->shape[a], &s->shape[r]) || !dl_dtype_eq(g->values[a].dtype, g->values[r].dtype))
        return -1;
    return p;
}

int dl_fuse_residual_of(const dl_session *s, int p) {
    const dl_graph *g = s->g;
    int a = g->nodes[p].output;
    if (dl_graph_consumers(g, a) != 1 || dl_graph_is_output(g, a)) return -1;
    int i = g->reader_node[g->reader_start[a]];
    if (g->nodes[i].kind == DL_OP_BATCHNORM && s->fuse.into[i] == p) { /* folded into p: its output is p's */
        a = g->nodes[i].output;
        if (dl_graph_consumers(g, a) != 1 || dl_graph_is_output(g, a)) return -1;
        i = g->reader_node[g->reader_start[a]];
    }
    for (int j = 0; j < 2 && g->nodes[i].kind == DL_OP_ADD && g->nodes[i].n_inputs == 2; j++) {
        const int t = residual_target(s, i, j); /* fuse_residual takes the first operand that may */
        if (t >= 0) return t == p ? g->nodes[i].inputs[1 - j] : -1;
    }
    return -1;
}

/* Fuses add node i as a residual into the conv2d or linear computing one of its operands, where
 * allowed (above) and accepted; returns 1 if it did. */
static int fuse_residual(dl_session *s, int i) {
    const dl_graph *g = s->g;
    const dl_node *n = &g->nodes[i];
    dl_fusion *f = &s->fuse;
    for (int j = 0; j < 2; j++) {
        const int p = residual_target(s, i, j);
        if (p < 0) continue;
        const int r = n->inputs[1 - j];
        const dl_backend *bp = s->place.be[p];
        if (!dl_same_domain(bp, s->place.be[i])) continue;
        dl_op_attrs fused = f->attrs[p];
        fused.residual = 1;
        f->residual[p] = r; /* the op view of p takes r from here */
        dl_error why;
        if (!dl_session_accepts(s, bp, p, &fused, &why)) {
            f->residual[p] = -1;
            continue;
        }
        f->attrs[p] = fused;
        f->into[i] = p;
        f->via[i] = j;
        s->place.be[i] = bp;
        return 1;
    }
    return 0;
}

/* The activation node i computes, as a fused epilogue (DL_ACT_NONE: not one). */
static dl_activation activation_of(const dl_node *n) {
    switch (n->kind) {
    case DL_OP_RELU: return DL_ACT_RELU;
    case DL_OP_SILU: return DL_ACT_SILU;
    case DL_OP_HARD_SWISH: return DL_ACT_HARD_SWISH;
    case DL_OP_GELU: return n->params.attrs.mode == DL_GELU_TANH ? DL_ACT_GELU_TANH : DL_ACT_GELU;
    case DL_OP_CLIP: return DL_ACT_CLIP;
    case DL_OP_LEAKY_RELU: return DL_ACT_LEAKY_RELU;
    case DL_OP_SIGMOID: return DL_ACT_SIGMOID;
    default: return DL_ACT_NONE;
    }
}

/* Fuses activation node i (relu, silu, hard_swish, gelu, clip, leaky_relu, sigmoid) into the op that produces its
 * input, when that is allowed and the op's backend accepts it. */
static void fuse_activation(dl_session *s, int i) {
    const dl_graph *g = s->g;
    const dl_node *r = &g->nodes[i];
    dl_fusion *f = &s->fuse;
    dl_activation act = activation_of(r);
    if (act == DL_ACT_NONE || r->backend) return;
    int v = r->inputs[0];
    int p = computed_by(s, v);
    if (p >= 0 && g->nodes[p].kind == DL_OP_ADD && f->into[p] >= 0) p = f->into[p]; /* a residual fused into a conv */
    if (p < 0 || dl_graph_is_output(g, v) || dl_graph_consumers(g, v) != 1 || f->into[p] >= 0) return;
    if (!(dl_op_def_of(g->nodes[p].kind)->flags & DL_OPF_FUSES_RELU)) return;
    if (f->attrs[p].activation != DL_ACT_NONE) return;
    /* Placement timed the two ops apart: an activation placed on another backend of the same
     * memory domain (the cpu and onednn plugins) moves to its producer's, where it costs nothing. */
    const dl_backend *bp = s->place.be[p];
    if (!dl_same_domain(bp, s->place.be[i])) return;
    dl_op_attrs fused = f->attrs[p];
    fused.activation = act;
    fused.clip_min = r->params.attrs.clip_min;
    fused.clip_max = r->params.attrs.clip_max;
    fused.alpha = r->params.attrs.alpha;
    dl_error why;
    if (!dl_session_accepts(s, bp, p, &fused, &why)) return;
    f->attrs[p] = fused;
    f->into[i] = p;
    s->place.be[i] = bp;
}

void dl_fuse_epilogues(dl_session *s) {
    if (s->opt.no_fuse) return;
    for (int i = 0; i < s->g->n_nodes; i++) fuse_residual(s, i);
    for (int i = 0; i < s->g->n_nodes; i++) fuse_activation(s, i);
}
