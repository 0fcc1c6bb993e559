/* onednn.h — the oneDNN plugin's shared pieces: a prepared kernel as a short list of oneDNN
 * primitives ("steps") whose arguments are bound, at run, to the op's tensors, the workspace or
 * buffers the kernel owns; and the helpers the op builders (conv.c, ops.c) use to make one. */
#ifndef DLRUN_ONEDNN_H
#define DLRUN_ONEDNN_H
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "dlrun/plugin.h"
#include "op_check.h"

/* The plugin's state: its backend table and the one CPU engine all kernels use. */
typedef struct odn_state {
    dl_backend table;
    dnnl_engine_t engine;
    int threads;
    int blocked;           /* 1: convs and pools in oneDNN's 8-channel blocked layout inside the kernel
                              (DLRUN_ONEDNN_LAYOUT=plain: 0) */
    int binary_residual;   /* 1: a conv's fused residual always a binary add post-op, never a sum on the
                              residual in dst (DLRUN_ONEDNN_RESIDUAL=binary; conv.c) */
    int conv_algo;         /* odn_conv_algo: DLRUN_ONEDNN_CONV=auto|direct|winograd|other */
    struct odn_memo *memo; /* algo.c: the conv variants measured fastest so far, by shape */
    const dl_host *host;   /* for its store (ABI 1.12): the variants measured by earlier processes */
    char description[256];
} odn_state;

/* Where a primitive argument's memory is at run. */
typedef enum odn_bind {
    ODN_INPUT = 0,     /* the op's input `index` */
    ODN_OUTPUT = 1,    /* the op's output */
    ODN_WORKSPACE = 2, /* bytes at `offset` in the workspace the host passes to run */
    ODN_OWNED = 3      /* memory the kernel set up at prepare (weights reordered once) */
} odn_bind;

typedef struct odn_arg {
    int arg;       /* DNNL_ARG_* */
    odn_bind bind; /* where its data is */
    int index;     /* ODN_INPUT: which input */
    size_t offset; /* ODN_WORKSPACE: byte offset */
} odn_arg;

/* One primitive and its arguments. */
typedef struct odn_step {
    dnnl_primitive_t prim;
    int n_args;
    odn_arg *args;          /* n_args bindings ... */
    dnnl_exec_arg_t *xargs; /* ... and the memory objects oneDNN is given, in the same order */
    int unless_at;          /* an input's index: the step is a copy of that input to the output,
                               skipped where run is given them in place (one buffer); else -1 */
} odn_step;

#define ODN_MAX_STEPS 8
#define ODN_MAX_OWNED 4

struct dl_kernel {
    char name[96]; /* "layer (kind)" for messages */
    int threads;
    dnnl_stream_t stream; /* one per kernel: a kernel is never in two calls at once */
    int n_steps;
    odn_step steps[ODN_MAX_STEPS];
    size_t workspace; /* bytes run needs: scratchpads and blocked copies of the tensors */
    int n_owned;
    void *owned[ODN_MAX_OWNED]; /* buffers of ODN_OWNED memories */
    size_t owned_bytes[ODN_MAX_OWNED];
    int in_place; /* the input the output may overwrite (kernel_in_place), or -1 */
};

/* How a builder describes one argument of the primitive it made (odn_add_primitive). `md` is the
 * layout the tensor has in dlrun (dense row-major f32); where the primitive wants another, a
 * reorder is added before it (inputs; weights known at prepare are reordered once, there) or after
 * it (the output). */
typedef struct odn_tensor_arg {
    int arg;       /* DNNL_ARG_* */
    odn_bind bind; /* ODN_INPUT or ODN_OUTPUT */
    int index;     /* ODN_INPUT: which input */
    dnnl_memory_desc_t md;
} odn_tensor_arg;

/* What a builder works with. With k NULL it only checks that oneDNN builds a primitive descriptor
 * for the op (supports); with a kernel it also creates the primitives (prepare). */
typedef struct odn_build {
    odn_state *s;
    const dl_op *op;
    dl_kernel *k;
    const char *what; /* "layer (kind)" */
    dl_error *err;
    int variant; /* a conv's odn_variant: oneDNN's first choice, Winograd, or another implementation */
} odn_build;

/* How a conv is built: oneDNN's direct algorithm by the implementation it offers first; Winograd
 * (odn_winograd_may); or, for a conv with a residual sum (odn_impls_may), by the j-th further jit
 * implementation oneDNN offers for it (ODN_IMPL(j), 1 <= j <= ODN_MAX_IMPLS). algo.c measures them. */
typedef enum odn_variant { ODN_DIRECT = 0, ODN_WINOGRAD = 1 } odn_variant;
#define ODN_IMPL(j) (1 + (j))
#define ODN_MAX_IMPLS 2

/* A oneDNN call's failure as a dl_status with a one-line message naming the op, what failed and
 * oneDNN's status; DL_E_UNSUPPORTED for "unimplemented", else DL_E_RUNTIME. */
dl_status odn_fail(odn_build *b, dnnl_status_t st, const char *what);
#define ODN_TRY(b, what, call)                                          \
    do {                                                                \
        dnnl_status_t odn_st_ = (call);                                 \
        if (odn_st_ != dnnl_success) return odn_fail(b, odn_st_, what); \
    } while (0)

/* A dense row-major f32 descriptor of a dlrun shape (rank 0 as [1]). */
dnnl_status_t odn_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *shape);
/* The f32 descriptor of tensor t as it lies: row-major, or by its strides (channels-last). */
dnnl_status_t odn_tensor_md(dnnl_memory_desc_t *md, const dl_tensor *t);
/* A primitive attribute with user scratchpad (run's workspace) and, for a fused residual (its
 * layout: NULL for none), post-op 0: a binary add (its argument is ODN_ARG_RESIDUAL) or, with
 * `sum`, a sum (dst += the result: the residual is copied into dst first, ODN_ARG_RESIDUAL_IN_DST);
 * then for a fused dl_activation its eltwise post-op; NULL where oneDNN has no exact form of the
 * activation. */
dnnl_status_t odn_attr_create(dnnl_primitive_attr_t *attr, const dl_op_attrs *a, const dnnl_memory_desc_t *residual,
                              int sum);
/* The residual's argument of a kernel built with odn_attr_create's residual as a binary add */
#define ODN_ARG_RESIDUAL (DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1)
/* Not an argument of the primitive: the residual, copied into its destination (in the primitive's
 * layout of it) before the primitive runs, for a sum post-op (odn_add_primitive). The kernel may
 * then run in place over the residual (ABI 1.10), where that copy is left out if the primitive
 * writes the output itself (a reorder after it reads the residual's copy, not the output). */
#define ODN_ARG_RESIDUAL_IN_DST (-1)
/* 1 if the activation has an exact oneDNN eltwise form (relu, silu, hard_swish, gelu erf/tanh; ABI 1.5:
 * clip, leaky relu, sigmoid). */
int odn_activation_ok(int activation);

/* Takes ownership of pd (destroyed in every case): in a check (b->k NULL) that is all; else adds
 * its primitive as a step, with reorders where the primitive's layout of an argument differs from
 * the given one, its scratchpad in the workspace, and weights known at prepare reordered once. */
dl_status odn_add_primitive(odn_build *b, dnnl_primitive_desc_t pd, const odn_tensor_arg *args, int n_args);

/* 1 for a conv oneDNN may run by Winograd: 2-D, 3x3, stride 1, no dilation, no groups (oneDNN
 * still decides, at building, whether it has a kernel for it: channels, ISA). */
int odn_winograd_may(const dl_op *op);

/* How a conv is run (DLRUN_ONEDNN_CONV): its variants measured at prepare (auto), or one forced, for
 * tests and measuring (forced Winograd or other runs direct where oneDNN has none for the conv). */
typedef enum odn_conv_algo {
    ODN_CONV_AUTO = 0,
    ODN_CONV_DIRECT = 1,   /* oneDNN's first choice of its direct kernels, nothing measured */
    ODN_CONV_WINOGRAD = 2, /* Winograd wherever oneDNN builds it */
    ODN_CONV_OTHER = 3     /* a residual sum conv by oneDNN's second jit implementation where it has one */
} odn_conv_algo;

/* 1 for a conv whose residual is a sum post-op, which algo.c times on oneDNN's further
 * implementations too: brgconv's sum read a cold residual at half the speed of jit:avx512_core's
 * (ResNet-50's 1x1 convs at batch 8, docs/onednn.md). */
int odn_impls_may(const odn_state *s, const dl_op *op);
/* algo.c: the variant measured fastest for a conv of this shape in this process, or kept by the
 * host from an earlier one (dl_host.cache_get) where it is a variant this conv offers; -1 if none. */
int odn_variant_known(odn_state *s, const dl_op *op);
/* algo.c: of n kernels of one conv (k[0] built as variants[0] = ODN_DIRECT, the others as
 * variants[i]), the index of the one to keep: each run in turn on patterned inputs at prepare, k[0]
 * kept unless another is 3 % faster; the answer remembered per shape for the plugin's life, so that
 * placement's timing and the session's kernel agree, and handed to the host to keep for the next
 * process (dl_host.cache_put). */
int odn_fastest(odn_state *s, const dl_op *op, dl_kernel *const *k, const int *variants, int n);
int odn_algo_init(odn_state *s); /* 0: out of memory */
void odn_algo_free(odn_state *s);

/* Runs a prepared kernel's steps with their arguments bound to this call's tensors and workspace. */
dl_status odn_kernel_run(dl_kernel *k, const dl_tensor *in, const dl_tensor *out, void *ws, dl_error *err);
void odn_kernel_free(dl_kernel *k);

/* The op builders: each builds the op's primitive descriptor(s) and hands them to
 * odn_add_primitive. The op has passed dl_op_check_as already; they refuse, with a reason, what
 * oneDNN would compute differently from the CPU reference. */
dl_status odn_conv2d(odn_build *b);
dl_status odn_conv3d(odn_build *b);
dl_status odn_pool(odn_build *b);
dl_status odn_linear(odn_build *b);
dl_status odn_matmul(odn_build *b);
dl_status odn_eltwise(odn_build *b);
dl_status odn_softmax(odn_build *b);
dl_status odn_concat(odn_build *b);
dl_status odn_add(odn_build *b);
dl_status odn_batchnorm(odn_build *b);
dl_status odn_copy_op(odn_build *b); /* flatten, dropout, reshape */
/* 1 for the kinds odn_eltwise runs (one oneDNN eltwise each; they may run in place). */
int odn_is_eltwise(int kind);
#endif
