/* batch_prefix.c — a batch whose first layers run in parts and the rest at once.
 *
 * A batch in parts (micro_batch.c) wins where the activations are large and the weights small, as
 * in a CNN's first stages: at ResNet-50's batch 8 its stem, layer1 and layer2 take 57.6 ms at once
 * and 50.2 in parts of 2, on the 2-core VM of 2026-11-29, while layer3 and layer4, whose weights
 * are large, take 69.3 at once and 79.1 in parts. So a session may run its first layers, up to a
 * cut, with a plan made for fewer images, part by part, and the rest with its own plan on the
 * whole batch. A cut is after a node whose output is the one value crossing it (the output of a
 * residual block, or of a stage): each part's copy of that value goes into the whole batch's
 * buffer at the part's offset (the batch is its first dimension in both layouts), and the session
 * runs its own steps from there. Under auto (micro_batch.c) each part size's measured steps price
 * every cut, and the best is run against the fastest plan so far; docs/micro-batch.md. */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "session.h"

int *dl_prefix_cuts(const dl_graph *g) {
    const int n = g->n_nodes;
    int *cut = malloc(((size_t)n + 1) * sizeof *cut), *last = malloc(((size_t)g->n_values + 1) * sizeof *last);
    unsigned char *gone = calloc((size_t)g->n_values + 1, 1); /* an input counted out already */
    if (!cut || !last || !gone) {
        free(cut), free(last), free(gone);
        return NULL;
    }
    for (int v = 0; v < g->n_values; v++) last[v] = -1; /* the last node reading it */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) last[g->nodes[i].inputs[j]] = i;
    for (int k = 0; k < g->n_outputs; k++) last[g->outputs[k]] = INT_MAX;
    int live = 0; /* activations made so far (model inputs included) that a later node reads */
    for (int k = 0; k < g->n_inputs; k++) live += last[g->inputs[k]] >= 0;
    for (int i = 0; i < n; i++) {
        const dl_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_inputs; j++) {
            const int v = nd->inputs[j];
            if (g->values[v].kind != DL_VALUE_WEIGHT && last[v] == i && !gone[v]) gone[v] = 1, live--;
        }
        live += last[nd->output] > i;
        const int o = nd->output;
        cut[i] = live == 1 && last[o] > i && last[o] != INT_MAX ? o : -1;
    }
    free(last), free(gone);
    return cut;
}

/* across[c] = 1 where a node after c is fused into one up to c (a cut there would split a fused
 * op); malloc'd, NULL when out of memory. */
static unsigned char *fused_across(const dl_session *s) {
    const int n = s->g->n_nodes;
    int *delta = calloc((size_t)n + 2, sizeof *delta);
    unsigned char *across = malloc((size_t)n + 1);
    if (!delta || !across) {
        free(delta), free(across);
        return NULL;
    }
    for (int j = 0; j < n; j++) /* j fused into f: the cuts after f .. j - 1 split them */
        if (s->fuse.into[j] >= 0 && s->fuse.into[j] < j) delta[s->fuse.into[j]]++, delta[j]--;
    for (int c = 0, open = 0; c < n; c++) across[c] = (open += delta[c]) > 0;
    free(delta);
    return across;
}

/* The value crossing the cut after node c in s's plan (a root) and its place there, or -1: no
 * node after c fused into one before it (across), the value's home in host memory with a buffer
 * of its own in the plan. */
static int crossing(const dl_session *s, int c, const int *cuts, const unsigned char *across, int *at) {
    if (c < 0 || c + 1 >= s->g->n_nodes || cuts[c] < 0 || across[c]) return -1;
    const int r = dl_session_root(s, cuts[c]), p = s->g->values[r].producer;
    if (p < 0 || p > c) return -1;
    /* the row-major twin for a value of other than 4 dims: it exists (dl_choose_storage) */
    const int home = dl_place_of_value((dl_session *)s, r, dl_session_home(s, r));
    if (home < 0 || s->places[home].dom != 0 || dl_slot_find(s, r, home) < 0) return -1;
    *at = home;
    return r;
}

/* 1 if the cut after c holds in both plans, the value crossing it stored alike in both */
static int cut_holds(const dl_session *w, const dl_session *p, int c, const int *cuts,
                     const unsigned char *const across[2], int *vw, int *aw, int *vp, int *ap) {
    if ((*vw = crossing(w, c, cuts, across[0], aw)) < 0 || (*vp = crossing(p, c, cuts, across[1], ap)) < 0) return 0;
    const dl_format fw = w->places[*aw].fmt, fp = p->places[*ap].fmt;
    return dl_dtype_eq(fw.dtype, fp.dtype) && fw.layout == fp.layout && w->n_doms == 1 && p->n_doms == 1;
}

/* Host memory copies at about 10 GB/s on the machines measured: the hand-over's estimate. */
#define HANDOVER_MS_PER_BYTE 1e-7

double dl_prefix_best(const dl_session *w, const dl_session *p, const int *cuts, const double *step_ms_w,
                      const double *step_ms_p, int *cut) {
    const unsigned char *across[2] = {fused_across(w), fused_across(p)};
    double best = INFINITY, total_w = 0, before_w = 0, before_p = 0; /* the sums up to the cut, in one pass */
    *cut = -1;
    for (int k = 0; k < w->n_steps; k++) total_w += step_ms_w[k];
    for (int c = 0, kw = 0, kp = 0; across[0] && across[1] && c + 1 < w->g->n_nodes; c++) {
        for (; kw < w->node_step[c + 1]; kw++) before_w += step_ms_w[kw];
        for (; kp < p->node_step[c + 1]; kp++) before_p += step_ms_p[kp];
        int vw, aw, vp, ap;
        if (cuts[c] < 0 || !cut_holds(w, p, c, cuts, across, &vw, &aw, &vp, &ap)) continue;
        const double ms =
            before_p + total_w - before_w + (double)dl_session_place_bytes(w, vw, aw) * HANDOVER_MS_PER_BYTE;
        if (ms < best) best = ms, *cut = c;
    }
    free((void *)across[0]), free((void *)across[1]);
    return best;
}

int dl_prefix_attach(dl_session *w, dl_session *p, int64_t parts, int cut, const int *cuts) {
    int vw, aw, vp, ap;
    const unsigned char *across[2] = {fused_across(w), fused_across(p)};
    const int holds = across[0] && across[1] && cut_holds(w, p, cut, cuts, across, &vw, &aw, &vp, &ap);
    free((void *)across[0]), free((void *)across[1]);
    if (parts < 2 || p->parts > 1 || p->prefix || !holds) return 0;
    if (dl_session_place_bytes(p, vp, ap) * (size_t)parts != dl_session_place_bytes(w, vw, aw)) return 0;
    /* a run allocates nothing: the parts' inputs and step times have their room now */
    free(w->part_ms), free(w->part_in);
    w->part_ms = calloc((size_t)p->node_step[cut + 1] + 1, sizeof *w->part_ms);
    w->part_in = calloc((size_t)w->g->n_inputs + 1, sizeof *w->part_in);
    if (!w->part_ms || !w->part_in) return 0;
    w->prefix = p;
    w->prefix_parts = parts;
    w->prefix_cut = cut;
    w->prefix_steps = p->node_step[cut + 1];
    w->prefix_value = vp, w->prefix_at = ap;
    w->first_step = w->node_step[cut + 1];
    w->cut_value = vw, w->cut_at = aw;
    return 1;
}

dl_status dl_session_run_prefixed(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err) {
    const dl_graph *g = s->g;
    dl_session *p = s->prefix;
    dl_status st = dl_session_check_host_inputs(s, s->inputs, inputs, n_inputs, "its first layers in parts", err);
    if (st != DL_OK) return st;
    const size_t bytes = dl_session_place_bytes(p, s->prefix_value, s->prefix_at);
    char *whole = BUF(s, s->cut_value, s->cut_at);
    const char *mine = BUF(p, s->prefix_value, s->prefix_at);
    double *sum = s->part_ms;
    dl_tensor *part = s->part_in;
    memset(sum, 0, (size_t)s->prefix_steps * sizeof *sum);
    dl_run_times t = {0, 0, 0};
    for (int64_t q = 0; st == DL_OK && q < s->prefix_parts; q++) {
        for (int i = 0; i < n_inputs; i++) {
            part[i] = p->inputs[i];
            part[i].device = inputs[i].device;
            part[i].data =
                (char *)inputs[i].data + inputs[i].byte_offset + (size_t)q * dl_session_value_bytes(p, g->inputs[i]);
        }
        st = dl_session_run_steps(p, part, n_inputs, 0, s->prefix_steps, err);
        if (st != DL_OK) break;
        const double t0 = dl_now_ms();
        memcpy(whole + (size_t)q * bytes, mine, bytes);
        for (int k = 0; k < s->prefix_steps; k++) sum[k] += p->steps[k].last_ms;
        t.inputs_ms += p->last_run.inputs_ms;
        t.compute_ms += p->last_run.compute_ms + dl_now_ms() - t0;
    }
    for (int k = 0; st == DL_OK && k < s->prefix_steps; k++) { /* each step once a run, over the parts */
        dl_step *ps = &p->steps[k];
        if (ps->kind != DL_STEP_OP && ps->kind != DL_STEP_COPY) continue;
        ps->last_ms = sum[k];
        ps->runs -= (int)s->prefix_parts - 1;
    }
    if (st == DL_OK) st = dl_session_run_steps(s, NULL, 0, s->first_step, s->n_steps, err);
    if (st == DL_OK) {
        s->last_run.inputs_ms += t.inputs_ms;
        s->last_run.compute_ms += t.compute_ms;
    }
    return st;
}

/* s keeps what its steps [from, to) need: the slots they never touch are unused (`keep`, the value
 * handed over, always used), a slot that would take over an unused one's storage in place gets its
 * own, the arena is planned and allocated again, and the kernels of the other steps released.
 * Unchanged (slots, arena, kernels) where the new arena cannot be had. */
static dl_status keep_steps(dl_session *s, int from, int to, int keep, dl_error *err) {
    dl_slot *was = malloc(((size_t)s->n_slots + 1) * sizeof *was);
    if (!was) return dl_fail(err, DL_E_NOMEM, "out of memory");
    memcpy(was, s->slots, (size_t)s->n_slots * sizeof *was);
    for (int i = 0; i < s->n_slots; i++) {
        dl_slot *sl = &s->slots[i];
        sl->unused = i != keep && (sl->last < from || sl->first >= to);
    }
    for (int i = 0; i < s->n_slots; i++) /* the value handed over, written over a dead block input */
        if (!s->slots[i].unused && s->slots[i].share >= 0 && s->slots[s->slots[i].share].unused) s->slots[i].share = -1;
    dl_status st = dl_session_replan(s, err);
    if (st != DL_OK) {
        memcpy(s->slots, was, (size_t)s->n_slots * sizeof *was);
        dl_error e;
        dl_session_check_memory(s, &e); /* the old offsets again: the buffers never moved */
        free(was);
        return st;
    }
    free(was);
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *sp = &s->steps[k];
        if ((k >= from && k < to) || sp->kind != DL_STEP_OP || !sp->kernel) continue;
        sp->be->release(sp->be->self, sp->kernel);
        sp->kernel = NULL;
    }
    return DL_OK;
}

dl_status dl_prefix_trim(dl_session *w, dl_error *err) {
    dl_session *p = w->prefix;
    if (!p) return DL_OK;
    dl_status st = keep_steps(p, 0, w->prefix_steps, dl_slot_find(p, w->prefix_value, w->prefix_at), err);
    if (st == DL_OK) st = keep_steps(w, w->first_step, w->n_steps, dl_slot_find(w, w->cut_value, w->cut_at), err);
    return st;
}
