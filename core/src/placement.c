/* placement.c — chooses the backend each op runs on and folds relu into the op before it.
 *
 * Rule in this version (static; measured placement replaces it): a backend named by --backend
 * runs everything; a layer's `backend:` pin is obeyed; otherwise the first backend outside host
 * memory whose supports() accepts the op, else the first host backend. A relu whose input is used
 * by nothing else is fused into the conv2d/linear/add/batchnorm that produced it when that
 * backend supports the fused form. */
#include <string.h>

#include "session.h"

void dl_session_op_view(dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op,
                        dl_tensor *in, dl_tensor *out) {
    const dl_node *n = &s->g->nodes[node];
    for (int i = 0; i < n->n_inputs; i++) {
        dl_value *v = &s->g->values[n->inputs[i]];
        in[i] = (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, v->ndim, v->dtype, v->shape, NULL, 0};
    }
    dl_value *o = &s->g->values[n->output];
    *out = (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, o->ndim, o->dtype, o->shape, NULL, 0};
    *op = (dl_op){sizeof *op, (int32_t)n->kind, n->name, attrs, n->n_inputs, in, 1, out,
                  s->opt.precision};
}

static int try_backend(dl_session *s, const dl_backend *be, int node, const dl_op_attrs *attrs,
                       dl_error *why) {
    const dl_node *n = &s->g->nodes[node];
    dl_tensor in[n->n_inputs > 0 ? n->n_inputs : 1], out;
    dl_op op;
    dl_session_op_view(s, node, attrs, &op, in, &out);
    for (int i = 0; i < n->n_inputs; i++) in[i].device = be->device;
    out.device = be->device;
    why->msg[0] = 0;
    return be->supports(be->self, &op, why);
}

static int is_output(const dl_graph *g, int v) {
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}

static int consumers(const dl_graph *g, int v) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) c += g->nodes[i].inputs[j] == v;
    return c;
}

static dl_status place_node(dl_session *s, int i, dl_error *err) {
    const dl_node *n = &s->g->nodes[i];
    const char *op = dl_op_kind_name(n->kind);
    char where[256];
    dl_graph_where(s->g, n->loc, where, sizeof where);
    dl_error why;
    const char *forced = s->opt.backend ? s->opt.backend : n->backend;
    if (forced) {
        const dl_backend *be = dl_context_backend(s->ctx, forced);
        if (!be)
            return dl_fail(err, DL_E_INVALID, "%s%s '%s' is pinned to backend '%s', which is not loaded",
                           where, op, n->name, forced);
        if (!try_backend(s, be, i, &s->node_attrs[i], &why))
            return dl_fail(err, DL_E_UNSUPPORTED, "backend '%s' cannot run %s '%s': %s", forced, op,
                           n->name, why.msg);
        s->node_be[i] = be;
        return DL_OK;
    }
    if (s->opt.prefer_backend) {
        const dl_backend *be = dl_context_backend(s->ctx, s->opt.prefer_backend);
        if (be && try_backend(s, be, i, &s->node_attrs[i], &why)) {
            s->node_be[i] = be;
            return DL_OK;
        }
    }
    char reasons[DL_ERROR_LEN] = "";
    for (int pass = 0; pass < 2; pass++) { /* devices first, then host backends */
        for (int p = 0; p < s->ctx->n_plugins; p++) {
            const dl_backend *be = s->ctx->plugins[p].be;
            if (!be || (be->device.device_type == DL_DEVICE_CPU) != (pass == 1)) continue;
            if (try_backend(s, be, i, &s->node_attrs[i], &why)) {
                s->node_be[i] = be;
                return DL_OK;
            }
            size_t used = strlen(reasons);
            snprintf(reasons + used, sizeof reasons - used, "%s%s: %s", used ? "; " : "", be->name,
                     why.msg);
        }
    }
    return dl_fail(err, DL_E_UNSUPPORTED, "no backend can run %s '%s'%s%s", op, n->name,
                   reasons[0] ? ": " : " (no backend is loaded)", reasons);
}

/* Fold relu node i into the producer of its input when that is possible and supported. */
static void try_fuse(dl_session *s, int i) {
    const dl_graph *g = s->g;
    const dl_node *r = &g->nodes[i];
    if (s->opt.no_fuse || r->kind != DL_OP_RELU || r->backend) return;
    int v = r->inputs[0];
    int p = g->values[v].producer;
    if (p < 0 || is_output(g, v) || consumers(g, v) != 1 || s->fused_into[p] >= 0) return;
    dl_op_kind k = g->nodes[p].kind;
    if (k != DL_OP_CONV2D && k != DL_OP_LINEAR && k != DL_OP_ADD && k != DL_OP_BATCHNORM) return;
    if (s->node_attrs[p].activation != DL_ACT_NONE) return;
    dl_op_attrs fused = s->node_attrs[p];
    fused.activation = DL_ACT_RELU;
    dl_error why;
    if (!try_backend(s, s->node_be[p], p, &fused, &why)) return;
    s->node_attrs[p] = fused;
    s->fused_into[i] = p;
    s->node_be[i] = s->node_be[p];
}

dl_status dl_place(dl_session *s, dl_error *err) {
    for (int i = 0; i < s->g->n_nodes; i++) {
        try_fuse(s, i);
        if (s->fused_into[i] >= 0) continue;
        dl_status st = place_node(s, i, err);
        if (st != DL_OK) return st;
    }
    return DL_OK;
}
