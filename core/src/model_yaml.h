/* model_yaml.h — reads a model declared in YAML (docs/model-format.md) into a dl_graph. */
#ifndef DLRUN_MODEL_YAML_H
#define DLRUN_MODEL_YAML_H
#include "graph.h"

/* Parse the file at path. On failure *out is NULL and err holds "path:line:col: what is wrong";
 * the status is DL_E_INVALID (bad model) or DL_E_IO (unreadable file). Shapes are inferred before
 * it returns (batch from the file). */
dl_status dl_model_read_yaml(const char *path, dl_graph **out, dl_error *err);
/* Same, from text in memory; `path` is used in messages and to resolve `weights:`. */
dl_status dl_model_parse_yaml(const char *text, size_t len, const char *path, dl_graph **out, dl_error *err);
#endif
