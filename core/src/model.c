/* model.c — the public dl_model: a parsed, shape-checked graph, plus library-wide small calls. */
#include <stdlib.h>

#include "model_yaml.h"
#include "session.h"

const char *dl_version(void) { return DLRUN_VERSION_STRING; }

const char *dl_status_name(dl_status s) {
    switch (s) {
    case DL_OK: return "ok";
    case DL_E_INVALID: return "invalid input";
    case DL_E_UNSUPPORTED: return "unsupported";
    case DL_E_NOMEM: return "out of memory";
    case DL_E_RUNTIME: return "runtime failure";
    case DL_E_NODEVICE: return "no device";
    case DL_E_IO: return "I/O error";
    }
    return "unknown status";
}

dl_status dl_model_load(const char *path, dl_model **out, dl_error *err) {
    *out = NULL;
    dl_model *m = calloc(1, sizeof *m);
    if (!m) return dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_status st = dl_model_read_yaml(path, &m->g, err);
    if (st != DL_OK) {
        free(m);
        return st;
    }
    *out = m;
    return DL_OK;
}

void dl_model_free(dl_model *m) {
    if (!m) return;
    dl_graph_free(m->g);
    free(m);
}

const char *dl_model_name(const dl_model *m) { return m->g->name; }
int dl_model_layer_count(const dl_model *m) { return m->g->n_nodes; }
int dl_model_input_count(const dl_model *m) { return m->g->n_inputs; }
const char *dl_model_weights_path(const dl_model *m) { return m->g->weights_path; }

int dl_model_label_count(const dl_model *m) { return m ? m->g->n_labels : 0; }

const char *dl_model_label(const dl_model *m, int i) {
    return m && i >= 0 && i < m->g->n_labels ? m->g->labels[i] : NULL;
}

void dl_free(void *p) { free(p); }

const char *dl_model_input(const dl_model *m, int i, int *ndim, const int64_t **shape) {
    if (i < 0 || i >= m->g->n_inputs) return NULL;
    const dl_value *v = &m->g->values[m->g->inputs[i]];
    if (ndim) *ndim = v->shape.ndim;
    if (shape) *shape = v->shape.d;
    return v->name;
}
