/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader (core/src/safetensors.c) and
 * the weight binding on top of it (core/src/weights.c): the input is a .safetensors file. It is
 * opened and validated, every tensor's bytes are read and looked up by name, then bound as the
 * weights of a small fixed model (below; tests/fuzz/make_seeds.py writes seeds that fit it), each
 * weight read as stored and as f32 (F16 and BF16 converted, unaligned tensors copied). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model_yaml.h"
#include "safetensors.h"
#include "weights.h"

/* Its weights: conv.weight [2, 2, 1, 1], conv.bias [2], bn.{weight, bias, running_mean,
 * running_var} [2], k [2, 1, 1], fc.weight [3, 32], fc.bias [3]. */
static const char model[] = "model: fuzz-weights\n"
                            "inputs: [{name: x, shape: [1, 2, 4, 4]}]\n"
                            "constants: [{name: k, shape: [2, 1, 1]}]\n"
                            "layers:\n"
                            "  - {name: conv, op: conv2d, filters: 2, kernel: 1}\n"
                            "  - {name: bn, op: batchnorm}\n"
                            "  - {name: add, op: add, inputs: [bn, k]}\n"
                            "  - {name: flat, op: flatten}\n"
                            "  - {name: fc, op: linear, units: 3}\n";
static dl_graph *g;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    dl_error err;
    if (dl_model_parse_yaml(model, strlen(model), "fuzz-weights.yaml", &g, &err) != DL_OK) {
        fprintf(stderr, "fuzz_safetensors: the fixed model does not load: %s\n", err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file(data, size);
    if (!path) return 0;
    dl_error err;
    dl_safetensors *st = NULL;
    volatile unsigned sink = 0;
    if (dl_safetensors_open(path, &st, &err) == DL_OK) {
        for (int i = 0; i < st->n_tensors; i++) {
            const dl_st_tensor *t = &st->tensors[i];
            const unsigned char *b = t->data;
            for (size_t j = 0; j < t->nbytes; j++) sink += b[j];
            if (i < 64 && dl_safetensors_find(st, t->name) != t) abort(); /* names are unique (a few: linear) */
        }
        dl_safetensors_close(st);
    }
    dl_weights *w = NULL;
    if (dl_weights_bind(g, NULL, path, 0, &w, &err) == DL_OK) {
        for (int v = 0; v < g->n_values; v++) {
            if (g->values[v].kind != DL_VALUE_WEIGHT) continue;
            size_t n = (size_t)dl_shape_numel(&g->values[v].shape);
            dl_dtype dt;
            const unsigned char *raw = dl_weights_raw(w, v, &dt);
            for (size_t j = 0; raw && j < n * (dt.bits / 8); j++) sink += raw[j];
            const float *f = dl_weights_data(w, v);
            for (size_t j = 0; f && j < n; j++) sink += f[j] == f[j];
        }
        dl_weights_free(w);
    }
    (void)sink;
    return 0;
}
