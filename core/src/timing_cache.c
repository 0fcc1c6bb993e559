/* timing_cache.c — see timing_cache.h. The file is JSON:
 *   {"format": "dlrun-timing-cache", "version": 1, "entries": {"<key>": <milliseconds>, ...}}
 * Anything else is corrupt or foreign, and is rebuilt rather than trusted. A key that appears
 * twice in "entries" makes the file unusable too (which time would be right?): dlrun never
 * writes one, so the file was edited or damaged. In memory each key is stored once (put replaces
 * its time), in arrays with a hash index, so a cache of any size costs constant time per look-up. */
#define _GNU_SOURCE
#include "timing_cache.h"

#include "files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "names.h"

#define FORMAT "dlrun-timing-cache"
#define VERSION 1

struct dl_tcache {
    char *path;
    char **keys; /* n entries, in the order they were read or put */
    double *ms;
    int n, cap;
    dl_names index; /* key -> entry */
    int dirty;
};

/* Entry i := (key, ms), a new one if key is new; 0 when out of memory. */
static int store(dl_tcache *c, const char *key, double ms) {
    int i = dl_names_find(&c->index, key);
    if (i >= 0) return c->ms[i] = ms, 1;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        char **k = realloc(c->keys, (size_t)cap * sizeof *k);
        if (k) c->keys = k;
        double *m = k ? realloc(c->ms, (size_t)cap * sizeof *m) : NULL;
        if (!m) return 0;
        c->ms = m, c->cap = cap;
    }
    char *copy = strdup(key);
    if (!copy) return 0;
    if (dl_names_add(&c->index, copy, c->n) < 0) return free(copy), 0;
    c->keys[c->n] = copy;
    c->ms[c->n++] = ms;
    return 1;
}

static char *cache_path(void) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *p = NULL;
    if (xdg && *xdg) {
        if (asprintf(&p, "%s/dlrun/timing-cache.json", xdg) < 0) p = NULL;
    } else if (home && *home) {
        if (asprintf(&p, "%s/.cache/dlrun/timing-cache.json", home) < 0) p = NULL;
    }
    return p;
}

/* Reads and validates the file; NULL with *why when it is missing (why "") or unusable. */
static cJSON *load(const char *path, const char **why) {
    *why = "";
    FILE *f;
    dl_error open_err; /* a file that cannot be opened is a missing cache; a FIFO is unusable */
    dl_status opened = dl_fopen_regular(path, &f, &open_err);
    if (opened != DL_OK) {
        if (opened == DL_E_INVALID) *why = "not a regular file";
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[65536];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *g = realloc(buf, cap);
            if (!g) break;
            buf = g;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf) return *why = "it is empty", NULL;
    buf[len] = 0;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root || !cJSON_IsObject(root)) return cJSON_Delete(root), *why = "it is not JSON", NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0)
        return cJSON_Delete(root), *why = "it is not a dlrun timing cache", NULL;
    if (!cJSON_IsNumber(ver) || ver->valueint != VERSION)
        return cJSON_Delete(root), *why = "it was written by another version of dlrun", NULL;
    if (!cJSON_IsObject(entries)) return cJSON_Delete(root), *why = "its entries are not an object", NULL;
    dl_names seen = {0};
    for (const cJSON *e = entries->child; e && !**why; e = e->next) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || !isfinite(e->valuedouble)) *why = "an entry is not a time";
        else if (!e->string) *why = "an entry has no key";
        else {
            int added = dl_names_add(&seen, e->string, 0);
            if (added == 0) *why = "a key appears twice";
            else if (added < 0) *why = "out of memory reading it";
        }
    }
    dl_names_free(&seen);
    if (**why) return cJSON_Delete(root), NULL;
    cJSON *out = cJSON_DetachItemFromObjectCaseSensitive(root, "entries");
    cJSON_Delete(root);
    return out;
}

/* The file as this process last read or wrote it, and the identity (device, inode, size,
 * modification time) it had then. A process opens the cache once per stage that uses it
 * (placement, auto's runs of both layouts, the micro-batch choice, the plugins' store; five for
 * ResNet-50 at batch 8, two for SqueezeNet at batch 1), and parsing the file each time cost 22 ms
 * for its 6779 entries (2.7 MB) on the 2-core VM: while the file is unchanged, its entries come from
 * here (copied into each open cache with its index: 11 ms there). A file renamed over it by another
 * process has another inode: it is read again. */
static struct {
    pthread_mutex_t lock;
    int valid;
    char *path;
    struct stat id;
    char **keys;
    double *ms;
    int n;
} memo = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, {0}, NULL, NULL, 0};

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void memo_clear(void) {
    for (int i = 0; i < memo.n; i++) free(memo.keys[i]);
    free(memo.keys), free(memo.ms), free(memo.path);
    memo.keys = NULL, memo.ms = NULL, memo.path = NULL, memo.n = 0, memo.valid = 0;
}

/* memo := empty, for n entries of the file at path with identity id, not valid until all are added
 * (memo locked); 0 when out of memory. */
static int memo_begin(const char *path, const struct stat *id, int n) {
    memo_clear();
    memo.path = strdup(path);
    memo.keys = calloc((size_t)n + 1, sizeof *memo.keys);
    memo.ms = malloc(((size_t)n + 1) * sizeof *memo.ms);
    memo.id = *id;
    return memo.path && memo.keys && memo.ms;
}

/* Appends an entry (a copy of key) after memo_begin's room; 0 when out of memory. */
static int memo_add(const char *key, double ms) {
    if (!(memo.keys[memo.n] = strdup(key))) return 0;
    memo.ms[memo.n++] = ms;
    return 1;
}

/* Stores the file's entries into c (what it lacks only, where `only_new`): from the memo while the
 * file is unchanged, else parsed into it first. *why: "" or why the file is unusable. */
static void read_into(dl_tcache *c, int only_new, const char **why) {
    *why = "";
    struct stat id;
    if (stat(c->path, &id) != 0) return; /* missing: an empty cache */
    pthread_mutex_lock(&memo.lock);
    if (!(memo.valid && !strcmp(memo.path, c->path) && same_file(&memo.id, &id))) {
        cJSON *entries = load(c->path, why);
        int n = 0;
        for (const cJSON *e = entries ? entries->child : NULL; e; e = e->next) n++;
        int ok = entries && memo_begin(c->path, &id, n);
        for (const cJSON *e = ok ? entries->child : NULL; e && ok; e = e->next)
            ok = memo_add(e->string, e->valuedouble);
        memo.valid = ok;
        cJSON_Delete(entries);
    }
    for (int i = 0; i < memo.n; i++) /* out of memory, a part only: what is missing is timed */
        if ((!only_new || dl_names_find(&c->index, memo.keys[i]) < 0) && !store(c, memo.keys[i], memo.ms[i])) break;
    if (!memo.valid) memo_clear();
    pthread_mutex_unlock(&memo.lock);
}

dl_tcache *dl_tcache_open(int retune, char *warning, size_t wlen) {
    if (wlen) warning[0] = 0;
    dl_tcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->path = cache_path();
    const char *why = "";
    if (c->path && !retune) read_into(c, 0, &why);
    if (*why) {
        snprintf(warning, wlen, "timing cache %s is unusable (%s); rebuilding it", c->path, why);
        c->dirty = 1; /* rewrite it even if nothing new is timed */
    }
    return c;
}

int dl_tcache_get(const dl_tcache *c, const char *key, double *ms) {
    int i = c ? dl_names_find(&c->index, key) : -1;
    if (i < 0) return 0;
    *ms = c->ms[i];
    return 1;
}

void dl_tcache_put(dl_tcache *c, const char *key, double ms) {
    if (!c) return;
    if (store(c, key, ms)) c->dirty = 1;
}

static int mkdirs(const char *file) {
    char *d = strdup(file);
    if (!d) return -1;
    for (char *p = d + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(d, 0755) != 0 && errno != EEXIST) {
            free(d);
            return -1;
        }
        *p = '/';
    }
    free(d);
    return 0;
}

int dl_tcache_save(dl_tcache *c, char *warning, size_t wlen) {
    if (wlen) warning[0] = 0;
    if (!c || !c->path || !c->dirty) return 1;
    const char *why;
    read_into(c, 1, &why); /* keep what other processes added meanwhile */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", FORMAT);
    cJSON_AddNumberToObject(root, "version", VERSION);
    cJSON *entries = cJSON_AddObjectToObject(root, "entries");
    int built = entries != NULL;
    for (int i = 0; built && i < c->n; i++) built = cJSON_AddNumberToObject(entries, c->keys[i], c->ms[i]) != NULL;
    char *text = built ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    char *tmp = NULL;
    int ok = text && mkdirs(c->path) == 0 && asprintf(&tmp, "%s.XXXXXX", c->path) > 0;
    int fd = ok ? mkstemp(tmp) : -1;
    if (fd >= 0) {
        size_t len = strlen(text), off = 0;
        while (off < len) {
            ssize_t w = write(fd, text + off, len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        ok = off == len && fsync(fd) == 0;
        ok = close(fd) == 0 && ok;
        struct stat id;
        ok = ok && stat(tmp, &id) == 0 && rename(tmp, c->path) == 0;
        if (!ok) unlink(tmp);
        pthread_mutex_lock(&memo.lock); /* what the file now holds, read back by the next open for free */
        int kept = ok && memo_begin(c->path, &id, c->n);
        for (int i = 0; i < c->n && kept; i++) kept = memo_add(c->keys[i], c->ms[i]);
        if (!(memo.valid = kept)) memo_clear();
        pthread_mutex_unlock(&memo.lock);
    } else {
        ok = 0;
    }
    if (!ok) snprintf(warning, wlen, "cannot write timing cache %s: %s", c->path, strerror(errno));
    else c->dirty = 0;
    free(text);
    free(tmp);
    return ok;
}

void dl_tcache_free(dl_tcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->keys[i]);
    free(c->keys);
    free(c->ms);
    dl_names_free(&c->index);
    free(c->path);
    free(c);
}

const char *dl_tcache_path(const dl_tcache *c) { return c ? c->path : NULL; }
