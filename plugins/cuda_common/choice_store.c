/* choice_store.c — see choice_store.h. */
#define _POSIX_C_SOURCE 200809L
#include "choice_store.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "op_check.h"

/* Appends to key[*used..len) like snprintf; 0 (and *used past len) once it no longer fits. */
static int put(char *key, size_t len, size_t *used, const char *fmt, ...) {
    if (*used >= len) return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(key + *used, len - *used, fmt, ap);
    va_end(ap);
    *used += n < 0 ? len : (size_t)n;
    return *used < len;
}

static int put_tensor(char *key, size_t len, size_t *used, const dl_tensor *t) {
    int ok = put(key, len, used, "%d.%d.%d%s[", t->dtype.code, t->dtype.bits, t->dtype.lanes,
                 dl_tensor_layout(t) == DL_LAYOUT_CHANNELS_LAST ? "c" : "");
    for (int d = 0; d < t->ndim && ok; d++) ok = put(key, len, used, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    return ok && put(key, len, used, "]");
}

int dl_gpu_choice_key(char *key, size_t len, const char *what, const dl_op *op, const char *extra) {
    size_t used = 0;
    const dl_op_attrs *a = op->attrs;
    int ok = len > 0 && put(key, len, &used, "%s;op=%d;prec=%d;in=", what, (int)op->kind, (int)op->precision);
    for (int i = 0; i < op->n_inputs && ok; i++)
        ok = (!i || put(key, len, &used, ",")) && put_tensor(key, len, &used, &op->inputs[i]);
    ok = ok && put(key, len, &used, ";out=") && put_tensor(key, len, &used, &op->outputs[0]);
    if (ok && a)
        ok = put(key, len, &used, ";k=%dx%d;s=%dx%d;p=%d,%d,%d,%d;d=%dx%d;g=%d;act=%d;res=%d", a->kernel[0],
                 a->kernel[1], a->stride[0], a->stride[1], a->pad_begin[0], a->pad_begin[1], a->pad_end[0],
                 a->pad_end[1], a->dilation[0], a->dilation[1], a->groups, a->activation, dl_op_residual(op));
    ok = ok && put(key, len, &used, ";%s", extra ? extra : "");
    if (!ok && len) key[0] = '\0';
    return ok;
}

static int has_store(const dl_host *h) {
    return h && DL_HOST_HAS(h, cache_get) && DL_HOST_HAS(h, cache_put) && h->cache_get && h->cache_put;
}

int dl_gpu_choice_get(const dl_host *host, const char *key, int *code) {
    double v;
    if (!has_store(host) || !key || !*key || !host->cache_get(host->ctx, key, &v)) return 0;
    if (!(v >= 0 && v <= DL_GPU_CHOICE_MAX) || v != floor(v)) return 0;
    *code = (int)v;
    return 1;
}

void dl_gpu_choice_put(const dl_host *host, const char *key, int code) {
    if (has_store(host) && key && *key && code >= 0 && code <= DL_GPU_CHOICE_MAX)
        host->cache_put(host->ctx, key, (double)code);
}
