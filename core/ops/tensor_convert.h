/* tensor_convert.h — converting a tensor between storage dtypes (f32, f16, bf16) and layouts
 * (row-major, channels-last) in host memory. The host uses it for casts and for weights; the
 * in-tree plugins (which link the op table) use it to take any storage dtype. */
#ifndef DLRUN_TENSOR_CONVERT_H
#define DLRUN_TENSOR_CONVERT_H
#include "dlrun/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif
/* 1 for the storage dtypes dlrun converts between: f32, f16, bf16. */
int dl_dtype_is_float(dl_dtype d);
/* Copies src to dst (same shape, both in host memory), converting dtype and layout; 0 (and
 * nothing written) if a dtype or layout is not one dl_dtype_is_float / dl_tensor_layout know. */
int dl_convert_host(const dl_tensor *dst, const dl_tensor *src);
/* The same for n contiguous elements in one layout. */
int dl_convert_elements(void *dst, dl_dtype dt, const void *src, dl_dtype st, int64_t n);
/* "f32", "f16", "bf16" or "?" */
const char *dl_dtype_name(dl_dtype d);
#ifdef __cplusplus
}
#endif
#endif
