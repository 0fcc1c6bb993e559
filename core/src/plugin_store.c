/* plugin_store.c — see plugin_store.h. Two timing caches per context: `seen`, the file as read at
 * the first use plus every put since (gets read it), and `fresh`, only the puts not yet written.
 * Saving writes `fresh` (dl_tcache_save merges it with the file on disk, so what placement or
 * another process wrote meanwhile stays) and starts it empty again: a plugin's entry never
 * overwrites a newer placement timing with the copy read at the start. */
#define _GNU_SOURCE
#include "plugin_store.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing_cache.h"

struct dl_plugin_store {
    pthread_mutex_t lock;
    int opened;
    dl_tcache *seen, *fresh;
};

static _Thread_local int retuning;

int dl_plugin_store_retune(int on) {
    int was = retuning;
    retuning = on;
    return was;
}

dl_plugin_store *dl_plugin_store_new(void) {
    dl_plugin_store *st = calloc(1, sizeof *st);
    if (st) pthread_mutex_init(&st->lock, NULL);
    return st;
}

void dl_plugin_store_free(dl_plugin_store *st) {
    if (!st) return;
    dl_tcache_free(st->seen);
    dl_tcache_free(st->fresh);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Under the lock: the file read once (a missing or unusable one reads as empty; placement says so). */
static void open_store(dl_plugin_store *st) {
    if (st->opened) return;
    char warn[512];
    st->seen = dl_tcache_open(0, warn, sizeof warn);
    st->opened = 1;
}

/* The key as stored: the plugin's identity, then its own key; NULL where the plugin is not loaded
 * yet (during dl_plugin_init), the key is too long or memory is out. */
static char *full_key(const dl_plugin_host *ph, const char *key) {
    const dl_plugin *p = &ph->ctx->plugins[ph->index];
    if (!p->be || !key || strnlen(key, DL_HOST_KEY_LEN + 1) > DL_HOST_KEY_LEN) return NULL;
    char *k = NULL;
    if (asprintf(&k, "plugin=%s;build=%s;about=%s;abi=%u;dlrun=%s;key=%s", p->be->name, p->build ? p->build : "",
                 p->description ? p->description : "", (unsigned)p->be->abi_version, DLRUN_VERSION_STRING, key) < 0)
        k = NULL;
    return k;
}

int dl_plugin_store_get(void *ctx, const char *key, double *value) {
    const dl_plugin_host *ph = ctx;
    dl_plugin_store *st = ph ? ph->ctx->store : NULL;
    if (!st || retuning || !value) return 0;
    char *k = full_key(ph, key);
    if (!k) return 0;
    pthread_mutex_lock(&st->lock);
    open_store(st);
    int found = dl_tcache_get(st->seen, k, value);
    pthread_mutex_unlock(&st->lock);
    free(k);
    return found;
}

void dl_plugin_store_put(void *ctx, const char *key, double value) {
    const dl_plugin_host *ph = ctx;
    dl_plugin_store *st = ph ? ph->ctx->store : NULL;
    if (!st || !(value >= 0) || !isfinite(value)) return; /* the file holds times: never a negative or NaN */
    char *k = full_key(ph, key);
    if (!k) return;
    pthread_mutex_lock(&st->lock);
    open_store(st);
    if (!st->fresh) {
        char warn[512];
        st->fresh = dl_tcache_open(1, warn, sizeof warn); /* empty: only what is put from now */
    }
    dl_tcache_put(st->seen, k, value);
    dl_tcache_put(st->fresh, k, value);
    pthread_mutex_unlock(&st->lock);
    free(k);
}

void dl_plugin_store_save(dl_context *ctx) {
    dl_plugin_store *st = ctx ? ctx->store : NULL;
    if (!st) return;
    pthread_mutex_lock(&st->lock);
    if (st->fresh) {
        char warn[512];
        if (!dl_tcache_save(st->fresh, warn, sizeof warn)) ctx->host.log(ctx->host.ctx, DL_LOG_WARN, warn);
        dl_tcache_free(st->fresh); /* it now holds the whole file: start the next saves empty */
        st->fresh = NULL;
    }
    pthread_mutex_unlock(&st->lock);
}
