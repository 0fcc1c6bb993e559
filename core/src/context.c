/* context.c — finds backend plugins (libdlrun-*.so), dlopens them, checks their ABI and keeps the
 * usable ones. A plugin that cannot be used is listed with a one-line reason, never fatal. */
#define _GNU_SOURCE
#include "context.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "plugin_store.h"

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static void host_log(void *ctx, int level, const char *msg) {
    (void)ctx;
    if (level <= DL_LOG_WARN) fprintf(stderr, "dlrun: %s\n", msg);
}

/* Folder holding libdlrun itself; plugins live in its DLRUN_PLUGIN_SUBDIR subfolder. */
static char *default_plugin_dir(void) {
    Dl_info di;
    if (!dladdr((void *)&dl_context_create, &di) || !di.dli_fname) return NULL;
    char *lib = realpath(di.dli_fname, NULL);
    if (!lib) return NULL;
    char *slash = strrchr(lib, '/');
    if (slash) *slash = 0;
    char *dir = NULL;
    if (asprintf(&dir, "%s/%s", lib, DLRUN_PLUGIN_SUBDIR) < 0) dir = NULL;
    free(lib);
    return dir;
}

static int has_name(const dl_context *ctx, const char *name) {
    for (int i = 0; i < ctx->n_plugins; i++)
        if (ctx->plugins[i].be && strcmp(ctx->plugins[i].name, name) == 0) return 1;
    return 0;
}

/* "libdlrun-cpu.so" -> "cpu" (malloc'd); NULL if the file name does not match. */
static char *stem_of(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (strncmp(base, "libdlrun-", 9) != 0 || n < 13 || strcmp(base + n - 3, ".so") != 0) return NULL;
    return strndup(base + 9, n - 12);
}

static const size_t required_members[] = {offsetof(dl_backend, destroy),  offsetof(dl_backend, alloc),
                                          offsetof(dl_backend, free),     offsetof(dl_backend, copy),
                                          offsetof(dl_backend, supports), offsetof(dl_backend, prepare),
                                          offsetof(dl_backend, run),      offsetof(dl_backend, release)};
static const char *const required_names[] = {"destroy",  "alloc",   "free", "copy",
                                             "supports", "prepare", "run",  "release"};

/* Checks a table the plugin returned; NULL if usable, else the reason (static text or buf). */
static const char *check_backend(const dl_backend *be, char *buf, size_t len) {
    if (DL_ABI_MAJOR_OF(be->abi_version) != DL_ABI_MAJOR) {
        snprintf(buf, len, "built for plugin ABI %u.%u, this dlrun speaks %u.%u", DL_ABI_MAJOR_OF(be->abi_version),
                 DL_ABI_MINOR_OF(be->abi_version), DL_ABI_MAJOR, DL_ABI_MINOR);
        return buf;
    }
    if (be->struct_size < offsetof(dl_backend, synchronize)) {
        snprintf(buf, len, "backend table of %u bytes is smaller than ABI %u.0 requires", be->struct_size,
                 DL_ABI_MAJOR);
        return buf;
    }
    for (size_t i = 0; i < sizeof required_members / sizeof required_members[0]; i++) {
        void *fn;
        memcpy(&fn, (const char *)be + required_members[i], sizeof fn);
        if (!fn) {
            snprintf(buf, len, "backend table has no '%s' function", required_names[i]);
            return buf;
        }
    }
    if (!be->name || !be->name[0]) return "backend table has no name";
    return NULL;
}

static dl_plugin *push(dl_context *ctx, const char *path) {
    dl_plugin *p = realloc(ctx->plugins, (size_t)(ctx->n_plugins + 1) * sizeof *p);
    if (!p) return NULL;
    ctx->plugins = p;
    p = &ctx->plugins[ctx->n_plugins++];
    memset(p, 0, sizeof *p);
    p->path = xstrdup(path);
    p->name = stem_of(path);
    if (!p->name) p->name = xstrdup(path);
    return p;
}

static void skip(dl_plugin *p, const char *reason) {
    free(p->reason);
    p->reason = xstrdup(reason);
}

/* ---- which build a plugin file is ---- */

typedef struct build_search {
    ElfW(Addr) base; /* the loaded object's load address (its link_map's l_addr) */
    char *id;        /* out: the build ID in hex, or NULL */
} build_search;

/* dl_iterate_phdr's callback: the GNU build ID note among the matching object's PT_NOTE segments */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *data) {
    build_search *b = data;
    (void)size;
    if (info->dlpi_addr != b->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const unsigned char *at = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = at + ph->p_memsz;
        while (at + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(const void *)at;
            const size_t name = (nh->n_namesz + 3u) & ~3u, desc = (nh->n_descsz + 3u) & ~3u;
            const unsigned char *n = at + sizeof *nh, *d = n + name;
            if (name > (size_t)(end - n) || desc > (size_t)(end - d)) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(n, "GNU", 4) == 0 && nh->n_descsz > 0 &&
                nh->n_descsz <= 64 && (b->id = malloc(2 * nh->n_descsz + 1))) {
                for (unsigned j = 0; j < nh->n_descsz; j++) sprintf(b->id + 2 * j, "%02x", d[j]);
                return 1;
            }
            at = d + desc;
        }
    }
    return 1; /* the object was found: stop */
}

/* "id:<hex>" from the build ID note of the loaded file the backend's code lives in (its run
 * member's: the plugin file itself, or the one a loader plugin loaded, as the cudnn plugin's
 * loader does), else "file:<size>-<mtime ns>" of the plugin file */
static char *build_of(void *handle, const char *path, const dl_backend *be) {
    struct link_map *lm = NULL;
    char *s = NULL;
    Dl_info where;
    void *code;
    memcpy(&code, &be->run, sizeof code);
    if (!(dladdr1(code, &where, (void **)&lm, RTLD_DL_LINKMAP) && lm)) lm = NULL;
    if (lm || (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm)) {
        build_search b = {lm->l_addr, NULL};
        dl_iterate_phdr(find_build_id, &b);
        if (b.id && asprintf(&s, "id:%s", b.id) < 0) s = NULL;
        free(b.id);
        if (s) return s;
    }
    struct stat st;
    if (stat(path, &st) == 0 && asprintf(&s, "file:%lld-%lld%09ld", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                                         st.st_mtim.tv_nsec) < 0)
        s = NULL;
    return s;
}

const char *dl_context_build(const dl_context *ctx, const dl_backend *be) {
    for (int i = 0; i < ctx->n_plugins; i++)
        if (ctx->plugins[i].be == be) return ctx->plugins[i].build ? ctx->plugins[i].build : "";
    return "";
}

static void load_one(dl_context *ctx, const char *path) {
    for (int i = 0; i < ctx->n_plugins; i++)
        if (strcmp(ctx->plugins[i].path, path) == 0) return; /* same file via two routes */
    dl_plugin *p = push(ctx, path);
    if (!p) return;
    const char *type;
    if (!dl_is_regular(path, &type)) { /* dlopen would block on a FIFO */
        char why[64];
        snprintf(why, sizeof why, "not a regular file (%s)", type);
        skip(p, why);
        return;
    }
    dlerror();
    p->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        const char *e = dlerror();
        /* dlerror() repeats the path first; keep only the reason after it. */
        const char *colon = e ? strstr(e, ": ") : NULL;
        skip(p, colon ? colon + 2 : (e ? e : "cannot be loaded"));
        return;
    }
    dl_plugin_init_fn init;
    void *sym = dlsym(p->handle, DL_PLUGIN_ENTRY);
    memcpy(&init, &sym, sizeof init);
    if (!init) {
        skip(p, "not a dlrun plugin: no '" DL_PLUGIN_ENTRY "' symbol");
        return;
    }
    dl_error err = {{0}};
    if (!(p->ph = calloc(1, sizeof *p->ph))) {
        skip(p, "out of memory");
        return;
    }
    p->ph->host = ctx->host;
    p->ph->host.ctx = p->ph;
    p->ph->ctx = ctx;
    p->ph->index = (int)(p - ctx->plugins);
    const dl_backend *be = init(&p->ph->host, &err);
    if (!be) {
        skip(p, err.msg[0] ? err.msg : "plugin init failed without a reason");
        return;
    }
    char buf[256];
    const char *why = check_backend(be, buf, sizeof buf);
    if (why) {
        skip(p, why); /* never call into a table we cannot trust, not even destroy */
        return;
    }
    if (has_name(ctx, be->name)) {
        snprintf(buf, sizeof buf, "a backend named '%s' was already loaded from another file", be->name);
        be->destroy(be->self);
        skip(p, buf);
        return;
    }
    free(p->name);
    p->name = xstrdup(be->name);
    p->description = xstrdup(be->description ? be->description : "");
    p->build = build_of(p->handle, path, be);
    p->be = be;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Loads every libdlrun-*.so in a folder, in name order so the result is reproducible. */
static void scan_dir(dl_context *ctx, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *stem = stem_of(e->d_name);
        if (!stem) continue;
        free(stem);
        char **grown = realloc(names, (size_t)(n + 1) * sizeof *names);
        if (!grown) break;
        names = grown;
        if (asprintf(&names[n], "%s/%s", dir, e->d_name) >= 0) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        load_one(ctx, names[i]);
        free(names[i]);
    }
    free(names);
}

static void scan_list(dl_context *ctx, const char *list) {
    if (!list) return;
    char *copy = strdup(list), *save = NULL;
    if (!copy) return;
    for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        if (!*tok) continue;
        struct stat st;
        if (is_dir(tok)) scan_dir(ctx, tok);
        else if (stat(tok, &st) == 0) load_one(ctx, tok); /* missing entries are ignored, as in PATH */
    }
    free(copy);
}

/* What dl_context_plugin() shows of each plugin, once the list is complete */
static void fill_info(dl_context *ctx) {
    for (int i = 0; i < ctx->n_plugins; i++) {
        dl_plugin *p = &ctx->plugins[i];
        p->info.name = p->name;
        p->info.path = p->path;
        p->info.loaded = p->be != NULL;
        p->info.description = p->description;
        p->info.reason = p->reason;
        if (p->be) p->info.device = p->be->device;
        p->info.queue_family = p->be && DL_BACKEND_HAS(p->be, queue_family) && DL_BACKEND_HAS(p->be, event_wait)
                                   ? p->be->queue_family
                                   : NULL;
    }
}

dl_status dl_context_create(const dl_context_options *opt, dl_context **out, dl_error *err) {
    *out = NULL;
    dl_context_options o = {sizeof o, 0, 0, NULL, 0};
    if (opt) memcpy(&o, opt, opt->struct_size < sizeof o ? opt->struct_size : sizeof o);
    dl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return dl_fail(err, DL_E_NOMEM, "out of memory creating the context");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ctx->host.abi_version = DL_ABI_VERSION;
    ctx->host.struct_size = sizeof ctx->host;
    ctx->host.n_threads = o.n_threads > 0 ? o.n_threads : (int32_t)(cores > 0 ? cores : 1);
    ctx->host.device_index = o.device_index;
    ctx->host.log = host_log;
    ctx->host.cache_get = dl_plugin_store_get;
    ctx->host.cache_put = dl_plugin_store_put;
    ctx->store = dl_plugin_store_new();
    scan_list(ctx, o.plugin_path);
    scan_list(ctx, getenv("DLRUN_PLUGIN_PATH"));
    if (!o.no_default_path) {
        char *dir = default_plugin_dir();
        if (dir) scan_dir(ctx, dir);
        free(dir);
    }
    fill_info(ctx);
    *out = ctx;
    return DL_OK;
}

dl_status dl_context_host_twin(const dl_context *ctx, int n_threads, dl_context **out, dl_error *err) {
    *out = NULL;
    dl_context *twin = calloc(1, sizeof *twin);
    if (!twin) return dl_fail(err, DL_E_NOMEM, "out of memory creating a context");
    twin->host = ctx->host;
    twin->host.n_threads = n_threads > 0 ? n_threads : 1;
    twin->store = dl_plugin_store_new();
    for (int i = 0; i < ctx->n_plugins; i++) /* the host's backends, from the files they came from */
        if (ctx->plugins[i].be && ctx->plugins[i].be->device.device_type == DL_DEVICE_CPU)
            load_one(twin, ctx->plugins[i].path);
    for (int i = 0; i < twin->n_plugins; i++) {
        if (twin->plugins[i].be) continue;
        dl_fail(err, DL_E_RUNTIME, "plugin %s loaded once but not again: %s", twin->plugins[i].path,
                twin->plugins[i].reason ? twin->plugins[i].reason : "no reason");
        dl_context_free(twin);
        return DL_E_RUNTIME;
    }
    fill_info(twin);
    *out = twin;
    return DL_OK;
}

void dl_context_free(dl_context *ctx) {
    if (!ctx) return;
    dl_plugin_store_save(ctx); /* what plugins measured since the last session was created */
    for (int i = ctx->n_plugins - 1; i >= 0; i--) {
        dl_plugin *p = &ctx->plugins[i];
        if (p->be) p->be->destroy(p->be->self);
        /* Handles stay open: a plugin's threads (OpenMP, OpenBLAS) may outlive destroy(). */
        free(p->name);
        free(p->path);
        free(p->reason);
        free(p->description);
        free(p->build);
        free(p->ph); /* after destroy: a plugin may use its host table until then */
    }
    dl_plugin_store_free(ctx->store);
    free(ctx->plugins);
    free(ctx);
}

int dl_context_plugin_count(const dl_context *ctx) { return ctx->n_plugins; }

const dl_plugin_info *dl_context_plugin(const dl_context *ctx, int i) {
    return i >= 0 && i < ctx->n_plugins ? &ctx->plugins[i].info : NULL;
}

const dl_backend *dl_context_backend(const dl_context *ctx, const char *name) {
    for (int i = 0; i < ctx->n_plugins; i++)
        if (ctx->plugins[i].be && strcmp(ctx->plugins[i].be->name, name) == 0) return ctx->plugins[i].be;
    return NULL;
}
