/* memplan.h — places buffers with known lifetimes at offsets inside one arena, reusing the space of
 * buffers that have died, so the arena stays close to the largest total live at any step. */
#ifndef DLRUN_MEMPLAN_H
#define DLRUN_MEMPLAN_H
#include <stddef.h>

typedef struct dl_mem_request {
    size_t size; /* bytes */
    int first;   /* step that writes it first */
    int last;    /* step that reads it last (inclusive); first <= last */
    int share;   /* index of an earlier request whose storage this one takes over in place (its
                    last use is this one's first step, sizes equal), or -1 */
} dl_mem_request;

typedef struct dl_mem_plan_stats {
    size_t peak;        /* arena size */
    size_t naive;       /* sum of all sizes: one buffer each, no reuse */
    size_t lower_bound; /* largest sum of sizes live at one step (shared requests counted once) */
} dl_mem_plan_stats;

/* Fills offsets[i] (multiples of align) so that no two requests whose lifetimes overlap share a
 * byte, except a request and the one it shares. Greedy by size, best-fit gap (as TFLite's arena
 * planner does). Returns 0 when out of memory. */
int dl_mem_plan(const dl_mem_request *req, int n, size_t align, size_t *offsets, dl_mem_plan_stats *stats);

/* Brute-force check of a plan: 1 if valid, else 0 with the first clash in i, j. */
int dl_mem_plan_verify(const dl_mem_request *req, int n, const size_t *offsets, int *i, int *j);
#endif
