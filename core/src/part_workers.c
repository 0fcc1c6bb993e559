/* part_workers.c — see part_workers.h. Each thread lives as long as its session. Between jobs it
 * spins for SPIN_MS, then sleeps on a condition variable: a run in a loop finds it awake. A thread
 * started for each run was slower on the 2-core VM than the run's own time could explain
 * (SqueezeNet at batch 8 in parts of 1, two at a time: 19.4 ms a run against 12.2 on threads that
 * stay), and starting one allocates. The caller waits for a job the same way. A job's data is
 * handed over by the mutex (given under it) and by the counters' release and acquire. */
#define _GNU_SOURCE
#include "part_workers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "clock.h"

#define SPIN_MS 0.2 /* about what GNU OpenMP's threads spin between parallel regions */

typedef struct worker {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t asked, finished;
    atomic_uint given, done; /* jobs given and run so far */
    atomic_int quit;
    void (*fn)(void *);
    void *arg;
} worker;

struct dl_part_workers {
    int n;
    worker *w;
};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until *counter != not (returning 1) or SPIN_MS pass (0) */
static int spin_while(atomic_uint *counter, unsigned not, const atomic_int *quit) {
    const double until = dl_now_ms() + SPIN_MS;
    for (int i = 1;; i++) {
        if (atomic_load_explicit(counter, memory_order_acquire) != not || (quit && atomic_load(quit))) return 1;
        relax();
        if (i % 64 == 0 && dl_now_ms() > until) return 0;
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    unsigned seen = 0;
    for (;;) {
        if (!spin_while(&w->given, seen, &w->quit)) {
            pthread_mutex_lock(&w->mu);
            while (atomic_load(&w->given) == seen && !atomic_load(&w->quit)) pthread_cond_wait(&w->asked, &w->mu);
            pthread_mutex_unlock(&w->mu);
        }
        if (atomic_load(&w->quit)) return NULL;
        pthread_mutex_lock(&w->mu); /* the job as the caller left it */
        void (*fn)(void *) = w->fn;
        void *job = w->arg;
        seen = atomic_load(&w->given);
        pthread_mutex_unlock(&w->mu);
        fn(job);
        pthread_mutex_lock(&w->mu);
        atomic_store_explicit(&w->done, seen, memory_order_release);
        pthread_cond_signal(&w->finished);
        pthread_mutex_unlock(&w->mu);
    }
}

dl_part_workers *dl_part_workers_start(int n) {
    dl_part_workers *p = calloc(1, sizeof *p);
    if (!p || !(p->w = calloc((size_t)(n > 0 ? n : 1), sizeof *p->w))) {
        free(p);
        return NULL;
    }
    for (; p->n < n; p->n++) {
        worker *w = &p->w[p->n];
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->asked, NULL);
        pthread_cond_init(&w->finished, NULL);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            pthread_cond_destroy(&w->asked), pthread_cond_destroy(&w->finished);
            pthread_mutex_destroy(&w->mu);
            dl_part_workers_stop(p); /* the ones started */
            return NULL;
        }
    }
    return p;
}

void dl_part_workers_give(dl_part_workers *p, int i, void (*fn)(void *), void *arg) {
    worker *w = &p->w[i];
    pthread_mutex_lock(&w->mu);
    w->fn = fn, w->arg = arg;
    atomic_fetch_add_explicit(&w->given, 1, memory_order_release);
    pthread_cond_signal(&w->asked);
    pthread_mutex_unlock(&w->mu);
}

void dl_part_workers_wait(dl_part_workers *p, int i) {
    worker *w = &p->w[i];
    const unsigned want = atomic_load(&w->given);
    if (atomic_load_explicit(&w->done, memory_order_acquire) == want) return;
    /* spin_while returns once done moves from what it was: the job given last, as one runs at a time */
    if (spin_while(&w->done, want - 1, NULL) && atomic_load_explicit(&w->done, memory_order_acquire) == want) return;
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->done) != want) pthread_cond_wait(&w->finished, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void dl_part_workers_stop(dl_part_workers *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        worker *w = &p->w[i];
        pthread_mutex_lock(&w->mu);
        atomic_store(&w->quit, 1);
        pthread_cond_signal(&w->asked);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->tid, NULL);
        pthread_cond_destroy(&w->asked), pthread_cond_destroy(&w->finished);
        pthread_mutex_destroy(&w->mu);
    }
    free(p->w);
    free(p);
}
