/* weights.h — binds weight values of a graph to data: a safetensors file or seeded init. */
#ifndef DLRUN_WEIGHTS_H
#define DLRUN_WEIGHTS_H
#include "graph.h"

typedef struct dl_weights dl_weights; /* owns mappings and converted copies */

/* Sets data of every DL_VALUE_WEIGHT value in g (shapes already inferred). With path != NULL reads
 * that safetensors file: f32 tensors are used in place when aligned, f16/bf16 converted once;
 * each weight must exist with the inferred shape, else an error naming the tensor. Tensors in the
 * file that the model does not use are allowed only if they end in ".num_batches_tracked"
 * (PyTorch bookkeeping); others are an error naming them. With path == NULL draws each weight
 * from `seed` as PyTorch initialises it (graph.h DL_INIT_*). */
dl_status dl_weights_bind(dl_graph *g, const char *path, uint64_t seed, dl_weights **out,
                          dl_error *err);
void dl_weights_free(dl_weights *w);
#endif
