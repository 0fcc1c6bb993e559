/* context.h — the plugin registry behind dl_context: loaded backends and skipped plugins. */
#ifndef DLRUN_CONTEXT_H
#define DLRUN_CONTEXT_H
#include "dlrun/dlrun.h"

typedef struct dl_plugin {
    dl_plugin_info info;                      /* what dl_context_plugin() shows */
    char *name, *path, *reason, *description; /* owned strings behind info */
    void *handle;                             /* dlopen handle */
    const dl_backend *be;                     /* the backend table, when loaded */
} dl_plugin;

struct dl_context {
    dl_host host;
    dl_plugin *plugins;
    int n_plugins;
};

/* The loaded backend with this name, or NULL. */
const dl_backend *dl_context_backend(const dl_context *ctx, const char *name);
#endif
