/* oprun.h — run one op on one backend, in its memory domain, from host data (see oprun.c). */
#ifndef DLRUN_OPRUN_H
#define DLRUN_OPRUN_H
#include "dlrun/plugin.h"

#define DL_GUARD 256u           /* bytes poisoned on each side of an output; keeps alignment */
#define DL_POISON 0x7fa5a5a5u   /* a quiet NaN bit pattern no kernel computes by accident */
#define DL_POISON16 0x7fa57fa5u /* the same for 16-bit outputs: a NaN in f16 and bf16 alike */

typedef struct dl_op_result {
    int supported;          /* supports() said yes */
    int guards_ok;          /* 1 fine; 0 a guard changed; -1 prepare or run failed (see why) */
    char why[DL_ERROR_LEN]; /* not supported, or the failure */
    double ms;              /* iterations > 0: median time of one run, after two warm-ups */
} dl_op_result;

/* be->supports(op), but first refuses what the plugin's ABI minor version cannot know about (an
 * ABI 1.1 plugin would ignore a maxpool's dilation): every host call of supports goes here. */
int dl_backend_accepts(const struct dl_backend *be, const dl_op *op, dl_error *why);

/* op has shapes, dtypes and layouts; inputs[i].data is host f32 row-major data, converted to the
 * op's tensor formats on the way; is_weight[i] marks inputs passed at prepare. The output is
 * converted back and written to out (host, numel floats, row-major). iterations > 0 also times the op. A failing
 * backend is reported in r, not as an error; errors are copies or memory that fail. */
dl_status dl_run_op(const struct dl_backend *be, const dl_op *op, const unsigned char *is_weight, float *out,
                    int iterations, dl_op_result *r, dl_error *err);
#endif
