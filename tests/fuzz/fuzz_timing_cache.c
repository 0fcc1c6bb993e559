/* fuzz_timing_cache.c — libFuzzer harness for the timing cache reader (core/src/timing_cache.c):
 * the input is the cache file ($XDG_CACHE_HOME/dlrun/timing-cache.json, in the private folder of
 * fz_cache_file). Each input is opened as a session opens it (a corrupt or foreign file must start
 * an empty cache with a warning), looked up, extended, and saved, which reads the file again to
 * merge what is on disk before replacing it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "timing_cache.h"

static const char *file;
/* A key as placement writes one (placement.c, key_of) */
#define KEY "op=relu;k=0x0;s=1x1;p=0,0,0,0;d=1x1;g=1;ceil=0;cip=1;axis=0;eps=0;act=0;in=[1, 8]f32;out=[1, 8]f32"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    if (!(file = fz_cache_file())) {
        fprintf(stderr, "fuzz_timing_cache: cannot make a private cache folder\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(file, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0 || !ok) return 0;
    char warn[600];
    dl_tcache *c = dl_tcache_open(0, warn, sizeof warn);
    if (!c) return 0;
    double ms;
    (void)dl_tcache_get(c, KEY, &ms);
    (void)dl_tcache_get(c, "", &ms);
    dl_tcache_put(c, KEY, 1.5);
    (void)dl_tcache_save(c, warn, sizeof warn);
    dl_tcache_free(c);
    return 0;
}
