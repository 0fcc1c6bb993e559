/* storage.h — f16/bf16 storage and channels-last layouts for the CPU plugin (ABI 1.3).
 *
 * The kernels in ops/ compute on f32 row-major tensors only. An op with any other tensor (an f16
 * or bf16 dtype, a channels-last 4-D layout) is wrapped here so that the CPU plugin stays the
 * reference at every precision: its weights are converted once at prepare to f32 row-major
 * copies the kernel keeps; at run each such activation is converted into f32 row-major staging
 * in the workspace, the f32 kernel writes f32 staging, and that is rounded once into the output's
 * dtype and layout. The staging sits at the start of the workspace, the f32 kernel's own
 * workspace after it. An op whose tensors are all f32 row-major does not come here: no copy, no
 * extra workspace. In place (output 0 aliasing input 0) stays correct: input 0 is read in full
 * (converted, or read by the kernel into the output staging) before the output is written. */
#ifndef DLRUN_CPU_STORAGE_H
#define DLRUN_CPU_STORAGE_H
#include "dlrun/plugin.h"

typedef struct cpu_storage {
    int active; /* 1 when some tensor is not f32 row-major: run goes through cpu_storage_run */
    int n_inputs;
    float **weights;  /* per input: its f32 row-major copy made at prepare (a converted weight), or NULL */
    size_t *stage;    /* per input: offset of its f32 row-major staging in the workspace, or CPU_NO_STAGE */
    size_t out_stage; /* offset of the output's f32 row-major staging, or CPU_NO_STAGE */
    size_t staging;   /* bytes of staging, a multiple of 64: the f32 kernel's workspace starts there */
    size_t kernel_ws; /* bytes of the f32 kernel's workspace */
    dl_tensor *t32;   /* per input: the tensor the f32 kernel is given (the view at prepare, reused by run) */
    dl_tensor out32;  /* the output as the f32 kernel's prepare sees it */
} cpu_storage;

#define CPU_NO_STAGE ((size_t)-1)

/* Fills s from op (already accepted by supports). When some tensor is not f32 row-major, converts
 * the weights that need it and sets *op32 to op with f32 row-major tensors (valid until
 * cpu_storage_free), for the f32 kernel's prepare; otherwise *op32 = op. keep_cl: the op has an
 * NHWC kernel (ops/nhwc.c), so its f32 channels-last activations and output stay where they are
 * (its channels-last weight is still converted). DL_E_NOMEM or
 * DL_E_INVALID (a weight that cannot be converted) with err filled. */
dl_status cpu_storage_prepare(cpu_storage *s, const dl_op *op, dl_op *op32, int keep_cl, dl_error *err);
/* The workspace the wrapped kernel needs given the f32 kernel's: kernel_ws itself when inactive. */
size_t cpu_storage_workspace(cpu_storage *s, size_t kernel_ws);
/* Runs fn (an f32 row-major kernel of k) on the inputs and output in their own formats, as
 * described in the header comment. */
dl_status cpu_storage_run(const cpu_storage *s, const dl_kernel *k,
                          void (*fn)(const dl_kernel *k, const dl_tensor *in, float *y, void *ws), const dl_tensor *in,
                          const dl_tensor *out, void *ws, dl_error *err);
void cpu_storage_free(cpu_storage *s);
#endif
