/* test_cpu_activate.c — the CPU plugin's own exp, sigmoid and erf (plugins/cpu/activate.h), compiled
 * into the test as the plugin compiles them, against double precision: a dense sweep of the
 * range, the clamp at the bottom of it, and NaN and the infinities. */
#include <criterion/criterion.h>
#include <math.h>

#include "activate.h"
#include "vecw.h"

/* every float in [lo, hi] would be 2^30 of them: every step-th bit pattern instead */
#define SWEEP_STEP 97

Test(cpu_activate, exp_neg_within_2_ulp) {
    double worst = 0;
    float worst_x = 0;
    for (uint32_t bits = 0x80000000u; bits <= 0xC2AE9999u; bits += SWEEP_STEP) { /* -0 .. -87.3 */
        float x;
        memcpy(&x, &bits, sizeof x);
        if (x < -87.3f) break;
        const double want = exp((double)x), got = cpu_exp_neg(x);
        const double ulp = ldexp(1.0, ilogb(want) - 23); /* a float's unit in the last place at want */
        const double err = fabs(got - want) / ulp;
        if (err > worst) worst = err, worst_x = x;
    }
    cr_expect(worst <= 2.0, "exp(%.9g): %.2f ulp", (double)worst_x, worst);
    for (float x = -87.3f; x <= 0; x += 0.37f) /* a coarse sweep of round numbers too */
        cr_expect(fabs(cpu_exp_neg(x) - exp((double)x)) <= 2.5e-7 * exp((double)x), "exp(%.9g)", (double)x);
}

Test(cpu_activate, exp_neg_edges) {
    cr_expect_eq(cpu_exp_neg(0.0f), 1.0f);
    cr_expect_eq(cpu_exp_neg(-0.0f), 1.0f);
    cr_expect_eq(cpu_exp_neg(-87.4f), 0.0f, "below the clamp: 0, not a wrong normal number");
    cr_expect_eq(cpu_exp_neg(-1000.0f), 0.0f);
    cr_expect_eq(cpu_exp_neg(-INFINITY), 0.0f);
    cr_expect(isnan(cpu_exp_neg(NAN)), "NaN stays NaN");
    cr_expect(cpu_exp_neg(-87.29f) > 0, "the last normal results are kept");
}

/* the softmax's exp on VW lanes (vecw.h) gives the scalar one's floats, bit for bit, lane by lane */
Test(cpu_activate, expw_neg_is_exp_neg_lane_by_lane) {
    float x[VW], got[VW];
    long checked = 0;
    for (uint32_t bits = 0x80000000u; bits <= 0xC3000000u; bits += SWEEP_STEP * VW) { /* -0 .. -128 */
        for (int l = 0; l < VW; l++) {
            const uint32_t b = bits + (uint32_t)l * SWEEP_STEP;
            memcpy(&x[l], &b, sizeof x[l]);
        }
        storew(got, expw_neg(loadw(x)));
        for (int l = 0; l < VW; l++, checked++) {
            const float want = cpu_exp_neg(x[l]);
            cr_assert(memcmp(&got[l], &want, sizeof want) == 0, "exp(%.9g): lanes %.9g, scalar %.9g", (double)x[l],
                      (double)got[l], (double)want);
        }
    }
    const float edge[4] = {-INFINITY, NAN, -87.29f, -87.31f};
    for (int i = 0; i < 4; i++) {
        storew(got, expw_neg(splatw(edge[i])));
        const float want = cpu_exp_neg(edge[i]);
        cr_expect(isnan(want) ? isnan(got[0]) : got[0] == want, "exp(%g): %g, want %g", (double)edge[i], (double)got[0],
                  (double)want);
    }
    cr_expect(checked > 1000000, "%ld floats checked", checked);
}

Test(cpu_activate, sigmoid_and_silu) {
    dl_op_attrs a = {0};
    for (float x = -100.0f; x <= 100.0f; x += 0.013f) {
        const double s = 1 / (1 + exp(-(double)x));
        const float got = cpu_sigmoid_of(x), silu = cpu_activate(x, DL_ACT_SILU, &a);
        cr_assert(fabs(got - s) <= 3e-7 * s + 1e-37, "sigmoid(%.9g) = %.9g, want %.9g", (double)x, got, s);
        cr_assert(fabs(silu - x * s) <= 3e-7 * fabs(x * s) + 1e-35, "silu(%.9g) = %.9g, want %.9g", (double)x, silu,
                  x * s);
    }
    cr_expect_eq(cpu_sigmoid_of(INFINITY), 1.0f);
    cr_expect_eq(cpu_sigmoid_of(-INFINITY), 0.0f);
    cr_expect(isnan(cpu_sigmoid_of(NAN)));
    cr_expect(isnan(cpu_activate(-INFINITY, DL_ACT_SILU, &a)), "silu(-inf) = -inf * 0: NaN, as in PyTorch");
    cr_expect(isnan(cpu_activate(NAN, DL_ACT_SILU, &a)));
}

/* erf for GELU: a sweep of [-5, 5] (past the clamp at 3.92) against erf in double, and the edges */
Test(cpu_activate, erf_fast_within_4e_7) {
    double worst = 0;
    float worst_x = 0;
    for (float x = -5.0f; x <= 5.0f; x += 1.3e-5f) {
        const double err = fabs(cpu_erf_fast(x) - erf((double)x));
        if (err > worst) worst = err, worst_x = x;
    }
    cr_expect(worst <= 4e-7, "erf(%.9g) off by %.3g", (double)worst_x, worst);
    for (float x = 1e-30f; x < 1e-3f; x *= 1.7f) /* tiny arguments: relative accuracy too */
        cr_expect(fabs(cpu_erf_fast(x) - erf((double)x)) <= 2e-7 * erf((double)x), "erf(%.9g)", (double)x);
    cr_expect_eq(cpu_erf_fast(0.0f), 0.0f);
    cr_expect_eq(cpu_erf_fast(INFINITY), 1.0f);
    cr_expect_eq(cpu_erf_fast(-INFINITY), -1.0f);
    cr_expect(cpu_erf_fast(100.0f) <= 1.0f && cpu_erf_fast(-100.0f) >= -1.0f, "never past +-1");
    cr_expect(isnan(cpu_erf_fast(NAN)), "NaN stays NaN");
}
