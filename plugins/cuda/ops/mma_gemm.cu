// mma_gemm.cu — the cuda plugin's tensor-core GEMM and its two problems, conv2d as an implicit
// GEMM and linear (issue 14): warp-level mma.sync with f32 accumulators (m16n8k8 .tf32 on f32
// tensors, m16n8k16 .f16/.bf16 on f16/bf16 tensors, both read from shared memory by ldmatrix), a
// STAGES-deep cp.async pipeline through padded shared memory (mma_layout.h says where every element
// lives; tests/test_cuda_mma.c replays it on the host), and bias, a residual and relu in the
// epilogue. A conv gathers its B operand from the image with no division in the loop: a per-k
// table built at prepare (mma_ktap) and a per-pixel table built once per block. Three tile shapes, and split-K
// (slices of k summed by a second kernel) for grids too small to fill the GPU; cuda_backend.c picks
// the tile and the split by timing, or takes those DLRUN_CUDA_GEMM_VARIANT forces.
#include <cstddef>
#include <type_traits>

#include "async_copy.cuh"
#include "launch.cuh"
#include "mma_layout.h"

namespace {

using namespace dlk;
using namespace dlg;

// ---- the instructions ----

__device__ inline unsigned to_tf32(float v) { // round to nearest (away on ties), as cuDNN's TF32
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return r;
}

__device__ inline void ldsm_x4(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d += a b for one m16n8 piece: tf32 (k 8) on float storage, f16 or bf16 (k 16)
__device__ inline void mma(float d[4], const unsigned a[4], const unsigned b[2], float) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline void mma(float d[4], const unsigned a[4], const unsigned b[2], __half) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline void mma(float d[4], const unsigned a[4], const unsigned b[2], __nv_bfloat16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- loading one stage ----

// One element into shared memory: 4-byte types by cp.async, 16-bit ones by a plain load and store
// (cp.async moves 4 bytes at least); zero where !ok.
template <class T> __device__ inline void load_elem(T *dst, const T *src, bool ok) {
    if constexpr (sizeof(T) == 4) cp_async4(dst, src, ok);
    else *dst = ok ? *src : from_f<T>(0.f);
}

// A dense operand: `rows` rows of K elements, row r at p + r * ld (the weights; linear's input).
// vec: ld, K and p allow 16-byte chunks (K a multiple of 16 / sizeof(T), p 16-byte aligned).
template <class T> struct Dense {
    const T *p;
    int rows, K;
    long long ld;
    bool vec;
};

template <class T, int ROWS, int THREADS>
__device__ inline void load_dense(T *s, const Dense<T> &d, int r0, int k0, int tid) {
    constexpr int S = MMA_BK + (sizeof(T) == 4 ? 4 : 8), E = 16 / (int)sizeof(T);
    if (d.vec) {
#pragma unroll
        for (int j = 0; j < ROWS * MMA_BK / E / THREADS; j++) {
            int row, k;
            mma_load_chunk(tid, j, THREADS, (int)sizeof(T), &row, &k);
            bool ok = r0 + row < d.rows && k0 + k < d.K;
            cp_async16(s + row * S + k, ok ? d.p + (r0 + row) * d.ld + k0 + k : d.p, ok);
        }
    } else {
#pragma unroll 4
        for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
            int row, k;
            mma_load_elem(tid, j, THREADS, &row, &k);
            bool ok = r0 + row < d.rows && k0 + k < d.K;
            load_elem(s + row * S + k, ok ? d.p + (r0 + row) * d.ld + k0 + k : d.p, ok);
        }
    }
}

// An output pixel of a conv's tile (one B row): where its window's corner lies in the image and
// where its output goes (mma_layout.h, mma_pix_of).
using Pix = mma_pix;

struct ConvShape {
    mma_conv_geom q;      // the conv as mma_pix_of takes it
    const mma_ktap *ktab; // K entries (mma_ktap_of, or mma_ktap_cl_of channels-last), on the device
    int K;                // cg kh kw
};

// One element of a conv's B stage: element j of this thread (mma_load_elem), whose k is the lane
// for every j: the source, and whether it lies in the image (else the element is zero).
struct GatherAt {
    mma_ktap t;
    bool kin;
};
template <int THREADS> __device__ inline GatherAt gather_k(const ConvShape &cs, int k0, int tid) {
    int row, k;
    mma_load_elem(tid, 0, THREADS, &row, &k);
    GatherAt g = {{0, 0, 0, 0}, k0 + k < cs.K};
    if (g.kin) g.t = cs.ktab[k0 + k];
    return g;
}
__device__ inline long long p_off(const Pix &p, const GatherAt &g) { return p.xoff + g.t.off; }
__device__ inline bool gather_ok(const ConvShape &cs, const GatherAt &g, const Pix &p) {
    int iy = p.iy0 + g.t.dy, ix = p.ix0 + g.t.dx;
    return g.kin && (unsigned)iy < (unsigned)cs.q.h && (unsigned)ix < (unsigned)cs.q.w;
}

// f32: straight into the stage by cp.async (4 bytes each, zero-filled outside the image)
template <class T, int ROWS, int THREADS>
__device__ inline void load_gather(T *s, const T *x, const ConvShape &cs, const Pix *pix, int k0, int tid) {
    constexpr int S = MMA_BK + (sizeof(T) == 4 ? 4 : 8);
    const GatherAt g = gather_k<THREADS>(cs, k0, tid);
#pragma unroll 4
    for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
        int row, k;
        mma_load_elem(tid, j, THREADS, &row, &k);
        bool ok = gather_ok(cs, g, pix[row]);
        load_elem(s + row * S + k, ok ? x + p_off(pix[row], g) : x, ok);
    }
}

// Channels-last (x NHWC, k = (ky kw + kx) cg + ci): 16-byte chunks of one tap's channels by
// cp.async, any element size (cg and c multiples of 16 / sizeof(T), x 16-byte aligned: each chunk
// is). A thread's chunks share their k (mma_load_chunk: the chunk's column is tid % chunks a row),
// so it looks its tap up once per stage; a chunk outside the image, or past K, is zero-filled.
template <class T, int ROWS, int THREADS>
__device__ inline void load_gather_cl(T *s, const T *x, const ConvShape &cs, const Pix *pix, int k0, int tid) {
    constexpr int S = MMA_BK + (sizeof(T) == 4 ? 4 : 8), E = 16 / (int)sizeof(T);
    static_assert(THREADS % (MMA_BK / E) == 0, "a thread's chunks keep one column of k");
    int row, k;
    mma_load_chunk(tid, 0, THREADS, (int)sizeof(T), &row, &k);
    GatherAt g = {{0, 0, 0, 0}, k0 + k < cs.K};
    if (g.kin) g.t = cs.ktab[k0 + k];
#pragma unroll
    for (int j = 0; j < ROWS * MMA_BK / E / THREADS; j++) {
        mma_load_chunk(tid, j, THREADS, (int)sizeof(T), &row, &k);
        bool ok = gather_ok(cs, g, pix[row]);
        cp_async16(s + row * S + k, ok ? x + p_off(pix[row], g) : x, ok);
    }
}

// 16-bit (cp.async moves 4 bytes at least): into registers a stage ahead (fetch_gather, whose
// loads are in flight while the block computes), then into the stage (put_gather)
template <class T, int ROWS, int THREADS>
__device__ inline void fetch_gather(T *r, const T *x, const ConvShape &cs, const Pix *pix, int k0, int tid) {
    const GatherAt g = gather_k<THREADS>(cs, k0, tid);
#pragma unroll
    for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
        int row, k;
        mma_load_elem(tid, j, THREADS, &row, &k);
        r[j] = gather_ok(cs, g, pix[row]) ? x[p_off(pix[row], g)] : from_f<T>(0.f);
    }
}
template <class T, int ROWS, int THREADS> __device__ inline void put_gather(T *s, const T *r, int tid) {
    constexpr int S = MMA_BK + (sizeof(T) == 4 ? 4 : 8);
#pragma unroll
    for (int j = 0; j < ROWS * MMA_BK / THREADS; j++) {
        int row, k;
        mma_load_elem(tid, j, THREADS, &row, &k);
        s[row * S + k] = r[j];
    }
}

// ---- the block: C[BM x BN] tile of group blockIdx.z ----

// The problem P gives the block its operands: prologue (per-block set-up in shared memory),
// load_a / load_b (one stage of A's BM rows and B's BN rows from k0), and store (one result with
// the epilogue applied).
template <class T> struct LinearP {
    static constexpr bool REG_B = false; // B by cp.async or plain loads into the stage (load_b)
    Dense<T> a, b;                       // a: w [out, in]; b: x [n, in]
    T *y;
    dlk_epilogue e;
    int M, N, K;
    template <int BN> __device__ void prologue(Pix *, int, int) const {}
    template <int BM, int THREADS> __device__ void load_a(T *s, int, int m0, int k0, const Pix *, int tid) const {
        load_dense<T, BM, THREADS>(s, a, m0, k0, tid);
    }
    template <int BN, int THREADS> __device__ void load_b(T *s, int, int n0, int k0, const Pix *, int tid) const {
        load_dense<T, BN, THREADS>(s, b, n0, k0, tid);
    }
    template <int BN, int THREADS> __device__ void fetch_b(T *, int, const Pix *, int) const {}
    template <int BN, int THREADS> __device__ void put_b(T *, const T *, int) const {}
    __device__ void store(int, int m, int n, const Pix *, int, float v) const {
        const long long at = (long long)n * M + m;
        y[at] = from_f<T>(epilogue<T>(e, m, at, v));
    }
};

// CL: the channels-last gather by 16-byte chunks (x NHWC, the weights KRSC: mma_ktap_cl_of's k
// order); else element by element, in either layout (ktab, cs.q and the weights say which).
template <class T, bool CL> struct ConvP {
    // NCHW 16-bit: B through registers a stage ahead (fetch_b, put_b)
    static constexpr bool REG_B = !CL && sizeof(T) == 2;
    Dense<T> a; // the weights of group 0: [ocg, K]; group g's start g * ocg rows further
    const T *x;
    T *y;
    dlk_epilogue e;
    ConvShape cs;
    int M, N, K;
    // the block's pixels n0 ... n0 + BN - 1, one thread each
    template <int BN> __device__ void prologue(Pix *pix, int n0, int g) const {
        for (int i = threadIdx.x; i < BN; i += blockDim.x) pix[i] = mma_pix_of(&cs.q, (long long)n0 + i, N, g);
    }
    template <int BM, int THREADS> __device__ void load_a(T *s, int g, int m0, int k0, const Pix *, int tid) const {
        Dense<T> d = a;
        d.p += (long long)g * cs.q.ocg * d.ld;
        load_dense<T, BM, THREADS>(s, d, m0, k0, tid);
    }
    template <int BN, int THREADS> __device__ void load_b(T *s, int, int, int k0, const Pix *pix, int tid) const {
        if constexpr (CL) load_gather_cl<T, BN, THREADS>(s, x, cs, pix, k0, tid);
        else load_gather<T, BN, THREADS>(s, x, cs, pix, k0, tid);
    }
    template <int BN, int THREADS> __device__ void fetch_b(T *r, int k0, const Pix *pix, int tid) const {
        fetch_gather<T, BN, THREADS>(r, x, cs, pix, k0, tid);
    }
    template <int BN, int THREADS> __device__ void put_b(T *s, const T *r, int tid) const {
        put_gather<T, BN, THREADS>(s, r, tid);
    }
    __device__ void store(int g, int m, int, const Pix *pix, int nl, float v) const {
        const long long at = mma_y_at(&cs.q, &pix[nl], m);
        y[at] = from_f<T>(epilogue<T>(e, g * cs.q.ocg + m, at, v));
    }
};

template <class T, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, class P>
__global__ void __launch_bounds__(WARPS_M *WARPS_N * 32) mma_tiles(P p, float *part, int splits) {
    constexpr int THREADS = WARPS_M * WARPS_N * 32, ES = (int)sizeof(T);
    constexpr int S = MMA_BK + (ES == 4 ? 4 : 8), KS = ES == 4 ? 8 : 16;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MI = WTM / 16, NI = WTN / 8;
    static_assert(MI >= 1 && NI % 2 == 0 && BN <= 128, "warp tile: 16 x 16 at least; pixels: 128 at most");
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ Pix pix[MMA_PIX_BYTES / sizeof(Pix)];
    T *As = reinterpret_cast<T *>(smem), *Bs = As + STAGES * BM * S;

    // blockIdx.z = g * splits + sp: group g, and (split-K) the sp-th of `splits` slices of k
    const int g = blockIdx.z / splits, sp = blockIdx.z % splits, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    p.template prologue<BN>(pix, n0, g);
    __syncthreads();

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

    // this block's k-tiles: kb ... kb + KT - 1 (all of them without split-K; a split may have none)
    const int KT_ALL = (p.K + MMA_BK - 1) / MMA_BK, per = (KT_ALL + splits - 1) / splits;
    const int kb = min(KT_ALL, sp * per), KT = min(KT_ALL, kb + per) - kb;
    // k-tile kt into stage slot `stage`: A by cp.async; B so too, or (P::REG_B) from the registers
    // rb, fetched a stage ahead
    T rb[P::REG_B ? BN * MMA_BK / THREADS : 1];
    auto load = [&](int stage, int kt) {
        const int k0 = (kb + kt) * MMA_BK;
        p.template load_a<BM, THREADS>(As + stage * BM * S, g, m0, k0, pix, tid);
        if constexpr (P::REG_B) {
            p.template fetch_b<BN, THREADS>(rb, k0, pix, tid);
            p.template put_b<BN, THREADS>(Bs + stage * BN * S, rb, tid);
        } else {
            p.template load_b<BN, THREADS>(Bs + stage * BN * S, g, n0, k0, pix, tid);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
    if constexpr (P::REG_B)
        if (STAGES - 1 < KT) p.template fetch_b<BN, THREADS>(rb, (kb + STAGES - 1) * MMA_BK, pix, tid);
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>(); // this thread's copies of stage kt have landed
        __syncthreads();             // everyone's have; and everyone is done with stage kt - 1
        const int nk = kt + STAGES - 1, slot = nk % STAGES;
        if (nk < KT) {
            p.template load_a<BM, THREADS>(As + slot * BM * S, g, m0, (kb + nk) * MMA_BK, pix, tid);
            if constexpr (P::REG_B) p.template put_b<BN, THREADS>(Bs + slot * BN * S, rb, tid);
            else p.template load_b<BN, THREADS>(Bs + slot * BN * S, g, n0, (kb + nk) * MMA_BK, pix, tid);
        }
        cp_async_commit();
        if constexpr (P::REG_B) // the next tile's B: its loads are in flight while this one computes
            if (nk + 1 < KT) p.template fetch_b<BN, THREADS>(rb, (kb + nk + 1) * MMA_BK, pix, tid);
        const T *as = As + (kt % STAGES) * BM * S + wm * WTM * S, *bs = Bs + (kt % STAGES) * BN * S + wn * WTN * S;
#pragma unroll
        for (int ks = 0; ks < MMA_BK; ks += KS) {
            unsigned a[MI][4], b[NI][2];
            int row, k;
            mma_ldsm_a(lane, ES, &row, &k);
#pragma unroll
            for (int i = 0; i < MI; i++) ldsm_x4(a[i], as + (i * 16 + row) * S + ks + k);
            mma_ldsm_b(lane, ES, &row, &k);
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned t[4];
                ldsm_x4(t, bs + (j * 8 + row) * S + ks + k);
                b[j][0] = t[0], b[j][1] = t[1], b[j + 1][0] = t[2], b[j + 1][1] = t[3];
            }
            if constexpr (ES == 4) { // f32 in shared memory: rounded to tf32 for the mma
#pragma unroll
                for (int i = 0; i < MI; i++)
#pragma unroll
                    for (int r = 0; r < 4; r++) a[i][r] = to_tf32(__uint_as_float(a[i][r]));
#pragma unroll
                for (int j = 0; j < NI; j++)
#pragma unroll
                    for (int r = 0; r < 2; r++) b[j][r] = to_tf32(__uint_as_float(b[j][r]));
            }
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) mma(acc[i][j], a[i], b[j], T{});
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                int row, n;
                mma_c(lane, q, &row, &n);
                int m = m0 + wm * WTM + i * 16 + row, nl = wn * WTN + j * 8 + n;
                if (m >= p.M || n0 + nl >= p.N) continue;
                if (part) // split-K: the raw sum of this slice; splitk_sum adds the slices up
                    part[((long long)blockIdx.z * p.M + m) * p.N + n0 + nl] = acc[i][j][q];
                else p.store(g, m, n0 + nl, pix, nl, acc[i][j][q]);
            }
}

// The tile shapes, by variant (kernels.h: DLK_MMA_TILES): 128x128 with 8 warps of 64x32,
// 128x64 and 64x64 with 4 warps of 64x32 and 32x32. Three stages.
constexpr int STAGES = MMA_STAGES;
static_assert(sizeof(Pix) * 128 == MMA_PIX_BYTES, "the pixel table holds 128 pixels, gemm_plan.c counts its bytes");

// Split-K's second step: y = epilogue(the sum of the slices), slice sp of group g at part[(g *
// splits + sp) M N ...]; one thread per output, in the GEMM's (g, m, n) order. conv (q not NULL): n
// is (image, pixel), y NCHW or NHWC as q says (mma_conv_y_of); linear: y[n, m].
template <class T>
__global__ void splitk_sum(const float *part, int splits, int groups, int M, int N, dlk_epilogue ep, T *y, int conv,
                           mma_conv_geom q) {
    const long long mn = (long long)M * N, total = mn * groups;
    for (long long e = grid_first(); e < total; e += grid_step()) {
        const int g = (int)(e / mn), m = (int)(e % mn / N), n = (int)(e % N);
        float v = 0.f;
        for (int sp = 0; sp < splits; sp++) v += part[((long long)g * splits + sp) * mn + e % mn];
        const int o = g * M + m; // the filter (conv) or output feature
        const long long at = conv ? mma_conv_y_of(&q, n, o) : (long long)n * M + m;
        y[at] = from_f<T>(epilogue<T>(ep, o, at, v));
    }
}

template <class T, int BM, int BN, int WM, int WN, class P>
int launch_tile(const P &p, int groups, int splits, float *part, cudaStream_t s) {
    const int smem = mma_smem_bytes(BM, BN, (int)sizeof(T));
    // gemm_plan.c left out the tiles the device cannot give (a 128x128 f32 tile takes 111 KiB)
    if (int rc = smem_opt_in<mma_tiles<T, BM, BN, WM, WN, STAGES, P>>(smem)) return rc;
    dim3 grid(blocks_for(p.N, BN), blocks_for(p.M, BM), groups * splits);
    mma_tiles<T, BM, BN, WM, WN, STAGES, P><<<grid, WM * WN * 32, smem, s>>>(p, splits > 1 ? part : nullptr, splits);
    return launched();
}

template <class T, class P> int launch(const P &p, int groups, int tile, int splits, float *part, cudaStream_t s) {
    if (splits < 1 || (splits > 1 && !part)) return (int)cudaErrorInvalidValue;
    switch (tile) {
    case 0: return launch_tile<T, 128, 128, 2, 4>(p, groups, splits, part, s);
    case 1: return launch_tile<T, 128, 64, 2, 2>(p, groups, splits, part, s);
    case 2: return launch_tile<T, 64, 64, 2, 2>(p, groups, splits, part, s);
    default: return (int)cudaErrorInvalidValue;
    }
}

template <class T>
int reduce(const float *part, int splits, int groups, int M, int N, const dlk_epilogue *e, void *y,
           const mma_conv_geom *q, cudaStream_t s) {
    const long long total = (long long)M * N * groups;
    const mma_conv_geom none = {};
    splitk_sum<T><<<grid_for(total), THREADS, 0, s>>>(part, splits, groups, M, N, *e, static_cast<T *>(y), q != nullptr,
                                                      q ? *q : none);
    return launched();
}

template <class T> bool aligned16(const void *p) { return ((size_t)p & 15) == 0; }

template <class T> Dense<T> dense(const void *p, int rows, int K, long long group_rows) {
    const int E = 16 / (int)sizeof(T);
    // a group's start must stay 16-byte aligned too: group_rows * K elements further
    bool vec = K % E == 0 && (group_rows * K) % E == 0 && aligned16<T>(p);
    return Dense<T>{static_cast<const T *>(p), rows, K, K, vec};
}

} // namespace

extern "C" int dlk_mma_conv2d(const dlk_conv *c, int type, const void *x, const void *w, const dlk_epilogue *e, void *y,
                              const mma_ktap *ktab, int tile, int splits, float *part, cudaStream_t s) {
    const mma_conv_geom q = {c->c,  c->h,  c->w,  c->oc, c->oh, c->ow, c->c / c->groups, c->oc / c->groups,
                             c->sh, c->sw, c->ph, c->pw, c->cl};
    auto run = [&](auto p) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(p.x)>>;
        p.M = q.ocg;
        p.N = c->n * c->oh * c->ow;
        p.K = q.cg * c->kh * c->kw;
        p.cs = ConvShape{q, ktab, p.K};
        p.a = dense<T>(w, p.M, p.K, p.M);
        p.x = static_cast<const T *>(x);
        p.y = static_cast<T *>(y);
        p.e = *e;
        int rc = launch<T>(p, c->groups, tile, splits, part, s);
        if (rc || splits == 1) return rc;
        return reduce<T>(part, splits, c->groups, p.M, p.N, e, y, &q, s);
    };
    return by_type(type, [&](auto t) {
        using T = decltype(t);
        // channels-last by 16-byte chunks where the channels allow; else (NCHW, or an NHWC stem of
        // 3 channels) element by element, which reads through ktab and the pixel table whatever the
        // layout (q.cl says where the pixels and outputs lie)
        if (c->cl && aligned16<T>(x) && mma_cl_chunks((int)sizeof(T), c->c, q.cg)) return run(ConvP<T, true>{});
        return run(ConvP<T, false>{});
    });
}

extern "C" int dlk_mma_linear(const dlk_linear_p *l, int type, const void *x, const void *w, const dlk_epilogue *e,
                              void *y, int tile, int splits, float *part, cudaStream_t s) {
    return by_type(type, [&](auto t) {
        using T = decltype(t);
        LinearP<T> p;
        p.a = dense<T>(w, l->out, l->in, 0);
        p.b = dense<T>(x, l->n, l->in, 0);
        p.y = static_cast<T *>(y);
        p.e = *e;
        p.M = l->out, p.N = l->n, p.K = l->in;
        int rc = launch<T>(p, 1, tile, splits, part, s);
        if (rc || splits == 1) return rc;
        return reduce<T>(part, splits, 1, p.M, p.N, e, y, nullptr, s);
    });
}

extern "C" int dlk_mma_splitk_sum(int type, const float *part, int splits, int groups, int m, int n,
                                  const dlk_epilogue *e, void *y, const mma_conv_geom *q, cudaStream_t s) {
    return by_type(type, [&](auto t) { return reduce<decltype(t)>(part, splits, groups, m, n, e, y, q, s); });
}
