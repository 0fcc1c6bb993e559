/* context.h — the plugin registry behind dl_context: loaded backends and skipped plugins. */
#ifndef DLRUN_CONTEXT_H
#define DLRUN_CONTEXT_H
#include "dlrun/dlrun.h"

struct dl_context;
typedef struct dl_plugin_store dl_plugin_store;

/* The host table one plugin was given: its own, so that the services (cache_get, cache_put) know
 * which plugin calls; allocated apart, so that it stays put while the plugin list grows. */
typedef struct dl_plugin_host {
    dl_host host; /* host.ctx points back here */
    struct dl_context *ctx;
    int index; /* the plugin's entry in ctx->plugins */
} dl_plugin_host;

typedef struct dl_plugin {
    dl_plugin_info info;                      /* what dl_context_plugin() shows */
    char *name, *path, *reason, *description; /* owned strings behind info */
    char *build;                              /* which build of the file (dl_context_build) */
    void *handle;                             /* dlopen handle */
    const dl_backend *be;                     /* the backend table, when loaded */
    dl_plugin_host *ph;                       /* the host table it was given */
} dl_plugin;

struct dl_context {
    dl_host host; /* the template of each plugin's own (dl_plugin_host) */
    dl_plugin *plugins;
    int n_plugins;
    dl_plugin_store *store; /* what plugins measured, kept across processes (plugin_store.c) */
};

/* A context of the host's (CPU) backends of ctx, loaded again from their files, whose plugins
 * each use n_threads threads (a batch's parts run at once, each on its share of the cores:
 * micro_batch.c). Its own plugin store; free it with dl_context_free after its sessions. */
dl_status dl_context_host_twin(const dl_context *ctx, int n_threads, dl_context **out, dl_error *err);
/* The loaded backend with this name, or NULL. */
const dl_backend *dl_context_backend(const dl_context *ctx, const char *name);
/* Which build of its plugin file a loaded backend is: "id:" and the file's GNU build ID (the
 * linker's hash of the code), else "file:" and its size and modification time; "" for a backend
 * not loaded from a file. The timing cache keys on it, so that a rebuilt plugin is measured anew. */
const char *dl_context_build(const dl_context *ctx, const dl_backend *be);
#endif
