/* trace.h — a session's timeline (dl_session_options.trace): spans of session creation, and every
 * step of the last runs, timed by device events where a backend has them (ABI 1.6), else by the
 * host's clock; written as Chrome trace-event JSON by dl_session_write_trace (docs/trace.md).
 * Every function takes a NULL trace and then does nothing, so callers need no test of their own;
 * a session without trace has none and its run loop pays one pointer test per step. */
#ifndef DLRUN_TRACE_H
#define DLRUN_TRACE_H
#include "dlrun/dlrun.h"

typedef struct dl_trace dl_trace;

/* A trace whose time 0 is origin_ms (dl_now_ms at the start of dl_session_create); NULL when out of
 * memory. */
dl_trace *dl_trace_new(double origin_ms);
/* Releases the device events recorded (their backends must still be loaded) and the trace. */
void dl_trace_free(dl_trace *t);

/* ---- creation: spans on the session track, nested as they are called ---- */
/* Opens a span now (name is copied, cat must be a literal); returns its index, or -1. */
int dl_trace_begin(dl_trace *t, const char *name, const char *cat);
/* Closes span i (-1: nothing) now. */
void dl_trace_end(dl_trace *t, int i);
/* Adds an argument to span i (-1: nothing). */
void dl_trace_arg_str(dl_trace *t, int i, const char *key, const char *value);
void dl_trace_arg_num(dl_trace *t, int i, const char *key, double value);

/* ---- runs ---- */
/* Once the session's steps are final (before its first run): storage for the runs the trace keeps,
 * allocated now so that a run allocates nothing (DL_TRACE_MAX_RUNS runs, fewer for a model with
 * more than DL_TRACE_MAX_EVENTS / DL_TRACE_MAX_RUNS steps), and the steps to time by device events. */
dl_status dl_trace_prepare(dl_trace *t, const dl_session *s, dl_error *err);
/* At the start of a run (every backend idle): each backend with events synchronizes and records
 * its reference event, whose host time it notes. */
void dl_trace_run_start(dl_trace *t);
/* Step k's device event just before (end 0) or after (end 1) its work is queued. */
void dl_trace_op_event(dl_trace *t, int k, int end);
/* Step k ran between host times t0 and t1 (ms, dl_now_ms). */
void dl_trace_step(dl_trace *t, int k, double t0, double t1);
/* After the run's final synchronize: device times from the events, and the run is kept (the
 * oldest kept dropped when the trace is full). t_start and t_end bound the run; ph its phases. */
void dl_trace_run_end(dl_trace *t, double t_start, double t_end, const dl_run_times *ph);
/* During a run: 1 if step k is timed by device events this run (its backend recorded the run's
 * reference event), so its time needs no synchronize; 0 otherwise or without a trace. */
int dl_trace_on_device(const dl_trace *t, int k);
/* After dl_trace_run_end: 1 and *ms, step k's device time in that run, if it was timed so. */
int dl_trace_device_ms(const dl_trace *t, int k, double *ms);
#endif
