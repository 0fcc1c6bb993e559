/* files.c — opening named files without blocking on FIFOs or devices (files.h). */
#define _GNU_SOURCE
#include "files.h"

#include <errno.h>
#include <fcntl.h>
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
