/* session_plan.c — the session's memory plan: every activation buffer and op workspace is a slot
 * with a lifetime (first writer to last reader, in step order); slots of one memory domain are
 * placed in one arena by memplan.c, an elementwise op reuses its dying input's slot in place
 * when its backend allows, and a plan that cannot fit a domain is refused before anything runs.
 * The run loop then only follows pointers into the arenas: it allocates nothing. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memplan.h"
#include "session.h"

/* Slot offsets in an arena: 64 bytes in host memory (a cache line, AVX-512), 256 in a device's
 * (cuBLASLt and cuDNN assume 256-byte aligned tensors unless told otherwise; cudaMalloc's own
 * alignment), so a kernel sees the same alignment in a session as on its own allocations. */
size_t dl_plan_align(int d) { return d == 0 ? 64 : 256; }

int dl_slot_add(dl_session *s, int value, int place, size_t size, int first) {
    if (s->n_slots == s->cap_slots) {
        int cap = s->cap_slots ? 2 * s->cap_slots : 128;
        dl_slot *p = realloc(s->slots, (size_t)cap * sizeof *p);
        if (!p) return -1;
        s->slots = p;
        s->cap_slots = cap;
    }
    s->slots[s->n_slots] = (dl_slot){value, place, size ? size : 1, first, first, -1, 0, -1, 0};
    if (value >= 0) s->slot_of[(size_t)value * DL_MAX_PLACES + (size_t)place] = s->n_slots + 1;
    return s->n_slots++;
}

int dl_slot_find(const dl_session *s, int value, int place) {
    return s->slot_of[(size_t)value * DL_MAX_PLACES + (size_t)place] - 1;
}

void dl_slot_use(dl_session *s, int slot, int step) {
    if (slot >= 0 && step > s->slots[slot].last) s->slots[slot].last = step;
}

/* Which input of step st its output may overwrite: its kernel's answer (ABI 1.10; none before the
 * kernels are prepared, when the plan is checked against the memory first), else input 0 of an
 * elementwise op its backend runs in place; -1 for none. */
static int in_place_input(const dl_step *st) {
    const dl_backend *be = st->be;
    int i = st->kernel && DL_BACKEND_HAS(be, kernel_in_place) ? be->kernel_in_place(be->self, st->kernel, &st->op) : -1;
    if (i >= 0) return i < st->op.n_inputs ? i : -1;
    if (!(dl_op_def_of(st->op.kind)->flags & DL_OPF_ELEMENTWISE)) return -1;
    return DL_BACKEND_HAS(be, supports_in_place) && be->supports_in_place(be->self, &st->op) ? 0 : -1;
}

/* Let an op write over an input that dies at that op (in_place_input), unless the op reads that
 * input's storage as another of its inputs too, or the input is an elided concat's input or
 * output or a layout view's (a slice's place is fixed inside its container's buffer, and an op
 * writing over a concat's buffer could overwrite a slice it still reads as another input). Where
 * the output is such a slice, the input becomes one too, at the same place: a reshape written
 * into a layout view's buffer (ConvNeXt's linear -> reshape -> transpose) copies nothing. */
static void plan_in_place(dl_session *s) {
    unsigned char *taken = calloc((size_t)s->n_slots + 1, 1);
    if (!taken) return; /* planning without in-place is still correct */
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].within >= 0) taken[i] = taken[s->slots[i].within] = 1;
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *st = &s->steps[k];
        const int at = st->kind == DL_STEP_OP ? in_place_input(st) : -1;
        if (at < 0) continue;
        int ins[DL_MAX_OP_INPUTS], count = dl_session_node_inputs(s, st->node, ins), clash = 0;
        if (at >= count) continue;
        const int o = dl_session_root(s, s->g->nodes[st->node].output), v = dl_session_root(s, ins[at]);
        for (int j = 0; j < count; j++) clash |= j != at && dl_session_root(s, ins[j]) == v;
        int out = dl_slot_find(s, o, dl_place_of_value(s, o, st->place));
        int in = dl_slot_find(s, v, dl_place_of_value(s, v, dl_session_input_place(s, st->node, at)));
        if (clash || out < 0 || in < 0 || taken[in] || s->slots[in].last != k ||
            s->slots[in].size != s->slots[out].size || s->slots[in].unused || s->slots[out].unused)
            continue;
        dl_slot *si = &s->slots[in];
        if (!taken[out]) {
            s->slots[out].share = in;
        } else { /* a slice of a later buffer (its offsets are worked out downwards) */
            if (s->slots[out].within < 0 || si->first < 0 || in > out) continue;
            si->within = out;
            si->within_at = 0;
            for (int c = out; c >= 0; c = s->slots[c].within) /* every buffer it lies in lives from its write */
                if (si->first < s->slots[c].first) s->slots[c].first = si->first;
        }
        taken[in] = 1;
    }
    free(taken);
}

static size_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

void dl_format_bytes(double b, char *buf, size_t len) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) b /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* The bytes domain d may use: --max-memory, or what the domain has free if less (0: unknown);
 * *what names which of the two. */
size_t dl_session_budget(const dl_session *s, int d, const char **what) {
    size_t avail = 0, total = 0;
    *what = "free memory";
    if (d == 0) avail = host_available();
    else if (DL_BACKEND_HAS(s->doms[d].be, memory_info)) {
        dl_error e;
        if (s->doms[d].be->memory_info(s->doms[d].be->self, &avail, &total, &e) != DL_OK) avail = 0;
    }
    if (s->opt.max_memory > 0 && (avail == 0 || (size_t)s->opt.max_memory < avail)) {
        avail = (size_t)s->opt.max_memory;
        *what = "--max-memory";
    }
    return avail;
}

size_t dl_session_host_weights(const dl_session *s) { return dl_weights_owned_bytes(s->weights) + s->fuse.owned_bytes; }

/* The caller's copies of the inputs (reserve_inputs), at the session's shapes. */
static size_t caller_inputs(const dl_session *s) {
    size_t bytes = 0;
    for (int i = 0; s->opt.reserve_inputs && i < s->g->n_inputs; i++)
        bytes += dl_session_value_bytes(s, s->g->inputs[i]);
    return bytes;
}

size_t dl_session_host_held(const dl_session *s) { return dl_session_host_weights(s) + caller_inputs(s); }

dl_status dl_session_refuse(const dl_session *s, int d, const char *at_least, size_t need, size_t avail,
                            const char *what, const char *parts, const char *hint, dl_error *err) {
    char nb[32], ab[32];
    dl_format_bytes((double)need, nb, sizeof nb);
    dl_format_bytes((double)avail, ab, sizeof ab);
    return dl_fail(err, DL_E_NOMEM, "model '%s' at batch %lld needs %s%s of %s memory (%s), but %s allows %s%s%s",
                   s->g->name, s->g->n_inputs ? (long long)s->shape[s->g->inputs[0]].d[0] : 1LL, at_least, nb,
                   d == 0 ? "host" : s->doms[d].be->name, parts, what, ab, hint ? "; " : "", hint ? hint : "");
}

dl_status dl_session_check_weights(const dl_session *s, size_t seeded, dl_error *err) {
    const char *what;
    size_t avail = dl_session_budget(s, 0, &what), need = seeded + dl_session_host_held(s);
    if (avail == 0 || need <= avail) return DL_OK;
    return dl_session_refuse(s, 0, "", need, avail, what,
                             caller_inputs(s) ? "seeded weights, inputs" : "seeded weights", NULL, err);
}

static dl_status check_fits(dl_session *s, int d, dl_error *err) {
    size_t weights = s->mem[d].weights + (d == 0 ? dl_session_host_weights(s) : 0);
    size_t inputs = d == 0 ? caller_inputs(s) : 0, need = s->mem[d].peak + weights + inputs;
    const char *what;
    size_t avail = dl_session_budget(s, d, &what);
    if (avail == 0 || need <= avail) return DL_OK;
    char parts[64];
    snprintf(parts, sizeof parts, "activations, scratch%s%s", weights ? ", weights" : "", inputs ? ", inputs" : "");
    return dl_session_refuse(s, d, "", need, avail, what, parts, "use a smaller --batch", err);
}

/* Offsets of every slot in its domain's arena, and whether each domain fits. */
dl_status dl_session_check_memory(dl_session *s, dl_error *err) {
    plan_in_place(s);
    dl_mem_request *req = malloc(((size_t)s->n_slots + 1) * sizeof *req);
    size_t *off = malloc(((size_t)s->n_slots + 1) * sizeof *off);
    int *local = malloc(((size_t)s->n_slots + 1) * sizeof *local);
    int *global = malloc(((size_t)s->n_slots + 1) * sizeof *global);
    dl_status st = req && off && local && global ? DL_OK : dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int d = 0; st == DL_OK && d < s->n_doms; d++) {
        int n = 0; /* an elided concat's inputs are placed with its output, below; unused slots nowhere */
        for (int i = 0; i < s->n_slots; i++)
            if (s->places[s->slots[i].place].dom == d && s->slots[i].within < 0 && !s->slots[i].unused)
                local[i] = n, global[n++] = i;
        for (int k = 0; k < n; k++) {
            const dl_slot *sl = &s->slots[global[k]];
            req[k] = (dl_mem_request){sl->size, sl->first, sl->last, sl->share >= 0 ? local[sl->share] : -1};
        }
        dl_mem_plan_stats stats;
        if (!dl_mem_plan(req, n, dl_plan_align(d), off, &stats)) {
            st = dl_fail(err, DL_E_NOMEM, "out of memory planning memory");
            break;
        }
        s->mem[d].peak = stats.peak, s->mem[d].naive = stats.naive, s->mem[d].lower_bound = stats.lower_bound;
        for (int k = 0; k < n; k++) s->slots[global[k]].offset = off[k];
    }
    /* a slice lies in a later slot (concat_elide.c), placed by now: downwards, nested ones too */
    for (int i = s->n_slots - 1; st == DL_OK && i >= 0; i--)
        if (s->slots[i].within >= 0) s->slots[i].offset = s->slots[s->slots[i].within].offset + s->slots[i].within_at;
    free(req), free(off), free(local), free(global);
    for (int d = 0; st == DL_OK && d < s->n_doms; d++) st = check_fits(s, d, err);
    return st;
}

dl_status dl_session_plan_memory(dl_session *s, dl_error *err) {
    dl_status st = dl_session_check_memory(s, err);
    for (int d = 0; st == DL_OK && d < s->n_doms; d++) {
        if (!s->mem[d].peak) continue;
        st = dl_session_alloc(s, d, s->mem[d].peak, &s->mem[d].arena, err);
    }
    if (st != DL_OK) return st;
    for (int i = 0; i < s->n_slots; i++) {
        const dl_slot *sl = &s->slots[i];
        void *p = sl->unused ? NULL : (char *)s->mem[s->places[sl->place].dom].arena + sl->offset;
        if (sl->value >= 0) s->buf[(size_t)sl->value * DL_MAX_PLACES + (size_t)sl->place] = p;
    }
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_OP && s->steps[k].ws_slot >= 0) {
            const dl_slot *sl = &s->slots[s->steps[k].ws_slot];
            s->steps[k].ws = sl->unused ? NULL : (char *)s->mem[s->places[sl->place].dom].arena + sl->offset;
        }
    return DL_OK;
}
