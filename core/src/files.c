/* files.c — opening named files without blocking on FIFOs or devices (files.h). */
#define _GNU_SOURCE
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *type_name(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a plain file";
}

dl_status dl_open_regular(const char *path, int *fd, dl_error *err) {
    *fd = -1;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) return dl_fail(err, DL_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return dl_fail(err, DL_E_IO, "%s: cannot read: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return dl_fail(err, DL_E_INVALID, "%s: not a regular file (%s)", path, type_name(sb.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    return DL_OK;
}

dl_status dl_fopen_regular(const char *path, FILE **out, dl_error *err) {
    *out = NULL;
    int fd;
    dl_status st = dl_open_regular(path, &fd, err);
    if (st != DL_OK) return st;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dl_fail(err, DL_E_IO, "%s: cannot open: %s", path, strerror(e));
    }
    *out = f;
    return DL_OK;
}

int dl_is_regular(const char *path, const char **why) {
    struct stat sb;
    *why = "";
    if (stat(path, &sb) != 0) return 1; /* missing: let the caller's own open say why */
    if (S_ISREG(sb.st_mode)) return 1;
    *why = type_name(sb.st_mode);
    return 0;
}

dl_status dl_read_regular(const char *path, size_t max_bytes, const char *what, void **out, size_t *out_len,
                          dl_error *err) {
    *out = NULL;
    *out_len = 0;
    FILE *f;
    dl_status st = dl_fopen_regular(path, &f, err);
    if (st != DL_OK) return st;
    size_t cap = 1 << 16, len = 0, n;
    unsigned char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len < cap) continue;
        if (cap >= max_bytes) {
            free(buf);
            fclose(f);
            return dl_fail(err, DL_E_INVALID, "%s: %s larger than %zu MiB", path, what, max_bytes >> 20);
        }
        unsigned char *grown = realloc(buf, cap *= 2);
        if (!grown) free(buf);
        buf = grown;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return dl_fail(err, DL_E_NOMEM, "out of memory");
    if (bad) {
        free(buf);
        return dl_fail(err, DL_E_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    *out = buf;
    *out_len = len;
    return DL_OK;
}
