/* rng.c — deterministic random numbers for seeded weights (see rng.h): xorshift128+ seeded
 * through splitmix64, so any 64-bit seed gives a well-mixed state. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void dl_rng_seed(dl_rng *r, uint64_t seed) {
    r->s[0] = splitmix64(&seed);
    r->s[1] = splitmix64(&seed);
    if (!r->s[0] && !r->s[1]) r->s[1] = 1;
}

uint64_t dl_rng_next(dl_rng *r) {
    uint64_t s1 = r->s[0];
    const uint64_t s0 = r->s[1];
    r->s[0] = s0;
    s1 ^= s1 << 23;
    r->s[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return r->s[1] + s0;
}

float dl_rng_uniform(dl_rng *r, float lo, float hi) {
    double u = (double)(dl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
    float v = (float)(lo + (hi - (double)lo) * u);
    return v < hi ? v : lo; /* rounding to float must not reach hi */
}

float dl_rng_normal(dl_rng *r) {
    double u1 = ((double)(dl_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0, 1] */
    double u2 = (double)(dl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t dl_rng_derive(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name, mixed with the seed */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    uint64_t x = seed ^ h;
    return splitmix64(&x);
}
