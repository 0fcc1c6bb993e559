/* test_cpu_gemm.c — the CPU plugin's packed matrix product (plugins/cpu/gemm.c, compiled into this
 * test) against a naive sum in double, on random operands of odd sizes: packed and run-time
 * operands, transposed (strided) sources, k past one pass (256 steps), blocks with edges on both
 * sides, each epilogue (row or column bias, relu, clip, gelu), C stored as it lies or transposed,
 * A read in place,
 * NaN kept by the clamp, k = 0, and the packed sizes' overflow check; and cpu_sgemm (plugins/cpu/blas.c),
 * OpenBLAS with the plugin's own sums where OpenBLAS would allocate. tests/CMakeLists.txt builds it three times: with
 * the kernel the machine takes (-march=native: AVX-512's 6 x 32 blocks, or AVX2's 6 x 16), with the AVX2 kernel
 * (-mno-avx512f) and with the portable C kernel (CPU_GEMM_PORTABLE). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activate.h"
#include "blas.h"
#include "gemm.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65535.0f - 0.5f;
}

#define THREADS 3 /* an odd count: blocks do not split evenly */

typedef struct gcase {
    int m, n, k;
    int trans_a, trans_b;   /* sources stored transposed (strided packing) */
    int packed_a, packed_b; /* packed beforehand, as a weight at prepare */
    int row_bias, col_bias; /* epilogue biases */
    int act;                /* dl_activation: none, relu, clip, gelu, silu */
    int trans_c;            /* C stored transposed: (i, j) at c[j * ldc + i] */
    int row_len, row_keep;  /* the gutter map: C's columns in rows of row_len, the first row_keep kept */
    int a_in_place;         /* A read in place (with trans_a: A(i, p) at a[p * m + i]), not packed */
    int residual;           /* a residual lying as C does, added before the activation */
    int threads;            /* 0: THREADS */
} gcase;

static double act_ref(int act, double v) {
    switch (act) {
    case DL_ACT_RELU: return v < 0 ? 0 : v;
    case DL_ACT_CLIP: return v < -0.3 ? -0.3 : v > 0.4 ? 0.4 : v;
    case DL_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case DL_ACT_SILU: return v / (1 + exp(-v));
    default: return v;
    }
}

static void check(gcase g) {
    unsigned seed = (unsigned)(g.m * 7919 + g.n * 104729 + g.k * 31 + g.act);
    const int m = g.m, n = g.n, k = g.k, lines = g.trans_c ? n : m;
    /* the columns C's rows hold: all n, or those the gutter map keeps */
    const int kept =
        g.row_len ? n / g.row_len * g.row_keep + (n % g.row_len < g.row_keep ? n % g.row_len : g.row_keep) : n;
    const int ldc = (g.trans_c ? m : kept) + 3;
    float *a = malloc(sizeof(float) * (size_t)(m * k + 1)), *b = malloc(sizeof(float) * (size_t)(k * n + 1));
    float *rb = malloc(sizeof(float) * (size_t)m), *cb = malloc(sizeof(float) * (size_t)n);
    float *c = malloc(sizeof(float) * (size_t)lines * ldc), *r = malloc(sizeof(float) * (size_t)lines * ldc);
    for (int i = 0; i < m * k; i++) a[i] = frand(&seed);
    for (int i = 0; i < k * n; i++) b[i] = frand(&seed);
    for (int i = 0; i < m; i++) rb[i] = frand(&seed);
    for (int i = 0; i < n; i++) cb[i] = frand(&seed);
    for (int i = 0; i < lines * ldc; i++) c[i] = 1234.5f; /* the pitch's gap must stay untouched */
    for (int i = 0; i < lines * ldc; i++) r[i] = frand(&seed);
    /* A(i, p) and B(p, j), stored as given or transposed */
    cpu_gemm_strided sa = {a, g.trans_a ? 1 : k, g.trans_a ? m : 1, m, k};
    cpu_gemm_strided sb = {b, g.trans_b ? 1 : n, g.trans_b ? k : 1, k, n};
    float *pa = NULL, *pb = NULL;
    if (g.packed_a) {
        pa = malloc(sizeof(float) * cpu_gemm_packed_a_floats(m, k));
        cpu_gemm_pack_a(&sa, pa);
    }
    if (g.packed_b) {
        pb = malloc(sizeof(float) * cpu_gemm_packed_b_floats(k, n));
        cpu_gemm_pack_b(&sb, pb);
    }
    cpu_gemm_operand oa = {pa, cpu_gemm_pack_a_strided, &sa}, ob = {pb, cpu_gemm_pack_b_strided, &sb};
    if (g.a_in_place) oa = (cpu_gemm_operand){NULL, NULL, NULL, a, NULL, m};
    dl_op_attrs at = {0};
    at.activation = g.act, at.clip_min = -0.3f, at.clip_max = 0.4f;
    cpu_gemm_epilogue e = {g.row_bias ? rb : NULL, g.col_bias ? cb : NULL, &at, g.trans_c, g.row_len, g.row_keep,
                           g.residual ? r : NULL};
    const int threads = g.threads ? g.threads : THREADS;
    size_t sf = cpu_gemm_scratch_floats(m, n, k, g.a_in_place ? 2 : !g.packed_a, !g.packed_b, g.trans_c, threads);
    float *scratch = malloc(sizeof(float) * (sf ? sf : 1));
    cpu_gemm(m, n, k, &oa, &ob, c, ldc, &e, scratch, threads);
    double worst = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double t =
                    (double)(g.trans_a ? a[p * m + i] : a[i * k + p]) * (g.trans_b ? b[j * k + p] : b[p * n + j]);
                s += t, mag += fabs(t);
            }
            if (g.row_bias) s += rb[i];
            if (g.col_bias) s += cb[j];
            if (g.row_len && j % g.row_len >= g.row_keep) continue; /* in the gutter: dropped */
            const int at_j = g.row_len ? j / g.row_len * g.row_keep + j % g.row_len : j;
            const int o = g.trans_c ? j * ldc + i : i * ldc + at_j;
            const float got = c[o];
            if (g.residual) s += r[o];
            const double want = act_ref(g.act, s), err = fabs(got - want) / (mag + 1.0);
            if (err > worst) worst = err;
        }
    }
    for (int l = 0; l < lines; l++)
        for (int q = ldc - 3; q < ldc; q++) cr_assert_eq(c[l * ldc + q], 1234.5f, "wrote past the end of line %d", l);
    if (g.row_len) /* every kept column written once: none left at the fill value */
        for (int i = 0; i < m; i++)
            for (int q = 0; q < kept; q++) cr_assert_neq(c[i * ldc + q], 1234.5f, "row %d: column %d not stored", i, q);
    cr_expect_lt(worst, 2e-6, "m%d n%d k%d ta%d tb%d pa%d pb%d rb%d cb%d act%d tc%d: error %g", m, n, k, g.trans_a,
                 g.trans_b, g.packed_a, g.packed_b, g.row_bias, g.col_bias, g.act, g.trans_c, worst);
    free(a), free(b), free(rb), free(cb), free(c), free(r), free(pa), free(pb), free(scratch);
}

Test(cpu_gemm, shapes_and_operands) {
    /* odd sizes, edges in both directions, k under, at and over one pass (256 steps; 512 for a B
     * packed beforehand); with 3 threads the blocks are at most 2 panels of B wide for most of
     * these, so one_thread below takes the 3- and 4-panel blocks */
    const int ms[] = {1, 5, 6, 7, 37, 101}, ns[] = {1, 16, 17, 40, 49, 203}, ks[] = {1, 27, 256, 300, 515, 1030};
    int count = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            for (int q = 0; q < 6; q++) {
                const int v = i + j + q; /* vary the operands' forms across the cases */
                for (int tc = 0; tc < 2; tc++) {
                    check((gcase){ms[i], ns[j], ks[q], v & 1, (v >> 1) & 1, (v >> 2) & 1, (v + 1) & 1, 0, 0,
                                  DL_ACT_NONE, tc});
                    count++;
                }
            }
    cr_assert_eq(count, 432);
}

Test(cpu_gemm, epilogues) {
    const int acts[] = {DL_ACT_NONE, DL_ACT_RELU, DL_ACT_CLIP, DL_ACT_GELU, DL_ACT_SILU};
    for (int t = 0; t < 5; t++) {
        check((gcase){43, 70, 33, 0, 0, 1, 0, 1, 0, acts[t]});  /* a conv: weight packed, row bias */
        check((gcase){29, 97, 300, 0, 1, 0, 1, 0, 1, acts[t]}); /* a linear layer: weight packed, column bias */
        check((gcase){96, 256, 64, 0, 0, 0, 0, 1, 1, acts[t]}); /* whole blocks only, both biases */
        /* C transposed (a conv with its pixels as rows): filters' bias by column, edges, 2 passes */
        check((gcase){49, 512, 300, 1, 1, 0, 1, 0, 1, acts[t], 1});
        check((gcase){37, 70, 33, 0, 0, 1, 0, 1, 1, acts[t], 1});
    }
}

Test(cpu_gemm, residual) {
    /* a fused residual (ABI 1.8), read where C's element is stored: C as it lies (whole blocks and
     * edges, 1 and 2 passes over k), transposed from the registers or through the blocks' sums,
     * through the gutter map, with A read in place; before relu, clip and GELU */
    const int acts[] = {DL_ACT_NONE, DL_ACT_RELU, DL_ACT_CLIP, DL_ACT_GELU};
    for (int t = 0; t < 4; t++) {
        check((gcase){43, 70, 33, 0, 0, 1, 0, 1, 0, acts[t], 0, 0, 0, 0, 1});
        check((gcase){96, 256, 300, 0, 0, 1, 0, 1, 1, acts[t], 0, 0, 0, 0, 1});
        check((gcase){37, 70, 33, 0, 0, 1, 0, 1, 1, acts[t], 1, 0, 0, 0, 1});
        check((gcase){49, 512, 300, 1, 1, 0, 1, 0, 1, acts[t], 1, 0, 0, 0, 1});
        check((gcase){49, 37, 1030, 1, 0, 0, 1, 0, 1, acts[t], 1, 0, 0, 1, 1});
        check((gcase){37, 4 * 57 + 55, 27, 0, 0, 1, 0, 1, 0, acts[t], 0, 57, 55, 0, 1});
        check((gcase){12, 5 * 12 - 2, 300, 0, 0, 1, 1, 1, 0, acts[t], 0, 12, 10, 0, 1});
        check((gcase){203, 160, 31, 1, 1, 0, 0, 0, 0, acts[t], 0, 0, 0, 1, 1});
    }
}

Test(cpu_gemm, one_thread) {
    /* threads 1: no parallel region (Winograd calls cpu_gemm inside one of its own); A packed
     * here or beforehand or read in place, B packed here, C transposed, k past one pass */
    check((gcase){43, 70, 33, 0, 0, 1, 0, 1, 0, DL_ACT_RELU, .threads = 1});
    check((gcase){29, 97, 300, 0, 1, 0, 1, 0, 1, DL_ACT_GELU, .threads = 1});
    check((gcase){49, 512, 300, 1, 1, 0, 1, 0, 1, DL_ACT_CLIP, 1, .threads = 1});
    check((gcase){49, 37, 1030, 1, 0, 0, 1, 0, 1, DL_ACT_NONE, 1, 0, 0, 1, 1, .threads = 1});
    check((gcase){101, 16, 515, 0, 0, 1, 1, 1, 1, DL_ACT_NONE, .threads = 1});
    /* B packed beforehand, C as it lies, k over two 512-step passes: with AVX-512 the 4-panel block
     * (64 columns whole; 49: a partial fourth) and the 3-panel one (40) add onto C's earlier sums */
    check((gcase){37, 64, 1030, 0, 0, 0, 1, 0, 1, DL_ACT_RELU, .threads = 1});
    check((gcase){13, 49, 515, 1, 0, 1, 1, 1, 1, DL_ACT_NONE, .residual = 1, .threads = 1});
    check((gcase){7, 40, 600, 0, 1, 0, 1, 0, 0, DL_ACT_GELU, .threads = 1});
}

Test(cpu_gemm, a_read_in_place) {
    /* A(i, p) = a[p * m + i] read where it lies, 6 rows a step (a 1x1 conv's image with its pixels
     * as rows); a partial last panel packed; C as it lies or transposed from the registers, or past
     * one pass (1024 steps) through the blocks' sums; each epilogue */
    const int ms[] = {1, 5, 6, 49, 203}, ks[] = {1, 31, 1030};
    const int acts[] = {DL_ACT_NONE, DL_ACT_RELU, DL_ACT_CLIP, DL_ACT_GELU};
    int count = 0;
    for (int i = 0; i < 5; i++)
        for (int q = 0; q < 3; q++)
            for (int tc = 0; tc < 2; tc++) {
                const int v = i + q + tc;
                check((gcase){ms[i], v % 2 ? 37 : 160, ks[q], 1, v & 1, 0, (v + 1) % 3 != 0, v % 3 == 1, v % 2,
                              acts[v % 4], tc, 0, 0, 1});
                count++;
            }
    cr_assert_eq(count, 30);
}

Test(cpu_gemm, gutter_map) {
    /* a conv reading its padded image in place: rows of row_len columns, the last few dropped.
     * Rows longer than a block and its gutter (masked stores, a block meeting one gutter or
     * starting or ending in one), shorter ones (stored column by column), a gutter wider than a
     * block, k over one pass (the sums reloaded through the map), each epilogue, edges. */
    const int lens[][2] = {{57, 55}, {17, 16}, {33, 31}, {40, 21}, {15, 13}, {12, 10}, {7, 3}, {114, 111}};
    const int acts[] = {DL_ACT_NONE, DL_ACT_RELU, DL_ACT_CLIP, DL_ACT_GELU};
    for (int l = 0; l < 8; l++)
        for (int t = 0; t < 4; t++) {
            const int rl = lens[l][0], rk = lens[l][1], rows = 3 + t;
            check((gcase){37, (rows - 1) * rl + rk, t == 1 ? 300 : 27, 0, 0, 1, 0, 1, 0, acts[t], 0, rl, rk});
            check((gcase){12, rows * rl - 2, 9, 0, 0, 1, 1, t & 1, 0, acts[t], 0, rl, rk}); /* ends in the gutter */
            if (t == 3) /* SiLU, k over one pass: applied once, on the last, through the map */
                check((gcase){13, (rows - 1) * rl + rk, 300, 0, 0, 1, 0, 1, 0, DL_ACT_SILU, 0, rl, rk});
        }
}

Test(cpu_gemm, relu_and_clip_keep_nan) {
    const int acts[] = {DL_ACT_RELU, DL_ACT_CLIP};
    for (int t = 0; t < 4; t++) {
        const int tc = t >= 2; /* C as it lies, then transposed */
        for (int m = 6; m <= 7; m++) {
            float a[7 * 2] = {0}, b[2 * 16], c[7 * 16];
            for (int i = 0; i < 2 * 16; i++) b[i] = 1.0f;
            for (int i = 0; i < m * 2; i++) a[i] = -1.0f;
            a[(m - 1) * 2] = NAN; /* the last row is NaN everywhere: in a whole block (m 6), an edge (m 7) */
            cpu_gemm_strided sa = {a, 2, 1, m, 2}, sb = {b, 16, 1, 2, 16};
            cpu_gemm_operand oa = {NULL, cpu_gemm_pack_a_strided, &sa}, ob = {NULL, cpu_gemm_pack_b_strided, &sb};
            dl_op_attrs at = {0};
            at.activation = acts[t % 2], at.clip_min = -0.5f, at.clip_max = 0.5f;
            cpu_gemm_epilogue e = {NULL, NULL, &at, tc};
            float *scratch = malloc(sizeof(float) * cpu_gemm_scratch_floats(m, 16, 2, 1, 1, tc, THREADS));
            cpu_gemm(m, 16, 2, &oa, &ob, c, tc ? m : 16, &e, scratch, THREADS);
            free(scratch);
            for (int j = 0; j < 16; j++) {
                const float last = tc ? c[j * m + m - 1] : c[(m - 1) * 16 + j], first = tc ? c[j * m] : c[j];
                cr_assert(isnan(last), "act %d m %d tc %d: column %d lost its NaN", acts[t % 2], m, tc, j);
                cr_assert_eq(first, acts[t % 2] == DL_ACT_RELU ? 0.0f : -0.5f);
            }
        }
    }
}

Test(cpu_gemm, empty_sum_is_the_epilogue_of_zero) {
    float rb[3] = {1, -2, 3}, c[3 * 5];
    dl_op_attrs at = {0};
    at.activation = DL_ACT_RELU;
    cpu_gemm_epilogue e = {rb, NULL, &at};
    cpu_gemm_strided sa = {NULL, 0, 1, 3, 0}, sb = {NULL, 5, 1, 0, 5};
    cpu_gemm_operand oa = {NULL, cpu_gemm_pack_a_strided, &sa}, ob = {NULL, cpu_gemm_pack_b_strided, &sb};
    cpu_gemm(3, 5, 0, &oa, &ob, c, 5, &e, NULL, THREADS);
    cr_assert_eq(cpu_gemm_scratch_floats(3, 5, 0, 1, 1, 1, THREADS), 0);
    for (int j = 0; j < 5; j++) cr_assert(c[j] == 1.0f && c[5 + j] == 0.0f && c[10 + j] == 3.0f);
    float t[5 * 3]; /* transposed: column i of t is row i of C */
    e.transposed = 1;
    cpu_gemm(3, 5, 0, &oa, &ob, t, 3, &e, NULL, THREADS);
    for (int j = 0; j < 5; j++) cr_assert(t[j * 3] == 1.0f && t[j * 3 + 1] == 0.0f && t[j * 3 + 2] == 3.0f);
}

Test(cpu_gemm, packed_sizes) {
    cr_assert_eq(cpu_gemm_packed_a_floats(7, 5), 2 * 6 * 5);
    cr_assert_eq(cpu_gemm_packed_b_floats(5, 17), 2 * 16 * 5);
    cr_assert_eq(cpu_gemm_packed_b_floats(0, 17), 0);
    cr_assert_eq(cpu_gemm_packed_a_floats(INT64_MAX / 2, INT64_MAX / 2), SIZE_MAX);
    cr_assert_eq(cpu_gemm_packed_b_floats((int64_t)1 << 40, (int64_t)1 << 40), SIZE_MAX);
    cr_assert_eq(cpu_gemm_scratch_floats((int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, 1, 1, 0, 2), SIZE_MAX);
    cr_assert_eq(cpu_gemm_scratch_floats(7, 17, 5, 1, 0, 0, 2), 2 * 6 * 5);
    /* B packed at run time: a buffer per thread of 16 panels by one pass of k (at most 256 steps) */
    cr_assert_eq(cpu_gemm_scratch_floats(7, 17, 5, 0, 1, 0, 3), 3 * 16 * 16 * 5);
    cr_assert_eq(cpu_gemm_scratch_floats(7, 17, 1000, 1, 1, 0, 2), 2 * 6 * 1000 + 2 * 16 * 16 * 256);
    /* a transposed C: a block of sums per thread, 16 (48 with B packed at run time) panels of A by 16 of B */
    cr_assert_eq(cpu_gemm_scratch_floats(7, 17, 5, 1, 0, 1, 2), 2 * 6 * 5 + 2 * 96 * 256);
    cr_assert_eq(cpu_gemm_scratch_floats(7, 17, 5, 0, 1, 1, 3), 3 * (16 * 16 * 5 + 288 * 256));
    cr_assert_eq(cpu_gemm_scratch_floats((int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, 0, 0, 1, 2),
                 2 * 96 * 256);
}

/* ---- cpu_sgemm (plugins/cpu/blas.c): OpenBLAS with the plugin's own sums for a small product's
 * last 1 to 8 columns ---- */

/* c = alpha op(a) op(b) + beta c against a sum in double; op(a) m x k, op(b) k x n, every matrix
 * with a pitch past its row (lda, ldb, ldc: 3 more). beta 0: c starts as NaN, never read. */
static void check_sgemm(int m, int n, int k, int ta, int tb, float alpha, float beta) {
    unsigned seed = (unsigned)(m * 131 + n * 17 + k + ta * 7 + tb * 3);
    const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
    float *a = malloc(sizeof(float) * (size_t)((ta ? k : m) * lda)),
          *b = malloc(sizeof(float) * (size_t)((tb ? n : k) * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    cr_assert(a && b && c && c0);
    for (int i = 0; i < (ta ? k : m) * lda; i++) a[i] = frand(&seed);
    for (int i = 0; i < (tb ? n : k) * ldb; i++) b[i] = frand(&seed);
    for (int i = 0; i < m * ldc; i++) c0[i] = c[i] = beta != 0 ? frand(&seed) : NAN;
    cpu_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            const double want = alpha * s + (beta != 0 ? beta * (double)c0[i * ldc + j] : 0);
            cr_assert(fabs(c[i * ldc + j] - want) <= 1e-5 * (1 + fabs(want)),
                      "%dx%dx%d ta %d tb %d: (%d, %d) %g, not %g", m, n, k, ta, tb, i, j, (double)c[i * ldc + j], want);
        }
    for (int i = 0; i < m; i++) /* the pitch's gap untouched */
        for (int j = n; j < ldc; j++)
            cr_assert(memcmp(&c[i * ldc + j], &c0[i * ldc + j], sizeof(float)) == 0, "gap (%d, %d) written", i, j);
    free(a), free(b), free(c), free(c0);
}

Test(cpu_sgemm, small_products_with_a_tail_of_columns) {
    /* n % 16 in 1..8 with k >= 32: the tail summed by the plugin; with and without columns before it */
    static const int shapes[][3] = {{5, 21, 40}, {7, 8, 33}, {3, 36, 100}, {1, 1, 32}, {6, 24, 77}, {9, 17, 500}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        check_sgemm(shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 1.0f, 0.0f);
        check_sgemm(shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 1.5f, 0.5f);
    }
    /* the others: OpenBLAS as it is (tails of 9..15 or 0, k < 32, large, transposed operands) */
    check_sgemm(4, 27, 40, 0, 0, 1.0f, 0.0f);
    check_sgemm(4, 32, 40, 0, 0, 1.0f, 1.0f);
    check_sgemm(4, 21, 31, 0, 0, 1.0f, 0.0f);
    check_sgemm(130, 133, 70, 0, 0, 1.0f, 0.0f);
    check_sgemm(5, 19, 37, 0, 1, 1.0f, 0.0f);
    check_sgemm(5, 19, 37, 1, 0, 0.5f, 0.0f);
    check_sgemm(5, 19, 37, 1, 1, 1.0f, 1.0f);
}
