/* fold.c — batchnorm folded into the conv2d before it, once per session (inference only):
 *   y = gamma * (conv(x, W) + b - mean) / sqrt(var + eps) + beta
 *     = conv(x, W * s) + (b - mean) * s + beta,   s = gamma / sqrt(var + eps) per channel,
 * so the batchnorm's pass over memory disappears and a relu after it can fuse into the conv. The
 * scaled weights are the session's own host copies (the model's weights are shared and may be
 * mapped read-only); a conv without bias takes the batchnorm's beta value as its bias, its data
 * replaced by the folded bias. Arithmetic in double, rounded once to f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

/* readers of v: the nodes that take it, and the model's outputs */
static int uses(const dl_graph *g, int v) { return dl_graph_consumers(g, v) + dl_graph_is_output(g, v); }

static int is_constant(const dl_graph *g, int v) { return g->values[v].kind == DL_VALUE_WEIGHT && g->values[v].data; }

static float *owned(dl_session *s, size_t n) {
    float **list = realloc(s->folded, (size_t)(s->n_folded + 1) * sizeof *list);
    if (!list) return NULL;
    s->folded = list;
    float *p = malloc(n * sizeof *p);
    if (p) s->folded[s->n_folded++] = p;
    return p;
}

/* The conv node that batchnorm node `b` can fold into, or -1. */
static int foldable(const dl_session *s, int b) {
    const dl_graph *g = s->g;
    const dl_node *bn = &g->nodes[b];
    if (bn->kind != DL_OP_BATCHNORM || bn->attrs.activation != DL_ACT_NONE) return -1;
    int v = bn->inputs[0], p = g->values[v].producer;
    if (p < 0 || s->fused_into[p] >= 0) return -1;
    const dl_node *c = &g->nodes[p];
    if (c->kind != DL_OP_CONV2D || c->attrs.activation != DL_ACT_NONE || uses(g, v) != 1) return -1;
    /* a pin on either must agree: folding must not move work off a pinned backend */
    if ((bn->backend || c->backend) && (!bn->backend || !c->backend || strcmp(bn->backend, c->backend))) return -1;
    for (int j = 1; j < c->n_inputs; j++) /* weight and bias: constants used by this conv only */
        if (!is_constant(g, c->inputs[j]) || uses(g, c->inputs[j]) != 1) return -1;
    for (int j = 1; j < 5; j++)
        if (!is_constant(g, bn->inputs[j])) return -1;
    if (!c->has_bias && uses(g, bn->inputs[2]) != 1) return -1; /* beta becomes the bias */
    return p;
}

dl_status dl_fold_batchnorm(dl_session *s, dl_error *err) {
    if (s->opt.no_fuse) return DL_OK;
    const dl_graph *g = s->g;
    for (int b = 0; b < g->n_nodes; b++) {
        int p = foldable(s, b);
        if (p < 0) continue;
        const dl_node *bn = &g->nodes[b], *c = &g->nodes[p];
        const dl_value *w = &g->values[c->inputs[1]];
        int64_t oc = w->shape[0], per = dl_value_numel(w) / oc;
        const float *gamma = BUF(s, bn->inputs[1], 0), *beta = BUF(s, bn->inputs[2], 0);
        const float *mean = BUF(s, bn->inputs[3], 0), *var = BUF(s, bn->inputs[4], 0);
        const float *w0 = BUF(s, c->inputs[1], 0), *b0 = c->has_bias ? BUF(s, c->inputs[2], 0) : NULL;
        float *w1 = owned(s, (size_t)(oc * per)), *b1 = owned(s, (size_t)oc);
        if (!w1 || !b1) return dl_fail(err, DL_E_NOMEM, "out of memory folding batchnorm '%s'", bn->name);
        for (int64_t o = 0; o < oc; o++) {
            double sc = gamma[o] / sqrt((double)var[o] + bn->attrs.epsilon);
            for (int64_t i = 0; i < per; i++) w1[o * per + i] = (float)(w0[o * per + i] * sc);
            b1[o] = (float)(((b0 ? b0[o] : 0.0) - mean[o]) * sc + beta[o]);
        }
        BUF(s, c->inputs[1], 0) = w1;
        int bias = c->has_bias ? c->inputs[2] : bn->inputs[2];
        BUF(s, bias, 0) = b1;
        if (!c->has_bias) s->extra_input[p] = bias;
        s->fused_into[b] = p;
    }
    return DL_OK;
}
