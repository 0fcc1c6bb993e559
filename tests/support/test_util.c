/* test_util.c — see test_util.h. */
#define _GNU_SOURCE
#include "test_util.h"

#include <dlfcn.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int64_t tu_channels_last_at(const int64_t *s, int64_t i) {
    int64_t w = i % s[3], h = i / s[3] % s[2], c = i / (s[3] * s[2]) % s[1], n = i / (s[3] * s[2] * s[1]);
    return ((n * s[2] + h) * s[3] + w) * s[1] + c;
}

void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        x[i] = (float)(lo + (hi - lo) * u);
    }
}

double tu_nmse(const float *ref, const float *got, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isnan(got[i])) return INFINITY;
        double d = (double)ref[i] - (double)got[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return num / den;
}

char *tu_write_temp(const char *suffix, const void *data, size_t len) {
    char *path = NULL;
    if (asprintf(&path, "/tmp/dlrun-test-XXXXXX%s", suffix) < 0) return NULL;
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0) {
        free(path);
        return NULL;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(fd);
    return path;
}

int tu_run(const char *cmd, char **out) {
    char *full = NULL;
    if (asprintf(&full, "%s 2>&1", cmd) < 0) return -1;
    FILE *p = popen(full, "r");
    free(full);
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += r;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    if (buf) buf[len] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    if (!WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static char tu_cache_dir[64];

static int tu_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path); /* best effort: go on past what cannot be removed */
    return 0;
}

static void tu_remove_cache(void) {
    if (tu_cache_dir[0]) nftw(tu_cache_dir, tu_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    tu_cache_dir[0] = 0;
}

const char *tu_fresh_cache(void) {
    static int registered;
    if (!registered) registered = atexit(tu_remove_cache) == 0;
    tu_remove_cache();
    snprintf(tu_cache_dir, sizeof tu_cache_dir, "/tmp/dlrun-cache-XXXXXX");
    if (!mkdtemp(tu_cache_dir) || setenv("XDG_CACHE_HOME", tu_cache_dir, 1) != 0) return tu_cache_dir[0] = 0, NULL;
    return tu_cache_dir;
}

dl_status tu_open_session(const char *plugins, const char *yaml, const dl_session_options *so, dl_context **ctx,
                          dl_model **m, dl_session **s, dl_error *err) {
    *ctx = NULL, *m = NULL, *s = NULL;
    dl_context_options co = {sizeof co, 2, 0, plugins, 1};
    dl_status st = dl_context_create(&co, ctx, err);
    if (st != DL_OK) return st;
    char *path = tu_write_temp(".yaml", yaml, strlen(yaml));
    st = path ? dl_model_load(path, m, err) : DL_E_IO;
    if (path) unlink(path);
    free(path);
    if (st != DL_OK) return st;
    return dl_session_create(*ctx, *m, so, s, err);
}

static void tu_quiet(void *ctx, int level, const char *msg) { (void)ctx, (void)level, (void)msg; }

const dl_backend *tu_load_backend(const char *path, int threads, dl_error *err) {
    static dl_host hosts[8]; /* a plugin may keep its host: each stays for the program's life */
    static int used;
    if (used == 8) return dl_fail(err, DL_E_NOMEM, "more than 8 plugins loaded"), NULL;
    dl_host *host = &hosts[used++];
    *host = (dl_host){DL_ABI_VERSION, sizeof *host, NULL, threads, 0, tu_quiet, NULL, NULL};
    return tu_load_backend_as(path, host, err);
}

const dl_backend *tu_load_backend_as(const char *path, const dl_host *host, dl_error *err) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return dl_fail(err, DL_E_IO, "dlopen: %s", dlerror()), NULL;
    void *sym = dlsym(h, DL_PLUGIN_ENTRY);
    if (!sym) return dl_fail(err, DL_E_IO, "no %s in %s", DL_PLUGIN_ENTRY, path), NULL;
    dl_plugin_init_fn init;
    memcpy(&init, &sym, sizeof init);
    return init(host, err);
}

void *tu_fake_symbol(const char *name, const char *symbol) {
    char path[512];
    snprintf(path, sizeof path, "%s/libdlrun-%s.so", DLRUN_TEST_PLUGIN_DIR, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return NULL;
    void *sym = dlsym(h, symbol);
    dlclose(h); /* the contexts' reference keeps it loaded */
    return sym;
}

#ifdef DLRUN_CLI
int tu_dlrun(const char *args, char **out) {
    char *cmd = NULL;
    if (asprintf(&cmd, "env -u DLRUN_PLUGIN_PATH %s %s", DLRUN_CLI, args) < 0) return -1;
    int rc = tu_run(cmd, out);
    free(cmd);
    return rc;
}
#endif
