/* test_cuda_mma.c — the cuda plugin's tensor-core GEMM (plugins/cuda/ops/mma_gemm.cu) without a
 * GPU: its kernel's steps replayed on the host, block by block and lane by lane, through the same
 * index functions the kernel calls (plugins/cuda/mma_layout.h: which thread loads which element of
 * a stage, where ldmatrix points, which register holds which element), with mma.sync and ldmatrix
 * modelled from the PTX ISA's fragment tables (written here independently of mma_layout.h), then
 * compared with naive conv2d and linear on odd shapes: groups, stride, padding, dilation, tails in
 * M, N and K, 16-byte and element loads, all three tile shapes, 4- and 2-byte elements. Stage
 * slots start as NaN, so an element the loaders forget fails the comparison; every output is
 * written once. Also: the fragment reads hit 32 banks (the padding's claim), the k-table, and the
 * rules of gemm_plan.c (which variant may run what, the switches). What the GPU does with it is
 * for the GPU round: tools/gpu-check mma. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"
#include "gemm_plan.h"
#include "mma_layout.h"

/* ---- the ISA's fragments: which lane and register hold an element (m16n8k8 .tf32 and
 *      m16n8k16 .f16/.bf16; 16-bit registers hold two elements, `half` says which) ---- */

static void isa_a(int es, int row, int k, int *lane, int *reg) {
    if (es == 4) *lane = (row % 8) * 4 + k % 4, *reg = row / 8 + 2 * (k / 4);
    else *lane = (row % 8) * 4 + (k % 8) / 2, *reg = (row / 8 + 2 * (k / 8)) * 2 + k % 2;
}
static void isa_b(int es, int k, int n, int *lane, int *reg) {
    if (es == 4) *lane = n * 4 + k % 4, *reg = k / 4;
    else *lane = n * 4 + (k % 8) / 2, *reg = (k / 8) * 2 + k % 2;
}
static void isa_c(int row, int n, int *lane, int *reg) { *lane = (row % 8) * 4 + n / 2, *reg = (row / 8) * 2 + n % 2; }

/* d += a b for one warp: registers a[lane][8], b[lane][4] (16-bit: element slots), d[lane][4] */
static void isa_mma(int es, double d[32][4], const float a[32][8], const float b[32][4]) {
    int K = es == 4 ? 8 : 16;
    for (int row = 0; row < 16; row++)
        for (int n = 0; n < 8; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                int la, ra, lb, rb;
                isa_a(es, row, k, &la, &ra);
                isa_b(es, k, n, &lb, &rb);
                s += (double)a[la][ra] * b[lb][rb];
            }
            int lc, rc;
            isa_c(row, n, &lc, &rc);
            d[lc][rc] += s;
        }
}

/* ldmatrix.x4 (b16, no .trans): lane l gives addr[l], the start of row l % 8 of matrix l / 8 (8
 * rows of 16 bytes); lane l receives in register j bytes 4 (l % 4) .. 4 (l % 4) + 3 of row l / 4 of
 * matrix j: elements 2 (l % 4) and 2 (l % 4) + 1 of 2 bytes (register slots 2j, 2j + 1), or
 * element l % 4 of 4 bytes (slot j). Shared memory is modelled as an array of elements. */
static void isa_ldsm_x4(int es, const float *smem, const int addr[32], float out[32][8]) {
    int per = 4 / es;
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < per; h++) out[l][j * per + h] = smem[addr[j * 8 + l / 4] + per * (l % 4) + h];
}

/* ---- the problems ---- */

typedef struct prob {
    int conv;                                                           /* else linear */
    int n, c, h, w, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups; /* conv */
    int cl;             /* conv: x and y channels-last, the weights KRSC (dlk_conv's cl) */
    int batch, in, out; /* linear */
    int relu;
    float *x, *wt, *b, *y; /* x NCHW and wt OIHW (the naive references read them), y as cl says */
    float *xk, *wk;        /* what the replayed kernel reads: x and wt, or their NHWC and KRSC copies */
    int *writes;
    int wg_runs; /* grids the warpgroup tile ran (check) */
    mma_ktap *ktab;
    int M, N, K, cg, ocg;
} prob;

typedef mma_pix pix;

static mma_conv_geom geom_of(const prob *p) {
    mma_conv_geom q = {p->c, p->h, p->w, p->oc, p->oh, p->ow, p->cg, p->ocg, p->sh, p->sw, p->ph, p->pw, p->cl};
    return q;
}

static float rnd(void) { return (float)(rand() % 33 - 16) / 8.f; }

static float *fill(size_t n) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = rnd();
    return p;
}

/* ---- one block of the kernel, replayed: the same steps as mma_tiles in mma_gemm.cu ---- */

enum { STAGES = 3, MAXT = 256 };

/* load_dense: rows x BK of a dense operand (row r at p + r * ld), by 16-byte chunks or elements */
static void load_dense(float *s, int es, int S, int ROWS, int THREADS, const float *p, int rows, int K, long long ld,
                       int vec, int r0, int k0) {
    for (int tid = 0; tid < THREADS; tid++) {
        if (vec) {
            int E = 16 / es;
            for (int j = 0; j < ROWS * MMA_BK / E / THREADS; j++) {
                int row, k;
                mma_load_chunk(tid, j, THREADS, es, &row, &k);
                int ok = r0 + row < rows && k0 + k < K;
                for (int e = 0; e < E; e++) s[row * S + k + e] = ok ? p[(r0 + row) * ld + k0 + k + e] : 0.f;
            }
        } else {
            for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
                int row, k;
                mma_load_elem(tid, j, THREADS, &row, &k);
                int ok = r0 + row < rows && k0 + k < K;
                s[row * S + k] = ok ? p[(r0 + row) * ld + k0 + k] : 0.f;
            }
        }
    }
}

/* A conv's gather, in two steps as the kernel's 16-bit path takes it: each thread's elements into
 * registers (fetch_gather), then into the stage (put_gather); its f32 path (load_gather, by
 * cp.async) puts the same element in the same slot, so the replay of it is the two in a row. */
static void fetch_gather(float *r, int ROWS, int THREADS, const prob *p, const pix *px, int k0) {
    for (int tid = 0; tid < THREADS; tid++) {
        int row, k;
        mma_load_elem(tid, 0, THREADS, &row, &k);
        int kin = k0 + k < p->K;
        mma_ktap t = {0, 0, 0, 0};
        if (kin) t = p->ktab[k0 + k];
        for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
            mma_load_elem(tid, j, THREADS, &row, &k);
            const pix *q = &px[row];
            int iy = q->iy0 + t.dy, ix = q->ix0 + t.dx;
            int ok = kin && (unsigned)iy < (unsigned)p->h && (unsigned)ix < (unsigned)p->w;
            r[tid * (ROWS * MMA_BK / THREADS) + j] = ok ? p->xk[q->xoff + t.off] : 0.f;
        }
    }
}
static void put_gather(float *s, int S, int ROWS, int THREADS, const float *r) {
    for (int tid = 0; tid < THREADS; tid++)
        for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
            int row, k;
            mma_load_elem(tid, j, THREADS, &row, &k);
            s[row * S + k] = r[tid * (ROWS * MMA_BK / THREADS) + j];
        }
}

/* load_gather_cl: 16-byte chunks of one tap's channels from NHWC x, the chunk's k looked up once
 * per thread; each chunk read must start 16-byte aligned (x itself is) */
static void load_gather_cl(float *s, int es, int S, int ROWS, int THREADS, const prob *p, const pix *px, int k0) {
    const int E = 16 / es;
    for (int tid = 0; tid < THREADS; tid++) {
        int row, k;
        mma_load_chunk(tid, 0, THREADS, es, &row, &k);
        const int k_of_thread = k, kin = k0 + k < p->K;
        mma_ktap t = {0, 0, 0, 0};
        if (kin) t = p->ktab[k0 + k];
        for (int j = 0; j < ROWS * MMA_BK / E / THREADS; j++) {
            mma_load_chunk(tid, j, THREADS, es, &row, &k);
            cr_assert_eq(k, k_of_thread, "thread %d's chunks keep one column", tid);
            const pix *q = &px[row];
            int iy = q->iy0 + t.dy, ix = q->ix0 + t.dx;
            int ok = kin && (unsigned)iy < (unsigned)p->h && (unsigned)ix < (unsigned)p->w;
            if (ok) cr_assert_eq((q->xoff + t.off) % E, 0, "chunk at element %lld", q->xoff + t.off);
            for (int e = 0; e < E; e++) s[row * S + k + e] = ok ? p->xk[q->xoff + t.off + e] : 0.f;
        }
    }
}

static int vec_ok(int es, int K, long long group_rows) {
    int E = 16 / es;
    return K % E == 0 && (group_rows * K) % E == 0; /* the tensors here are 16-byte aligned (malloc) */
}

/* the epilogue of the sum v of filter or feature o, stored at y[at]: bias, relu, and the write
 * counted (each output must be written once) */
static void put_out(const prob *p, int o, long long at, float v) {
    if (p->b) v += p->b[o];
    if (p->relu && v < 0.f) v = 0.f;
    p->y[at] = v;
    p->writes[at]++;
}

/* a block's sum v of filter or feature m (group g) at its column nl (output n0 + nl; px[nl], a
 * conv's pixel): with split-K, the raw sum of slice z; else the epilogue, as the kernels' store */
static void block_out(const prob *p, const mma_conv_geom *geom, const pix *px, int g, int z, int splits, float *part,
                      int m, int n0, int nl, float v) {
    if (splits > 1) part[((long long)z * p->M + m) * p->N + n0 + nl] = v;
    else if (p->conv) put_out(p, g * p->ocg + m, mma_y_at(geom, &px[nl], m), v);
    else put_out(p, m, (long long)(n0 + nl) * p->M + m, v);
}

/* block (bx, by, z = g * splits + sp); part: split-K's partial sums when splits > 1 */
static void block(const prob *p, int es, int BM, int BN, int WM, int WN, int bx, int by, int z, int splits,
                  float *part) {
    const int g = z / splits, sp = z % splits;
    const int THREADS = WM * WN * 32, S = mma_row_stride(es), KS = mma_kstep(es);
    const int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
    const int m0 = by * BM, n0 = bx * BN;
    float *As = malloc(sizeof(float) * STAGES * BM * S), *Bs = malloc(sizeof(float) * STAGES * BN * S);
    for (int i = 0; i < STAGES * BM * S; i++) As[i] = NAN;
    for (int i = 0; i < STAGES * BN * S; i++) Bs[i] = NAN;
    pix px[128];
    const mma_conv_geom geom = geom_of(p);
    if (p->conv) /* prologue */
        for (int i = 0; i < BN; i++) px[i] = mma_pix_of(&geom, (long long)n0 + i, p->N, g);
    double(*acc)[32][4] = calloc((size_t)(WM * WN) * MI * NI, sizeof *acc); /* [warp][i][j] */
    const int KT_ALL = (p->K + MMA_BK - 1) / MMA_BK, per = (KT_ALL + splits - 1) / splits;
    const int kb = KT_ALL < sp * per ? KT_ALL : sp * per, KT = (KT_ALL < kb + per ? KT_ALL : kb + per) - kb;
    const float *wa = p->wk + (p->conv ? (long long)g * p->ocg * p->K : 0);
    int avec = vec_ok(es, p->K, p->conv ? p->ocg : 0), bvec = !p->conv && vec_ok(es, p->K, 0);
    /* the channels-last chunk gather (ConvP<T, true>) where the channels allow, else elements */
    const int chunks = p->conv && p->cl && mma_cl_chunks(es, p->c, p->cg);
    const int reg_b = p->conv && es == 2 && !chunks; /* ConvP::REG_B */
    float *rb = malloc(sizeof(float) * BN * MMA_BK);
#define LOAD_A(stage, kt) \
    load_dense(As + (stage)*BM * S, es, S, BM, THREADS, wa, p->M, p->K, p->K, avec, m0, (kb + (kt)) * MMA_BK)
#define LOAD_B(stage, kt)                                                                                 \
    do {                                                                                                  \
        if (chunks) load_gather_cl(Bs + (stage)*BN * S, es, S, BN, THREADS, p, px, (kb + (kt)) * MMA_BK); \
        else if (p->conv)                                                                                 \
            fetch_gather(rb, BN, THREADS, p, px, (kb + (kt)) * MMA_BK),                                   \
                put_gather(Bs + (stage)*BN * S, S, BN, THREADS, rb);                                      \
        else                                                                                              \
            load_dense(Bs + (stage)*BN * S, es, S, BN, THREADS, p->xk, p->N, p->K, p->K, bvec, n0,        \
                       (kb + (kt)) * MMA_BK);                                                             \
    } while (0)
    for (int s = 0; s < STAGES - 1; s++)
        if (s < KT) {
            LOAD_A(s, s);
            if (reg_b)
                fetch_gather(rb, BN, THREADS, p, px, (kb + s) * MMA_BK),
                    put_gather(Bs + s * BN * S, S, BN, THREADS, rb);
            else LOAD_B(s, s);
        }
    if (reg_b && STAGES - 1 < KT) fetch_gather(rb, BN, THREADS, p, px, (kb + STAGES - 1) * MMA_BK);
    for (int kt = 0; kt < KT; kt++) {
        const int nk = kt + STAGES - 1, slot = nk % STAGES;
        if (nk < KT) {
            LOAD_A(slot, nk);
            if (reg_b) put_gather(Bs + slot * BN * S, S, BN, THREADS, rb);
            else LOAD_B(slot, nk);
        }
        if (reg_b && nk + 1 < KT) fetch_gather(rb, BN, THREADS, p, px, (kb + nk + 1) * MMA_BK);
        for (int warp = 0; warp < WM * WN; warp++) {
            int wm = warp / WN, wn = warp % WN;
            const float *as = As + (kt % STAGES) * BM * S + wm * WTM * S;
            const float *bs = Bs + (kt % STAGES) * BN * S + wn * WTN * S;
            for (int ks = 0; ks < MMA_BK; ks += KS) {
                static float a[8][32][8], b[8][32][4];
                const int epr = 4 / es; /* elements per 32-bit register */
                int addr[32];
                float t[32][8];
                for (int i = 0; i < MI; i++) {
                    for (int lane = 0; lane < 32; lane++) {
                        int row, k;
                        mma_ldsm_a(lane, es, &row, &k);
                        addr[lane] = (i * 16 + row) * S + ks + k;
                    }
                    isa_ldsm_x4(es, as, addr, a[i]);
                }
                for (int j = 0; j < NI; j += 2) {
                    for (int lane = 0; lane < 32; lane++) {
                        int n, k;
                        mma_ldsm_b(lane, es, &n, &k);
                        addr[lane] = (j * 8 + n) * S + ks + k;
                    }
                    isa_ldsm_x4(es, bs, addr, t);
                    for (int lane = 0; lane < 32; lane++)
                        for (int h = 0; h < 2 * epr; h++) { /* registers 0, 1 -> tile j; 2, 3 -> tile j + 1 */
                            b[j][lane][h] = t[lane][h];
                            b[j + 1][lane][h] = t[lane][2 * epr + h];
                        }
                }
                for (int i = 0; i < MI; i++)
                    for (int j = 0; j < NI; j++) isa_mma(es, acc[(warp * MI + i) * NI + j], a[i], b[j]);
            }
        }
    }
#undef LOAD_A
#undef LOAD_B
    free(rb);
    for (int warp = 0; warp < WM * WN; warp++) { /* epilogue */
        int wm = warp / WN, wn = warp % WN;
        for (int i = 0; i < MI; i++)
            for (int j = 0; j < NI; j++)
                for (int lane = 0; lane < 32; lane++)
                    for (int q = 0; q < 4; q++) {
                        int row, n;
                        mma_c(lane, q, &row, &n);
                        int m = m0 + wm * WTM + i * 16 + row, nl = wn * WTN + j * 8 + n;
                        if (m >= p->M || n0 + nl >= p->N) continue;
                        block_out(p, &geom, px, g, z, splits, part, m, n0, nl,
                                  (float)acc[(warp * MI + i) * NI + j][lane][q]);
                    }
    }
    free(acc);
    free(As);
    free(Bs);
}

static void splitk_replay(const prob *p, float *part, int splits);

/* the whole grid, as mma_gemm.cu's launch: (N / BN, M / BM, groups x splits), then with split-K
 * its splitk_sum */
static void run_grid(const prob *p, int es, int tile, int splits) {
    static const int warps[3][2] = {{2, 4}, {2, 2}, {2, 2}};
    int bm, bn, groups = p->conv ? p->groups : 1;
    cu_mma_tile_shape(tile, &bm, &bn);
    float *part = splits > 1 ? malloc(cu_splitk_bytes(splits, groups, p->M, p->N)) : NULL;
    for (int z = 0; z < groups * splits; z++)
        for (int by = 0; by < (p->M + bm - 1) / bm; by++)
            for (int bx = 0; bx < (p->N + bn - 1) / bn; bx++)
                block(p, es, bm, bn, warps[tile][0], warps[tile][1], bx, by, z, splits, part);
    if (part) splitk_replay(p, part, splits);
}

/* split-K's second kernel (mma_gemm.cu's splitk_sum): the slices added, the epilogue, y; frees
 * part */
static void splitk_replay(const prob *p, float *part, int splits) {
    int groups = p->conv ? p->groups : 1;
    long long mn = (long long)p->M * p->N;
    for (long long e = 0; e < mn * groups; e++) {
        int g = (int)(e / mn), m = (int)(e % mn / p->N), n = (int)(e % p->N), o = g * p->M + m;
        float v = 0.f;
        for (int sp = 0; sp < splits; sp++) v += part[((long long)g * splits + sp) * mn + e % mn];
        const mma_conv_geom geom = geom_of(p);
        put_out(p, o, p->conv ? mma_conv_y_of(&geom, n, o) : (long long)n * p->M + m, v);
    }
    free(part);
}

/* ---- the sm_90 warpgroup tile (ops/wgmma_gemm.cu), replayed ---- */

/* The PTX ISA's view of a K-major operand without swizzle, read through a matrix descriptor: 14
 * bits of start address >> 4 (bits 0-13), of leading byte offset >> 4 (16-29: between the core
 * matrices along k) and of stride byte offset >> 4 (32-45: between 8-row groups), base offset
 * (49-51) and swizzle mode (62-63) zero here. A core matrix is 8 rows of 16 contiguous bytes, row
 * after row. Element k (es bytes each) of row i: its core matrix is (i / 8, k es / 16), the row
 * within it i % 8. Returns the byte address. */
static uint32_t isa_wg_addr(uint64_t desc, int es, int i, int k) {
    cr_assert_eq((desc >> 62) & 3, 0, "no swizzle");
    cr_assert_eq((desc >> 49) & 7, 0, "base offset 0");
    uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4;
    uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    int kb = k * es;
    return start + (uint32_t)(i / 8) * sbo + (uint32_t)(kb / 16) * lbo + (uint32_t)(i % 8) * 16 + (uint32_t)(kb % 16);
}

/* The ISA's accumulator of .m64nNk* with f32 sums, as CUTLASS writes it (thread t of the
 * warpgroup, value v): t = t0 + 4 t1 + 32 t2 and v = v0 + 2 v1 + 4 v2 hold row t1 + 16 t2 + 8 v1,
 * column 2 t0 + v0 + 8 v2. */
static void isa_wg_c(int t, int v, int *row, int *col) {
    int t0 = t % 4, t1 = t / 4 % 8, t2 = t / 32, v0 = v % 2, v1 = v / 2 % 2, v2 = v / 4;
    *row = t1 + 16 * t2 + 8 * v1;
    *col = 2 * t0 + v0 + 8 * v2;
}

/* Shared memory as elements: byte address a holds element a / es of mem (a multiple of es). */
enum { WG_SMEM_BASE = 3072 }; /* the dynamic window starts past the static pixel table */

/* copy_dense and Conv::load_b: each thread's 16-byte chunks (wg_load_chunk) to wg_at */
static void wg_copy(float *mem, int es, uint32_t stage, int ROWS, const prob *p, int operand_b, const pix *px,
                    const float *src, int rows, int r0, int k0) {
    const int E = 16 / es;
    for (int tid = 0; tid < WG_THREADS; tid++) {
        int row, ch;
        wg_load_chunk(tid, 0, &row, &ch);
        const int k = k0 + ch * E, ch0 = ch, kin = k < p->K;
        mma_ktap t = {0, 0, 0, 0};
        if (operand_b && p->conv && kin) t = p->ktab[k];
        for (int j = 0; j < ROWS / 32; j++) {
            wg_load_chunk(tid, j, &row, &ch);
            cr_assert_eq(ch, ch0, "thread %d keeps its chunk column", tid);
            long long at = -1; /* element offset in the source, -1: zeros */
            if (operand_b && p->conv) {
                const pix *q = &px[row];
                int iy = q->iy0 + t.dy, ix = q->ix0 + t.dx;
                if (kin && (unsigned)iy < (unsigned)p->h && (unsigned)ix < (unsigned)p->w) at = q->xoff + t.off;
            } else if (kin && r0 + row < rows) {
                at = (long long)(r0 + row) * p->K + k;
            }
            if (at >= 0) cr_assert_eq(at % E, 0, "a 16-byte chunk starts aligned (element %lld)", at);
            uint32_t a = stage + (uint32_t)wg_at(row, ch * 16);
            cr_assert_eq(a % 16, 0);
            for (int e = 0; e < E; e++) mem[a / es + e] = at >= 0 ? src[at + e] : 0.f;
        }
    }
}

static void block_wg(const prob *p, int es, int bn, int bx, int by, int z, int splits, float *part) {
    const int g = z / splits, sp = z % splits, m0 = by * WG_BM, n0 = bx * bn, BK = wg_bk(es);
    const int A_STAGE = WG_BM * WG_KBYTES, B_STAGE = bn * WG_KBYTES;
    const size_t n_mem = (size_t)(WG_SMEM_BASE + wg_smem_bytes(bn)) / es;
    float *mem = malloc(n_mem * sizeof *mem);
    for (size_t i = 0; i < n_mem; i++) mem[i] = NAN;
    const uint32_t As = WG_SMEM_BASE, Bs = As + WG_STAGES * A_STAGE;
    pix px[WG_BN_MAX];
    const mma_conv_geom geom = geom_of(p);
    if (p->conv)
        for (int i = 0; i < bn; i++) px[i] = mma_pix_of(&geom, (long long)n0 + i, p->N, g);
    static double d[2][64][WG_BN_MAX]; /* each warpgroup's 64 x bn sums, as the ISA keeps them */
    memset(d, 0, sizeof d);
    const int KT_ALL = (p->K + BK - 1) / BK, per = (KT_ALL + splits - 1) / splits;
    const int kb = KT_ALL < sp * per ? KT_ALL : sp * per, KT = (KT_ALL < kb + per ? KT_ALL : kb + per) - kb;
    const float *wa = p->wk + (p->conv ? (long long)g * p->ocg * p->K : 0);
    /* the kernel's order: k-tiles 0 and 1 first, then at step kt the copy of kt + 2, then the wgmma of kt */
    for (int kt = -(WG_STAGES - 2); kt < KT; kt++) {
        const int nk = kt + WG_STAGES - 2, slot = nk % WG_STAGES;
        if (nk < KT) {
            wg_copy(mem, es, As + slot * A_STAGE, WG_BM, p, 0, px, wa, p->M, m0, (kb + nk) * BK);
            wg_copy(mem, es, Bs + slot * B_STAGE, bn, p, 1, px, p->xk, p->N, n0, (kb + nk) * BK);
        }
        if (kt < 0) continue;
        const uint32_t a = As + (kt % WG_STAGES) * A_STAGE, b = Bs + (kt % WG_STAGES) * B_STAGE;
        for (int wg = 0; wg < 2; wg++)
            for (int ks = 0; ks < WG_KBYTES / WG_KSTEP_BYTES; ks++) {
                uint64_t da = wg_desc(wg_start(a, 64 * wg, ks)), db = wg_desc(wg_start(b, 0, ks));
                const int KS = WG_KSTEP_BYTES / es;
                float opa[64][16], opb[WG_BN_MAX][16]; /* the operands as the descriptors read them */
                for (int k = 0; k < KS; k++) {
                    for (int i = 0; i < 64; i++) opa[i][k] = mem[isa_wg_addr(da, es, i, k) / es];
                    for (int n = 0; n < bn; n++) opb[n][k] = mem[isa_wg_addr(db, es, n, k) / es];
                }
                for (int i = 0; i < 64; i++)
                    for (int n = 0; n < bn; n++)
                        for (int k = 0; k < KS; k++) d[wg][i][n] += (double)opa[i][k] * opb[n][k];
            }
    }
    for (int tid = 0; tid < WG_THREADS; tid++) /* the epilogue: register r of each thread */
        for (int r = 0; r < wg_acc(bn); r++) {
            const int wg = tid / 128, t = tid % 128;
            int irow, icol, row, col;
            isa_wg_c(t, r, &irow, &icol);        /* what the register holds */
            wg_c(t / 32, t % 32, r, &row, &col); /* where the kernel puts it */
            const int m = m0 + 64 * wg + row, n = n0 + col;
            if (m >= p->M || n >= p->N) continue;
            block_out(p, &geom, px, g, z, splits, part, m, n0, col, (float)d[wg][irow][icol]);
        }
    free(mem);
}

/* a warpgroup tile's grid (N / bn, M / 128, groups x splits), then split-K's sum */
static void run_grid_wg(const prob *p, int es, int bn, int splits) {
    int groups = p->conv ? p->groups : 1;
    float *part = splits > 1 ? malloc(cu_splitk_bytes(splits, groups, p->M, p->N)) : NULL;
    for (int z = 0; z < groups * splits; z++)
        for (int by = 0; by < (p->M + WG_BM - 1) / WG_BM; by++)
            for (int bx = 0; bx < (p->N + bn - 1) / bn; bx++) block_wg(p, es, bn, bx, by, z, splits, part);
    if (part) splitk_replay(p, part, splits);
}

/* ---- naive references ---- */

static double naive_conv(const prob *p, int img, int o, int oy, int ox) {
    int g = o / p->ocg;
    double s = p->b ? p->b[o] : 0;
    for (int ci = 0; ci < p->cg; ci++)
        for (int ky = 0; ky < p->kh; ky++)
            for (int kx = 0; kx < p->kw; kx++) {
                int iy = oy * p->sh - p->ph + ky * p->dh, ix = ox * p->sw - p->pw + kx * p->dw;
                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
                s += (double)p->x[(((long long)img * p->c + g * p->cg + ci) * p->h + iy) * p->w + ix] *
                     p->wt[(((long long)o * p->cg + ci) * p->kh + ky) * p->kw + kx];
            }
    return p->relu && s < 0 ? 0 : s;
}

static double naive_linear(const prob *p, int n, int m) {
    double s = p->b ? p->b[m] : 0;
    for (int k = 0; k < p->in; k++) s += (double)p->x[(long long)n * p->in + k] * p->wt[(long long)m * p->in + k];
    return p->relu && s < 0 ? 0 : s;
}

/* y against the naive reference: every output right and written once */
static void compare(const prob *p, const char *what, int es, const char *tile, int splits) {
    size_t ny = p->conv ? (size_t)p->n * p->oc * p->oh * p->ow : (size_t)p->batch * p->out;
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < ny; i++) {
        double ref;
        if (p->conv && p->cl) { /* y NHWC */
            size_t r = i;
            int o = (int)(r % p->oc);
            r /= p->oc;
            int ox = (int)(r % p->ow);
            r /= p->ow;
            ref = naive_conv(p, (int)(r / p->oh), o, (int)(r % p->oh), ox);
        } else if (p->conv) {
            size_t r = i;
            int ox = (int)(r % p->ow);
            r /= p->ow;
            int oy = (int)(r % p->oh);
            r /= p->oh;
            int o = (int)(r % p->oc), img = (int)(r / p->oc);
            ref = naive_conv(p, img, o, oy, ox);
        } else {
            ref = naive_linear(p, (int)(i / p->out), (int)(i % p->out));
        }
        double e = fabs(p->y[i] - ref);
        if (!(e <= 1e-4 * (1 + fabs(ref))) || p->writes[i] != 1) bad++;
        if (!(e <= worst)) worst = e;
    }
    cr_expect(bad == 0, "%s, %d-byte elements, %s, %d k-slices: %zu of %zu outputs wrong (worst |error| %g)", what, es,
              tile, splits, bad, ny, worst);
}

static void clear_y(prob *p) {
    size_t ny = p->conv ? (size_t)p->n * p->oc * p->oh * p->ow : (size_t)p->batch * p->out;
    for (size_t i = 0; i < ny; i++) p->y[i] = NAN, p->writes[i] = 0;
}

/* every tile that may run the problem (gemm_plan.c's rules), in both element sizes, with 1 to 3
 * k-slices */
static void check(prob *p, const char *what) {
    for (int es = 4; es >= 2; es -= 2) {
        for (int tile = 0; tile < 3; tile++) {
            /* channels-last: only where the plugin would run it (gemm_plan.c) */
            if (p->cl && !cu_mma_conv_cl_ok(CU_GEMM_MMA + tile, p->c, p->cg, p->w, p->kh, p->kw, p->dh, p->dw))
                continue;
            char name[32];
            snprintf(name, sizeof name, "tile %d", tile);
            for (int splits = 1; splits <= 3; splits++) {
                clear_y(p);
                run_grid(p, es, tile, splits);
                compare(p, what, es, name, splits);
            }
        }
        if (!cu_wgmma_ok(es, p->conv, p->cl, p->c, p->cg, p->K) ||
            (p->conv && !cu_mma_conv_cl_ok(CU_GEMM_WGMMA, p->c, p->cg, p->w, p->kh, p->kw, p->dh, p->dw)))
            continue;
        for (int bn = 128; bn <= WG_BN_MAX; bn *= 2)
            for (int splits = 1; splits <= 3; splits++) {
                char name[40];
                snprintf(name, sizeof name, "the 128x%d warpgroup tile", bn);
                clear_y(p);
                run_grid_wg(p, es, bn, splits);
                compare(p, what, es, name, splits);
                p->wg_runs++;
            }
    }
}

/* returns the grids the warpgroup tile ran */
static int conv_case(int n, int c, int h, int w, int oc, int k, int s, int pad, int d, int groups, int relu,
                     const char *what) {
    prob p = {.conv = 1,
              .n = n,
              .c = c,
              .h = h,
              .w = w,
              .oc = oc,
              .kh = k,
              .kw = k,
              .sh = s,
              .sw = s,
              .ph = pad,
              .pw = pad,
              .dh = d,
              .dw = d,
              .groups = groups,
              .relu = relu};
    p.oh = (h + 2 * pad - d * (k - 1) - 1) / s + 1;
    p.ow = (w + 2 * pad - d * (k - 1) - 1) / s + 1;
    p.cg = c / groups, p.ocg = oc / groups;
    p.M = p.ocg, p.N = n * p.oh * p.ow, p.K = p.cg * k * k;
    p.x = fill((size_t)n * c * h * w);
    p.wt = fill((size_t)oc * p.K);
    p.b = fill((size_t)oc);
    size_t ny = (size_t)n * oc * p.oh * p.ow;
    p.y = malloc(ny * sizeof *p.y);
    p.writes = malloc(ny * sizeof *p.writes);
    cr_assert(cu_mma_conv_fits(p.cg, h, w, k, k, d, d));
    p.ktab = malloc((size_t)p.K * sizeof *p.ktab);
    cu_mma_ktab(p.cg, k, k, h, w, d, d, p.ktab);
    p.xk = p.x, p.wk = p.wt;
    check(&p, what);
    { /* channels-last too: by 16-byte chunks where the channels fill them, else element by element */
        p.cl = 1;
        p.xk = malloc((size_t)n * c * h * w * sizeof *p.xk);
        p.wk = malloc((size_t)oc * p.K * sizeof *p.wk);
        for (int i = 0; i < n; i++) /* NCHW -> NHWC */
            for (int ch = 0; ch < c; ch++)
                for (int r = 0; r < h * w; r++)
                    p.xk[((size_t)i * h * w + r) * c + ch] = p.x[((size_t)i * c + ch) * h * w + r];
        for (int o = 0; o < oc; o++) /* OIHW -> KRSC */
            for (int ci = 0; ci < p.cg; ci++)
                for (int t = 0; t < k * k; t++)
                    p.wk[((size_t)o * k * k + t) * p.cg + ci] = p.wt[((size_t)o * p.cg + ci) * k * k + t];
        cu_mma_ktab_cl(c, p.cg, k, k, w, d, d, p.ktab);
        char cl_what[200];
        snprintf(cl_what, sizeof cl_what, "%s, channels-last", what);
        check(&p, cl_what);
        free(p.xk), free(p.wk);
    }
    free(p.x), free(p.wt), free(p.b), free(p.y), free(p.writes), free(p.ktab);
    return p.wg_runs;
}

static int linear_case(int batch, int in, int out, int relu, const char *what) {
    prob p = {.batch = batch, .in = in, .out = out, .relu = relu, .M = out, .N = batch, .K = in};
    p.x = p.xk = fill((size_t)batch * in);
    p.wt = p.wk = fill((size_t)out * in);
    p.b = fill((size_t)out);
    p.y = malloc((size_t)batch * out * sizeof *p.y);
    p.writes = malloc((size_t)batch * out * sizeof *p.writes);
    check(&p, what);
    free(p.x), free(p.wt), free(p.b), free(p.y), free(p.writes);
    return p.wg_runs;
}

Test(cuda_mma, conv_blocks_replayed_match_naive) {
    srand(7);
    int wg = 0; /* grids the warpgroup tile ran: where channels-last chunks fit */
    /* groups, stride 2, padding, dilation 2, K = 27 (element loads, a K tail), N = 2 x 25 */
    wg += conv_case(2, 6, 9, 11, 10, 3, 2, 1, 2, 2, 1, "3x3 conv, 2 groups, stride 2, dilation 2");
    /* K = 16: 16-byte loads of the weights in both sizes; N = 3 x 81 = 243 crosses 128 and 64 */
    wg += conv_case(3, 16, 9, 9, 20, 1, 1, 0, 1, 1, 0, "1x1 conv, 16 -> 20 channels");
    /* M = 130 filters cross the 128-row tile; K = 4 x 9 = 36, two stages with a tail */
    wg += conv_case(1, 4, 7, 13, 130, 3, 1, 1, 1, 1, 1, "3x3 conv, 130 filters");
    /* K = 2 x 5 x 5 = 50 over two stages, 5x5 padding 3 reaches far outside */
    wg += conv_case(1, 2, 6, 5, 3, 5, 1, 3, 1, 1, 0, "5x5 conv, padding 3");
    /* depthwise: 8 groups of one channel, K = 9 */
    wg += conv_case(2, 8, 5, 6, 8, 3, 1, 1, 1, 8, 1, "depthwise 3x3");
    /* K = 144: 5 k-tiles, so the pipeline's steady state (slots reused, 16-bit gathers fetched a
     * stage ahead), and slices of 2 and 1 k-tiles with split-K */
    wg += conv_case(2, 16, 9, 10, 24, 3, 1, 1, 1, 1, 1, "3x3 conv, 16 -> 24 channels");
    /* K = 256: 8 k-tiles, 16-byte weight loads in both sizes */
    wg += conv_case(1, 256, 5, 7, 40, 1, 1, 0, 1, 1, 0, "1x1 conv, 256 -> 40 channels");
    /* groups with 16-byte weight loads: K = 8 (both sizes; group g starts 48 elements on) */
    wg += conv_case(2, 16, 6, 6, 12, 1, 1, 0, 1, 2, 1, "1x1 conv, 2 groups of 8 channels");
    /* K = 36: 16-byte loads in f32 (group g starts 180 floats on), element loads in 16-bit */
    wg += conv_case(1, 8, 7, 7, 10, 3, 1, 1, 1, 2, 0, "3x3 conv, 2 groups of 4 channels");
    /* channels-last in both sizes (groups of 8 channels): stride 2, dilation 2, padding 2, K = 72
     * (a k tail in the third k-tile), taps outside the image on every side */
    wg += conv_case(2, 16, 9, 11, 12, 3, 2, 2, 2, 2, 1, "3x3 conv, 2 groups of 8, stride 2, dilation 2");
    /* channels-last: 24 channels (three 16-bit chunks a tap), N = 3 x 49 = 147 past one 128 tile */
    wg += conv_case(3, 24, 7, 7, 136, 3, 1, 1, 1, 1, 0, "3x3 conv, 24 -> 136 channels");
    /* channels-last, whole chunks: in both sizes 16 -> 20, 16 -> 24, 256 -> 40, 2 groups of 8 (1x1 and
     * 3x3) and 24 -> 136; in f32 only 4 -> 130 and 2 groups of 4: 14 (case, size) pairs, 2 tiles of
     * 3 splits each */
    cr_expect_eq(wg, 14 * 2 * 3, "the warpgroup tiles ran %d grids", wg);
}

Test(cuda_mma, linear_blocks_replayed_match_naive) {
    srand(11);
    int wg = 0;
    wg += linear_case(37, 100, 70, 1, "linear 100 -> 70, batch 37 (f32 16-byte loads, 16-bit element loads)");
    wg += linear_case(5, 96, 131, 0, "linear 96 -> 131, batch 5 (16-byte loads in both sizes)");
    wg += linear_case(130, 33, 9, 1, "linear 33 -> 9, batch 130 (element loads, a K tail)");
    wg += linear_case(1, 200, 3, 0, "linear 200 -> 3, batch 1 (7 k-stages)");
    /* K a whole number of 16-byte chunks: 100 (f32), 96 (both), 200 (both) */
    cr_expect_eq(wg, 5 * 2 * 3, "the warpgroup tiles ran %d grids", wg);
}

/* The padding's claim (mma_layout.h): each 8-lane phase of an ldmatrix reads 8 different 16-byte
 * bank groups, and every row it points at is 16-byte aligned, for both element sizes. */
Test(cuda_mma, fragment_reads_hit_every_bank_once) {
    for (int es = 4; es >= 2; es -= 2)
        for (int which = 0; which < 2; which++) /* A, B */
            for (int ks = 0; ks < MMA_BK; ks += mma_kstep(es))
                for (int phase = 0; phase < 4; phase++) {
                    int seen[8] = {0};
                    for (int lane = phase * 8; lane < phase * 8 + 8; lane++) {
                        int row, k;
                        if (which) mma_ldsm_b(lane, es, &row, &k);
                        else mma_ldsm_a(lane, es, &row, &k);
                        int byte = (row * mma_row_stride(es) + ks + k) * es;
                        cr_expect_eq(byte % 16, 0, "ldmatrix rows are 16-byte aligned");
                        seen[byte / 16 % 8]++;
                    }
                    for (int b = 0; b < 8; b++)
                        cr_expect_eq(seen[b], 1, "%d-byte %c, k %d, phase %d: bank group %d read %d times", es,
                                     which ? 'B' : 'A', ks, phase, b, seen[b]);
                }
}

/* The ldmatrix maps of mma_layout.h give each lane, register by register, the element the ISA's
 * fragment table puts there (and the accumulator map is the table's): element by element. */
Test(cuda_mma, fragment_maps_are_the_isa_tables) {
    for (int es = 4; es >= 2; es -= 2) {
        const int per = 4 / es, K = 2 * (16 / es);
        /* a 16 x K tile whose element (row, k) holds row * 100 + k, with rows of K elements */
        float tile[16 * 32], regs[32][8];
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < K; k++) tile[r * K + k] = (float)(r * 100 + k);
        int addr[32];
        for (int which = 0; which < 2; which++) {
            for (int lane = 0; lane < 32; lane++) {
                int row, k;
                if (which) mma_ldsm_b(lane, es, &row, &k);
                else mma_ldsm_a(lane, es, &row, &k);
                addr[lane] = row * K + k;
            }
            isa_ldsm_x4(es, tile, addr, regs);
            for (int row = 0; row < (which ? 8 : 16); row++)
                for (int k = 0; k < K; k++) {
                    int lane, slot;
                    if (which) { /* B: the first n8 tile's registers 0, 1; rows 8-15 are the second's */
                        isa_b(es, k, row, &lane, &slot);
                        float got = regs[lane][slot], other = regs[lane][2 * per + slot];
                        cr_expect(got == tile[row * K + k] && other == tile[(row + 8) * K + k],
                                  "%d-byte B (k %d, n %d): lane %d slot %d holds %g", es, k, row, lane, slot, got);
                    } else {
                        isa_a(es, row, k, &lane, &slot);
                        cr_expect(regs[lane][slot] == tile[row * K + k], "%d-byte A (%d, %d): lane %d slot %d holds %g",
                                  es, row, k, lane, slot, regs[lane][slot]);
                    }
                }
        }
    }
    for (int lane = 0; lane < 32; lane++)
        for (int r = 0; r < 4; r++) {
            int row, n, l, reg;
            mma_c(lane, r, &row, &n);
            isa_c(row, n, &l, &reg);
            cr_expect(l == lane && reg == r, "C lane %d register %d", lane, r);
        }
}

Test(cuda_mma, ktab_is_the_naive_tap_offsets) {
    int cg = 3, kh = 2, kw = 3, h = 7, w = 5, dh = 2, dw = 3;
    mma_ktap t[18];
    cu_mma_ktab(cg, kh, kw, h, w, dh, dw, t);
    int k = 0;
    for (int ci = 0; ci < cg; ci++)
        for (int ky = 0; ky < kh; ky++)
            for (int kx = 0; kx < kw; kx++, k++) {
                cr_expect_eq(t[k].off, ci * h * w + ky * dh * w + kx * dw, "k %d", k);
                cr_expect(t[k].dy == ky * dh && t[k].dx == kx * dw, "k %d", k);
            }
    cr_expect(cu_mma_conv_fits(512, 224, 224, 3, 3, 1, 1));
    cr_expect_not(cu_mma_conv_fits(65536, 256, 256, 1, 1, 1, 1), "2^32 elements in one image's group");
}

Test(cuda_mma, channels_last_ktab_and_its_rules) {
    int c = 24, cg = 8, kh = 2, kw = 3, w = 5, dh = 2, dw = 3;
    mma_ktap t[48];
    cu_mma_ktab_cl(c, cg, kh, kw, w, dh, dw, t);
    int k = 0;
    for (int ky = 0; ky < kh; ky++) /* KRSC: the taps outside, a group's channels inside */
        for (int kx = 0; kx < kw; kx++)
            for (int ci = 0; ci < cg; ci++, k++) {
                cr_expect_eq(t[k].off, (ky * dh * w + kx * dw) * c + ci, "k %d", k);
                cr_expect(t[k].dy == ky * dh && t[k].dx == kx * dw, "k %d", k);
            }
    const int v = CU_GEMM_MMA;
    cr_expect(cu_mma_conv_cl_ok(v, 64, 64, 224, 3, 3, 1, 1), "VGG-16's conv2");
    cr_expect(cu_mma_conv_cl_ok(v + 2, 3, 3, 224, 3, 3, 1, 1), "an RGB stem (element by element)");
    cr_expect_not(cu_mma_conv_cl_ok(0, 64, 64, 56, 3, 3, 1, 1), "the SIMT tiles read NCHW");
    cr_expect_not(cu_mma_conv_cl_ok(CU_GEMM_GEMV, 64, 64, 56, 1, 1, 1, 1), "the GEMV is no conv");
    cr_expect_not(cu_mma_conv_cl_ok(v, 4096, 4096, 65536, 3, 3, 4, 4), "offsets past 32 bits");
    /* which gather: chunks of 4 floats or 8 halves of one tap's channels, or elements */
    cr_expect(mma_cl_chunks(2, 64, 64) && mma_cl_chunks(4, 4, 4) && mma_cl_chunks(2, 16, 8));
    cr_expect_not(mma_cl_chunks(2, 4, 4), "4 channels are half a 16-bit chunk");
    cr_expect_not(mma_cl_chunks(4, 3, 3), "an RGB stem");
    cr_expect_not(mma_cl_chunks(2, 16, 4), "4 channels a group in 16-bit");
}

Test(cuda_mma, variants_and_switches) {
    cu_gemm_switch sw;
    char why[160];
    cr_assert(cu_gemm_switch_parse(NULL, NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.mma == 1 && sw.forced == -1, "on by default since the GPU round of 2026-11-30");
    cr_assert(cu_gemm_switch_parse("", NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.mma == 1, "an empty value is unset");
    cr_assert(cu_gemm_switch_parse("0", NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.mma == 0 && sw.forced == -1);
    /* DLRUN_CUDA_MMA=0: the SIMT tiles only, on f32 only */
    for (int v = 0; v < CU_GEMM_VARIANTS; v++) {
        cr_expect_eq(cu_gemm_variant_ok(&sw, v, DL_GPU_F32, DL_PRECISION_TF32, 0), v < CU_GEMM_MMA, "variant %d", v);
        cr_expect_eq(cu_gemm_variant_ok(&sw, v, DL_GPU_F32, DL_PRECISION_F32, 1), v < CU_GEMM_MMA, "variant %d", v);
        cr_expect_not(cu_gemm_variant_ok(&sw, v, DL_GPU_F16, DL_PRECISION_F16, 0), "variant %d on f16", v);
    }
    cr_assert(cu_gemm_switch_parse("1", "", NULL, NULL, &sw, why, sizeof why));
    for (int v = CU_GEMM_MMA; v < CU_GEMM_GEMV; v++) {
        cr_expect_not(cu_gemm_variant_ok(&sw, v, DL_GPU_F32, DL_PRECISION_F32, 0), "tf32 is not f32: variant %d", v);
        cr_expect(cu_gemm_variant_ok(&sw, v, DL_GPU_F32, DL_PRECISION_TF32, 0));
        cr_expect(cu_gemm_variant_ok(&sw, v, DL_GPU_F32, DL_PRECISION_BF16, 3));
        cr_expect(cu_gemm_variant_ok(&sw, v, DL_GPU_F16, DL_PRECISION_F16, 0));
        cr_expect(cu_gemm_variant_ok(&sw, v, DL_GPU_BF16, DL_PRECISION_BF16, 0));
    }
    /* the GEMV: linear of 1 to 8 rows, exact f32 sums, any storage */
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_GEMV, DL_GPU_F32, DL_PRECISION_F32, 1));
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_GEMV, DL_GPU_BF16, DL_PRECISION_BF16, CU_GEMV_ROWS));
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_GEMV, DL_GPU_F32, DL_PRECISION_TF32, CU_GEMV_ROWS + 1));
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_GEMV, DL_GPU_F32, DL_PRECISION_TF32, 0), "not a conv");
    cr_expect_not(cu_gemm_variant_ok(&sw, 0, DL_GPU_BF16, DL_PRECISION_BF16, 0), "the SIMT tiles are f32 only");
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_VARIANTS, DL_GPU_F32, DL_PRECISION_TF32, 0));
    cr_assert(cu_gemm_switch_parse(NULL, "3", NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.forced == 3 && sw.mma == 1, "a forced variant of issue 14 turns them on");
    cr_assert(cu_gemm_switch_parse("0", "1", NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.forced == 1 && sw.mma == 0);
    cr_expect_not(cu_gemm_switch_parse(NULL, "8", NULL, NULL, &sw, why, sizeof why));
    cr_expect(strstr(why, "DLRUN_CUDA_GEMM_VARIANT is \"8\"") != NULL, "%s", why);
    cr_expect_not(cu_gemm_switch_parse(NULL, "2x", NULL, NULL, &sw, why, sizeof why));
    cr_expect_not(cu_gemm_switch_parse(NULL, "-1", NULL, NULL, &sw, why, sizeof why));
    cr_expect_not(cu_gemm_switch_parse("yes", NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect(strstr(why, "DLRUN_CUDA_MMA") != NULL, "%s", why);
    /* DLRUN_CUDA_NHWC: off until a GPU round has run the channels-last kernels */
    cr_assert(cu_gemm_switch_parse(NULL, NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect_eq(sw.nhwc, 0);
    cr_assert(cu_gemm_switch_parse(NULL, NULL, "1", NULL, &sw, why, sizeof why));
    cr_expect(sw.nhwc == 1 && sw.mma == 1);
    cr_assert(cu_gemm_switch_parse(NULL, NULL, "", NULL, &sw, why, sizeof why));
    cr_expect_eq(sw.nhwc, 0, "an empty value is unset");
    cr_expect_not(cu_gemm_switch_parse(NULL, NULL, "2", NULL, &sw, why, sizeof why));
    cr_expect(strstr(why, "DLRUN_CUDA_NHWC is \"2\"") != NULL, "%s", why);
}

Test(cuda_mma, split_k_plan) {
    int t[CU_SPLITK_TRIES];
    /* VGG-16's 14x14 layer at batch 1 on the 128x128 tile: 2 x 4 blocks, 144 k-tiles, 132 SMs */
    int n = cu_splitk_tries(8, 144, 132, t);
    cr_expect(n == 4 && t[0] == 1 && t[1] == 2 && t[2] == 4 && t[3] == 8, "%d tries", n);
    /* a full grid: no split */
    cr_expect_eq(cu_splitk_tries(196, 144, 132, t), 1);
    /* few k-tiles: each slice keeps 4 */
    n = cu_splitk_tries(8, 9, 132, t);
    cr_expect(n == 2 && t[1] == 2, "%d tries", n);
    cr_expect_eq(cu_splitk_bytes(1, 3, 100, 100), 0);
    cr_expect_eq(cu_splitk_bytes(4, 2, 512, 196), (size_t)4 * 4 * 2 * 512 * 196);
    cr_expect_eq(cu_splitk_bytes(8, 1, 4096, 65536), (size_t)-1, "past 1 GiB");
    cu_gemm_switch sw;
    char why[200];
    cr_assert(cu_gemm_switch_parse(NULL, "3:4", NULL, NULL, &sw, why, sizeof why), "%s", why);
    cr_expect(sw.forced == 3 && sw.forced_splits == 4 && sw.mma == 1);
    cr_assert(cu_gemm_switch_parse(NULL, "4", NULL, NULL, &sw, why, sizeof why));
    cr_expect(sw.forced == 4 && sw.forced_splits == 0);
    const char *bad[] = {"0:2", "5:2", "2:0", "2:17", "2:", ":2", "2:4:1", "22222222222222222222222222222222222:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_not(cu_gemm_switch_parse(NULL, bad[i], NULL, NULL, &sw, why, sizeof why), "\"%s\" taken", bad[i]);
    int bm, bn;
    cu_mma_tile_shape(1, &bm, &bn);
    cr_expect(bm == 128 && bn == 64);
}

/* The warpgroup tile's copies (wgmma_layout.h): over a 128-row operand every (row, chunk) of the
 * stage is copied once; each 8-lane phase writes one core matrix's 128 bytes (8 different 16-byte
 * bank groups); lanes l and l + 8 copy the two halves of one 32-byte sector of a row. */
Test(cuda_mma, warpgroup_copies_cover_the_stage_once_without_conflicts) {
    static int seen[WG_BN_MAX][WG_KBYTES / 16];
    for (int rows = 128; rows <= WG_BN_MAX; rows *= 2) { /* A and the 128-wide B; the 256-wide B */
        memset(seen, 0, sizeof seen);
        for (int tid = 0; tid < WG_THREADS; tid++)
            for (int j = 0; j < rows / 32; j++) {
                int row, ch, row8, ch8;
                wg_load_chunk(tid, j, &row, &ch);
                cr_assert(row >= 0 && row < rows && ch >= 0 && ch < WG_KBYTES / 16, "thread %d step %d", tid, j);
                seen[row][ch]++;
                if (tid % 32 < 8 || (tid % 32 >= 16 && tid % 32 < 24)) {
                    wg_load_chunk(tid + 8, j, &row8, &ch8);
                    cr_expect(row8 == row && ch8 == ch + 1 && ch % 2 == 0, "lanes %d and +8 share a sector", tid % 32);
                }
            }
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < WG_KBYTES / 16; c++)
                cr_expect_eq(seen[r][c], 1, "%d rows: row %d chunk %d", rows, r, c);
    }
    for (int warp = 0; warp < WG_THREADS / 32; warp++)
        for (int j = 0; j < WG_BN_MAX / 32; j++)
            for (int phase = 0; phase < 4; phase++) {
                int groups[8] = {0}, lo = 1 << 30;
                for (int l = phase * 8; l < phase * 8 + 8; l++) {
                    int row, ch;
                    wg_load_chunk(warp * 32 + l, j, &row, &ch);
                    int at = wg_at(row, ch * 16);
                    groups[at / 16 % 8]++;
                    if (at < lo) lo = at;
                }
                for (int g = 0; g < 8; g++) cr_expect_eq(groups[g], 1, "warp %d step %d phase %d", warp, j, phase);
                cr_expect_eq(lo % 128, 0, "one core matrix");
            }
}

/* The descriptors the kernel builds read what the copies put there (the ISA's no-swizzle K-major
 * addressing, isa_wg_addr, against wg_at), for each warpgroup and k-step, with the window's start
 * past the pixel table; and the accumulator map is the ISA's, one register per element. */
Test(cuda_mma, warpgroup_descriptors_and_accumulators_are_the_isa_tables) {
    for (int es = 4; es >= 2; es -= 2)
        for (int which = 0; which < 3; which++) { /* A of warpgroup 0, A of warpgroup 1, B */
            const uint32_t stage = WG_SMEM_BASE + 2 * WG_BM * WG_KBYTES;
            const int row0 = which == 1 ? 64 : 0, rows = which == 2 ? WG_BN_MAX : 64;
            for (int ks = 0; ks < WG_KBYTES / WG_KSTEP_BYTES; ks++) {
                uint64_t d = wg_desc(wg_start(stage, row0, ks));
                for (int i = 0; i < rows; i++)
                    for (int k = 0; k < WG_KSTEP_BYTES / es; k++)
                        cr_assert_eq(isa_wg_addr(d, es, i, k),
                                     stage + (uint32_t)wg_at(row0 + i, ks * WG_KSTEP_BYTES + k * es),
                                     "%d-byte, operand %d, k-step %d, row %d, k %d", es, which, ks, i, k);
            }
        }
    static int seen[64][WG_BN_MAX];
    for (int bn = 128; bn <= WG_BN_MAX; bn *= 2) {
        memset(seen, 0, sizeof seen);
        for (int t = 0; t < 128; t++)
            for (int r = 0; r < wg_acc(bn); r++) {
                int row, col, irow, icol;
                wg_c(t / 32, t % 32, r, &row, &col);
                isa_wg_c(t, r, &irow, &icol);
                cr_expect(row == irow && col == icol, "thread %d register %d", t, r);
                cr_assert(row >= 0 && row < 64 && col >= 0 && col < bn);
                seen[row][col]++;
            }
        for (int i = 0; i < 64; i++)
            for (int n = 0; n < bn; n++) cr_expect_eq(seen[i][n], 1, "n %d: row %d column %d", bn, i, n);
    }
    cr_expect_eq(wg_smem_bytes(128), 4 * 256 * 128, "4 stages of 128 + 128 rows of 128 bytes");
    cr_expect_eq(wg_smem_bytes(256), 4 * 384 * 128);
}

/* DLRUN_CUDA_WGMMA, the variant's rules and limits (gemm_plan.c) */
Test(cuda_mma, warpgroup_switch_rules_and_limits) {
    cu_gemm_switch sw;
    char why[200];
    cr_assert(cu_gemm_switch_parse(NULL, NULL, NULL, NULL, &sw, why, sizeof why));
    cr_expect_eq(sw.wgmma, 0, "off until a GPU round has run it");
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_BF16, DL_PRECISION_BF16, 0));
    cr_assert(cu_gemm_switch_parse(NULL, NULL, NULL, "1", &sw, why, sizeof why));
    cr_expect(sw.wgmma == 1 && sw.mma == 1);
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_BF16, DL_PRECISION_BF16, 0));
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_F16, DL_PRECISION_F16, 4));
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_F32, DL_PRECISION_TF32, 0));
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_F32, DL_PRECISION_F32, 0), "tf32 is not f32");
    cr_assert(cu_gemm_switch_parse("0", NULL, NULL, "1", &sw, why, sizeof why));
    cr_expect_not(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA, DL_GPU_BF16, DL_PRECISION_BF16, 0), "DLRUN_CUDA_MMA=0 wins");
    cr_expect_not(cu_gemm_switch_parse(NULL, NULL, NULL, "yes", &sw, why, sizeof why));
    cr_expect(strstr(why, "DLRUN_CUDA_WGMMA is \"yes\"") != NULL, "%s", why);
    /* forced, with a split: the switch turns on */
    cr_assert(cu_gemm_switch_parse(NULL, "6:3", NULL, NULL, &sw, why, sizeof why), "%s", why);
    cr_expect(sw.forced == CU_GEMM_WGMMA && sw.forced_splits == 3 && sw.wgmma == 1 && sw.mma == 1);
    cr_expect(cu_gemm_is_tile(CU_GEMM_WGMMA) && cu_gemm_is_tile(CU_GEMM_WGMMA + 1) && cu_gemm_is_tile(CU_GEMM_MMA + 2));
    cr_expect(!cu_gemm_is_tile(CU_GEMM_GEMV) && !cu_gemm_is_tile(1) && !cu_gemm_is_tile(CU_GEMM_VARIANTS));
    cr_expect(cu_gemm_is_wgmma(CU_GEMM_WGMMA + 1) && !cu_gemm_is_wgmma(CU_GEMM_MMA));
    cr_assert(cu_gemm_switch_parse(NULL, "7", NULL, NULL, &sw, why, sizeof why), "%s", why);
    cr_expect(sw.forced == CU_GEMM_WGMMA + 1 && sw.wgmma == 1);
    cr_expect(cu_gemm_variant_ok(&sw, CU_GEMM_WGMMA + 1, DL_GPU_BF16, DL_PRECISION_BF16, 0));
    int bm, bn, bk;
    cu_tile_of(CU_GEMM_WGMMA, 2, &bm, &bn, &bk);
    cr_expect(bm == 128 && bn == 128 && bk == 64);
    cu_tile_of(CU_GEMM_WGMMA, 4, &bm, &bn, &bk);
    cr_expect_eq(bk, 32);
    cu_tile_of(CU_GEMM_WGMMA + 1, 2, &bm, &bn, &bk);
    cr_expect(bm == 128 && bn == 256 && bk == 64);
    cu_tile_of(CU_GEMM_MMA + 1, 2, &bm, &bn, &bk);
    cr_expect(bm == 128 && bn == 64 && bk == MMA_BK);
    /* what it copies by 16-byte chunks: channels-last convs with whole chunks of channels */
    cr_expect(cu_wgmma_ok(2, 1, 1, 64, 64, 576));
    cr_expect_not(cu_wgmma_ok(2, 1, 0, 64, 64, 576), "NCHW");
    cr_expect_not(cu_wgmma_ok(2, 1, 1, 3, 3, 27), "an RGB stem");
    cr_expect(cu_wgmma_ok(4, 1, 1, 12, 4, 36), "f32: chunks of 4");
    cr_expect_not(cu_wgmma_ok(2, 1, 1, 12, 4, 36), "16-bit: chunks of 8");
    cr_expect_not(cu_wgmma_ok(2, 1, 1, 16, 4, 36), "groups of 4 channels in 16-bit");
    cr_expect(cu_wgmma_ok(2, 0, 0, 0, 0, 4096));
    cr_expect_not(cu_wgmma_ok(2, 0, 0, 0, 0, 1000 + 4), "K 1004 in 16-bit");
    cr_expect_not(cu_wgmma_ok(8, 0, 0, 0, 0, 64));
    cr_expect(cu_mma_conv_cl_ok(CU_GEMM_WGMMA, 64, 64, 224, 3, 3, 1, 1));
    /* 131072 + 3072 bytes of shared memory, and 196608 + 6144: an H100's 227 KiB, not an Ada's 99 */
    cr_expect(cu_gemm_fits(CU_GEMM_WGMMA, 2, 512, 6272, 4608, 1, 1, 227 << 10));
    cr_expect_not(cu_gemm_fits(CU_GEMM_WGMMA, 2, 512, 6272, 4608, 1, 1, 99 << 10));
    cr_expect(cu_gemm_fits(CU_GEMM_WGMMA + 1, 4, 512, 6272, 4608, 1, 1, 227 << 10));
    cr_expect_not(cu_gemm_fits(CU_GEMM_WGMMA + 1, 4, 512, 6272, 4608, 1, 1, 196608 + 6143));
    cr_expect(cu_gemm_fits(CU_GEMM_WGMMA + 1, 4, 512, 6272, 4608, 1, 1, 196608 + 6144));
    cr_expect_not(cu_gemm_fits(CU_GEMM_WGMMA, 2, 65535LL * 128 + 1, 10, 64, 1, 1, 227 << 10), "y past 65535");
}

Test(cuda_mma, launch_limits) {
    const int h100 = 227 << 10, ada = 99 << 10;
    /* the 128x128 tile: 3 x 256 x 36 x 4 = 110592 bytes in f32 (+ 3072), 61440 in 16-bit */
    cr_expect(cu_gemm_fits(CU_GEMM_MMA, 4, 512, 6272, 4608, 1, 1, h100));
    cr_expect_not(cu_gemm_fits(CU_GEMM_MMA, 4, 512, 6272, 4608, 1, 1, ada), "111 KiB on a 99 KiB device");
    cr_expect(cu_gemm_fits(CU_GEMM_MMA, 2, 512, 6272, 4608, 1, 1, ada));
    cr_expect(cu_gemm_fits(CU_GEMM_MMA + 2, 4, 512, 6272, 4608, 1, 1, ada), "the 64x64 tile fits anywhere");
    cr_expect_eq(mma_smem_bytes(128, 128, 4), 110592);
    /* grid limits: y = ceil(M / rows), z = groups x splits; int indices */
    cr_expect_not(cu_gemm_fits(1, 4, 65536 * 32 + 1, 10, 10, 1, 1, h100), "y past 65535 on the 32x32 SIMT tile");
    cr_expect(cu_gemm_fits(0, 4, 65535 * 64, 10, 10, 1, 1, h100));
    cr_expect_not(cu_gemm_fits(CU_GEMM_MMA + 2, 4, 8, 10, 90, 8192, 8, h100), "8192 groups in 8 slices");
    cr_expect(cu_gemm_fits(CU_GEMM_MMA + 2, 4, 8, 10, 90, 8192, 7, h100));
    cr_expect_not(cu_gemm_fits(0, 4, 10, (int64_t)1 << 31, 10, 1, 1, h100), "N past int");
    cr_expect(cu_gemm_fits(CU_GEMM_GEMV, 4, 100000, 1, 25088, 1, 1, h100));
}

Test(cuda_mma, timed_choices_kept_and_read_back) {
    int v, s, seen[CU_GEMM_VARIANTS * (CU_SPLITK_MAX + 1)] = {0};
    for (int vv = 0; vv < CU_GEMM_VARIANTS; vv++)
        for (int ss = 1; ss <= (cu_gemm_is_tile(vv) ? CU_SPLITK_MAX : 1); ss++) {
            int code = cu_gemm_choice_code(vv, ss);
            cr_assert(code >= 0 && code < (int)(sizeof seen / sizeof *seen));
            cr_expect(!seen[code]++, "variant %d in %d: a code of its own", vv, ss);
            cr_expect(cu_gemm_choice_of(code, &v, &s) && v == vv && s == ss);
        }
    /* what no timing keeps (the file is the user's): no split, a split of a SIMT tile or the GEMV,
     * too many slices, a negative code */
    v = s = -7;
    cr_expect(!cu_gemm_choice_of(cu_gemm_choice_code(CU_GEMM_MMA, 0), &v, &s));
    cr_expect(!cu_gemm_choice_of(cu_gemm_choice_code(0, 2), &v, &s));
    cr_expect(!cu_gemm_choice_of(cu_gemm_choice_code(CU_GEMM_GEMV, 2), &v, &s));
    cr_expect(!cu_gemm_choice_of(cu_gemm_choice_code(CU_GEMM_WGMMA, CU_SPLITK_MAX + 1), &v, &s));
    cr_expect(!cu_gemm_choice_of(-1, &v, &s));
    cr_expect(v == -7 && s == -7, "nothing written for a refused code");
    /* the plugin's part of the key: every switch and device limit the candidates depend on */
    cu_gemm_switch sw;
    char why[200], base[128], other[128];
    cr_assert(cu_gemm_switch_parse(NULL, NULL, NULL, NULL, &sw, why, sizeof why));
    cr_assert(cu_gemm_choice_extra(&sw, 132, 227 << 10, 1, base, sizeof base));
    for (int i = 0; i < 6; i++) {
        cu_gemm_switch o = sw;
        int sms = 132, smem = 227 << 10, sm90 = 1;
        if (i == 0) o.mma = 0;
        if (i == 1) o.nhwc = 1;
        if (i == 2) o.wgmma = 1;
        if (i == 3) sms = 114;
        if (i == 4) smem = 99 << 10;
        if (i == 5) sm90 = 0;
        cr_assert(cu_gemm_choice_extra(&o, sms, smem, sm90, other, sizeof other));
        cr_expect_str_neq(base, other, "change %d", i);
    }
    cr_expect(!cu_gemm_choice_extra(&sw, 132, 227 << 10, 1, other, 10), "does not fit: no key");
}
