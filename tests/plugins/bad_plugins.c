/* bad_plugins.c — deliberately broken plugins for the loader tests. One source, built several
 * times with a different BAD_* define each: no entry symbol, a wrong ABI major, an init that
 * fails like a GPU plugin on a machine without a GPU, a table missing a required function. */
#include <stdlib.h>

#include "dlrun/plugin.h"

#if defined(BAD_NOENTRY)
DL_PLUGIN_EXPORT int dlrun_something_else(void) { return 42; }
#else
static void nop_destroy(void *self) { (void)self; }
static dl_backend table __attribute__((unused)) = {
    .abi_version = DL_ABI_VERSION,
    .struct_size = sizeof(dl_backend),
    .name = "bad",
    .description = "a broken test plugin",
    .device = {DL_DEVICE_CPU, 0},
    .destroy = nop_destroy,
};

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    (void)host;
#if defined(BAD_ABI)
    table.abi_version = (99u << 16) | 3u;
    return &table;
#elif defined(BAD_INITFAIL)
    dl_fail(err, DL_E_NODEVICE, "no CUDA device (test plugin)");
    return NULL;
#elif defined(BAD_INCOMPLETE)
    (void)err;
    return &table; /* alloc, run, ... are NULL */
#endif
}
#endif
