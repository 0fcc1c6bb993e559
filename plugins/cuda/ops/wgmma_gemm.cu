// wgmma_gemm.cu — the cuda plugin's GEMM on sm_90's warpgroup MMA (issue 14): conv2d as an
// implicit GEMM over channels-last tensors, and linear, on tiles of two warpgroups, each issuing
// wgmma.mma_async m64nN (k16 on f16/bf16, k8 on f32 as tf32) with both operands read from
// shared memory through matrix descriptors, f32 sums in registers. The stages are filled by 16-byte
// cp.async copies (a conv's gathered input through mma_layout.h's k-table and pixel table, as
// mma_gemm.cu's channels-last gather) in the no-swizzle layout wgmma_layout.h describes; 4 stage
// slots, copies 2 k-tiles ahead, one group of wgmma in flight while the next stage's copies
// land. Two tile shapes, 128x128 and 128x256 (m64n256). Bias, a residual and relu in the epilogue;
// split-K as the mma tiles (their second kernel).
// Built for sm_90a only (plugins/cuda/CMakeLists.txt): wgmma exists nowhere else.
// tests/test_cuda_mma.c replays a block of it on the host.
#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"
#include "launch.cuh"
#include "mma_layout.h"
#include "wgmma_layout.h"

namespace {

using namespace dlk;
using namespace dlg;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DLK_WGMMA 1 // the device pass for sm_90a: the instructions exist
#endif

// ---- the instructions (sm_90a) ----

#ifdef DLK_WGMMA
// the copies this thread made to shared memory (generic proxy) visible to wgmma (async proxy)
__device__ inline void fence_to_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// The sums are written by wgmma behind the compiler's back until a wait_group retires them: this
// empty asm "uses and rewrites" each register, so no instruction that reads or moves one is
// scheduled across the fence or the wait it stands beside (as CUTLASS's warpgroup_fence_operand).
template <int N> __device__ inline void acc_fence(float (&acc)[N]) {
#pragma unroll
    for (int r = 0; r < N; r++) asm volatile("" : "+f"(acc[r])::"memory");
}
template <int N> __device__ inline void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d (64 x N over the warpgroup, wgmma_layout.h's wg_c) += a b^T: a 64 x 32 bytes of k, b N x 32
// bytes of k, both K-major in shared memory (descriptors da, db); scale-d 1 (accumulate), the
// operands' scales 1; f16 and bf16 also say "not transposed" (K-major), which tf32 always is.
// D: the N / 2 sums' "{%0, ...}"; OUT: their operands; A, B, S: the numbers of da, db and scale-d.
#define DLK_WGMMA_ASM(OP, TAIL, D, OUT, A, B, S)                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned." OP " " D ", %" A ", %" B ", p, 1, 1" TAIL ";\n}\n" \
                 : OUT                                                                              \
                 : "l"(da), "l"(db), "r"(1))
#define DLK_R64                                                                                                      \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DLK_D64 "{" DLK_R64 "}"
#define DLK_D128                                                                                                    \
    "{" DLK_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, " \
    "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "             \
    "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "              \
    "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define DLK_OUT64                                                                                               \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define DLK_OUT128                                                                                                     \
    DLK_OUT64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),        \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),        \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),        \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),    \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),              \
        "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]),              \
        "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]),              \
        "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
__device__ inline void wgmma(float (&d)[64], uint64_t da, uint64_t db, float) {
    DLK_WGMMA_ASM("m64n128k8.f32.tf32.tf32", "", DLK_D64, DLK_OUT64, "64", "65", "66");
}
__device__ inline void wgmma(float (&d)[64], uint64_t da, uint64_t db, __half) {
    DLK_WGMMA_ASM("m64n128k16.f32.f16.f16", ", 0, 0", DLK_D64, DLK_OUT64, "64", "65", "66");
}
__device__ inline void wgmma(float (&d)[64], uint64_t da, uint64_t db, __nv_bfloat16) {
    DLK_WGMMA_ASM("m64n128k16.f32.bf16.bf16", ", 0, 0", DLK_D64, DLK_OUT64, "64", "65", "66");
}
__device__ inline void wgmma(float (&d)[128], uint64_t da, uint64_t db, float) {
    DLK_WGMMA_ASM("m64n256k8.f32.tf32.tf32", "", DLK_D128, DLK_OUT128, "128", "129", "130");
}
__device__ inline void wgmma(float (&d)[128], uint64_t da, uint64_t db, __half) {
    DLK_WGMMA_ASM("m64n256k16.f32.f16.f16", ", 0, 0", DLK_D128, DLK_OUT128, "128", "129", "130");
}
__device__ inline void wgmma(float (&d)[128], uint64_t da, uint64_t db, __nv_bfloat16) {
    DLK_WGMMA_ASM("m64n256k16.f32.bf16.bf16", ", 0, 0", DLK_D128, DLK_OUT128, "128", "129", "130");
}
#undef DLK_WGMMA_ASM
#undef DLK_R64
#undef DLK_D64
#undef DLK_OUT64
#undef DLK_D128
#undef DLK_OUT128
#endif

// ---- the problems: what fills a block's stages and where its results go ----

using Pix = mma_pix;

// `rows` rows of K elements from p (row r at p + r K), rows r0 ... r0 + ROWS - 1 and the stage's k
// from k0, by 16-byte chunks (K a whole number of them: wg_chunks_ok); zeros past rows or K
template <class T, int ROWS>
__device__ inline void copy_dense(unsigned char *s, const T *p, int rows, int K, int r0, int k0, int tid) {
    constexpr int E = 16 / (int)sizeof(T);
    int row, ch;
    wg_load_chunk(tid, 0, &row, &ch);
    const int k = k0 + ch * E;
#pragma unroll
    for (int j = 0; j < ROWS / 32; j++) {
        wg_load_chunk(tid, j, &row, &ch);
        const bool ok = k < K && r0 + row < rows;
        cp_async16(s + wg_at(row, ch * 16), ok ? p + (long long)(r0 + row) * K + k : p, ok);
    }
}

template <class T> struct Linear {
    const T *w, *x; // w [M, K], x [N, K]
    T *y;           // [N, M]
    dlk_epilogue e;
    int M, N, K;
    template <int BN> __device__ void prologue(Pix *, int, int) const {}
    __device__ void load_a(unsigned char *s, int, int m0, int k0, int tid) const {
        copy_dense<T, WG_BM>(s, w, M, K, m0, k0, tid);
    }
    template <int BN> __device__ void load_b(unsigned char *s, int n0, int k0, const Pix *, int tid) const {
        copy_dense<T, BN>(s, x, N, K, n0, k0, tid);
    }
    __device__ void store(int, int m, int n, const Pix *, int, float v) const {
        const long long at = (long long)n * M + m;
        y[at] = from_f<T>(epilogue<T>(e, m, at, v));
    }
};

// channels-last: x NHWC, the weights KRSC (group g's M rows g M K elements on), k = (ky kw + kx)
// cg + ci, so a 16-byte chunk of k is one tap's run of channels of one pixel
template <class T> struct Conv {
    const T *w, *x;
    T *y;
    dlk_epilogue e;
    mma_conv_geom q;
    const mma_ktap *ktab; // K entries, mma_ktap_cl_of
    int M, N, K;
    template <int BN> __device__ void prologue(Pix *pix, int n0, int g) const {
        for (int i = threadIdx.x; i < BN; i += blockDim.x) pix[i] = mma_pix_of(&q, (long long)n0 + i, N, g);
    }
    __device__ void load_a(unsigned char *s, int g, int m0, int k0, int tid) const {
        copy_dense<T, WG_BM>(s, w + (long long)g * M * K, M, K, m0, k0, tid);
    }
    // the thread's chunk column is the same for every row it copies: one tap looked up per stage
    template <int BN> __device__ void load_b(unsigned char *s, int, int k0, const Pix *pix, int tid) const {
        constexpr int E = 16 / (int)sizeof(T);
        int row, ch;
        wg_load_chunk(tid, 0, &row, &ch);
        const int k = k0 + ch * E;
        const bool kin = k < K;
        mma_ktap t = {0, 0, 0, 0};
        if (kin) t = ktab[k];
#pragma unroll
        for (int j = 0; j < BN / 32; j++) {
            wg_load_chunk(tid, j, &row, &ch);
            const Pix &px = pix[row];
            const int iy = px.iy0 + t.dy, ix = px.ix0 + t.dx;
            const bool ok = kin && (unsigned)iy < (unsigned)q.h && (unsigned)ix < (unsigned)q.w;
            cp_async16(s + wg_at(row, ch * 16), ok ? x + px.xoff + t.off : x, ok);
        }
    }
    __device__ void store(int g, int m, int, const Pix *pix, int nl, float v) const {
        const long long at = mma_y_at(&q, &pix[nl], m);
        y[at] = from_f<T>(epilogue<T>(e, g * q.ocg + m, at, v));
    }
};

// ---- the block: C[128 x BN] of group g = blockIdx.z / splits, k-slice blockIdx.z % splits ----

template <class T, int BN, class P>
__global__ void __launch_bounds__(WG_THREADS) wg_tiles(P p, float *part, int splits) {
#ifdef DLK_WGMMA
    constexpr int BK = WG_KBYTES / (int)sizeof(T), A_STAGE = WG_BM * WG_KBYTES, B_STAGE = BN * WG_KBYTES;
    constexpr int ACC = BN / 2; // wg_acc(BN)
    static_assert(WG_STAGES == 4, "the copies run WG_STAGES - 2 k-tiles ahead of one wgmma group in flight");
    static_assert(sizeof(Pix) == WG_PIX_BYTES, "gemm_plan.c counts the pixel table's bytes");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ Pix pix[BN];
    unsigned char *As = smem, *Bs = smem + WG_STAGES * A_STAGE;
    const int g = blockIdx.z / splits, sp = blockIdx.z % splits, m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * BN;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    p.template prologue<BN>(pix, n0, g);
    __syncthreads();

    float acc[ACC];
#pragma unroll
    for (int r = 0; r < ACC; r++) acc[r] = 0.f;

    // this block's k-tiles: kb ... kb + KT - 1 (a split may have none)
    const int KT_ALL = (p.K + BK - 1) / BK, per = (KT_ALL + splits - 1) / splits;
    const int kb = min(KT_ALL, sp * per), KT = min(KT_ALL, kb + per) - kb;
    auto load = [&](int kt) {
        const int slot = kt % WG_STAGES, k0 = (kb + kt) * BK;
        p.load_a(As + slot * A_STAGE, g, m0, k0, tid);
        p.template load_b<BN>(Bs + slot * B_STAGE, n0, k0, pix, tid);
    };
    // k-tile kt is copied at step kt - 2 into slot kt % 4, which wgmma read at step kt - 4; every
    // warpgroup waited for that group at step kt - 3 (wait_group 1 leaves only the newest in
    // flight), before the barrier of step kt - 2
#pragma unroll
    for (int s = 0; s < WG_STAGES - 2; s++) {
        if (s < KT) load(s);
        cp_async_commit();
    }
    const uint32_t a_base = smem_addr(As), b_base = smem_addr(Bs);
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<WG_STAGES - 3>(); // this thread's copies of k-tile kt have landed
        fence_to_async();
        __syncthreads(); // everyone's have
        if (kt + WG_STAGES - 2 < KT) load(kt + WG_STAGES - 2);
        cp_async_commit();
        const int slot = kt % WG_STAGES;
        const uint32_t a = a_base + slot * A_STAGE, b = b_base + slot * B_STAGE;
        acc_fence(acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < WG_KBYTES / WG_KSTEP_BYTES; ks++)
            wgmma(acc, wg_desc(wg_start(a, 64 * wg, ks)), wg_desc(wg_start(b, 0, ks)), T{});
        wgmma_commit();
        acc_fence(acc);
        wgmma_wait<1>();
        acc_fence(acc);
    }
    wgmma_wait<0>();
    acc_fence(acc); // the epilogue reads the sums only now
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < ACC; r++) {
        int row, col;
        wg_c(warp, lane, r, &row, &col);
        const int m = m0 + 64 * wg + row, n = n0 + col;
        if (m >= p.M || n >= p.N) continue;
        if (part) part[((long long)blockIdx.z * p.M + m) * p.N + n] = acc[r]; // split-K: this slice's sum
        else p.store(g, m, n, pix, col, acc[r]);
    }
#else
    __trap(); // not sm_90a: never launched (gemm_plan.c offers this variant on compute capability 9.0 only)
#endif
}

template <class T, int BN, class P> int launch_tile(const P &p, int groups, int splits, float *part, cudaStream_t s) {
    const int smem = wg_smem_bytes(BN);
    if (int rc = smem_opt_in<wg_tiles<T, BN, P>>(smem)) return rc;
    dim3 grid(blocks_for(p.N, BN), blocks_for(p.M, WG_BM), groups * splits);
    wg_tiles<T, BN, P><<<grid, WG_THREADS, smem, s>>>(p, splits > 1 ? part : nullptr, splits);
    return launched();
}

template <class T, class P> int launch(const P &p, int groups, int bn, int splits, float *part, cudaStream_t s) {
    if (splits < 1 || (splits > 1 && !part)) return (int)cudaErrorInvalidValue;
    if (bn == 128) return launch_tile<T, 128>(p, groups, splits, part, s);
    if (bn == 256) return launch_tile<T, 256>(p, groups, splits, part, s);
    return (int)cudaErrorInvalidValue;
}

} // namespace

extern "C" int dlk_wgmma_aligned(const void *x, const void *w) { return (((size_t)x | (size_t)w) & 15) == 0; }

extern "C" int dlk_wgmma_conv2d(const dlk_conv *c, int type, const void *x, const void *w, const dlk_epilogue *e,
                                void *y, const mma_ktap *ktab, int bn, int splits, float *part, cudaStream_t s) {
    const mma_conv_geom q = {c->c,  c->h,  c->w,  c->oc, c->oh, c->ow, c->c / c->groups, c->oc / c->groups,
                             c->sh, c->sw, c->ph, c->pw, c->cl};
    if (!c->cl || !dlk_wgmma_aligned(x, w)) return (int)cudaErrorInvalidValue;
    return by_type(type, [&](auto t) {
        using T = decltype(t);
        Conv<T> p;
        p.w = static_cast<const T *>(w);
        p.x = static_cast<const T *>(x);
        p.y = static_cast<T *>(y);
        p.e = *e;
        p.q = q;
        p.ktab = ktab;
        p.M = q.ocg, p.N = c->n * c->oh * c->ow, p.K = q.cg * c->kh * c->kw;
        if (!wg_chunks_ok((int)sizeof(T), 1, c->c, q.cg, p.K)) return (int)cudaErrorInvalidValue;
        int rc = launch<T>(p, c->groups, bn, splits, part, s);
        if (rc || splits == 1) return rc;
        return dlk_mma_splitk_sum(type, part, splits, c->groups, p.M, p.N, e, y, &q, s);
    });
}

extern "C" int dlk_wgmma_linear(const dlk_linear_p *l, int type, const void *x, const void *w, const dlk_epilogue *e,
                                void *y, int bn, int splits, float *part, cudaStream_t s) {
    if (!dlk_wgmma_aligned(x, w)) return (int)cudaErrorInvalidValue;
    return by_type(type, [&](auto t) {
        using T = decltype(t);
        Linear<T> p;
        p.w = static_cast<const T *>(w);
        p.x = static_cast<const T *>(x);
        p.y = static_cast<T *>(y);
        p.e = *e;
        p.M = l->out, p.N = l->n, p.K = l->in;
        if (!wg_chunks_ok((int)sizeof(T), 0, 0, 0, p.K)) return (int)cudaErrorInvalidValue;
        int rc = launch<T>(p, 1, bn, splits, part, s);
        if (rc || splits == 1) return rc;
        return dlk_mma_splitk_sum(type, part, splits, 1, p.M, p.N, e, y, nullptr, s);
    });
}
