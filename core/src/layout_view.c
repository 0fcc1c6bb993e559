/* layout_view.c — transposes that are views of a layout. A 4-D tensor [N, C, H, W] stored
 * channels-last lies in memory exactly as the row-major [N, H, W, C] that transpose(0, 2, 3, 1)
 * makes of it, and a row-major [N, H, W, C] exactly as the channels-last [N, C, H, W] that
 * transpose(0, 3, 1, 2) makes. ConvNeXt writes both around every block's layer norm (and
 * LayerNorm2d), PyTorch's channels_last idiom; in a channels-last plan each cost a transpose.
 *
 * Such a transpose, on the host, is a view when its input is stored in the first layout: its
 * output is stored in the second (storage.c asks its backend's supports() with that input and
 * output), the step reads its input in that place (session.c), and after the steps are built its
 * input's buffer becomes its output's (dl_slot.within, as an elided concat's inputs do), so the
 * step (DL_STEP_ELIDED) runs nothing. Placement counts it as free where it will be one
 * (placement.c). Off with no_fuse, as concat elision is, so `dlrun check`'s op-by-op rows and
 * `--no-fuse` run every transpose. docs/layout.md describes it. */
#include "session.h"

static const int32_t TO_ROWS_PERM[4] = {0, 2, 3, 1}, TO_CL_PERM[4] = {0, 3, 1, 2};

static int perm_is(const dl_node *n, const int32_t *p) {
    for (int d = 0; d < 4; d++)
        if (n->params.attrs.perm[d] != p[d]) return 0;
    return 1;
}

int dl_layout_view_of(const dl_session *s, int i) {
    const dl_node *n = &s->g->nodes[i];
    if (s->opt.no_fuse || n->kind != DL_OP_TRANSPOSE || n->n_inputs != 1) return DL_VIEW_NONE;
    const int x = n->inputs[0];
    const dl_value *v = &s->g->values[x];
    /* an activation some op writes (a model input's buffer is the caller's copy, not a slot) */
    if (v->kind == DL_VALUE_WEIGHT || v->producer < 0 || v->dtype.code != DL_DTYPE_FLOAT) return DL_VIEW_NONE;
    if (s->shape[x].ndim != 4 || s->shape[n->output].ndim != 4) return DL_VIEW_NONE;
    return perm_is(n, TO_ROWS_PERM) ? DL_VIEW_TO_ROWS : perm_is(n, TO_CL_PERM) ? DL_VIEW_TO_CL : DL_VIEW_NONE;
}

int dl_layout_view_ask(int ask) { return ask == DL_ASK_CL_CONVS || ask == DL_ASK_CL_CONVS_HOST; }

/* The input of step k (a layout view) as a slice of its output at offset 0, and the step
 * elided; left to run (a transpose between the two places) where its input cannot be one. */
static void try_view(dl_session *s, int k) {
    dl_step *st = &s->steps[k];
    const int i = st->node;
    if (s->view_in[i] < 0) return;
    const dl_node *n = &s->g->nodes[i];
    const int x = dl_session_root(s, n->inputs[0]), o = dl_session_root(s, n->output);
    const int in = dl_slot_find(s, x, dl_place_of_value(s, x, s->view_in[i]));
    const int out = dl_slot_find(s, o, dl_place_of_value(s, o, st->place));
    if (in < 0 || out < 0 || in >= out) return;
    dl_slot *a = &s->slots[in], *b = &s->slots[out];
    if (a->first < 0 || a->within >= 0 || a->size != b->size) return;
    a->within = out;
    a->within_at = 0;
    if (a->first < b->first) b->first = a->first;
    if (a->last > b->last) b->last = a->last;
    st->kind = DL_STEP_ELIDED;
}

void dl_elide_views(dl_session *s) {
    if (s->opt.no_fuse || !s->view_in) return;
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_OP && s->g->nodes[s->steps[k].node].kind == DL_OP_TRANSPOSE) try_view(s, k);
}
