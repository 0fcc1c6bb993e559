/* algo.c — which kernel a oneDNN conv runs: direct by the implementation oneDNN offers first;
 * Winograd where oneDNN has a kernel for it (3x3, stride 1; docs/onednn.md, "Winograd"); and, for
 * a conv with a residual sum, oneDNN's further jit implementations (its first, brgconv, read a cold
 * residual slowly: docs/onednn.md, "Implementations"). The candidates are prepared and run in turn
 * on patterned inputs; the fastest is kept. Timed alone, a kernel finds its weights in cache, which
 * in a model's run the layers before have evicted, and Winograd's transformed weights are 16/9 or
 * 36/9 the size of the filters: so the weights (and a residual, which the kernel overwrites in
 * place as in a run) are evicted from the caches before each timed run. The answer is remembered
 * per op shape for the plugin's life, so the kernel placement timed is the kernel the session runs,
 * and given to the host to keep across processes (dl_host.cache_put, ABI 1.12): the next process
 * builds the kept variant alone, with no timing (ResNet-50 at batch 8 was created in 1.07 s with
 * the timings, 0.42 s without). A kept value is used only where it is a variant the conv offers. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <omp.h>

#include "onednn.h"

#define MEMO_SIZE 512
#define KEY_LEN 384
/* Inputs and output of a conv timed here at most: beyond it the direct kernel is kept untimed. */
#define MAX_SCRATCH ((size_t)512 << 20)

#define MAX_CANDIDATES 4
_Static_assert(MAX_CANDIDATES >= 2 + ODN_MAX_IMPLS, "direct, Winograd and every further implementation");

typedef struct memo_entry {
    char key[KEY_LEN];
    int variant; /* odn_variant */
} memo_entry;

struct odn_memo {
    pthread_mutex_t lock;
    int n, next; /* entries filled; the next to overwrite once full */
    memo_entry e[MEMO_SIZE];
};

int odn_algo_init(odn_state *s) {
    s->memo = calloc(1, sizeof *s->memo);
    if (!s->memo) return 0;
    pthread_mutex_init(&s->memo->lock, NULL);
    return 1;
}

void odn_algo_free(odn_state *s) {
    if (!s->memo) return;
    pthread_mutex_destroy(&s->memo->lock);
    free(s->memo);
    s->memo = NULL;
}

static void put_tensor(char *key, size_t len, const dl_tensor *t) {
    size_t at = strlen(key);
    for (int d = 0; d < t->ndim && at < len; d++, at = strlen(key))
        snprintf(key + at, len - at, "%s%lld", d ? "x" : " ", (long long)t->shape[d]);
    if (at < len) snprintf(key + at, len - at, "%s", dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST ? "c" : "");
}

/* What the kernels' speed depends on: the tensors' shapes and layouts, padding, stride, dilation,
 * the fused activation and residual, and the threads. */
static void key_of(const odn_state *s, const dl_op *op, char *key, size_t len) {
    const dl_op_attrs *a = op->attrs;
    snprintf(key, len, "t%d a%d r%d p%d,%d,%d,%d s%d,%d d%d,%d", s->threads, a->activation, dl_op_residual(op),
             a->pad_begin[0], a->pad_begin[1], a->pad_end[0], a->pad_end[1], a->stride[0], a->stride[1], a->dilation[0],
             a->dilation[1]);
    for (int i = 0; i < op->n_inputs; i++) put_tensor(key, len, &op->inputs[i]);
    put_tensor(key, len, &op->outputs[0]);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Patterned values in [-1, 1): no zeros, no denormals. */
static void fill(float *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 8388608.0f - 1.0f + 1.0f / 16777216.0f;
    }
}

/* Takes a buffer out of every cache level, so that the next run reads it from memory. */
static void evict(const void *p, size_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
    for (size_t i = 0; i < bytes; i += 64) _mm_clflush((const char *)p + i);
    _mm_mfence();
#else
    (void)p, (void)bytes; /* elsewhere the weights stay where the last run left them */
#endif
}

/* The weights as the kernels read them (the op's, and each kernel's reordered copies) out of the
 * caches, as a model's run finds them after the layers before; and the residual the kernels sum
 * into in place. */
static void evict_inputs(const dl_op *op, dl_kernel *const *k, int n, const void *residual, size_t rbytes) {
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].data) evict(op->inputs[i].data, (size_t)dl_tensor_numel(&op->inputs[i]) * sizeof(float));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < k[j]->n_owned; i++) evict(k[j]->owned[i], k[j]->owned_bytes[i]);
    if (residual) evict(residual, rbytes);
}

/* Runs the n kernels on the same scratch tensors: one untimed run each, then up to three each in
 * turn, the inputs evicted before each (one where the fastest beats every other by 20 % or more);
 * ms[j] the fastest of kernel j. Kernels that all overwrite their residual in place run so, their
 * output the residual's buffer, as the session runs them. 0 where it could not (memory, or a
 * failed run). */
static int measure(odn_state *s, const dl_op *op, dl_kernel *const *k, int n, double *ms) {
    dl_tensor in[16], out = op->outputs[0];
    void *mine[17] = {0};
    size_t total = 0, wsb = 0;
    int ok = op->n_inputs <= 16, at = k[0]->in_place;
    for (int j = 0; j < n; j++) {
        if (k[j]->workspace > wsb) wsb = k[j]->workspace;
        if (k[j]->in_place != at) at = -1;
    }
    for (int i = 0; ok && i < op->n_inputs; i++) {
        in[i] = op->inputs[i];
        if (in[i].data) continue; /* a weight, known at prepare */
        const size_t m = (size_t)dl_tensor_numel(&in[i]);
        total += m * sizeof(float);
        ok = total <= MAX_SCRATCH && (mine[i] = malloc(m * sizeof(float) + 64)) != NULL;
        if (ok) fill(mine[i], m, 17u + (uint32_t)i), in[i].data = mine[i];
    }
    const size_t ny = (size_t)dl_tensor_numel(&out);
    const int in_place = at >= 0 && ok && mine[at]; /* over the residual (an activation: scratch) */
    if (in_place) {
        out.data = in[at].data;
    } else {
        total += ny * sizeof(float);
        ok = ok && total <= MAX_SCRATCH && (mine[16] = malloc(ny * sizeof(float) + 64)) != NULL;
        out.data = mine[16];
    }
    ok = ok && total + wsb <= MAX_SCRATCH;
    void *ws = NULL;
    ok = ok && posix_memalign(&ws, 64, wsb ? wsb : 64) == 0;
    omp_set_num_threads(s->threads);
    for (int j = 0; j < n; j++) ms[j] = 1e300;
    for (int r = 0; ok && r < 4; r++) {
        for (int j = 0; ok && j < n; j++) {
            dl_error err;
            if (r) evict_inputs(op, k, n, in_place ? out.data : NULL, ny * sizeof(float));
            const double t0 = now_ms();
            ok = odn_kernel_run(k[j], in, &out, ws, &err) == DL_OK;
            const double t = now_ms() - t0;
            if (r && t < ms[j]) ms[j] = t;
        }
        if (r == 1) { /* clear at once: the fastest 20 % ahead of every other */
            int best = 0, clear = 1;
            for (int j = 1; j < n; j++)
                if (ms[j] < ms[best]) best = j;
            for (int j = 0; j < n; j++) clear &= j == best || ms[best] < 0.8 * ms[j];
            if (clear) break;
        }
    }
    for (int i = 0; i < 17; i++) free(mine[i]);
    free(ws);
    return ok;
}

/* Remembers the variant for key for the plugin's life (m locked). */
static void remember(struct odn_memo *m, const char *key, int variant) {
    memo_entry *e = &m->e[m->n < MEMO_SIZE ? m->n++ : m->next++ % MEMO_SIZE];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->variant = variant;
}

/* The host's store keeps numbers under the plugin's own keys: "conv variant " and the memo's. */
#define STORE_PREFIX "conv variant "
static int has_store(const odn_state *s) {
    return s->host && DL_HOST_HAS(s->host, cache_get) && DL_HOST_HAS(s->host, cache_put);
}

/* 1 if v (a value read back from the user's cache file) is a variant this conv is built as. */
static int offered(const odn_state *s, const dl_op *op, double v) {
    if (v == ODN_DIRECT) return 1;
    if (v == ODN_WINOGRAD) return odn_winograd_may(op);
    for (int j = 1; j <= ODN_MAX_IMPLS; j++)
        if (v == ODN_IMPL(j)) return odn_impls_may(s, op);
    return 0;
}

int odn_variant_known(odn_state *s, const dl_op *op) {
    char key[KEY_LEN], stored[sizeof STORE_PREFIX + KEY_LEN];
    key_of(s, op, key, sizeof key);
    struct odn_memo *m = s->memo;
    pthread_mutex_lock(&m->lock);
    int found = -1;
    for (int i = 0; i < m->n && found < 0; i++)
        if (!strcmp(m->e[i].key, key)) found = m->e[i].variant;
    pthread_mutex_unlock(&m->lock);
    double v;
    snprintf(stored, sizeof stored, STORE_PREFIX "%s", key);
    if (found < 0 && has_store(s) && s->host->cache_get(s->host->ctx, stored, &v) && offered(s, op, v)) {
        found = (int)v;
        pthread_mutex_lock(&m->lock);
        remember(m, key, found);
        pthread_mutex_unlock(&m->lock);
    }
    return found;
}

int odn_fastest(odn_state *s, const dl_op *op, dl_kernel *const *k, const int *variants, int n) {
    if (n > MAX_CANDIDATES) n = MAX_CANDIDATES;
    double ms[MAX_CANDIDATES];
    int best = 0;
    if (n > 1 && measure(s, op, k, n, ms))
        for (int j = 1; j < n; j++) /* another kept where it is faster by more than a few runs' noise (3 %) */
            if (ms[j] < 0.97 * ms[0] && ms[j] < ms[best]) best = j;
    char key[KEY_LEN], stored[sizeof STORE_PREFIX + KEY_LEN];
    key_of(s, op, key, sizeof key);
    struct odn_memo *m = s->memo;
    pthread_mutex_lock(&m->lock);
    remember(m, key, variants[best]);
    pthread_mutex_unlock(&m->lock);
    snprintf(stored, sizeof stored, STORE_PREFIX "%s", key);
    if (has_store(s)) s->host->cache_put(s->host->ctx, stored, variants[best]);
    return best;
}
