/* choice_store.h — a GPU plugin's choices timed at prepare (the cuda plugin's GEMM variant and
 * split, the cudnn plugin's convolution algorithm, math and epilogue), kept across processes in
 * the host's timing cache (dl_host.cache_get / cache_put, ABI 1.12), so that a model is timed once
 * per machine instead of once per process. The host adds the plugin's build and description (the
 * GPU, its driver, CUDA, cuDNN) to each key; the plugin's key holds everything else the choice
 * depends on. Plain C, no CUDA: tests/test_gpu_formats.c checks it without a GPU. */
#ifndef DLRUN_GPU_CHOICE_STORE_H
#define DLRUN_GPU_CHOICE_STORE_H
#include <stddef.h>

#include "dlrun/plugin.h"

enum { DL_GPU_CHOICE_KEY_LEN = DL_HOST_KEY_LEN + 1, DL_GPU_CHOICE_MAX = 1 << 20 };

/* The key of op's choice: `what` (the plugin's name for the choice, with the version of its
 * encoding), the op's kind, precision, every input's and the output's dtype, layout and shape, its
 * conv attributes, fused activation and residual, then `extra` (the plugin's switches and the
 * device limits its candidates depend on). 1, or 0 where it does not fit len (key is then "": such
 * an op is not kept, never kept under a cut key that another op could share). */
int dl_gpu_choice_key(char *key, size_t len, const char *what, const dl_op *op, const char *extra);

/* 1 and *code where host keeps key as a whole number from 0 to DL_GPU_CHOICE_MAX, else 0 (no
 * store, an empty key, --retune, nothing kept, or a value the file should not hold: the file is
 * the user's). The caller still checks that code is a choice it offers for the op. */
int dl_gpu_choice_get(const dl_host *host, const char *key, int *code);
/* Keeps code (0 to DL_GPU_CHOICE_MAX) under key; nothing where there is no store or no key. */
void dl_gpu_choice_put(const dl_host *host, const char *key, int code);
#endif
