/* safetensors.h — read-only access to a .safetensors file through a memory mapping. */
#ifndef DLRUN_SAFETENSORS_H
#define DLRUN_SAFETENSORS_H
#include "graph.h"

typedef struct dl_st_tensor {
    char *name;
    char dtype[8]; /* as stored: "F32", "F16", "BF16", "I64", ... */
    int32_t ndim;
    int64_t shape[DL_MAX_DIMS];
    const void *data; /* inside the mapping */
    size_t nbytes;
} dl_st_tensor;

typedef struct dl_safetensors {
    char *path;
    void *map;
    size_t map_len;
    dl_st_tensor *tensors;
    int n_tensors;
    dl_names index; /* tensor name -> index in tensors */
} dl_safetensors;

/* Map and validate the whole file: header length, JSON, dtypes, shapes, offsets inside the data
 * section, no overlaps, sizes matching shape x dtype, no name twice. Errors name the file and the
 * tensor. Time near-linear in the number of tensors (names hashed, overlaps found after a sort). */
dl_status dl_safetensors_open(const char *path, dl_safetensors **out, dl_error *err);
/* The tensor of that name, or NULL (a hash look-up). */
const dl_st_tensor *dl_safetensors_find(const dl_safetensors *st, const char *name);
void dl_safetensors_close(dl_safetensors *st);

/* Write f32 tensors to a safetensors file (tests, tools). */
dl_status dl_safetensors_write_f32(const char *path, int n, const char *const *names, const float *const *data,
                                   const int *ndims, const int64_t *const *shapes, dl_error *err);
#endif
