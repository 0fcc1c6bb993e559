/* test_storage.c — the ABI 1.3 storage conversions every plugin and the host rely on: the scalar
 * f16/bf16 conversions of plugin.h against references computed independently in double (the
 * nearest representable value, ties to even), and dl_convert_host (core/ops/tensor_convert.c)
 * between f32/f16/bf16 and row-major/channels-last, checked element by element with index
 * arithmetic written out here. The CPU plugin's ops on these formats are in test_cpu_ops.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"
#include "tensor_convert.h"
#include "test_util.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

/* ---- references in double ---- */

/* The value of f16 bits h from the IEEE binary16 definition. */
static double ref_f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* x rounded to `mant` significant bits (the leading one included) with ties to even, in a format
 * whose smallest normal binade starts at 2^emin (below it the quantum stays 2^(emin-mant+1)): x
 * is scaled to the quantum of its binade, rint rounds (ties to even in the default rounding mode),
 * both steps exact in double. */
static double ref_round(double x, int mant, int emin) {
    if (x == 0 || isinf(x)) return x;
    int e;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    int binade = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, binade - (mant - 1));
    return copysign(rint(fabs(x) / q) * q, x);
}

/* The f16 bits nearest to x (ties to even): overflow past 65504 is infinity. NaN not handled. */
static uint16_t ref_f16(float x) {
    uint16_t sign = signbit(x) ? 0x8000u : 0;
    double v = fabs(ref_round(x, 11, -14));
    if (v > 65504) return sign | 0x7c00u;
    if (v < 0x1p-14) return sign | (uint16_t)(v / 0x1p-24); /* subnormal (or zero): m * 2^-24 */
    int e;
    frexp(v, &e);
    int m = (int)(v / ldexp(1.0, e - 11)) - 1024; /* v = (1024 + m) * 2^(e - 11) */
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)m;
}

/* The bf16 bits nearest to x (ties to even): overflow past the largest bf16 is infinity. */
static uint16_t ref_bf16(float x) {
    double v = ref_round(x, 8, -126);
    if (fabs(v) > 0x1.fep127) return (uint16_t)((signbit(x) ? 0x8000u : 0) | 0x7f80u);
    return (uint16_t)(bits_of((float)v) >> 16); /* bf16 values are floats: the top half of one */
}

/* Checks both conversions of x against the references (NaN: the result must be a NaN). */
static void check_value(float x, const char *what) {
    uint16_t h = dl_f32_to_f16(x), b = dl_f32_to_bf16(x);
    if (isnan(x)) {
        cr_assert(f16_is_nan(h), "%s: f16 of NaN 0x%08x is 0x%04x, not a NaN", what, bits_of(x), h);
        cr_assert(bf16_is_nan(b), "%s: bf16 of NaN 0x%08x is 0x%04x, not a NaN", what, bits_of(x), b);
        return;
    }
    cr_assert_eq(h, ref_f16(x), "%s: f16 of %a (0x%08x) is 0x%04x, the nearest is 0x%04x", what, x, bits_of(x), h,
                 ref_f16(x));
    cr_assert_eq(b, ref_bf16(x), "%s: bf16 of %a (0x%08x) is 0x%04x, the nearest is 0x%04x", what, x, bits_of(x), b,
                 ref_bf16(x));
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t next32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* ---- scalars ---- */

Test(half, every_f16_decodes_and_round_trips) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dl_f16_to_f32(h);
        double want = ref_f16_value(h);
        uint16_t back = dl_f32_to_f16(f);
        if (f16_is_nan(h)) {
            cr_assert(isnan(f), "f16 0x%04x is a NaN, decoded %g", h, f);
            cr_assert(f16_is_nan(back), "f16 NaN 0x%04x came back as 0x%04x", h, back);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "f16 0x%04x decoded %a, is %a", h, f, want);
        cr_assert_eq(back, h, "f16 0x%04x -> %a -> 0x%04x", h, f, back);
    }
}

Test(half, every_bf16_decodes_and_round_trips) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dl_bf16_to_f32(h);
        cr_assert_eq(bits_of(f), (uint32_t)h << 16, "bf16 0x%04x decoded 0x%08x", h, bits_of(f));
        uint16_t back = dl_f32_to_bf16(f);
        if (bf16_is_nan(h)) cr_assert(bf16_is_nan(back), "bf16 NaN 0x%04x came back as 0x%04x", h, back);
        else cr_assert_eq(back, h, "bf16 0x%04x -> %a -> 0x%04x", h, f, back);
    }
}

Test(half, random_floats_round_to_nearest) {
    /* any bit pattern: every exponent, most overflowing or flushing f16 */
    for (int i = 0; i < 1000000; i++) check_value(float_of(next32()), "random bits");
    /* exponents around f16's range (2^-26 .. 2^16) and bf16's subnormals, random mantissas */
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = next32();
        int e = (int)(u % 43) - 26;
        if (i % 4 == 3) e = -(int)(u % 30) - 120; /* 2^-149 .. 2^-120: bf16's subnormals and below */
        uint32_t m = next32() & 0x7fffffu, sign = u & 0x80000000u;
        check_value(e + 127 > 0 ? float_of(sign | (uint32_t)(e + 127) << 23 | m) : float_of(sign | m), "random scale");
    }
    /* uniform values in [-4, 4) as the ops see them */
    float x[4096];
    tu_fill_uniform(x, 4096, 77, -4, 4);
    for (int i = 0; i < 4096; i++) check_value(x[i], "uniform");
}

Test(half, subnormals) {
    /* every f32 subnormal exponent (f16: 0; bf16 keeps or rounds them), and f16's subnormal range */
    for (uint32_t m = 1; m < 0x800000u; m += 37) {
        check_value(float_of(m), "f32 subnormal");
        check_value(float_of(0x80000000u | m), "f32 subnormal");
    }
    for (int k = 0; k < 1024; k++) { /* the f16 subnormals k * 2^-24 and values just off them */
        float v = ldexpf((float)k, -24);
        check_value(v, "f16 subnormal");
        check_value(-v, "f16 subnormal");
        check_value(nextafterf(v, 1), "f16 subnormal");
        check_value(nextafterf(v, 0), "f16 subnormal");
    }
    check_value(0x1p-25f, "half the smallest f16 subnormal"); /* a tie: to 0 */
    check_value(nextafterf(0x1p-25f, 1), "just over half the smallest f16 subnormal");
    check_value(0x1.8p-24f, "1.5 f16 subnormals"); /* a tie: to 2 (even) */
    check_value(nextafterf(0x1p-14f, 0), "just below the smallest f16 normal");
    cr_expect_eq(dl_f32_to_f16(0x1p-25f), 0);
    cr_expect_eq(dl_f32_to_f16(0x1.8p-24f), 2);
    cr_expect_eq(dl_f32_to_f16(-0.0f), 0x8000);
    cr_expect_eq(dl_f32_to_bf16(float_of(0x00008000u)), 0x0000); /* a tie below bf16's least subnormal: even */
    cr_expect_eq(dl_f32_to_bf16(float_of(0x00018000u)), 0x0002);
}

Test(half, ties_go_to_even) {
    /* the midpoint between every pair of neighbouring finite f16 values (exact in f32), and the
     * floats on either side of it */
    int ties = 0;
    for (uint32_t i = 0; i < 0x7bffu; i++)
        for (int s = 0; s < 2; s++) {
            uint16_t lo = (uint16_t)(i | (s ? 0x8000u : 0));
            float mid = (float)((ref_f16_value(lo) + ref_f16_value((uint16_t)(lo + 1))) / 2);
            cr_assert_eq(dl_f32_to_f16(mid), (lo & 1) ? lo + 1 : lo, "f16 tie %a between 0x%04x and 0x%04x", mid, lo,
                         lo + 1);
            check_value(mid, "f16 tie");
            check_value(nextafterf(mid, 0), "f16 below tie");
            check_value(nextafterf(mid, INFINITY), "f16 above tie");
            ties++;
        }
    /* the same for bf16 */
    for (uint32_t i = 0; i < 0x7f7fu; i++)
        for (int s = 0; s < 2; s++) {
            uint16_t lo = (uint16_t)(i | (s ? 0x8000u : 0));
            float mid = (float)(((double)dl_bf16_to_f32(lo) + dl_bf16_to_f32((uint16_t)(lo + 1))) / 2);
            cr_assert_eq(dl_f32_to_bf16(mid), (lo & 1) ? lo + 1 : lo, "bf16 tie %a between 0x%04x and 0x%04x", mid, lo,
                         lo + 1);
            check_value(mid, "bf16 tie");
            check_value(nextafterf(mid, 0), "bf16 below tie");
            check_value(nextafterf(mid, INFINITY), "bf16 above tie");
            ties++;
        }
    cr_expect_eq(ties, 2 * (0x7bff + 0x7f7f));
}

Test(half, overflow_and_nan) {
    const float big[] = {65504,       nextafterf(65520, 0),
                         65520,       nextafterf(65520, INFINITY),
                         65536,       1e9f,
                         0x1.fep127f, nextafterf(0x1.ffp127f, 0),
                         0x1.ffp127f, FLT_MAX,
                         INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        check_value(big[i], "large");
        check_value(-big[i], "large");
    }
    cr_expect_eq(dl_f32_to_f16(65504), 0x7bff);
    cr_expect_eq(dl_f32_to_f16(nextafterf(65520, 0)), 0x7bff);
    cr_expect_eq(dl_f32_to_f16(65520), 0x7c00); /* the tie past the largest f16 overflows */
    cr_expect_eq(dl_f32_to_f16(-1e9f), 0xfc00);
    cr_expect_eq(dl_f32_to_bf16(FLT_MAX), 0x7f80);
    cr_expect_eq(dl_f32_to_bf16(nextafterf(0x1.ffp127f, 0)), 0x7f7f);
    /* NaNs whose payload sits only in the low bits (truncation would make them infinities),
     * signalling and quiet, both signs */
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7f800fffu, 0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0x7f801000u};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) check_value(float_of(nans[i]), "NaN");
    for (uint32_t m = 1; m < 0x800000u; m = m * 5 + 3) check_value(float_of(0x7f800000u | m), "NaN");
}

/* ---- dl_convert_host ---- */

/* A test buffer of logical shape [N,C,H,W] in one dtype and layout. */
typedef struct fmt {
    dl_dtype dtype;
    int cl;
} fmt;

static const int64_t SH[4] = {3, 5, 7, 9};
#define NUMEL (3 * 5 * 7 * 9)

/* offset of logical element (n, c, h, w) (row-major index i) in a layout */
static int64_t at(int64_t i, int cl) {
    int64_t w = i % SH[3], h = i / SH[3] % SH[2], c = i / (SH[3] * SH[2]) % SH[1], n = i / (SH[3] * SH[2] * SH[1]);
    return cl ? ((n * SH[2] + h) * SH[3] + w) * SH[1] + c : i;
}

/* the stored bits of element i (f32 bits, or the 16 bits) */
static uint32_t get(const void *p, fmt f, int64_t i) {
    int64_t o = at(i, f.cl);
    return f.dtype.bits == 32 ? bits_of(((const float *)p)[o]) : ((const uint16_t *)p)[o];
}
static float value(const void *p, fmt f, int64_t i) {
    uint32_t u = get(p, f, i);
    return f.dtype.bits == 32                ? float_of(u)
           : f.dtype.code == DL_DTYPE_BFLOAT ? dl_bf16_to_f32((uint16_t)u)
                                             : dl_f16_to_f32((uint16_t)u);
}
static uint32_t encode(float v, dl_dtype d) {
    return d.bits == 32 ? bits_of(v) : d.code == DL_DTYPE_BFLOAT ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}

static dl_tensor tensor(void *data, fmt f, int64_t *strides) {
    if (f.cl) dl_channels_last_strides(SH, strides);
    return (dl_tensor){data, {DL_DEVICE_CPU, 0}, 4, f.dtype, (int64_t *)SH, f.cl ? strides : NULL, 0};
}

static const char *fmt_name(fmt f, char *buf) {
    sprintf(buf, "%s %s", dl_dtype_name(f.dtype), f.cl ? "NHWC" : "NCHW");
    return buf;
}

Test(convert_host, every_dtype_and_layout_pair) {
    const fmt fmts[6] = {{DL_F32, 0}, {DL_F32, 1}, {DL_F16, 0}, {DL_F16, 1}, {DL_BF16, 0}, {DL_BF16, 1}};
    float x[NUMEL];
    tu_fill_uniform(x, NUMEL, 5, -3, 3);
    x[7] = NAN, x[8] = -0.0f, x[9] = 1e6f, x[10] = 0x1p-20f; /* NaN, -0, f16 overflow, an f16 subnormal */
    static uint32_t a[NUMEL], b[NUMEL], c[NUMEL];            /* storage of any of the formats */
    int64_t sa[4], sb[4], sc[4];
    char na[32], nb[32];
    for (int i = 0; i < 6; i++) {
        fmt fa = fmts[i];
        /* the source, stored by hand */
        for (int64_t e = 0; e < NUMEL; e++) {
            uint32_t u = encode(x[e], fa.dtype);
            if (fa.dtype.bits == 32) memcpy((float *)a + at(e, fa.cl), &u, 4);
            else ((uint16_t *)a)[at(e, fa.cl)] = (uint16_t)u;
        }
        dl_tensor ta = tensor(a, fa, sa);
        for (int j = 0; j < 6; j++) {
            fmt fb = fmts[j];
            memset(b, 0xa5, sizeof b);
            dl_tensor tb = tensor(b, fb, sb);
            cr_assert(dl_convert_host(&tb, &ta), "%s -> %s refused", fmt_name(fa, na), fmt_name(fb, nb));
            for (int64_t e = 0; e < NUMEL; e++) {
                uint32_t want = encode(value(a, fa, e), fb.dtype), got = get(b, fb, e);
                int nan = isnan(value(a, fa, e));
                cr_assert(nan ? isnan(value(b, fb, e)) : got == want,
                          "%s -> %s: element %lld is 0x%x, want 0x%x (from %a)", fmt_name(fa, na), fmt_name(fb, nb),
                          (long long)e, got, want, value(a, fa, e));
            }
            /* back to the source's format: the same bits wherever nothing was lost on the way */
            if (fb.dtype.bits == 32 || dl_dtype_eq(fa.dtype, fb.dtype)) {
                memset(c, 0x5a, sizeof c);
                dl_tensor tc = tensor(c, fa, sc);
                cr_assert(dl_convert_host(&tc, &tb));
                size_t bytes = (size_t)NUMEL * dl_dtype_size(fa.dtype);
                cr_assert(memcmp(a, c, bytes) == 0, "%s -> %s -> back differs", fmt_name(fa, na), fmt_name(fb, nb));
            }
        }
    }
}

/* f32 NCHW <-> NHWC over several 32 x 32 tiles and partial ones (37 channels, 99 pixels), and an
 * RGB image (3 channels, 22 pixels: the SSE loop's 4 and a rest), against the index mapping */
Test(convert_host, layouts_across_tiles) {
    const int64_t shapes[2][4] = {{2, 37, 9, 11}, {2, 3, 2, 11}};
    for (int k = 0; k < 2; k++) {
        const int64_t *sh = shapes[k], n = sh[0], c = sh[1], hw = sh[2] * sh[3], numel = n * c * hw;
        float *x = malloc((size_t)numel * sizeof *x), *y = malloc((size_t)numel * sizeof *y),
              *z = malloc((size_t)numel * sizeof *z);
        cr_assert(x && y && z);
        tu_fill_uniform(x, numel, 11, -1, 1);
        int64_t st[4];
        dl_channels_last_strides(sh, st);
        dl_tensor rm = {x, {1, 0}, 4, DL_F32, (int64_t *)sh, NULL, 0},
                  cl = {y, {1, 0}, 4, DL_F32, (int64_t *)sh, st, 0};
        cr_assert(dl_convert_host(&cl, &rm));
        for (int64_t b = 0; b < n; b++)
            for (int64_t ch = 0; ch < c; ch++)
                for (int64_t p = 0; p < hw; p++)
                    cr_assert_eq(y[(b * hw + p) * c + ch], x[(b * c + ch) * hw + p],
                                 "to NHWC: image %lld channel %lld pixel %lld", (long long)b, (long long)ch,
                                 (long long)p);
        dl_tensor back = {z, {1, 0}, 4, DL_F32, (int64_t *)sh, NULL, 0};
        cr_assert(dl_convert_host(&back, &cl));
        cr_assert(memcmp(x, z, (size_t)numel * sizeof *x) == 0, "NCHW -> NHWC -> NCHW differs (%lld channels)",
                  (long long)c);
        free(x), free(y), free(z);
    }
}

Test(convert_host, odd_shapes_other_ranks_and_refusals) {
    /* a 2-D tensor and a 1-D one: dtype only */
    int64_t s2[2] = {13, 17}, s1[1] = {221};
    float x[221], y[221];
    uint16_t h[221];
    tu_fill_uniform(x, 221, 9, -100, 100);
    dl_tensor tx = {x, {1, 0}, 2, DL_F32, s2, NULL, 0}, th = {h, {1, 0}, 2, DL_BF16, s2, NULL, 0};
    dl_tensor ty = {y, {1, 0}, 1, DL_F32, s1, NULL, 0};
    cr_assert(dl_convert_host(&th, &tx));
    for (int i = 0; i < 221; i++) cr_assert_eq(h[i], ref_bf16(x[i]));
    cr_assert(!dl_convert_host(&ty, &th), "ranks differ: refused");
    th.ndim = 1, th.shape = s1;
    cr_assert(dl_convert_host(&ty, &th));
    for (int i = 0; i < 221; i++) cr_assert_eq(y[i], dl_bf16_to_f32(h[i]));
    cr_assert(dl_convert_elements(h, DL_F16, x, DL_F32, 221));
    for (int i = 0; i < 221; i++) cr_assert_eq(h[i], ref_f16(x[i]));
    /* refused, nothing written: an int dtype, other strides, differing shapes */
    memset(y, 0, sizeof y);
    dl_tensor ti = {x, {1, 0}, 1, {DL_DTYPE_INT, 32, 1}, s1, NULL, 0};
    cr_expect(!dl_convert_host(&ty, &ti));
    cr_expect(!dl_convert_elements(y, DL_F32, x, (dl_dtype){DL_DTYPE_INT, 32, 1}, 221));
    int64_t s4[4] = {1, 13, 17, 1}, odd[4] = {221, 17, 1, 1}, t4[4] = {1, 13, 1, 17};
    dl_tensor a4 = {x, {1, 0}, 4, DL_F32, s4, odd, 0}, b4 = {y, {1, 0}, 4, DL_F32, s4, NULL, 0};
    cr_expect_eq(dl_tensor_layout(&a4), DL_LAYOUT_OTHER);
    cr_expect(!dl_convert_host(&b4, &a4));
    a4.strides = NULL, b4.shape = t4;
    cr_expect(!dl_convert_host(&b4, &a4));
    for (int i = 0; i < 221; i++) cr_assert_eq(y[i], 0.0f, "a refused conversion wrote element %d", i);
}

/* An RGB image to NHWC takes its own (SSE) path: 3 channels, pixel counts that are and are not a
 * multiple of 4, two images; every element where the index map puts it, and back. */
Test(convert_host, three_channels_to_nhwc) {
    static const int64_t hws[3][2] = {{5, 7}, {4, 4}, {1, 3}};
    for (int t = 0; t < 3; t++) {
        int64_t sh[4] = {2, 3, hws[t][0], hws[t][1]}, cls[4];
        const int64_t hw = sh[2] * sh[3], n = 2 * 3 * hw;
        float x[2 * 3 * 35], y[2 * 3 * 35], z[2 * 3 * 35];
        tu_fill_uniform(x, (size_t)n, 40 + (uint64_t)t, -2, 2);
        dl_channels_last_strides(sh, cls);
        dl_tensor tx = {x, {DL_DEVICE_CPU, 0}, 4, DL_F32, sh, NULL, 0};
        dl_tensor ty = {y, {DL_DEVICE_CPU, 0}, 4, DL_F32, sh, cls, 0};
        dl_tensor tz = {z, {DL_DEVICE_CPU, 0}, 4, DL_F32, sh, NULL, 0};
        cr_assert(dl_convert_host(&ty, &tx));
        for (int64_t b = 0; b < 2; b++)
            for (int64_t c = 0; c < 3; c++)
                for (int64_t p = 0; p < hw; p++)
                    cr_assert_eq(bits_of(y[(b * hw + p) * 3 + c]), bits_of(x[(b * 3 + c) * hw + p]),
                                 "%lldx%lld: image %lld channel %lld pixel %lld", (long long)sh[2], (long long)sh[3],
                                 (long long)b, (long long)c, (long long)p);
        cr_assert(dl_convert_host(&tz, &ty));
        cr_assert(memcmp(x, z, (size_t)n * sizeof *x) == 0, "NCHW -> NHWC -> NCHW differs");
    }
}
