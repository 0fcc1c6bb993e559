/* weights.h — gives a model's weight values host data for one session: a safetensors file or
 * seeded init. The model is only read; the data belongs to the returned dl_weights. */
#ifndef DLRUN_WEIGHTS_H
#define DLRUN_WEIGHTS_H
#include "graph.h"

/* Owns the mapping, copies and seeded tensors. One session's: it is used by one thread at a
 * time (dl_weights_data may convert and cache, so it is not safe to call from two at once). */
typedef struct dl_weights dl_weights;

/* Binds every DL_VALUE_WEIGHT value of g at the given shapes (a session's; NULL: the model's
 * own). With path != NULL reads that safetensors file: each weight keeps the file's dtype (F32,
 * F16 or BF16; any other is an error naming the tensor), used in place from the read-only mapping
 * when aligned for its dtype, else copied once; nothing is converted here. Each weight must exist
 * with its shape, else an error naming the tensor. Tensors in the file that the model does not
 * use are allowed only if they end in ".num_batches_tracked" (PyTorch bookkeeping); others are an
 * error naming them. With path == NULL draws each weight from `seed` as PyTorch initialises it
 * (dl_init), in f32. */
dl_status dl_weights_bind(const dl_graph *g, const dl_shape *shapes, const char *path, uint64_t seed, dl_weights **out,
                          dl_error *err);
/* Value v's data as stored, with its dtype in *dtype (DL_F32, DL_F16 or DL_BF16; dtype may be
 * NULL): the file's bits for a file weight, f32 for a seeded one. NULL, and *dtype untouched, for
 * any other value. Little-endian (as safetensors and the hosts dlrun runs on). Valid until
 * dl_weights_free. Never allocates. */
const void *dl_weights_raw(const dl_weights *w, int v, dl_dtype *dtype);
/* Host f32 data of value v: a weight's, NULL for any other value. An f32 weight's is its stored
 * data; an f16/bf16 weight is converted exactly on the first call for it and the copy cached in w
 * (NULL if that copy cannot be allocated). Valid until dl_weights_free. Not thread-safe (see
 * above). */
const float *dl_weights_data(dl_weights *w, int v);
/* Bytes of f32 data w has allocated so far: seeded weights, copies of unaligned F32 tensors and
 * f16/bf16 weights converted by dl_weights_data; f32 used in place from the file is not counted.
 * 0 after binding a file of aligned tensors until dl_weights_data converts one. */
size_t dl_weights_f32_bytes(const dl_weights *w);
/* Bytes of host memory w has allocated so far, of every dtype (seeded weights, aligned copies,
 * f32 conversions); the file's mapping is not counted (the page cache backs it). */
size_t dl_weights_owned_bytes(const dl_weights *w);
/* Bytes dl_weights_bind will allocate for seeded weights at these shapes (0 with a weights file,
 * whose tensors are mapped): the memory budget is checked against it before anything is drawn. */
size_t dl_weights_seeded_bytes(const dl_graph *g, const dl_shape *shapes);
void dl_weights_free(dl_weights *w);
#endif
