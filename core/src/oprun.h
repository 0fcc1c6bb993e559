/* oprun.h — run one op on one backend, in its memory domain, from host data (see oprun.c). */
#ifndef DLRUN_OPRUN_H
#define DLRUN_OPRUN_H
#include "dlrun/plugin.h"
#include "graph.h"

#define DL_GUARD 256u           /* bytes poisoned on each side of an output; keeps alignment */
#define DL_POISON 0x7fa5a5a5u   /* a quiet NaN bit pattern no kernel computes by accident */
#define DL_POISON16 0x7fa57fa5u /* the same for 16-bit outputs: a NaN in f16 and bf16 alike */

typedef struct dl_op_result {
    int supported;          /* supports() said yes */
    int guards_ok;          /* 1 fine; 0 a guard changed; -1 prepare or run failed (see why) */
    char why[DL_ERROR_LEN]; /* not supported, or the failure */
    double ms;              /* iterations > 0: median time of one run, after two warm-ups */
} dl_op_result;

/* How a tensor is stored: dtype and, for 4-D activations, layout (dl_layout). */
typedef struct dl_format {
    dl_dtype dtype;
    int layout;
} dl_format;

/* "f32", "bf16", "f16 nhwc", ... */
void dl_format_str(dl_format f, char *buf, size_t len);
/* Gives tensor t (a float activation) format f: f's dtype, and NHWC strides in strides4 where f
 * is channels-last and t 4-D, else row-major. dl_op_apply_format: gives op's tensors (in, out: op's arrays, writable)
 * format f: every dtype is f's; with channels-last, 4-D inputs that are not weights (is_weight) and a 4-D output get
 * NHWC strides (strides: room for 4 per tensor, inputs then output); all else is row-major. */
void dl_tensor_apply_format(dl_tensor *t, dl_format f, int64_t *strides4);
void dl_op_apply_format(dl_op *op, dl_tensor *in, dl_tensor *out, const unsigned char *is_weight, dl_format f,
                        int64_t *strides);
/* What the host asks of each backend for 4-D layouts: a dl_layout_mode resolved for one model
 * (dl_layout_ask_for). */
typedef enum dl_layout_ask {
    DL_ASK_PLUGIN = 0,    /* each backend's preferred_layout */
    DL_ASK_ROW_MAJOR,     /* row-major everywhere (nchw) */
    DL_ASK_CL_CONVS,      /* channels-last at every conv2d on every backend (nhwc) */
    DL_ASK_CL_CONVS_HOST, /* the same on backends in host memory only (auto's second plan) */
    DL_ASK_MEASURE        /* a session's auto: DL_ASK_PLUGIN or DL_ASK_CL_CONVS_HOST, whichever plan
                             placement measures cheaper (dl_session_place); no backend is asked so */
} dl_layout_ask;
/* A dl_layout_mode resolved for one op, with no plan to measure (check's op-by-op rows): auto is
 * DL_ASK_CL_CONVS_HOST for a model with `depthwise` depthwise convs, else DL_ASK_PLUGIN. */
int dl_layout_ask_for(int mode, int depthwise);
/* The layout the host asks be for op under `ask`: DL_LAYOUT_ROW_MAJOR (whatever the input),
 * DL_LAYOUT_CHANNELS_LAST or DL_LAYOUT_AS_INPUT. DL_ASK_ROW_MAJOR: row-major; DL_ASK_CL_CONVS:
 * channels-last at conv2d; DL_ASK_CL_CONVS_HOST: the same at the conv2d of a backend in host memory
 * unless be answers row-major for it. Elsewhere be's preferred_layout answer as ABI 1.9 reads it:
 * AS_INPUT where it gives none, or row-major from a plugin built before 1.9. */
int dl_backend_layout_pref(const struct dl_backend *be, const dl_op *op, int ask);
/* Tries op on be in the storage formats of `precision`, best first (ABI 1.3): its dtype (f16,
 * bf16) channels-last when the op has a 4-D activation and the host asks channels-last for it
 * (dl_backend_layout_pref under `ask`; or AS_INPUT and input_cl says its input already is), that dtype row-major, f32
 * channels-last (same condition), f32 row-major. A plugin of ABI 1.2 or older is asked f32 row-major only. Leaves op in
 * the first format accepted and returns 1 (*f says which), else 0 with be's reason for f32 row-major. */
int dl_backend_accepts_as(const struct dl_backend *be, int precision, int ask, int input_cl, dl_op *op, dl_tensor *in,
                          dl_tensor *out, const unsigned char *is_weight, int64_t *strides, dl_format *f,
                          dl_error *why);

/* be->supports(op), but first refuses what the plugin's ABI minor version cannot know about (an
 * ABI 1.1 plugin would ignore a maxpool's dilation): every host call of supports goes here. */
int dl_backend_accepts(const struct dl_backend *be, const dl_op *op, dl_error *why);

/* Host buffers kept from one dl_run_op to the next, for measuring many ops in a row: placement at
 * batch 10000 spent most of its time faulting in fresh pages, 2 GB for each op it timed. Slot k <
 * DL_MAX_OP_INPUTS is the caller's (dl_op_scratch_get), the last the run's output. `random`: the
 * inputs are random numbers for timing, so an f32 activation is taken as it lies in whatever
 * layout the op has (no conversion from row-major), and the output is not read back. */
typedef struct dl_op_scratch {
    void *p[DL_MAX_OP_INPUTS + 1];
    size_t cap[DL_MAX_OP_INPUTS + 1];
    int random;
    /* cold > 0: each timed run on a host backend starts with the caches emptied of the op's
     * weights, as in a model whose weights exceed the last-level cache (placement.c): this many
     * bytes of `evict` are read first, then the op's activations, output and workspace touched;
     * `evictions` counts those runs */
    size_t cold;
    void *evict;
    size_t evict_cap;
    unsigned long evictions;
} dl_op_scratch;

/* Slot k of sc, at least `bytes`, 64-byte aligned, its contents undefined; kept where it is at most
 * twice that, else allocated anew (NULL: out of memory). dl_op_scratch_put frees slot k. */
void *dl_op_scratch_get(dl_op_scratch *sc, int k, size_t bytes);
void dl_op_scratch_put(dl_op_scratch *sc, int k);
void dl_op_scratch_free(dl_op_scratch *sc);

/* op has shapes, dtypes and layouts; inputs[i].data is host f32 row-major data, converted to the
 * op's tensor formats on the way; is_weight[i] marks inputs passed at prepare. The output is
 * converted back and written to out (host, numel floats, row-major; NULL: only its guards are
 * checked). iterations > 0 also times the op. sc: buffers to reuse (NULL: its own). A failing
 * backend is reported in r, not as an error; errors are copies or memory that fail. */
dl_status dl_run_op(const struct dl_backend *be, const dl_op *op, const unsigned char *is_weight, float *out,
                    int iterations, dl_op_scratch *sc, dl_op_result *r, dl_error *err);
#endif
