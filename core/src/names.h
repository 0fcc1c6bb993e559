/* names.h — a map from strings to ints (open addressing), so that looking a name up stays
 * constant-time however many names a model, weights file or timing cache holds: value names in
 * the graph, tensor names in a safetensors header, YAML anchors, timing-cache keys.
 *
 * The map does not copy its keys: each must stay valid, unchanged, as long as the map. The hash
 * (FNV-1a, then a 64-bit mixer) is not keyed, so names crafted to collide make look-ups slower
 * but never wrong. Reading (dl_names_find) from several threads at once is safe. */
#ifndef DLRUN_NAMES_H
#define DLRUN_NAMES_H
#include <stddef.h>

typedef struct dl_names {
    const char **keys; /* cap slots; NULL where empty */
    int *vals;
    size_t cap; /* 0 or a power of two */
    size_t n;   /* keys stored */
} dl_names;

/* An empty map needs no allocation: `dl_names m = {0};` */
void dl_names_free(dl_names *m);
/* The value stored for key, or -1. */
int dl_names_find(const dl_names *m, const char *key);
/* Stores key -> val (val >= 0) unless key is present. Returns 1 when added, 0 when key was
 * already there (its value unchanged), -1 when out of memory. */
int dl_names_add(dl_names *m, const char *key, int val);
#endif
