/* concat_elide.c — concats that copy nothing. A concat along an axis with nothing but ones before
 * it in the output's shape (channels at batch 1, or any 1-D concat) lays each input out as one
 * contiguous run of its output. Such a concat is elided: each input's buffer becomes that run of
 * the output's buffer (dl_slot.within), so the op producing the input writes its result where the
 * concat would have copied it, and the concat's step (DL_STEP_ELIDED) runs nothing. SqueezeNet's
 * fire modules and GoogLeNet's inception blocks end in one each.
 *
 * A concat is elided only when every input can be a slice: an activation written by an earlier
 * step into a buffer of its own in the concat's place (not a model input or a weight, not a
 * slice already, not given twice), row-major, each slice starting on the domain's arena
 * alignment; and only as a whole. The output's buffer then lives from the first input's writer to
 * the last read of it or of any input. The memory plan (session_plan.c) places the output's
 * buffer and derives the inputs' from it, and never lets an op run in place over a slice or over
 * a buffer that holds slices. */
#include "session.h"

/* 1 if every dimension before axis is 1 (no product: a hostile shape could overflow it). */
static int ones_before(const dl_shape *sh, int axis) {
    for (int i = 0; i < axis && i < sh->ndim; i++)
        if (sh->d[i] != 1) return 0;
    return 1;
}

static void try_elide(dl_session *s, int k) {
    dl_step *st = &s->steps[k];
    const dl_node *n = &s->g->nodes[st->node];
    int o = dl_session_root(s, n->output), po = dl_place_of_value(s, o, st->place);
    int out = dl_slot_find(s, o, po);
    if (out < 0 || n->n_inputs < 1 || n->n_inputs > DL_MAX_NODE_INPUTS || st->attrs.axis < 0) return;
    if (s->places[po].fmt.layout != DL_LAYOUT_ROW_MAJOR || !ones_before(&s->shape[o], st->attrs.axis)) return;
    const size_t align = dl_plan_align(s->places[po].dom);
    int part[DL_MAX_NODE_INPUTS];
    size_t at[DL_MAX_NODE_INPUTS], next = 0;
    for (int j = 0; j < n->n_inputs; j++) {
        int r = dl_session_root(s, n->inputs[j]);
        int p = dl_place_of_value(s, r, st->place), sl = dl_slot_find(s, r, p);
        if (sl < 0 || p != po || s->slots[sl].first < 0 || s->slots[sl].within >= 0 || sl >= out) return;
        for (int i = 0; i < j; i++)
            if (part[i] == sl) return; /* one input given twice cannot be two slices */
        if (next % align) return;
        part[j] = sl;
        at[j] = next;
        next += s->slots[sl].size;
    }
    if (next != s->slots[out].size) return; /* an empty input (its slot holds 1 byte), or a size mismatch */
    dl_slot *c = &s->slots[out];
    for (int j = 0; j < n->n_inputs; j++) {
        dl_slot *p = &s->slots[part[j]];
        p->within = out;
        p->within_at = at[j];
        if (p->first < c->first) c->first = p->first;
        if (p->last > c->last) c->last = p->last;
    }
    st->kind = DL_STEP_ELIDED;
}

void dl_elide_concats(dl_session *s) {
    if (s->opt.no_fuse) return;
    /* in step order: a concat that feeds a later one is a slice of it only after its own inputs
     * became slices of it, so the outer buffer's life covers all of theirs */
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_OP && s->g->nodes[s->steps[k].node].kind == DL_OP_CONCAT) try_elide(s, k);
}
