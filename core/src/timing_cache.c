/* timing_cache.c — see timing_cache.h. The file is JSON:
 *   {"format": "dlrun-timing-cache", "version": 1, "entries": {"<key>": <milliseconds>, ...}}
 * Anything else is corrupt or foreign, and is rebuilt rather than trusted. */
#define _GNU_SOURCE
#include "timing_cache.h"

#include "files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT "dlrun-timing-cache"
#define VERSION 1

struct dl_tcache {
    char *path;
    cJSON *entries; /* object: key -> number */
    int dirty;
};

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
    dl_error open_err;
    if (dl_fopen_regular(path, &f, &open_err) != DL_OK) {
        if (access(path, F_OK) == 0) *why = "not a regular file";
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
    for (const cJSON *e = entries->child; e; e = e->next)
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || !isfinite(e->valuedouble))
            return cJSON_Delete(root), *why = "an entry is not a time", NULL;
    cJSON *out = cJSON_DetachItemFromObjectCaseSensitive(root, "entries");
    cJSON_Delete(root);
    return out;
}

dl_tcache *dl_tcache_open(int retune, char *warning, size_t wlen) {
    if (wlen) warning[0] = 0;
    dl_tcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->path = cache_path();
    const char *why = "";
    if (c->path && !retune) c->entries = load(c->path, &why);
    if (!c->entries) {
        c->entries = cJSON_CreateObject();
        if (*why) {
            snprintf(warning, wlen, "timing cache %s is unusable (%s); rebuilding it", c->path, why);
            c->dirty = 1; /* rewrite it even if nothing new is timed */
        }
    }
    return c;
}

int dl_tcache_get(const dl_tcache *c, const char *key, double *ms) {
    const cJSON *e = c ? cJSON_GetObjectItemCaseSensitive(c->entries, key) : NULL;
    if (!cJSON_IsNumber(e)) return 0;
    *ms = e->valuedouble;
    return 1;
}

void dl_tcache_put(dl_tcache *c, const char *key, double ms) {
    if (!c) return;
    cJSON_DeleteItemFromObjectCaseSensitive(c->entries, key);
    cJSON_AddNumberToObject(c->entries, key, ms);
    c->dirty = 1;
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
    cJSON *disk = load(c->path, &why); /* keep what other processes added meanwhile */
    for (cJSON *e = disk ? disk->child : NULL; e; e = e->next)
        if (!cJSON_GetObjectItemCaseSensitive(c->entries, e->string))
            cJSON_AddNumberToObject(c->entries, e->string, e->valuedouble);
    cJSON_Delete(disk);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", FORMAT);
    cJSON_AddNumberToObject(root, "version", VERSION);
    cJSON_AddItemReferenceToObject(root, "entries", c->entries);
    char *text = cJSON_Print(root);
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
        ok = ok && rename(tmp, c->path) == 0;
        if (!ok) unlink(tmp);
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
    cJSON_Delete(c->entries);
    free(c->path);
    free(c);
}

const char *dl_tcache_path(const dl_tcache *c) { return c ? c->path : NULL; }
