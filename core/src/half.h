/* half.h — exact conversions from IEEE half (f16) and bfloat16 to f32. */
#ifndef DLRUN_HALF_H
#define DLRUN_HALF_H
#include <stdint.h>

float dl_f16_to_f32(uint16_t h);
float dl_bf16_to_f32(uint16_t b);
#endif
