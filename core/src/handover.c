/* handover.c — see handover.h. */
#include "handover.h"

#include <stdlib.h>
#include <string.h>

static int events_allowed(void) {
    const char *v = getenv("DLRUN_HANDOVER");
    return !(v && strcmp(v, "sync") == 0);
}

static int can_wait(const dl_backend *from, const dl_backend *to) {
    return DL_BACKEND_HAS(from, event_record) && DL_BACKEND_HAS(from, event_release) &&
           DL_BACKEND_HAS(from, queue_family) && DL_BACKEND_HAS(from, event_wait) && DL_BACKEND_HAS(to, event_wait) &&
           DL_BACKEND_HAS(to, queue_family) && strcmp(from->queue_family, to->queue_family) == 0;
}

int dl_handover_by_event(const dl_backend *from, const dl_backend *to) {
    return from && to && can_wait(from, to) && events_allowed();
}

static dl_status sync_backend(const dl_backend *be, dl_error *err) {
    dl_error e = {{0}};
    if (be && DL_BACKEND_HAS(be, synchronize) && be->synchronize(be->self, &e) != DL_OK)
        return dl_fail(err, DL_E_RUNTIME, "%s: %s", be->name, e.msg);
    return DL_OK;
}

/* The session's event of backend be (NULL: none made). */
static void **event_of(dl_handover *h, const dl_backend *be) {
    for (int i = 0; i < h->n; i++)
        if (h->be[i] == be) return &h->ev[i];
    return NULL;
}

void dl_handover_prepare(dl_handover *h, const dl_backend *const *bes, int n) {
    for (int a = 0; a < n; a++) {
        int wanted = 0;
        for (int z = 0; z < n && !wanted; z++) wanted = z != a && can_wait(bes[a], bes[z]);
        if (!wanted || event_of(h, bes[a]) || h->n == (int)(sizeof h->be / sizeof h->be[0])) continue;
        dl_error e = {{0}};
        void *ev = NULL; /* a first record makes it (ABI 1.6); nothing waits for this one */
        if (bes[a]->event_record(bes[a]->self, &ev, &e) == DL_OK && ev) h->be[h->n] = bes[a], h->ev[h->n++] = ev;
    }
}

static dl_status by_event(dl_handover *h, const dl_backend *from, const dl_backend *to) {
    void **ev = event_of(h, from);
    dl_error e = {{0}};
    if (!ev || from->event_record(from->self, ev, &e) != DL_OK) return DL_E_RUNTIME;
    return to->event_wait(to->self, *ev, &e);
}

static int tracked(const dl_queues *q, int d, const dl_backend *be) {
    for (int i = 0; i < q->n_used[d]; i++)
        if (q->used[d][i] == be) return 1;
    return 0;
}

dl_status dl_hand_over(dl_handover *h, dl_queues *q, int d, const dl_backend *be, dl_error *err) {
    if (d <= 0 || d >= DL_HANDOVER_DOMAINS) return DL_OK;
    const dl_backend *prev = q->last[d];
    q->last[d] = be;
    if (!tracked(q, d, be) && q->n_used[d] < DL_HANDOVER_BACKENDS) q->used[d][q->n_used[d]++] = be;
    if (!prev || prev == be) return DL_OK;
    if (!h->mode) h->mode = events_allowed() ? 1 : 2;
    /* by event only from a backend the run's end will wait for (one past the tracked ones is
     * synchronized here instead) */
    if (h->mode == 1 && can_wait(prev, be) && tracked(q, d, prev) && by_event(h, prev, be) == DL_OK)
        return q->waits++, DL_OK;
    q->syncs++;
    return sync_backend(prev, err);
}

/* Waits for be; the first failure of a domain is kept in *r and *e, later ones only waited for. */
static void wait_for(const dl_backend *be, dl_status *r, dl_error *e) {
    dl_error ignored = {{0}};
    dl_status st = sync_backend(be, *r == DL_OK ? e : &ignored);
    if (*r == DL_OK) *r = st;
}

dl_status dl_queues_finish(const dl_queues *q, const dl_backend *const *owners, int n_doms, dl_error *err) {
    dl_status st = DL_OK;
    for (int d = 1; d < n_doms && d < DL_HANDOVER_DOMAINS; d++) {
        dl_error e = {{0}};
        dl_status r = DL_OK;
        wait_for(owners[d], &r, &e);
        for (int i = 0; i < q->n_used[d]; i++)
            if (q->used[d][i] != owners[d]) wait_for(q->used[d][i], &r, &e);
        if (q->last[d] != owners[d] && !tracked(q, d, q->last[d])) wait_for(q->last[d], &r, &e); /* past the tracked */
        if (r != DL_OK && st == DL_OK) st = dl_fail(err, r, "%s", e.msg);
    }
    return st;
}

void dl_handover_free(dl_handover *h) {
    for (int i = 0; i < h->n; i++)
        if (h->ev[i]) h->be[i]->event_release(h->be[i]->self, h->ev[i]);
    h->n = 0;
}
