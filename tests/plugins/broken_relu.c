/* broken_relu.c — the example plugin with its relu broken on purpose, for the cross-check tests:
 * built once per BROKEN_* define (a little off, part of the output unwritten, a write past the
 * output's end, a NaN). `dlrun check` and `dlrun test-ops` must catch each one. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#define dl_plugin_init example_plugin_init
#include "../../plugins/example/example_plugin.c"
#undef dl_plugin_init

static dl_status broken_run(void *self, dl_kernel *k, const dl_tensor *inputs, const dl_tensor *outputs,
                            void *workspace, dl_error *err) {
    (void)self, (void)workspace, (void)err;
    const float *x = inputs[0].data;
    float *y = outputs[0].data;
    int64_t n = k->numel;
#if defined(BROKEN_UNWRITTEN)
    n = n / 2; /* forgets the second half */
#elif defined(BROKEN_OVERRUN)
    n = n + 1; /* one element too many */
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i > k->numel - 1 ? k->numel - 1 : i] > 0 ? x[i > k->numel - 1 ? k->numel - 1 : i] : 0;
#if defined(BROKEN_OFF)
    for (int64_t i = 0; i < n; i++) y[i] *= 1.001f; /* a little off */
#elif defined(BROKEN_NAN)
    y[n / 2] = (float)NAN;
#endif
    return DL_OK;
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    dl_backend *be = (dl_backend *)example_plugin_init(host, err); /* we own the table */
    if (be) {
        be->name = BROKEN_NAME;
        be->description = "example plugin with a deliberately broken relu (tests)";
        be->run = broken_run;
    }
    return be;
}
