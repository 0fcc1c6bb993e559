/* fuzz_yaml.c — libFuzzer harness for the YAML model reader (core/src/model_yaml.c): the input is
 * a model file's text, parsed from memory as dl_model_load parses a file (libyaml, every key and
 * attribute, names, references, shape inference at the file's batch). A model that loads is then
 * inferred again at another batch, as a session does, and its public readers are called. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "model_yaml.h"
#include "session.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dl_graph *g = NULL;
    dl_error err;
    if (dl_model_parse_yaml((const char *)data, size, "fuzz.yaml", &g, &err) != DL_OK) return 0;
    dl_model m = {g};
    int ndim;
    const int64_t *shape;
    volatile int64_t sink = dl_model_layer_count(&m) + (dl_model_name(&m) ? 1 : 0);
    for (int i = 0; i < dl_model_input_count(&m); i++)
        if (dl_model_input(&m, i, &ndim, &shape)) sink += ndim ? shape[0] : 0;
    (void)sink;
    dl_shape *shapes = calloc((size_t)g->n_values + 1, sizeof *shapes);
    if (shapes) (void)dl_graph_infer(g, 3, shapes, &err); /* a session's batch: may fail, must not crash */
    free(shapes);
    dl_graph_free(g);
    return 0;
}
