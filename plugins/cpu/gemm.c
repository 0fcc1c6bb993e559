/* gemm.c — the CPU plugin's packed matrix product (gemm.h): packing, the micro-kernel (6 x 32 with
 * AVX-512, 6 x 64 where B was packed beforehand; 6 x 16 with AVX2 + FMA; or portable C), the
 * epilogue, and the split of C into blocks across threads. */
#include "gemm.h"

#include <math.h>
#include <string.h>

#include "activate.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(CPU_GEMM_PORTABLE)
#include <immintrin.h>
#define CPU_GEMM_AVX2 1 /* 256-bit vectors, or 512-bit ones where the build has AVX-512: */
#ifdef __AVX512F__
#define CPU_GEMM_AVX512 1
#endif
#endif

#define MR CPU_GEMM_MR
#define NR CPU_GEMM_NR
#define KC 256 /* k steps per pass over a block: a 256 x 16 slice of B stays in L1 */
/* k steps per pass where B is read in place: its rows lie apart, and a pass's B comes from L2
 * either way, while each further pass stores and reloads C */
#define KC_IN_PLACE 1024
/* k steps per pass where B was packed before the product (a weight): each further pass stores and
 * reloads C, and B's panels come from L2 either way (4 panels of 512 steps: 128 KiB) */
#define KC_PACKED 512

static size_t packed_floats(int64_t outer, int64_t k, int64_t width) {
    if (outer <= 0 || k <= 0) return 0;
    const uint64_t panels = ((uint64_t)outer + (uint64_t)width - 1) / (uint64_t)width;
    const uint64_t per = (uint64_t)k * (uint64_t)width;
    if (per / (uint64_t)width != (uint64_t)k || panels > SIZE_MAX / sizeof(float) / per) return SIZE_MAX;
    return (size_t)(panels * per);
}
size_t cpu_gemm_packed_a_floats(int64_t m, int64_t k) { return packed_floats(m, k, MR); }
size_t cpu_gemm_packed_b_floats(int64_t k, int64_t n) { return packed_floats(n, k, NR); }

void cpu_gemm_pack_a_strided(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    const cpu_gemm_strided *s = ctx;
    const int64_t i0 = panel * MR, rows = s->rows - i0 < MR ? s->rows - i0 : MR;
    for (int64_t p = 0; p < kc; p++) {
        const float *src = s->data + i0 * s->rs + (p0 + p) * s->cs;
        int64_t i = 0;
        for (; i < rows; i++) dst[p * MR + i] = src[i * s->rs];
        for (; i < MR; i++) dst[p * MR + i] = 0.0f;
    }
}

void cpu_gemm_pack_b_strided(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst) {
    const cpu_gemm_strided *s = ctx;
    const int64_t j0 = panel * NR, cols = s->cols - j0 < NR ? s->cols - j0 : NR;
    for (int64_t p = 0; p < kc; p++) {
        const float *src = s->data + (p0 + p) * s->rs + j0 * s->cs;
        float *d = dst + p * NR;
        if (s->cs == 1 && cols == NR) {
            memcpy(d, src, NR * sizeof *d);
            continue;
        }
        int64_t j = 0;
        for (; j < cols; j++) d[j] = src[j * s->cs];
        for (; j < NR; j++) d[j] = 0.0f;
    }
}

void cpu_gemm_pack_a(const cpu_gemm_strided *a, float *dst) {
    for (int64_t p = 0; p * MR < a->rows; p++) cpu_gemm_pack_a_strided(a, p, 0, a->cols, dst + p * MR * a->cols);
}
void cpu_gemm_pack_b(const cpu_gemm_strided *b, float *dst) {
    for (int64_t p = 0; p * NR < b->cols; p++) cpu_gemm_pack_b_strided(b, p, 0, b->rows, dst + p * NR * b->rows);
}

#define BLOCK_PANELS 16 /* a block of C is at most 16 panels of A by 16 of B (96 x 256) */
#define MOST_A_PANELS(b_at_run_time) ((b_at_run_time) ? 3 * BLOCK_PANELS : BLOCK_PANELS)

/* Floats of one thread's buffer for a block of B packed at run time: 16 panels, one pass of k */
static size_t b_buffer_floats(int64_t k) { return (size_t)BLOCK_PANELS * NR * (size_t)(k < KC ? k : KC); }

/* Floats of one thread's block of sums for a transposed C: the largest block plan_blocks makes */
static size_t t_buffer_floats(int b_at_run_time) {
    return (size_t)MOST_A_PANELS(b_at_run_time) * MR * BLOCK_PANELS * NR;
}

size_t cpu_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int pack_a, int pack_b, int transposed, int threads) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    const size_t t = (size_t)(threads > 0 ? threads : 1);
    const size_t a = pack_a == 2 ? cpu_gemm_packed_a_floats(MR, k) : pack_a ? cpu_gemm_packed_a_floats(m, k) : 0;
    const size_t b = (pack_b ? b_buffer_floats(k) : 0) + (transposed ? t_buffer_floats(pack_b) : 0);
    if (a == SIZE_MAX || b > SIZE_MAX / sizeof(float) / t || a > SIZE_MAX / sizeof(float) - b * t) return SIZE_MAX;
    return a + b * t;
}

/* The epilogue as the micro-kernel sees it: relu and clip are a clamp to [lo, hi] it applies
 * itself; any other activation (`other`: sigmoid, SiLU, GELU...) it applies to each finished
 * 6 x 16 block while that is in L1 (cpu_activate_rows16), not over C's rows afterwards. */
typedef struct epi {
    const float *row_bias, *col_bias;
    int clamp, other, transposed;
    float lo, hi;
    const dl_op_attrs *attrs;
    int64_t rl, rk;   /* C's columns in rows of rl, the first rk kept (cpu_gemm_epilogue); rl 0: all */
    const float *res; /* the residual: the element stored at c0[o] gets + res[o]; NULL: none */
    const float *c0;
} epi;

static epi epi_of(const cpu_gemm_epilogue *e, const float *c) {
    epi x = {e ? e->row_bias : NULL,
             e ? e->col_bias : NULL,
             0,
             0,
             e && e->transposed,
             -INFINITY,
             INFINITY,
             e ? e->attrs : NULL,
             e && !e->transposed ? e->row_len : 0,
             e ? e->row_keep : 0,
             e ? e->residual : NULL,
             c};
    const int act = x.attrs ? x.attrs->activation : DL_ACT_NONE;
    if (act == DL_ACT_RELU) {
        x.clamp = 1, x.lo = 0.0f;
    } else if (act == DL_ACT_CLIP) {
        x.clamp = 1, x.lo = x.attrs->clip_min, x.hi = x.attrs->clip_max;
    } else if (act != DL_ACT_NONE) {
        x.other = 1;
    }
    return x;
}

/* Where column j of C is stored in its row: j itself, or through the gutter map; -1: dropped. */
static int64_t column_at(const epi *e, int64_t j) {
    if (!e->rl) return j;
    return j % e->rl < e->rk ? j / e->rl * e->rk + j % e->rl : -1;
}

/* Columns j0 .. j0+cols-1 of C's rows i0 .. i0+rows-1 (c: row i0, pitch ldc) = (accumulate ? C :
 * 0) + t (MR x NR); then, on the last pass, the biases, the clamp and any other activation. NaN stays
 * NaN (cpu_clamp). */
static void merge_block(const float *t, float *c, int64_t ldc, int64_t rows, int64_t cols, int accumulate, int last,
                        const epi *e, int64_t i0, int64_t j0) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
            const int64_t at = column_at(e, j0 + q);
            if (at < 0) continue;
            float *d = c + r * ldc + at;
            float v = t[r * NR + q] + (accumulate ? *d : 0.0f);
            if (last) {
                if (e->row_bias) v += e->row_bias[i0 + r];
                if (e->col_bias) v += e->col_bias[j0 + q];
                if (e->res) v += e->res[d - e->c0];
                if (e->clamp) v = cpu_clamp(v, e->lo, e->hi);
                if (e->other) v = cpu_activate(v, e->attrs->activation, e->attrs);
            }
            *d = v;
        }
}

/* Rows [i0, i1) by columns [j0, j1) of C, their sums in t (element (i, j) at t[(i - i0) * tl + j -
 * j0]), through the epilogue into a transposed C: column j of C is the run c[j * ldc + i0 ..]. */
static void store_transposed(const float *t, int64_t tl, float *c, int64_t ldc, const epi *e, int64_t i0, int64_t i1,
                             int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; j++) {
        float *d = c + j * ldc;
        const float *s = t + (j - j0);
        const float cb = e->col_bias ? e->col_bias[j] : 0.0f;
        for (int64_t i = i0; i < i1; i++) {
            float v = s[(i - i0) * tl] + cb;
            if (e->row_bias) v += e->row_bias[i];
            if (e->res) v += e->res[d + i - e->c0];
            if (e->clamp) v = cpu_clamp(v, e->lo, e->hi);
            d[i] = v;
        }
        if (e->other) cpu_bias_act(d + i0, i1 - i0, 0.0f, e->attrs);
    }
}

#ifdef CPU_GEMM_AVX2
/* A block row's 16 lanes as the epilogue sees them: one 512-bit vector with AVX-512, two 256-bit
 * ones with AVX2. max and min return their second operand when either is NaN, so the clamp
 * (max(lo, v), then min(hi, .)) keeps a NaN v. */
#ifdef CPU_GEMM_AVX512
typedef __m512 lanes16;
static inline lanes16 l16_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void l16_store(float *p, lanes16 v) { _mm512_storeu_ps(p, v); }
static inline lanes16 l16_set1(float f) { return _mm512_set1_ps(f); }
static inline lanes16 l16_add(lanes16 x, lanes16 y) { return _mm512_add_ps(x, y); }
static inline lanes16 l16_clamp(lanes16 v, lanes16 lo, lanes16 hi) { return _mm512_min_ps(hi, _mm512_max_ps(lo, v)); }
#else
typedef struct lanes16 {
    __m256 h0, h1;
} lanes16;
static inline lanes16 l16_load(const float *p) { return (lanes16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void l16_store(float *p, lanes16 v) { _mm256_storeu_ps(p, v.h0), _mm256_storeu_ps(p + 8, v.h1); }
static inline lanes16 l16_set1(float f) { return (lanes16){_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
static inline lanes16 l16_add(lanes16 x, lanes16 y) {
    return (lanes16){_mm256_add_ps(x.h0, y.h0), _mm256_add_ps(x.h1, y.h1)};
}
static inline lanes16 l16_clamp(lanes16 v, lanes16 lo, lanes16 hi) {
    return (lanes16){_mm256_min_ps(hi.h0, _mm256_max_ps(lo.h0, v.h0)),
                     _mm256_min_ps(hi.h1, _mm256_max_ps(lo.h1, v.h1))};
}
#endif

/* Where a block's columns j0 .. j0+cols-1 go in a C with a gutter map: runs of lanes, lanes
 * [lo[r], hi[r]) stored from column at[r] of C's row on. Returns the runs (0: all dropped; at most
 * 16, one a lane). */
static int block_runs(const epi *e, int64_t j0, int cols, int lo[NR], int hi[NR], int64_t at[NR]) {
    int runs = 0;
    for (int q = 0; q < cols;) {
        const int64_t j = j0 + q, x = j % e->rl, row = j / e->rl;
        const int len = (int)(e->rl - x < cols - q ? e->rl - x : cols - q); /* lanes left in this row */
        if (x < e->rk)
            lo[runs] = q, hi[runs] = q + (int)(e->rk - x < len ? e->rk - x : len), at[runs++] = row * e->rk + x;
        q += len;
    }
    return runs;
}

/* d[0 .. n) = s[0 .. n), n <= 16, in pieces of 8, 4, 2 and 1 floats (AVX2 has no fast masked
 * store on every core: AMD's take many cycles each). */
static inline void copy_run(float *d, const float *s, int n) {
    if (n & 16) _mm256_storeu_ps(d, _mm256_loadu_ps(s)), d += 8, s += 8, n -= 8;
    if (n & 8) _mm256_storeu_ps(d, _mm256_loadu_ps(s)), d += 8, s += 8;
    if (n & 4) _mm_storeu_ps(d, _mm_loadu_ps(s)), d += 4, s += 4;
    if (n & 2) _mm_storel_pi((__m64 *)d, _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)s)), d += 2, s += 2;
    if (n & 1) *d = *s;
}

/* A block's row v (16 lanes) into C's row: side by side (whole), or the runs' lanes [lo, hi) from
 * column at on, through t */
static inline void store_row(float *row, lanes16 v, int whole, int runs, const int *lo, const int *hi,
                             const int64_t *at, float *t) {
    if (whole) {
        l16_store(row + at[0], v);
        return;
    }
    l16_store(t, v);
    for (int s = 0; s < runs; s++) copy_run(row + at[s], t + lo[s], hi[s] - lo[s]);
}

/* The last pass's epilogue on a block row's 16 lanes: + its row's bias (*rb; rb NULL: none), +
 * the columns' biases cb, + the residual's lanes (res: NULL for none), then the clamp. */
static inline lanes16 finish_row(lanes16 v, const float *rb, lanes16 cb, const float *res, int clamp, lanes16 lo,
                                 lanes16 hi) {
    if (rb) v = l16_add(v, l16_set1(*rb));
    v = l16_add(v, cb);
    if (res) v = l16_add(v, l16_load(res));
    return clamp ? l16_clamp(v, lo, hi) : v;
}

/* The residual's 16 lanes for a block row stored into C's row `row` as store_row stores it: read
 * in place (whole), or its runs' lanes set out in t (the other lanes 0). */
static inline const float *residual_lanes(const epi *e, const float *row, int whole, int runs, const int *lo,
                                          const int *hi, const int64_t *at, float *t) {
    const float *r = e->res + (row - e->c0);
    if (whole) return r + at[0];
    l16_store(t, l16_set1(0.0f));
    for (int s = 0; s < runs; s++) copy_run(t + lo[s], r + at[s], hi[s] - lo[s]);
    return t;
}

/* A finished 6 x 16 block of sums (acc, row r's lanes in acc[r]) into C: c is C's row i0 and the
 * block its rows [i0, i0 + rows) by columns [j0, j0 + cols). Its 16 columns go to C side by side,
 * or by runs (an edge block's first cols, or the runs the gutter map keeps): each row's sums set
 * out in a stack row, then copied run by run. On the last pass (`last`) the epilogue is applied;
 * with `accumulate`, C's earlier partial sums are added first. */
static void store_block(const lanes16 acc[MR], float *c, int64_t ldc, int64_t rows, int64_t cols, int accumulate,
                        int last, const epi *e, int64_t i0, int64_t j0) {
    float t[MR * NR]; /* the block on its way to C: row r at t + r * NR (runs, the other activations) */
    lanes16 cb = l16_set1(0.0f);
    const lanes16 lo_v = l16_set1(e->lo), hi_v = l16_set1(e->hi);
    if (last && e->col_bias && cols == NR) {
        cb = l16_load(e->col_bias + j0); /* not through t: a 512-bit load of two 256-bit stores waits on them */
    } else if (last && e->col_bias) {
        l16_store(t, cb);
        copy_run(t, e->col_bias + j0, (int)cols);
        cb = l16_load(t);
    }
    if (e->transposed) { /* all of k in this pass (last): through the epilogue, column j0+q of C^T is C's row */
        for (int r = 0; r < MR; r++)
            l16_store(t + r * NR, finish_row(acc[r], e->row_bias && r < rows ? e->row_bias + i0 + r : NULL, cb, NULL,
                                             e->clamp && !e->res, lo_v, hi_v));
        if (e->res) { /* the residual lies transposed to the block: added element by element */
            for (int q = 0; q < cols; q++) {
                const float *rq = e->res + (c + (j0 + q) * ldc + i0 - e->c0);
                for (int r = 0; r < rows; r++) {
                    const float v = t[r * NR + q] + rq[r];
                    t[r * NR + q] = e->clamp ? cpu_clamp(v, e->lo, e->hi) : v;
                }
            }
        }
        if (e->other) cpu_activate_rows16(t, MR, e->attrs);
        for (int q = 0; q < cols; q++) {
            float *d = c + (j0 + q) * ldc + i0;
            for (int r = 0; r < rows; r++) d[r] = t[r * NR + q];
        }
        return;
    }
    int lo[NR], hi[NR], runs = 1;
    int64_t at[NR];
    lo[0] = 0, hi[0] = (int)cols, at[0] = j0;
    if (e->rl && (runs = block_runs(e, j0, (int)cols, lo, hi, at)) == 0) return; /* all in the gutter */
    const int whole = runs == 1 && lo[0] == 0 && hi[0] == NR;                    /* the 16 columns side by side in C */
    const int act_after = last && e->other; /* the block through the activation in L1, then stored */
    for (int r = 0; r < rows; r++) {
        float *row = c + r * ldc, *tr = t + r * NR;
        lanes16 v = acc[r];
        if (accumulate && whole) {
            v = l16_add(v, l16_load(row + at[0]));
        } else if (accumulate) { /* the gutter's lanes add 0 */
            l16_store(tr, l16_set1(0.0f));
            for (int s = 0; s < runs; s++) copy_run(tr + lo[s], row + at[s], hi[s] - lo[s]);
            v = l16_add(v, l16_load(tr));
        }
        if (last)
            v = finish_row(v, e->row_bias ? e->row_bias + i0 + r : NULL, cb,
                           e->res ? residual_lanes(e, row, whole, runs, lo, hi, at, tr) : NULL, e->clamp, lo_v, hi_v);
        if (act_after) l16_store(tr, v);
        else store_row(row, v, whole, runs, lo, hi, at, tr);
    }
    if (act_after) {
        cpu_activate_rows16(t, (int)rows, e->attrs);
        for (int r = 0; r < rows; r++)
            store_row(c + r * ldc, l16_load(t + r * NR), whole, runs, lo, hi, at, t + r * NR);
    }
}

/* The micro-kernel first fetches, for writing, C's lines that the block PREFETCH_BLOCKS to the
 * right of its own (same rows) will store, and the residual's lines it will read. Blocks go down
 * A's panels first, so those lines are needed PREFETCH_BLOCKS x (A panels in a block) blocks later;
 * their stores then find them in cache instead of each waiting for its line to come from memory
 * (a row panel stores into 6 channel planes at once: too many streams for the hardware's
 * prefetcher, and `perf` put 20 % of a 16 -> 64 1x1 conv's samples on its stores). Measured on the
 * 2-core AMD EPYC VM, 2 threads (docs/performance.md): 1x1 convs as cpu_gemm alone, 8 images,
 * medians of 40 alternated, 16 -> 96 on 112x112 10.9 -> 7.7 ms, 24 -> 144 on 56x56 4.2 -> 3.1 ms;
 * inside models (`dlrun compare`) the same convs 1.03-1.21x, C in L2 (14x14) unchanged. Written
 * out as a macro: GCC drops a call to a function of prefetches alone. A block of `np` panels
 * fetches np lines a row. */
#define PREFETCH_BLOCKS 2
#define PREFETCH_C(e, c, ldc, rows, j0, np)                                                                         \
    do {                                                                                                            \
        if ((e)->transposed) break;                                                                                 \
        for (int h_ = 0; h_ < (np); h_++) {                                                                         \
            const int64_t j_ = column_at((e), (j0) + (PREFETCH_BLOCKS * (np) + h_) * NR); /* -1: in the gutter */   \
            const uintptr_t to_ = (uintptr_t)(c) + (uintptr_t)j_ * sizeof(float);                                   \
            const uintptr_t res_ =                                                                                  \
                (e)->res ? (uintptr_t)((e)->res + ((c) - (e)->c0)) + (uintptr_t)j_ * sizeof(float) : 0;             \
            for (int64_t r_ = 0; j_ >= 0 && r_ < (rows); r_++) { /* addresses only: may lie past C's end */         \
                __builtin_prefetch((const void *)(to_ + (uintptr_t)(r_ * (ldc)) * sizeof(float)), 1, 3);            \
                if (res_) __builtin_prefetch((const void *)(res_ + (uintptr_t)(r_ * (ldc)) * sizeof(float)), 0, 3); \
            }                                                                                                       \
        }                                                                                                           \
    } while (0)

/* The k loop of a micro-kernel, STEP(a, bp) being one k step on A's 6 floats at a and B's step at
 * bp: A packed (steps MR apart, a constant the compiler unrolls by) or read in place; B packed
 * (NR floats a step) or read in place (step p at b + rows_at[p]) */
#define K_LOOP(STEP)                                                               \
    do {                                                                           \
        if (rows_at && a_step == MR)                                               \
            for (int64_t p = 0; p < kc; p++, a += MR) STEP(a, b + rows_at[p]);     \
        else if (rows_at)                                                          \
            for (int64_t p = 0; p < kc; p++, a += a_step) STEP(a, b + rows_at[p]); \
        else if (a_step == MR)                                                     \
            for (int64_t p = 0; p < kc; p++, a += MR, b += NR) STEP(a, b);         \
        else                                                                       \
            for (int64_t p = 0; p < kc; p++, a += a_step, b += NR) STEP(a, b);     \
    } while (0)

/* One k step of the block: each of A's 6 floats at a times two vectors of B at bp and bp +
 * SECOND_AT, into c<row>0 and c<row>1. AVX-512: two panels of 16 (a 6 x 32 block, the second
 * panel b_next floats past the first); AVX2: one panel of 16 as two vectors of 8 (6 x 16). With
 * AVX-512, STEP1 is the step of a lone panel (6 x 16, c<row>0 only). */
#ifdef CPU_GEMM_AVX512
/* B panels a micro-kernel call takes: 4 (6 x 64) where B was packed before the product (a weight:
 * linear, matmul by a weight, an NHWC 1x1 conv), 2 (6 x 32) otherwise. A transformer's linears ran
 * 6-15 % faster at 6 x 64; MobileNetV2's NCHW convs, their image read in place as B with few k
 * steps a call, 10-15 % slower. */
#define KERNEL_PANELS 4
#define KERNEL_PANELS_AT_RUN_TIME 2
#define PAIR_A_PANELS 1 /* a lone panel of B takes two of A */
#define VEC __m512
#define V_LOAD _mm512_loadu_ps
#define V_SET1 _mm512_set1_ps
#define V_FMA _mm512_fmadd_ps
#define V_ZERO _mm512_setzero_ps
#define SECOND_AT b_next
#define STEP_ROW1(r, a, b0) c##r##0 = V_FMA(V_SET1((a)[r]), b0, c##r##0)
#define STEP1(a, bp)                                                      \
    do {                                                                  \
        const VEC b0_ = V_LOAD(bp);                                       \
        STEP_ROW1(0, a, b0_), STEP_ROW1(1, a, b0_), STEP_ROW1(2, a, b0_); \
        STEP_ROW1(3, a, b0_), STEP_ROW1(4, a, b0_), STEP_ROW1(5, a, b0_); \
    } while (0)
/* A lone panel of B with two of A (a 12 x 16 block: c<row>0 the first A panel's rows, c<row>1 the
 * second's, a_next floats past the first): 12 sums in flight where 6 would wait on each other */
#define STEP_ROW_PAIR(r, a, b0) \
    c##r##0 = V_FMA(V_SET1((a)[r]), b0, c##r##0), c##r##1 = V_FMA(V_SET1((a)[a_next + (r)]), b0, c##r##1)
#define STEP_PAIR(a, bp)                                                              \
    do {                                                                              \
        const VEC b0_ = V_LOAD(bp);                                                   \
        STEP_ROW_PAIR(0, a, b0_), STEP_ROW_PAIR(1, a, b0_), STEP_ROW_PAIR(2, a, b0_); \
        STEP_ROW_PAIR(3, a, b0_), STEP_ROW_PAIR(4, a, b0_), STEP_ROW_PAIR(5, a, b0_); \
    } while (0)
#else
#define KERNEL_PANELS 1
#define KERNEL_PANELS_AT_RUN_TIME 1
#define PAIR_A_PANELS 0
#define VEC __m256
#define V_LOAD _mm256_loadu_ps
#define V_SET1 _mm256_set1_ps
#define V_FMA _mm256_fmadd_ps
#define V_ZERO _mm256_setzero_ps
#define SECOND_AT 8
#endif
#define STEP_ROW2(r, a, b0, b1)           \
    do {                                  \
        const VEC x_ = V_SET1((a)[r]);    \
        c##r##0 = V_FMA(x_, b0, c##r##0); \
        c##r##1 = V_FMA(x_, b1, c##r##1); \
    } while (0)
#define STEP2(a, bp)                                                \
    do {                                                            \
        const VEC b0_ = V_LOAD(bp), b1_ = V_LOAD((bp) + SECOND_AT); \
        STEP_ROW2(0, a, b0_, b1_);                                  \
        STEP_ROW2(1, a, b0_, b1_);                                  \
        STEP_ROW2(2, a, b0_, b1_);                                  \
        STEP_ROW2(3, a, b0_, b1_);                                  \
        STEP_ROW2(4, a, b0_, b1_);                                  \
        STEP_ROW2(5, a, b0_, b1_);                                  \
    } while (0)
#ifdef CPU_GEMM_AVX512
/* Three and four panels of B (6 x 48, 6 x 64: 18 and 24 sums in registers, 4 B vectors and 6
 * broadcasts feeding 24 FMAs a step where 6 x 32 had 2 and 6 feeding 12) */
#define STEP_ROW3(r, a, b0, b1, b2)       \
    do {                                  \
        const VEC x_ = V_SET1((a)[r]);    \
        c##r##0 = V_FMA(x_, b0, c##r##0); \
        c##r##1 = V_FMA(x_, b1, c##r##1); \
        c##r##2 = V_FMA(x_, b2, c##r##2); \
    } while (0)
#define STEP3(a, bp)                                                                              \
    do {                                                                                          \
        const VEC b0_ = V_LOAD(bp), b1_ = V_LOAD((bp) + b_next), b2_ = V_LOAD((bp) + 2 * b_next); \
        STEP_ROW3(0, a, b0_, b1_, b2_);                                                           \
        STEP_ROW3(1, a, b0_, b1_, b2_);                                                           \
        STEP_ROW3(2, a, b0_, b1_, b2_);                                                           \
        STEP_ROW3(3, a, b0_, b1_, b2_);                                                           \
        STEP_ROW3(4, a, b0_, b1_, b2_);                                                           \
        STEP_ROW3(5, a, b0_, b1_, b2_);                                                           \
    } while (0)
#define STEP_ROW4(r, a, b0, b1, b2, b3)   \
    do {                                  \
        const VEC x_ = V_SET1((a)[r]);    \
        c##r##0 = V_FMA(x_, b0, c##r##0); \
        c##r##1 = V_FMA(x_, b1, c##r##1); \
        c##r##2 = V_FMA(x_, b2, c##r##2); \
        c##r##3 = V_FMA(x_, b3, c##r##3); \
    } while (0)
#define STEP4(a, bp)                                                                              \
    do {                                                                                          \
        const VEC b0_ = V_LOAD(bp), b1_ = V_LOAD((bp) + b_next), b2_ = V_LOAD((bp) + 2 * b_next), \
                  b3_ = V_LOAD((bp) + 3 * b_next);                                                \
        STEP_ROW4(0, a, b0_, b1_, b2_, b3_);                                                      \
        STEP_ROW4(1, a, b0_, b1_, b2_, b3_);                                                      \
        STEP_ROW4(2, a, b0_, b1_, b2_, b3_);                                                      \
        STEP_ROW4(3, a, b0_, b1_, b2_, b3_);                                                      \
        STEP_ROW4(4, a, b0_, b1_, b2_, b3_);                                                      \
        STEP_ROW4(5, a, b0_, b1_, b2_, b3_);                                                      \
    } while (0)
#endif

/* The block of A's panel a (6 rows) times np of B's panels (np is 1; with AVX-512 up to 2, or 4 for a
 * B packed beforehand) over kc
 * steps: B's panel at b (NR floats a step), the next b_next floats further, or B read in place
 * (step p's 16 or 32 floats at b + rows_at[p]; b_next is then NR). c is C's row i0, the block its
 * rows [i0, i0 + rows) by columns [j0, j0 + cols), cols <= np * 16; store_block takes each 16
 * columns. With AVX-512 and one panel of B, A's next panel may come too (a_next floats past a,
 * its steps as far apart; 0: none): rows2 more rows of C from i0 + 6 (c + 6 ldc, or c itself
 * where C is stored transposed). */
static void micro_kernel(int np, int64_t kc, const float *a, int64_t a_next, int64_t a_step, const float *b,
                         int64_t b_next, const int64_t *rows_at, float *c, int64_t ldc, int64_t rows, int64_t rows2,
                         int64_t cols, int accumulate, int last, const epi *e, int64_t i0, int64_t j0) {
    VEC c00 = V_ZERO(), c10 = c00, c20 = c00, c30 = c00, c40 = c00, c50 = c00;
    VEC c01 = c00, c11 = c00, c21 = c00, c31 = c00, c41 = c00, c51 = c00;
    PREFETCH_C(e, c, ldc, rows + rows2, j0, np);
#ifdef CPU_GEMM_AVX512
    if (a_next) {
        K_LOOP(STEP_PAIR);
        const lanes16 first[MR] = {c00, c10, c20, c30, c40, c50}, second[MR] = {c01, c11, c21, c31, c41, c51};
        store_block(first, c, ldc, rows, cols, accumulate, last, e, i0, j0);
        store_block(second, e->transposed ? c : c + MR * ldc, ldc, rows2, cols, accumulate, last, e, i0 + MR, j0);
        return;
    }
    if (np <= 2) { /* 12 sums: the 6 x 32 block as it was, nothing more set up or stored */
        if (np == 2) K_LOOP(STEP2);
        else K_LOOP(STEP1);
        const lanes16 left[MR] = {c00, c10, c20, c30, c40, c50}, right[MR] = {c01, c11, c21, c31, c41, c51};
        store_block(left, c, ldc, rows, cols < NR ? cols : NR, accumulate, last, e, i0, j0);
        if (np == 2) store_block(right, c, ldc, rows, cols - NR, accumulate, last, e, i0, j0 + NR);
        return;
    }
    VEC c02 = c00, c12 = c00, c22 = c00, c32 = c00, c42 = c00, c52 = c00;
    VEC c03 = c00, c13 = c00, c23 = c00, c33 = c00, c43 = c00, c53 = c00;
    if (np == 4) K_LOOP(STEP4);
    else K_LOOP(STEP3);
    const lanes16 acc[4][MR] = {{c00, c10, c20, c30, c40, c50},
                                {c01, c11, c21, c31, c41, c51},
                                {c02, c12, c22, c32, c42, c52},
                                {c03, c13, c23, c33, c43, c53}};
    for (int q = 0; q < np; q++)
        store_block(acc[q], c, ldc, rows, cols - q * NR < NR ? cols - q * NR : NR, accumulate, last, e, i0,
                    j0 + q * NR);
#else
    K_LOOP(STEP2);
    const lanes16 acc[MR] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    store_block(acc, c, ldc, rows, cols, accumulate, last, e, i0, j0);
#endif
}
#else
#define KERNEL_PANELS 1
#define KERNEL_PANELS_AT_RUN_TIME 1
#define PAIR_A_PANELS 0
static void micro_kernel(int np, int64_t kc, const float *a, int64_t a_next, int64_t a_step, const float *b,
                         int64_t b_next, const int64_t *rows_at, float *c, int64_t ldc, int64_t rows, int64_t rows2,
                         int64_t cols, int accumulate, int last, const epi *e, int64_t i0, int64_t j0) {
    float t[MR * NR] = {0};
    for (int64_t p = 0; p < kc; p++, a += a_step) {
        const float *bp = rows_at ? b + rows_at[p] : b + p * NR;
        for (int r = 0; r < MR; r++)
            for (int q = 0; q < NR; q++) t[r * NR + q] += a[r] * bp[q];
    }
    if (e->transposed) { /* all of k in this pass */
        store_transposed(t, NR, c, ldc, e, i0, i0 + rows, j0, j0 + cols);
        return;
    }
    merge_block(t, c, ldc, rows, cols, accumulate, last, e, i0, j0);
}
#endif

/* Blocks of C: at most 16 panels of A by 16 of B, halved until every thread has about two blocks,
 * so that thin or small products still use every core. Where B is packed at run time (a conv's
 * windows), a block takes up to 48 panels of A (288 filters: one pass of them is 288 KiB, in L2)
 * so that B is packed once or nearly, and the split goes along n: each block packs its own
 * columns of B. */
static void plan_blocks(int64_t a_panels, int64_t b_panels, int threads, int b_at_run_time, int64_t *bm, int64_t *bn) {
    const int64_t most_a = MOST_A_PANELS(b_at_run_time);
    int64_t tm = a_panels < most_a ? a_panels : most_a, tn = b_panels < BLOCK_PANELS ? b_panels : BLOCK_PANELS;
    for (;;) {
        const int64_t blocks = ((a_panels + tm - 1) / tm) * ((b_panels + tn - 1) / tn);
        if (blocks >= 2 * (int64_t)threads || (tm == 1 && tn == 1)) break;
        if (tn > 1 && (b_at_run_time || tn * NR >= tm * MR || tm == 1)) tn = (tn + 1) / 2;
        else tm = (tm + 1) / 2;
    }
    *bm = tm, *bn = tn;
}

static const epi sums = {NULL, NULL, 0, 0, 0, 0.0f, 0.0f, NULL, 0, 0, NULL, NULL}; /* C as it lies, no epilogue */

/* A's panel ip from k step p0 on, and the floats between its steps: packed (pa), or read in place
 * (a->base), its last panel, when partial, from the copy of it that pa then holds */
static const float *a_panel(const cpu_gemm_operand *a, const float *pa, int64_t m, int64_t k, int64_t ip, int64_t p0,
                            int64_t *step) {
    if (!a->base || (ip + 1) * MR > m) {
        *step = MR;
        return a->base ? pa + p0 * MR : pa + ip * k * MR + p0 * MR;
    }
    *step = a->ld;
    return a->base + p0 * a->ld + ip * MR;
}

/* One block of C: A's panels [ia, ib) by B's panels [ja, jb), every pass over k. B is packed
 * (pb, all of k per panel), or packed here pass by pass into buf with b->pack. For a transposed C
 * the sums gather in tb (the block's own rows by columns, padded to whole panels) and go to C
 * through the epilogue once they are complete, unless all of k is one pass: then each block of
 * sums goes to C from the micro-kernel. */
static void run_block(int64_t m, int64_t n, int64_t k, const cpu_gemm_operand *a, const float *pa, const float *pb,
                      const cpu_gemm_operand *b, float *buf, float *tb, float *c, int64_t ldc, const epi *e, int64_t ia,
                      int64_t ib, int64_t ja, int64_t jb) {
    const int64_t tl = (jb - ja) * NR;
    const int64_t step = b->row_at ? KC_IN_PLACE : pb ? KC_PACKED : KC;
    if (tb && k <= step) tb = NULL; /* one pass: C^T stored block by block */
    for (int64_t p0 = 0; p0 < k; p0 += step) {
        const int64_t kc = k - p0 < step ? k - p0 : step;
        const int last = p0 + kc == k;
        const int64_t *at = b->row_at ? b->row_at + p0 : NULL; /* B read in place */
        if (!pb && !at)
            for (int64_t jp = ja; jp < jb; jp++) b->pack(b->ctx, jp, p0, kc, buf + (jp - ja) * kc * NR);
        /* `group` of B's panels at a time; the next one b_next floats past the first */
        const int64_t b_next = at ? NR : pb ? k * NR : kc * NR;
        const int group = pb ? KERNEL_PANELS : KERNEL_PANELS_AT_RUN_TIME;
        for (int64_t jp = ja; jp < jb; jp += group) {
            const int np = jb - jp < group ? (int)(jb - jp) : group;
            const int64_t j0 = jp * NR, cols = n - j0 < np * NR ? n - j0 : np * NR;
            const float *bp = at ? b->base + j0 : pb ? pb + jp * k * NR + p0 * NR : buf + (jp - ja) * kc * NR;
            for (int64_t ip = ia; ip < ib; ip++) {
                const int64_t i0 = ip * MR, rows = m - i0 < MR ? m - i0 : MR;
                int64_t as, as2, a_next = 0, rows2 = 0;
                const float *ap = a_panel(a, pa, m, k, ip, p0, &as);
                /* two of A's panels from one buffer (not A read in place and its last panel's copy) */
                if (PAIR_A_PANELS && np == 1 && ip + 1 < ib && (!a->base || (ip + 2) * MR <= m)) {
                    const float *ap2 = a_panel(a, pa, m, k, ip + 1, p0, &as2);
                    a_next = ap2 - ap, rows2 = m - i0 - MR < MR ? m - i0 - MR : MR, ip++;
                }
                if (tb) /* the sums as they lie, no epilogue yet */
                    micro_kernel(np, kc, ap, a_next, as, bp, b_next, at, tb + (i0 - ia * MR) * tl, tl, MR,
                                 a_next ? MR : 0, np * NR, p0 > 0, 0, &sums, 0, (jp - ja) * NR);
                else if (e->transposed)
                    micro_kernel(np, kc, ap, a_next, as, bp, b_next, at, c, ldc, rows, rows2, cols, 0, 1, e, i0, j0);
                else
                    micro_kernel(np, kc, ap, a_next, as, bp, b_next, at, c + i0 * ldc, ldc, rows, rows2, cols, p0 > 0,
                                 last, e, i0, j0);
            }
        }
    }
    const int64_t i1 = ib * MR < m ? ib * MR : m, j0 = ja * NR, j1 = jb * NR < n ? jb * NR : n;
    if (tb) store_transposed(tb, tl, c, ldc, e, ia * MR, i1, j0, j1);
}

void cpu_gemm(int64_t m, int64_t n, int64_t k, const cpu_gemm_operand *a, const cpu_gemm_operand *b, float *c,
              int64_t ldc, const cpu_gemm_epilogue *e, float *scratch, int threads) {
    if (m <= 0 || n <= 0) return;
    const epi x = epi_of(e, c);
    if (k <= 0) { /* an empty sum: the epilogue of zeros */
        float t[MR * NR] = {0};
        if (x.transposed) { /* tl 0: every row reads t's first row */
            for (int64_t j = 0; j < n; j += NR) store_transposed(t, 0, c, ldc, &x, 0, m, j, n - j < NR ? n : j + NR);
            return;
        }
        for (int64_t i = 0; i < m; i += MR)
            for (int64_t j = 0; j < n; j += NR)
                merge_block(t, c + i * ldc, ldc, m - i < MR ? m - i : MR, n - j < NR ? n - j : NR, 0, 1, &x, i, j);
        return;
    }
    const int64_t a_panels = (m + MR - 1) / MR, b_panels = (n + NR - 1) / NR;
    if (threads < 1) threads = 1;
    float *pa = a->packed ? (float *)a->packed : scratch; /* or, A read in place, the copy of its last panel */
    const int b_packs = !b->packed && !b->row_at;         /* B packed here, block by block */
    float *bufs = scratch + (a->packed ? 0 : (a->base ? 1 : a_panels) * MR * k); /* one B buffer per thread */
    float *tbufs = bufs + (b_packs ? (size_t)threads * b_buffer_floats(k) : 0);  /* one block of sums each */
    int64_t bm, bn;
    plan_blocks(a_panels, b_panels, threads, b_packs, &bm, &bn);
    int64_t mb = (a_panels + bm - 1) / bm, nb = (b_panels + bn - 1) / bn;
    /* Few blocks (under 4 a thread): the panels shared out evenly, as many blocks for each thread
     * where there are panels enough (49 panels in 4 blocks of 12 or 13, not 16, 16, 16 and 1: one
     * thread would do 32 panels of the 49). Many: blocks of bm x bn panels, the last ones
     * smaller (shared evenly, they measured 5 % slower on 112x112 and 56x56 maps). */
    const int even = mb * nb < 4 * (int64_t)threads;
    while (even && (mb * nb) % threads && nb < b_panels) nb++;
    while (even && (mb * nb) % threads && mb < a_panels) mb++;
    if (mb * nb < threads && a->packed) threads = (int)(mb * nb);
    if (a->base && m % MR) { /* A read in place: its partial last panel packed */
        const cpu_gemm_strided edge = {a->base, 1, a->ld, m, k};
        cpu_gemm_pack_a_strided(&edge, a_panels - 1, 0, k, pa);
    }
    /* block t of the mb x nb: A's panels [ia, ib) by B's [ja, jb) */
#define BLOCK_OF(t)                                                                                         \
    const int64_t bi = (t) / nb, bj = (t) % nb;                                                             \
    const int64_t ia = even ? bi * a_panels / mb : bi * bm, ib = even ? (bi + 1) * a_panels / mb : ia + bm; \
    const int64_t ja = even ? bj * b_panels / nb : bj * bn, jb = even ? (bj + 1) * b_panels / nb : ja + bn
    if (threads == 1) { /* no parallel region: one inside another's (Winograd's products) would allocate a team */
        if (a->pack)
            for (int64_t p = 0; p < a_panels; p++) a->pack(a->ctx, p, 0, k, pa + p * MR * k);
        for (int64_t t = 0; t < mb * nb; t++) {
            BLOCK_OF(t);
            run_block(m, n, k, a, pa, b->packed, b, b_packs ? bufs : NULL, x.transposed ? tbufs : NULL, c, ldc, &x, ia,
                      ib < a_panels ? ib : a_panels, ja, jb < b_panels ? jb : b_panels);
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        int t_id = 0;
#ifdef _OPENMP
        t_id = omp_get_thread_num();
#endif
        float *buf = bufs + (size_t)t_id * b_buffer_floats(k);
        float *tb = x.transposed ? tbufs + (size_t)t_id * t_buffer_floats(b_packs) : NULL;
        if (a->pack) {
#pragma omp for schedule(static)
            for (int64_t p = 0; p < a_panels; p++) a->pack(a->ctx, p, 0, k, pa + p * MR * k);
        }
        /* blocks along n first: neighbouring threads share A's panels; taken as threads come free */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < mb * nb; t++) {
            BLOCK_OF(t);
            run_block(m, n, k, a, pa, b->packed, b, b_packs ? buf : NULL, tb, c, ldc, &x, ia,
                      ib < a_panels ? ib : a_panels, ja, jb < b_panels ? jb : b_panels);
        }
    }
#undef BLOCK_OF
}

const char *cpu_gemm_isa(void) {
#if defined(CPU_GEMM_AVX512)
    return "AVX-512";
#elif defined(CPU_GEMM_AVX2)
    return "AVX2";
#else
    return "portable C";
#endif
}

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

cpu_gemm_form cpu_gemm_conv_form(int64_t m, int64_t n, int64_t k) {
    /* a small map with many taps: the pixels pad less in panels of 6 than of 16 (a 7x7 map's 49
     * pixels are 54 or 64) and the long sums pay for storing C transposed */
    const int64_t filter_rows = round_up(m, MR) * round_up(n, NR), pixel_rows = round_up(n, MR) * round_up(m, NR);
    if (k >= 512 && 10 * pixel_rows < 9 * filter_rows) return CPU_GEMM_PIXEL_ROWS;
    return k <= 64 || (n >= 512 && k <= 1024) ? CPU_GEMM_FILTER_ROWS : CPU_GEMM_NOT;
}
