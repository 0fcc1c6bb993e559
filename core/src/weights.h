/* weights.h — gives a model's weight values host data for one session: a safetensors file or
 * seeded init. The model is only read; the data belongs to the returned dl_weights. */
#ifndef DLRUN_WEIGHTS_H
#define DLRUN_WEIGHTS_H
#include "graph.h"

typedef struct dl_weights dl_weights; /* owns the mapping, converted copies and seeded tensors */

/* Binds every DL_VALUE_WEIGHT value of g at the given shapes (a session's; NULL: the model's
 * own). With path != NULL reads that safetensors file: f32 tensors are used in place when
 * aligned, f16/bf16 converted once; each weight must exist with its shape, else an error naming
 * the tensor. Tensors in the file that the model does not use are allowed only if they end in
 * ".num_batches_tracked" (PyTorch bookkeeping); others are an error naming them. With path ==
 * NULL draws each weight from `seed` as PyTorch initialises it (dl_init). */
dl_status dl_weights_bind(const dl_graph *g, const dl_shape *shapes, const char *path, uint64_t seed, dl_weights **out,
                          dl_error *err);
/* Host f32 data of value v: a weight's, NULL for any other value. Valid until dl_weights_free. */
const float *dl_weights_data(const dl_weights *w, int v);
void dl_weights_free(dl_weights *w);
#endif
