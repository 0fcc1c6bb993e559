/* fuzz_util.c — see fuzz_util.h. */
#define _GNU_SOURCE
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int fz_fd = -1;
static char fz_path[64];

const char *fz_file(const uint8_t *data, size_t size) {
    if (fz_fd < 0) {
        fz_fd = memfd_create("dlrun-fuzz", MFD_CLOEXEC);
        if (fz_fd < 0) return NULL;
        snprintf(fz_path, sizeof fz_path, "/proc/self/fd/%d", fz_fd);
    }
    if (ftruncate(fz_fd, 0) != 0) return NULL;
    size_t off = 0;
    while (off < size) {
        ssize_t w = pwrite(fz_fd, data + off, size - off, (off_t)off);
        if (w <= 0) return NULL;
        off += (size_t)w;
    }
    return fz_path;
}

static char fz_cache[64];

/* Removes the private cache folder and what the timing cache wrote into it. */
static void fz_cleanup(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/dlrun/timing-cache.json", fz_cache);
    unlink(p);
    snprintf(p, sizeof p, "%s/dlrun", fz_cache);
    rmdir(p);
    rmdir(fz_cache);
}

void fz_setup(void) {
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    unsetenv("DLRUN_PLUGIN_PATH");
    /* /dev/shm where there is one: the timing cache fsyncs each file it writes */
    snprintf(fz_cache, sizeof fz_cache, "%s/dlrun-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (mkdtemp(fz_cache)) {
        setenv("XDG_CACHE_HOME", fz_cache, 1);
        atexit(fz_cleanup);
    } else {
        setenv("XDG_CACHE_HOME", "/nonexistent/dlrun-fuzz", 1);
    }
}

/* Sanitizer settings built into every harness, so a reproducer replays the same way by hand: a
 * malloc beyond what ASan can ever give returns NULL as glibc's would (the code must handle it);
 * one larger than libFuzzer's -malloc_limit_mb (the -rss_limit_mb, 2 GiB by default) that can be
 * given is still reported, since dlrun should refuse a size it cannot back before asking for it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:detect_leaks=1"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }
