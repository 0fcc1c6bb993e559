/* test_util.h — helpers shared by the Criterion suites: random data, error norms, temp files,
 * running the CLI. */
#ifndef DLRUN_TEST_UTIL_H
#define DLRUN_TEST_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* Fill with uniform values in [lo, hi) from a seed (printed by the caller on failure). */
void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* Where row-major element i of a 4-D [N, C, H, W] tensor of this shape lies in its channels-last
 * ([N, H, W, C]) storage: written out here, independent of the plugins' conversions. */
int64_t tu_channels_last_at(const int64_t *shape, int64_t i);
/* Normalized mean squared error sum((a-b)^2) / sum(a^2); NaN anywhere gives +inf. */
double tu_nmse(const float *ref, const float *got, size_t n);
/* Write bytes to a new temporary file whose name ends in suffix; returns its malloc'd path. */
char *tu_write_temp(const char *suffix, const void *data, size_t len);
/* Run a shell command; capture stdout and stderr together into *out (malloc'd, may be NULL).
 * Returns the exit status, or -1 if it did not exit normally (a crash). */
int tu_run(const char *cmd, char **out);
/* Runs the dlrun CLI of this build with args (a shell-quoted string), $DLRUN_PLUGIN_PATH unset so
 * that it finds the plugins beside libdlrun as a user's would; as tu_run. */
int tu_dlrun(const char *args, char **out);
/* A new empty folder /tmp/dlrun-cache-XXXXXX made $XDG_CACHE_HOME, so that placement's timing cache
 * starts empty and stays out of $HOME; returns its path (valid until the next call). The folder
 * made by the previous call in this process is removed with all it holds, and the last one when
 * the process exits (Criterion runs each test in its own process). NULL if it cannot be made. */
const char *tu_fresh_cache(void);

/* A context on the plugins listed (a colon-separated path), the model written out from YAML
 * text, and a session with the options given; DL_OK or the failing call's status with err set.
 * Free with dl_session_free, dl_model_free, dl_context_free. */
#include "dlrun/dlrun.h"
#include "dlrun/plugin.h"
/* The backend of the plugin at path, loaded through its entry point as the host does (its log
 * silenced), with `threads` CPU threads; NULL with the reason in err. The plugin stays loaded. */
const dl_backend *tu_load_backend(const char *path, int threads, dl_error *err);
/* The same with the caller's host table (it must outlive the plugin). */
const dl_backend *tu_load_backend_as(const char *path, const dl_host *host, dl_error *err);
dl_status tu_open_session(const char *plugins, const char *yaml, const dl_session_options *so, dl_context **ctx,
                          dl_model **m, dl_session **s, dl_error *err);
/* The address of `symbol` in the test plugin `name` (tests/plugins: "fakedev"), as the contexts
 * loaded it (never closed); NULL where it is not loaded or has no such symbol. */
void *tu_fake_symbol(const char *name, const char *symbol);
#endif
