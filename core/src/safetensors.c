/* safetensors.c — maps a .safetensors file read-only and validates its header completely before
 * any tensor is used: lengths, JSON, dtypes, shapes, offsets, sizes, overlaps, duplicate names.
 * Near-linear in the number of tensors: a header may list 10^5 of them. */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include "files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20)

static const struct {
    const char *name;
    int size;
} dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
              {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1}};

static int dtype_size(const char *s) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, s)) return dtypes[i].size;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const dl_st_tensor *x = a, *y = b;
    const char *px = x->data, *py = y->data;
    if (px != py) return (px > py) - (px < py);
    return strcmp(x->name, y->name); /* names are unique: a fixed order, so a fixed message */
}

static int whole(const cJSON *n, double max, uint64_t *out) {
    if (!cJSON_IsNumber(n)) return 0;
    double v = n->valuedouble;
    if (!(v >= 0) || v > max || floor(v) != v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static dl_status parse_entry(dl_safetensors *st, const cJSON *e, const unsigned char *data, uint64_t data_len,
                             dl_st_tensor *t, dl_error *err) {
    const char *p = st->path, *name = e->string;
    if (!cJSON_IsObject(e)) return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': entry is not an object", p, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': missing or non-string 'dtype'", p, name);
    int esize = dtype_size(dt->valuestring);
    if (!esize) return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': unknown dtype '%.16s'", p, name, dt->valuestring);
    if (!cJSON_IsArray(sh)) return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': missing or non-list 'shape'", p, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > DL_MAX_DIMS)
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': %d dimensions, at most %d supported", p, name, nd,
                       DL_MAX_DIMS);
    double numel = 1;
    uint64_t count = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!whole(cJSON_GetArrayItem(sh, i), 9007199254740992.0, &d))
            return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': shape entries must be non-negative integers", p, name);
        t->shape[i] = (int64_t)d;
        numel *= (double)d;
        count *= d;
    }
    t->ndim = nd;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': 'data_offsets' must be [begin, end]", p, name);
    uint64_t b, en;
    if (!whole(cJSON_GetArrayItem(off, 0), 9007199254740992.0, &b) ||
        !whole(cJSON_GetArrayItem(off, 1), 9007199254740992.0, &en))
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': data_offsets must be non-negative integers", p, name);
    if (b > en)
        return dl_fail(err, DL_E_INVALID, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p, name,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return dl_fail(
            err, DL_E_INVALID,
            "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes; truncated file?)", p,
            name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_len);
    char shs[160];
    dl_shape_str(t->shape, nd, shs, sizeof shs);
    if (numel * esize > 9e18 || count * (uint64_t)esize != en - b)
        return dl_fail(err, DL_E_INVALID,
                       "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape %s of %s needs %.0f", p,
                       name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b), shs,
                       dt->valuestring, numel * esize);
    if (!(t->name = strdup(name))) return dl_fail(err, DL_E_NOMEM, "out of memory");
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    t->data = data + b;
    t->nbytes = (size_t)(en - b);
    return DL_OK;
}

static dl_status parse_header(dl_safetensors *st, const char *text, size_t n, const unsigned char *data,
                              uint64_t data_len, dl_error *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root)
        return dl_fail(err, DL_E_INVALID, "%s: header is not valid JSON (near byte %ld)", st->path,
                       end ? (long)(end - text) + 8 : 8L);
    dl_status rc = DL_OK;
    if (!cJSON_IsObject(root)) rc = dl_fail(err, DL_E_INVALID, "%s: header is not a JSON object", st->path);
    int count = rc == DL_OK ? cJSON_GetArraySize(root) : 0;
    if (rc == DL_OK && !(st->tensors = calloc((size_t)count + 1, sizeof *st->tensors)))
        rc = dl_fail(err, DL_E_NOMEM, "out of memory");
    for (const cJSON *e = rc == DL_OK ? root->child : NULL; e && rc == DL_OK; e = e->next) {
        if (!e->string) continue;
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) rc = dl_fail(err, DL_E_INVALID, "%s: __metadata__ is not an object", st->path);
            continue;
        }
        if (dl_names_find(&st->index, e->string) >= 0)
            rc = dl_fail(err, DL_E_INVALID, "%s: tensor '%s' appears twice in the header", st->path, e->string);
        if (rc == DL_OK) rc = parse_entry(st, e, data, data_len, &st->tensors[st->n_tensors], err);
        if (rc == DL_OK) st->n_tensors++;
        if (rc == DL_OK && dl_names_add(&st->index, st->tensors[st->n_tensors - 1].name, st->n_tensors - 1) < 0)
            rc = dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    cJSON_Delete(root);
    if (rc != DL_OK || st->n_tensors < 2) return rc;
    /* Overlap check on a copy sorted by start: each non-empty tensor against the furthest end of
     * those before it (not only its predecessor, which may be empty or end sooner). Empty tensors
     * hold no byte, so they overlap nothing. */
    dl_st_tensor *sorted = malloc((size_t)st->n_tensors * sizeof *sorted);
    if (!sorted) return dl_fail(err, DL_E_NOMEM, "out of memory");
    memcpy(sorted, st->tensors, (size_t)st->n_tensors * sizeof *sorted);
    qsort(sorted, (size_t)st->n_tensors, sizeof *sorted, cmp_begin);
    const dl_st_tensor *furthest = NULL; /* the tensor, so far, whose bytes end last */
    for (int i = 0; i < st->n_tensors && rc == DL_OK; i++) {
        const dl_st_tensor *t = &sorted[i];
        if (!t->nbytes) continue;
        if (furthest && (const char *)t->data < (const char *)furthest->data + furthest->nbytes)
            rc = dl_fail(err, DL_E_INVALID, "%s: tensors '%s' and '%s' overlap in the data section", st->path,
                         furthest->name, t->name);
        if (!furthest || (const char *)t->data + t->nbytes > (const char *)furthest->data + furthest->nbytes)
            furthest = t;
    }
    free(sorted);
    return rc;
}

dl_status dl_safetensors_open(const char *path, dl_safetensors **out, dl_error *err) {
    *out = NULL;
    dl_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    int fd;
    struct stat sb;
    dl_status rc = dl_open_regular(path, &fd, err);
    if (rc == DL_OK && fstat(fd, &sb) != 0) rc = dl_fail(err, DL_E_IO, "%s: cannot read: %s", path, strerror(errno));
    else if (rc == DL_OK && sb.st_size < 8)
        rc = dl_fail(err, DL_E_INVALID, "%s: %lld bytes is too short for a safetensors file", path,
                     (long long)sb.st_size);
    if (rc == DL_OK) {
        st->map_len = (size_t)sb.st_size;
        st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (st->map == MAP_FAILED) {
            st->map = NULL;
            rc = dl_fail(err, DL_E_IO, "%s: cannot map: %s", path, strerror(errno));
        }
    }
    if (fd >= 0) close(fd);
    if (rc == DL_OK) {
        const unsigned char *b = st->map;
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
        if (n > MAX_HEADER || n > st->map_len - 8)
            rc = dl_fail(err, DL_E_INVALID, "%s: header length %llu exceeds the file (%zu bytes) or the 100 MB limit",
                         path, (unsigned long long)n, st->map_len);
        else rc = parse_header(st, (const char *)b + 8, (size_t)n, b + 8 + n, st->map_len - 8 - n, err);
    }
    if (rc != DL_OK) {
        dl_safetensors_close(st);
        return rc;
    }
    *out = st;
    return DL_OK;
}

const dl_st_tensor *dl_safetensors_find(const dl_safetensors *st, const char *name) {
    int i = dl_names_find(&st->index, name);
    return i >= 0 ? &st->tensors[i] : NULL;
}

void dl_safetensors_close(dl_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    dl_names_free(&st->index);
    if (st->map) munmap(st->map, st->map_len);
    free(st->path);
    free(st);
}

dl_status dl_safetensors_write_f32(const char *path, int n, const char *const *names, const float *const *data,
                                   const int *ndims, const int64_t *const *shapes, dl_error *err) {
    cJSON *root = cJSON_CreateObject();
    uint64_t off = 0;
    for (int i = 0; i < n && root; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        uint64_t count = 1;
        for (int d = 0; d < ndims[i]; d++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shapes[i][d]));
            count *= (uint64_t)shapes[i][d];
        }
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += count * 4;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return dl_fail(err, DL_E_NOMEM, "out of memory");
    size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8;
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(text);
        return dl_fail(err, DL_E_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    unsigned char hdr[8];
    for (int i = 0; i < 8; i++) hdr[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(hdr, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        uint64_t count = 1;
        for (int d = 0; d < ndims[i]; d++) count *= (uint64_t)shapes[i][d];
        ok = fwrite(data[i], 4, count, f) == count;
    }
    free(text);
    if (fclose(f) != 0 || !ok) return dl_fail(err, DL_E_IO, "%s: write failed", path);
    return DL_OK;
}
