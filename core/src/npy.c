/* npy.c — NumPy .npy files (format versions 1-3): read f4/f8/f2/i4/i8/u1 little-endian C-order
 * arrays into f32, write f32. Headers are parsed strictly; nothing in them is trusted. */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"

/* Value text after 'key': in a header dict, or NULL. */
static const char *dict_value(const char *hdr, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static dl_status parse_header(const char *path, const char *hdr, char descr[8], int *fortran, int64_t *shape, int *ndim,
                              dl_error *err) {
    const char *p = hdr;
    while (*p == ' ') p++;
    if (*p != '{') return dl_fail(err, DL_E_INVALID, "%s: .npy header is not a dict", path);
    const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"), *s = dict_value(hdr, "shape");
    if (!d || !f || !s) return dl_fail(err, DL_E_INVALID, "%s: .npy header lacks descr, fortran_order or shape", path);
    if (*d != '\'' || !strchr(d + 1, '\'') || strchr(d + 1, '\'') - d - 1 >= 8)
        return dl_fail(err, DL_E_INVALID, "%s: .npy header has an unsupported descr", path);
    size_t dl = (size_t)(strchr(d + 1, '\'') - d - 1);
    memcpy(descr, d + 1, dl);
    descr[dl] = 0;
    if (!strncmp(f, "True", 4)) *fortran = 1;
    else if (!strncmp(f, "False", 5)) *fortran = 0;
    else return dl_fail(err, DL_E_INVALID, "%s: .npy fortran_order must be True or False", path);
    if (*s != '(') return dl_fail(err, DL_E_INVALID, "%s: .npy shape is not a tuple", path);
    s++;
    *ndim = 0;
    for (;;) {
        while (*s == ' ') s++;
        if (*s == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 0) return dl_fail(err, DL_E_INVALID, "%s: .npy shape has a bad dimension", path);
        if (*ndim == DL_MAX_DIMS)
            return dl_fail(err, DL_E_INVALID, "%s: .npy array has more than %d dimensions", path, DL_MAX_DIMS);
        shape[(*ndim)++] = v;
        s = end;
        while (*s == ' ') s++;
        if (*s == ',') s++;
        else if (*s != ')') return dl_fail(err, DL_E_INVALID, "%s: .npy shape is malformed", path);
    }
    return DL_OK;
}

/* Element i of a block of little-endian integers of esize bytes (i8, i4; 1: u1), as int64: exact. */
static int64_t int_at(const unsigned char *b, int esize, size_t i) {
    if (esize == 8) {
        int64_t v;
        memcpy(&v, b + 8 * i, 8);
        return v;
    }
    if (esize == 4) {
        int32_t v;
        memcpy(&v, b + 4 * i, 4);
        return v;
    }
    return b[i];
}

/* n elements of a block at b as f32: descr's kind ('f' float, 'i'/'u' integer) and esize bytes. */
static void convert_f32(float *o, const unsigned char *b, char kind, int esize, size_t n) {
    if (kind == 'f' && esize == 4) {
        memcpy(o, b, 4 * n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (kind != 'f') o[i] = (float)int_at(b, esize, i);
        else if (esize == 8) {
            double v;
            memcpy(&v, b + 8 * i, 8);
            o[i] = (float)v;
        } else {
            uint16_t v;
            memcpy(&v, b + 2 * i, 2);
            o[i] = dl_f16_to_f32(v);
        }
    }
}

/* Reads a .npy as f32 (from f32, f64, f16, i32, i64, u8), or with as_int as int64 (from i64, i32,
 * u8: integers only, exact). */
static dl_status read_npy(const char *path, int as_int, void **data, int64_t *shape, int *ndim, dl_error *err) {
    *data = NULL;
    FILE *f;
    dl_status rc = dl_fopen_regular(path, &f, err);
    if (rc != DL_OK) return rc;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) sb.st_size = 0;
    unsigned char pre[12];
    char *hdr = NULL;
    void *raw = NULL;
    size_t got = fread(pre, 1, 10, f);
    uint32_t hlen = 0;
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        rc = dl_fail(err, DL_E_INVALID, "%s: not a .npy file (bad magic)", path);
    else if (pre[6] < 1 || pre[6] > 3)
        rc = dl_fail(err, DL_E_INVALID, "%s: .npy format version %d is not supported", path, pre[6]);
    else if (pre[6] == 1) hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    else if (fread(pre + 10, 1, 2, f) != 2) rc = dl_fail(err, DL_E_INVALID, "%s: truncated .npy header", path);
    else hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    if (rc == DL_OK && hlen > (1u << 20))
        rc = dl_fail(err, DL_E_INVALID, "%s: .npy header of %u bytes is implausible", path, hlen);
    if (rc == DL_OK && !(hdr = calloc(hlen + 1, 1))) rc = dl_fail(err, DL_E_NOMEM, "out of memory");
    if (rc == DL_OK && fread(hdr, 1, hlen, f) != hlen)
        rc = dl_fail(err, DL_E_INVALID, "%s: truncated .npy header", path);
    char descr[8];
    int fortran = 0;
    if (rc == DL_OK) rc = parse_header(path, hdr, descr, &fortran, shape, ndim, err);
    if (rc == DL_OK && fortran)
        rc = dl_fail(err, DL_E_INVALID,
                     "%s: Fortran-order arrays are not supported (save with numpy.ascontiguousarray)", path);
    int esize = 0;
    if (rc == DL_OK) {
        if (!strcmp(descr, "<f4") || !strcmp(descr, "<i4")) esize = 4;
        else if (!strcmp(descr, "<f8") || !strcmp(descr, "<i8")) esize = 8;
        else if (!strcmp(descr, "<f2")) esize = 2;
        else if (!strcmp(descr, "|u1")) esize = 1;
        else rc = dl_fail(err, DL_E_INVALID, "%s: dtype '%s' is not supported (use float32)", path, descr);
        if (rc == DL_OK && as_int && descr[1] != 'i' && descr[1] != 'u')
            rc = dl_fail(err, DL_E_INVALID, "%s: dtype '%s' where the input is int64 (use numpy.int64)", path, descr);
    }
    const size_t osize = as_int ? sizeof(int64_t) : sizeof(float);
    /* The declared size is checked against the limit and the file's length before any allocation. */
    int64_t count = 1;
    if (rc == DL_OK && !dl_dims_numel(shape, *ndim, &count))
        rc = dl_fail(err, DL_E_INVALID, "%s: .npy shape holds more than the %lld elements a tensor may have", path,
                     (long long)DL_MAX_TENSOR_ELEMENTS);
    long header_end = rc == DL_OK ? ftell(f) : 0;
    if (rc == DL_OK && (int64_t)sb.st_size - header_end < count * esize)
        rc = dl_fail(err, DL_E_INVALID, "%s: data is shorter than its shape needs (%lld bytes, the file has %lld)",
                     path, (long long)(count * esize), (long long)((int64_t)sb.st_size - header_end));
    /* Read and converted a block at a time: the only full-size buffer is the result. */
    enum { BLOCK = 1 << 16 };
    if (rc == DL_OK && (!(raw = malloc((size_t)BLOCK * (size_t)esize)) || !(*data = malloc((size_t)count * osize + 1))))
        rc = dl_fail(err, DL_E_NOMEM, "%s: out of memory for %lld elements", path, (long long)count);
    for (int64_t at = 0; rc == DL_OK && at < count; at += BLOCK) {
        size_t n = (size_t)(count - at < BLOCK ? count - at : BLOCK);
        if (fread(raw, (size_t)esize, n, f) != n) {
            rc = dl_fail(err, DL_E_INVALID, "%s: data is shorter than its shape needs (truncated file?)", path);
            break;
        }
        if (as_int)
            for (size_t i = 0; i < n; i++) ((int64_t *)*data)[at + (int64_t)i] = int_at(raw, esize, i);
        else convert_f32((float *)*data + at, raw, descr[1], esize, n);
    }
    fclose(f);
    free(hdr);
    free(raw);
    if (rc != DL_OK) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

dl_status dl_npy_write(const char *path, const float *data, const int64_t *shape, int ndim, dl_error *err) {
    char dict[512];
    size_t u = (size_t)snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        u += (size_t)snprintf(dict + u, sizeof dict - u, "%lld%s", (long long)shape[i],
                              ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        count *= (uint64_t)shape[i];
    }
    u += (size_t)snprintf(dict + u, sizeof dict - u, "), }");
    size_t total = (10 + u + 1 + 63) / 64 * 64; /* magic+len+dict+newline, padded to 64 */
    size_t hlen = total - 10;
    FILE *f = fopen(path, "wb");
    if (!f) return dl_fail(err, DL_E_IO, "%s: cannot create: %s", path, strerror(errno));
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, u, f) == u;
    for (size_t i = u; ok && i < hlen - 1; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, 4, count, f) == count;
    if (fclose(f) != 0 || !ok) return dl_fail(err, DL_E_IO, "%s: write failed", path);
    return DL_OK;
}

dl_status dl_npy_read(const char *path, float **data, int64_t *shape, int *ndim, dl_error *err) {
    void *d = NULL;
    dl_status st = read_npy(path, 0, &d, shape, ndim, err);
    *data = d;
    return st;
}

dl_status dl_npy_read_int64(const char *path, int64_t **data, int64_t *shape, int *ndim, dl_error *err) {
    void *d = NULL;
    dl_status st = read_npy(path, 1, &d, shape, ndim, err);
    *data = d;
    return st;
}
