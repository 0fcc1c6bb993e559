/* fuzz_util.h — what the libFuzzer harnesses share: the fuzz input as a file for readers that
 * take a path, and the quiet, single-threaded setting every harness runs in. */
#ifndef DLRUN_FUZZ_UTIL_H
#define DLRUN_FUZZ_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* The input written to this process's one in-memory file (memfd), replacing what it held; returns
 * a path that opens it ("/proc/self/fd/N"), or NULL when it cannot be written (the harness then
 * skips the input). Each open of the path reads from the start. */
const char *fz_file(const uint8_t *data, size_t size);
/* One thread for OpenMP and OpenBLAS, no plugin search path from the environment, and the timing
 * cache pointed nowhere (never the user's): call first in LLVMFuzzerInitialize. */
void fz_setup(void);
/* For the timing cache harness: a private cache folder, dlrun-fuzz-<pid> in /dev/shm (or /tmp),
 * made the process's $XDG_CACHE_HOME; returns the cache file's path there, or NULL. The folder is
 * removed at exit, and by the next call in any process once this one is gone. */
const char *fz_cache_file(void);
#endif
