/* timing_cache.h — measured op and transfer times kept across runs, in
 * $XDG_CACHE_HOME/dlrun/timing-cache.json (default ~/.cache/dlrun/), keyed by everything that can
 * change a time (op signature, backend, device and library versions, dlrun and ABI versions). */
#ifndef DLRUN_TIMING_CACHE_H
#define DLRUN_TIMING_CACHE_H
#include <stddef.h>

typedef struct dl_tcache dl_tcache;

/* Opens the cache (never fails: a missing, corrupt or foreign file starts empty, and *warning
 * then holds one line saying so). retune: start empty without reading. */
dl_tcache *dl_tcache_open(int retune, char *warning, size_t wlen);
/* 1 and *ms when the key is cached. */
int dl_tcache_get(const dl_tcache *c, const char *key, double *ms);
void dl_tcache_put(dl_tcache *c, const char *key, double ms);
/* Merges with what is on disk now and replaces the file atomically (temporary file + rename), so
 * concurrent dlrun processes never leave a torn file. Returns 0 (with a warning) on failure. */
int dl_tcache_save(dl_tcache *c, char *warning, size_t wlen);
void dl_tcache_free(dl_tcache *c);
/* The file it uses, or NULL when neither XDG_CACHE_HOME nor HOME is set. */
const char *dl_tcache_path(const dl_tcache *c);
#endif
