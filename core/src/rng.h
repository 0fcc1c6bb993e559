/* rng.h — a small deterministic random generator (splitmix64 seeding, xoshiro128+ style). */
#ifndef DLRUN_RNG_H
#define DLRUN_RNG_H
#include <stdint.h>

typedef struct dl_rng {
    uint64_t s[2];
} dl_rng;

void dl_rng_seed(dl_rng *r, uint64_t seed);
uint64_t dl_rng_next(dl_rng *r);
/* Uniform in [lo, hi). */
float dl_rng_uniform(dl_rng *r, float lo, float hi);
/* Standard normal (Box-Muller). */
float dl_rng_normal(dl_rng *r);
/* A seed derived from a base seed and a string (e.g. a tensor's name), so each tensor's values do
 * not depend on the order tensors are initialised in. */
uint64_t dl_rng_derive(uint64_t seed, const char *name);
#endif
