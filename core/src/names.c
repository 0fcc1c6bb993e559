/* names.c — the string -> int map of names.h: linear probing in a power-of-two table kept at
 * most half full, grown by doubling. */
#include "names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h ^= h >> 33; /* MurmurHash3's finaliser: every bit of h reaches the low bits used as the slot */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

void dl_names_free(dl_names *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t slot_of(const dl_names *m, const char *key) {
    size_t mask = m->cap - 1, i = (size_t)hash(key) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & mask;
    return i;
}

int dl_names_find(const dl_names *m, const char *key) {
    if (!m->cap) return -1;
    size_t i = slot_of(m, key);
    return m->keys[i] ? m->vals[i] : -1;
}

static int grow(dl_names *m) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    if (cap > SIZE_MAX / 2 / sizeof(char *)) return 0;
    dl_names bigger = {calloc(cap, sizeof(char *)), malloc(cap * sizeof(int)), cap, m->n};
    if (!bigger.keys || !bigger.vals) {
        free(bigger.keys);
        free(bigger.vals);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = slot_of(&bigger, m->keys[i]);
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    *m = bigger;
    return 1;
}

int dl_names_add(dl_names *m, const char *key, int val) {
    if (m->cap) {
        size_t i = slot_of(m, key);
        if (m->keys[i]) return 0;
    }
    if (2 * (m->n + 1) > m->cap && !grow(m)) return -1;
    size_t i = slot_of(m, key);
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return 1;
}
