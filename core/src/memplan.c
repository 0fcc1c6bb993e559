/* memplan.c — arena planning for activations and scratch space (see memplan.h).
 *
 * Requests joined by `share` (an elementwise op writing over its dying input) are merged into one
 * group with the union of their lifetimes. Groups are placed largest first; each goes into the
 * smallest gap, between groups already placed whose lifetimes overlap its own, that holds it, or
 * after the last of them. Placing large buffers first leaves small ones to fill the holes, which
 * on chain- and residual-shaped networks lands within a few percent of the lower bound. */
#include "memplan.h"

#include <stdlib.h>

typedef struct group {
    size_t size;
    int first, last;
    size_t offset;
    int placed;
} group;

static int root_of(const dl_mem_request *req, int i) {
    while (req[i].share >= 0) i = req[i].share;
    return i;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

typedef struct span {
    size_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int cmp_group_size(const void *a, const void *b, void *g);

int dl_mem_plan(const dl_mem_request *req, int n, size_t align, size_t *offsets, dl_mem_plan_stats *stats) {
    stats->peak = stats->naive = stats->lower_bound = 0;
    if (n == 0) return 1;
    if (align == 0) align = 1;
    group *g = calloc((size_t)n, sizeof *g);
    int *order = malloc((size_t)n * sizeof *order);
    span *spans = malloc((size_t)n * sizeof *spans);
    int *rootv = malloc((size_t)n * sizeof *rootv);
    if (!g || !order || !spans || !rootv) {
        free(g), free(order), free(spans), free(rootv);
        return 0;
    }
    int min_step = req[0].first, max_step = req[0].last;
    for (int i = 0; i < n; i++) {
        stats->naive += round_up(req[i].size, align);
        int r = rootv[i] = root_of(req, i);
        if (r == i) g[r] = (group){round_up(req[i].size, align), req[i].first, req[i].last, 0, 0};
        if (req[i].first < min_step) min_step = req[i].first;
        if (req[i].last > max_step) max_step = req[i].last;
    }
    for (int i = 0; i < n; i++) { /* grow each group to cover its members */
        group *r = &g[rootv[i]];
        size_t sz = round_up(req[i].size, align);
        if (sz > r->size) r->size = sz;
        if (req[i].first < r->first) r->first = req[i].first;
        if (req[i].last > r->last) r->last = req[i].last;
    }
    /* lower bound: max over steps of live group sizes */
    for (int t = min_step; t <= max_step; t++) {
        size_t live = 0;
        for (int i = 0; i < n; i++)
            if (rootv[i] == i && g[i].first <= t && t <= g[i].last) live += g[i].size;
        if (live > stats->lower_bound) stats->lower_bound = live;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (rootv[i] == i) order[m++] = i;
    /* largest first; ties by earlier start, for a deterministic plan */
    for (int a = 1; a < m; a++)
        for (int b = a; b > 0 && cmp_group_size(&order[b], &order[b - 1], g) < 0; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    for (int k = 0; k < m; k++) {
        group *cur = &g[order[k]];
        int ns = 0;
        for (int j = 0; j < k; j++) {
            group *o = &g[order[j]];
            if (o->first <= cur->last && cur->first <= o->last) spans[ns++] = (span){o->offset, o->offset + o->size};
        }
        qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
        size_t best = (size_t)-1, best_gap = (size_t)-1, at = 0;
        for (int s = 0; s < ns; s++) {
            if (spans[s].lo > at && spans[s].lo - at >= cur->size && spans[s].lo - at < best_gap) {
                best_gap = spans[s].lo - at;
                best = at;
            }
            if (spans[s].hi > at) at = spans[s].hi;
        }
        cur->offset = best != (size_t)-1 ? best : at;
        cur->placed = 1;
        if (cur->offset + cur->size > stats->peak) stats->peak = cur->offset + cur->size;
    }
    for (int i = 0; i < n; i++) offsets[i] = g[rootv[i]].offset;
    free(g), free(order), free(spans), free(rootv);
    return 1;
}

static int cmp_group_size(const void *a, const void *b, void *gv) {
    const group *g = gv;
    const group *x = &g[*(const int *)a], *y = &g[*(const int *)b];
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

int dl_mem_plan_verify(const dl_mem_request *req, int n, const size_t *offsets, int *bad_i, int *bad_j) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (root_of(req, i) == root_of(req, j)) continue;
            int overlap_time = req[i].first <= req[j].last && req[j].first <= req[i].last;
            int overlap_space = offsets[i] < offsets[j] + req[j].size && offsets[j] < offsets[i] + req[i].size;
            if (overlap_time && overlap_space && req[i].size && req[j].size) {
                *bad_i = i, *bad_j = j;
                return 0;
            }
        }
    return 1;
}
