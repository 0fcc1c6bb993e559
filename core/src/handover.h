/* handover.h — the run loop's order between backends that share a device domain (the cuda and
 * cudnn plugins on one GPU), each queuing its work on a queue (stream) of its own. When the domain
 * passes from one backend to another, the second must not start before the first's work is done:
 *   - where both speak ABI 1.14 with one queue_family, the first records an event and the second's
 *     queue waits for it, on the device (the host goes on queuing);
 *   - else, or with DLRUN_HANDOVER=sync, the host synchronizes the first.
 * Either way the work of a domain runs in the order it was queued, one backend after another, so
 * a buffer reused by a later op is never still read or written by an earlier one. At the end of a
 * run (and when a run stops on an error) every backend that queued work is synchronized, so each
 * reports its own errors. placement.c prices a hand-over by the same rule (dl_handover_by_event). */
#ifndef DLRUN_HANDOVER_H
#define DLRUN_HANDOVER_H
#include "dlrun/plugin.h"

#define DL_HANDOVER_DOMAINS 8   /* as DL_MAX_DOMAINS (session.h) */
#define DL_HANDOVER_BACKENDS 16 /* backends of one domain a run tracks; more are handed over by sync */

/* A session's hand-over events, one per backend the device may be taken from by an event; made
 * with the session (dl_handover_prepare), recorded again by each hand-over (a CUDA event may be),
 * released with the session. */
typedef struct dl_handover {
    const dl_backend *be[DL_HANDOVER_BACKENDS * DL_HANDOVER_DOMAINS];
    void *ev[DL_HANDOVER_BACKENDS * DL_HANDOVER_DOMAINS];
    int n;
    int mode;                 /* 0: not read yet; 1: events where both backends can; 2: DLRUN_HANDOVER=sync */
    int run_waits, run_syncs; /* hand-overs each way since the last dl_session_run began, added up by
                                 each run of steps (dl_session_last_run_handovers sums a run's
                                 sessions: its prefix and siblings too) */
} dl_handover;

/* One run's queues: per domain, the backend that queued last and every backend that queued. */
typedef struct dl_queues {
    const dl_backend *last[DL_HANDOVER_DOMAINS];
    const dl_backend *used[DL_HANDOVER_DOMAINS][DL_HANDOVER_BACKENDS];
    int n_used[DL_HANDOVER_DOMAINS];
    int waits, syncs; /* hand-overs made each way */
} dl_queues;

/* 1 if `to` can be handed a device by waiting for `from`'s event (both ABI 1.14 with events and
 * the same queue_family, and DLRUN_HANDOVER is not "sync"). */
int dl_handover_by_event(const dl_backend *from, const dl_backend *to);
/* Backend `be` is about to queue work in domain d (> 0; 0, the host, needs nothing): after the
 * work the domain's previous backend queued, by an event where it can, else by synchronizing it.
 * A failed event hand-over falls back to synchronizing. */
dl_status dl_hand_over(dl_handover *h, dl_queues *q, int d, const dl_backend *be, dl_error *err);
/* Waits for every backend that queued work in the run, and for the domains' owners
 * (owners[d], d from 1 to n_doms - 1); the first error is reported, every backend still waited for. */
dl_status dl_queues_finish(const dl_queues *q, const dl_backend *const *owners, int n_doms, dl_error *err);
/* Makes the events a run may record, with the session (runs then allocate none): of each of the n
 * backends of one device domain `bes` that some other one there can take the device from by an
 * event. One that cannot be made leaves that hand-over to a synchronize. */
void dl_handover_prepare(dl_handover *h, const dl_backend *const *bes, int n);
/* Releases the session's events (before its backends are unloaded). */
void dl_handover_free(dl_handover *h);
#endif
