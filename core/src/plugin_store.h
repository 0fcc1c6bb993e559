/* plugin_store.h — what plugins measured, kept across processes: the dl_host.cache_get and
 * cache_put services (ABI 1.12). Entries live in the timing cache file (timing_cache.h) under keys
 * the host prefixes with the plugin's name, build, description and ABI, so plugins never see each
 * other's entries and a rebuilt plugin starts afresh. */
#ifndef DLRUN_PLUGIN_STORE_H
#define DLRUN_PLUGIN_STORE_H
#include "context.h"

/* A context's store, opened lazily (the file read at the first get or put); NULL when out of
 * memory (the services then keep nothing). */
dl_plugin_store *dl_plugin_store_new(void);
void dl_plugin_store_free(dl_plugin_store *st);
/* The dl_host callbacks; ctx is the plugin's dl_plugin_host. */
int dl_plugin_store_get(void *ctx, const char *key, double *value);
void dl_plugin_store_put(void *ctx, const char *key, double value);
/* Writes what plugins put since the last save into the file, merged with what is on disk. */
void dl_plugin_store_save(dl_context *ctx);
/* While on, this thread's gets miss (a session created with retune measures again); returns the
 * setting it replaces, for the caller to restore. */
int dl_plugin_store_retune(int on);
#endif
