/* files.h — opening the files a user names (model, weights, inputs, timing cache) for reading
 * without ever blocking: a FIFO, a device or a directory is refused in one line before any read. */
#ifndef DLRUN_FILES_H
#define DLRUN_FILES_H

#include <stdio.h>

#include "dlrun/plugin.h"

/* Opens path read-only into *fd if it is a regular file. A missing or unreadable file is
 * DL_E_IO ("path: cannot open: reason"); anything else that is not a regular file (a FIFO, a
 * socket, a device, a directory) is DL_E_INVALID ("path: not a regular file (a FIFO)"). The
 * open itself never blocks: it is made with O_NONBLOCK, which is cleared once the type is known. */
dl_status dl_open_regular(const char *path, int *fd, dl_error *err);
/* The same as a stdio stream ("rb"). */
dl_status dl_fopen_regular(const char *path, FILE **f, dl_error *err);
/* Reads the whole regular file at path into *buf (malloc'd; free it) and its size into *len.
 * A file larger than max_bytes is DL_E_INVALID ("path: <what> larger than N MiB"), found
 * while reading (never trusting a size the file system reports); errors as dl_fopen_regular. */
dl_status dl_read_regular(const char *path, size_t max_bytes, const char *what, void **buf, size_t *len, dl_error *err);
/* For paths handed to other libraries (dlopen): 1 if path is a regular file, else 0 with *why
 * ("a FIFO", "a directory", ...); stat() does not block on a FIFO. */
int dl_is_regular(const char *path, const char **why);
#endif
