/* part_workers.h — threads that run a batch's parts side by side (micro_batch.c): started once
 * with their session, each waiting for a job, spinning a while and then asleep. */
#ifndef DLRUN_PART_WORKERS_H
#define DLRUN_PART_WORKERS_H

typedef struct dl_part_workers dl_part_workers;

/* n threads, or NULL where one cannot be started (none is then left running). */
dl_part_workers *dl_part_workers_start(int n);
/* Thread i runs fn(arg) once; the caller goes on meanwhile. */
void dl_part_workers_give(dl_part_workers *w, int i, void (*fn)(void *), void *arg);
/* Returns once thread i has run what it was given last. */
void dl_part_workers_wait(dl_part_workers *w, int i);
/* Ends and joins the threads (none may be running a job); NULL: nothing. */
void dl_part_workers_stop(dl_part_workers *w);
#endif
