/* fuzz_npy.c — libFuzzer harness for the .npy reader (core/src/npy.c): the input is a .npy file,
 * read both as f32 (dl_npy_read: f4, f8, f2, i4, i8, u1 converted) and as int64 token ids
 * (dl_npy_read_int64), the two ways the CLI reads --input files. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "npy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    return 0;
}

static double product(const int64_t *shape, int ndim) {
    double n = 1;
    for (int i = 0; i < ndim; i++) n *= (double)shape[i];
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file(data, size);
    if (!path) return 0;
    int64_t shape[DL_MAX_DIMS];
    int ndim = 0;
    dl_error err;
    float *f = NULL;
    volatile double sink = 0; /* every element read: ASan checks the buffer holds the shape */
    if (dl_npy_read(path, &f, shape, &ndim, &err) == DL_OK)
        for (size_t i = 0; i < (size_t)product(shape, ndim); i++) sink += f[i];
    free(f);
    int64_t *q = NULL;
    if (dl_npy_read_int64(path, &q, shape, &ndim, &err) == DL_OK)
        for (size_t i = 0; i < (size_t)product(shape, ndim); i++) sink += (double)q[i];
    free(q);
    (void)sink;
    return 0;
}
