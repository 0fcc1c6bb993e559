/* gemm.h — the CPU plugin's own matrix product C = A B, with the bias and the fused activation
 * applied as each block of C is finished (conv2d's 1x1 and im2col paths, linear, matmul by a
 * weight).
 *
 * Why not only OpenBLAS: a weight is packed once at prepare instead of at every call; the
 * activation operand of a conv is packed straight from the image (im2col never materialises);
 * thin products (a 1x1 conv over 16 or 24 channels) run at the cores' rate where sgemm spends
 * its time packing; the epilogue runs on the block while it is in cache.
 *
 * Layout (the BLIS scheme): A is packed in panels of CPU_GEMM_MR rows, each panel k steps of MR
 * floats; B in panels of CPU_GEMM_NR columns, each k steps of NR floats; panels are zero-padded,
 * so the micro-kernel never sees an edge. With AVX-512 the micro-kernel keeps a 6 x 32 block of C
 * (two panels of B) in 12 registers of 16 lanes, or 6 x 64 in 24 where B was packed beforehand;
 * with AVX2 + FMA a 6 x 16 block in 12 of 8;
 * without them a portable C kernel of the same layout runs. The layout is the same for all three,
 * so a packed operand does not depend on the kernel. */
#ifndef DLRUN_CPU_GEMM_H
#define DLRUN_CPU_GEMM_H
#include <stddef.h>
#include <stdint.h>

#include "dlrun/plugin.h"

#define CPU_GEMM_MR 6
#define CPU_GEMM_NR 16

/* Floats of a packed A (m x k) or B (k x n); SIZE_MAX when that does not fit a size_t. */
size_t cpu_gemm_packed_a_floats(int64_t m, int64_t k);
size_t cpu_gemm_packed_b_floats(int64_t k, int64_t n);

/* Packs part of one panel of an operand: panel `panel` (rows panel*MR.. of A, or columns
 * panel*NR.. of B), k steps p0 .. p0+kc-1, zero-padded past the matrix's edge, into dst (kc x MR
 * or kc x NR floats). ctx is the operand's own. */
typedef void (*cpu_gemm_pack_fn)(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst);

/* A strided matrix as a packer's ctx: element (r, c) at data[r * rs + c * cs]; rows x cols. For
 * A, rows are m and cols k; for B, rows are k and cols n. */
typedef struct cpu_gemm_strided {
    const float *data;
    int64_t rs, cs, rows, cols;
} cpu_gemm_strided;
void cpu_gemm_pack_a_strided(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst);
void cpu_gemm_pack_b_strided(const void *ctx, int64_t panel, int64_t p0, int64_t kc, float *dst);

/* Packs a whole strided A or B on the calling thread (a weight, at prepare). */
void cpu_gemm_pack_a(const cpu_gemm_strided *a, float *dst);
void cpu_gemm_pack_b(const cpu_gemm_strided *b, float *dst);

/* One operand of cpu_gemm: already packed, or packed by cpu_gemm into its scratch with pack(ctx):
 * A all at once before the product, B one block of columns and k steps at a time, by the thread
 * that uses it while it is in that core's cache. Either may instead be read in place, unpacked:
 * - B with row_at set: B(p, j) = base[row_at[p] + j], every row readable up to its last whole
 *   panel (column round_up(n, 16) - 1; a conv's padded image, tail included);
 * - A with base set (row_at NULL): A(i, p) = base[p * ld + i], its k steps ld floats apart (a 1x1
 *   conv's image with its pixels as the rows of C: each step's 6 pixels lie side by side). A last
 *   panel of fewer than 6 rows is packed into the scratch, so nothing past A's edge is read. */
typedef struct cpu_gemm_operand {
    const float *packed;
    cpu_gemm_pack_fn pack;
    const void *ctx;
    const float *base;
    const int64_t *row_at;
    int64_t ld;
} cpu_gemm_operand;

/* What happens to C's elements once their sum is complete: + row_bias[i] and/or + col_bias[j]
 * (either may be NULL), + the residual where there is one, then the activation attrs->activation (attrs may be NULL:
 * none); stored at c[i * ldc + j], or with `transposed` at c[j * ldc + i] (a conv computed with its pixels as the rows
 * of C stores its output channel by channel). A transposed C gathers each block's sums in the thread's scratch and
 * stores them once, at the end. */
typedef struct cpu_gemm_epilogue {
    const float *row_bias, *col_bias;
    const dl_op_attrs *attrs;
    int transposed;
    /* C's columns in rows of row_len, of which the first row_keep are kept: column j is stored at
     * c[i * ldc + (j / row_len) * row_keep + j % row_len] when j % row_len < row_keep, else
     * dropped (a conv reading its padded image in place computes a gutter past each output row).
     * row_len 0: every column, as it lies. Not with `transposed`. */
    int64_t row_len, row_keep;
    /* A residual to add (a fused add, ABI 1.8), NULL: none. It lies as C's output does: the
     * element stored at c[o] gets + residual[o], after the biases and before the activation. */
    const float *residual;
} cpu_gemm_epilogue;

/* Floats of scratch cpu_gemm needs on `threads` threads for the operands it packs and, for a
 * transposed C, each thread's block of sums (0 for two packed operands and C as it lies);
 * SIZE_MAX when that does not fit a size_t. pack_a 2: A read in place (its last panel packed). */
size_t cpu_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int pack_a, int pack_b, int transposed, int threads);

/* C[i * ldc + j] = epilogue(sum_p A(i, p) B(p, j)) for i < m, j < n, on up to `threads` OpenMP
 * threads (call it outside a parallel region). scratch holds cpu_gemm_scratch_floats for as many
 * threads or more. */
void cpu_gemm(int64_t m, int64_t n, int64_t k, const cpu_gemm_operand *a, const cpu_gemm_operand *b, float *c,
              int64_t ldc, const cpu_gemm_epilogue *e, float *scratch, int threads);

/* The micro-kernel this build has: "AVX-512" (a 6 x 32 block in 12 registers), "AVX2" (6 x 16 in
 * 12) or "portable C". */
const char *cpu_gemm_isa(void);

/* How a conv of m filters by k taps over n pixels, its weight constant, runs fastest: */
typedef enum cpu_gemm_form {
    CPU_GEMM_NOT = 0,     /* not through cpu_gemm: OpenBLAS */
    CPU_GEMM_FILTER_ROWS, /* C = W windows: the filters packed as A, the windows as B (16 pixels a panel) */
    CPU_GEMM_PIXEL_ROWS,  /* C^T = windows^T W^T, stored transposed: the windows as A (6 pixels a panel) */
} cpu_gemm_form;
cpu_gemm_form cpu_gemm_conv_form(int64_t m, int64_t n, int64_t k);
#endif
