/* fuzz_util.c — see fuzz_util.h. */
#define _GNU_SOURCE
#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

void fz_setup(void) {
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    unsetenv("DLRUN_PLUGIN_PATH");
    setenv("XDG_CACHE_HOME", "/nonexistent/dlrun-fuzz", 1); /* never the user's timing cache */
    /* no whole runs to measure a layout or a batch in parts (docs/layout.md, docs/micro-batch.md),
     * as in tools/test's sanitizer builds: under ASan they made one input take over 10 s */
    setenv("DLRUN_LAYOUT_RUNS", "0", 1);
    setenv("DLRUN_MICRO_BATCH_RUNS", "0", 1);
}

/* /dev/shm where there is one (the timing cache fsyncs each file it writes), else /tmp */
static const char *fz_tmp(void) { return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; }
static char fz_cache[64];

/* Removes folder `dir` made by fz_cache_file, with what the timing cache wrote into it. */
static void fz_remove(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/dlrun", dir);
    DIR *d = opendir(p);
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        char f[1024];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        if (e->d_name[0] != '.') unlink(f);
    }
    if (d) closedir(d);
    rmdir(p);
    rmdir(dir);
}

static void fz_cleanup(void) { fz_remove(fz_cache); }

const char *fz_cache_file(void) {
    static char file[128];
    if (file[0]) return file;
    /* libFuzzer leaves with _Exit after a finding or a timeout, skipping atexit: remove the folders
     * of fuzzers that are gone first */
    DIR *d = opendir(fz_tmp());
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        long pid;
        char dir[512];
        if (sscanf(e->d_name, "dlrun-fuzz-%ld", &pid) != 1 || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running */
        snprintf(dir, sizeof dir, "%s/%s", fz_tmp(), e->d_name);
        fz_remove(dir);
    }
    if (d) closedir(d);
    snprintf(fz_cache, sizeof fz_cache, "%s/dlrun-fuzz-%ld", fz_tmp(), (long)getpid());
    char sub[128];
    snprintf(sub, sizeof sub, "%s/dlrun", fz_cache);
    if ((mkdir(fz_cache, 0700) != 0 && errno != EEXIST) || (mkdir(sub, 0700) != 0 && errno != EEXIST)) return NULL;
    atexit(fz_cleanup);
    setenv("XDG_CACHE_HOME", fz_cache, 1);
    snprintf(file, sizeof file, "%s/timing-cache.json", sub);
    return file;
}

/* Sanitizer settings built into every harness, so a reproducer replays the same way by hand: a
 * malloc beyond what ASan can ever give returns NULL as glibc's would (the code must handle it);
 * one larger than libFuzzer's -malloc_limit_mb (the -rss_limit_mb, 2 GiB by default) that can be
 * given is still reported, since dlrun should refuse a size it cannot back before asking for it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:detect_leaks=1"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }
