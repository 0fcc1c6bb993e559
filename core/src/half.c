/* half.c — f16/bf16 to f32 conversions (subnormals, infinities and NaN included). */
#include "half.h"

#include <string.h>

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float dl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return from_bits(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return from_bits(sign);
        int e = -1; /* subnormal: normalise */
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        return from_bits(sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13));
    }
    return from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

float dl_bf16_to_f32(uint16_t b) { return from_bits((uint32_t)b << 16); }
