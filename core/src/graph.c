/* graph.c — building and querying the in-memory model (graph.h): values, nodes, lookups. */
#define _POSIX_C_SOURCE 200809L
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dl_graph *dl_graph_new(void) { return calloc(1, sizeof(dl_graph)); }

void dl_graph_free(dl_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) free(g->values[i].name);
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].inputs);
        free(g->nodes[i].backend);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name);
    free(g->path);
    free(g->weights_path);
    free(g);
}

/* Grows the array at *items_ptr (n used, *cap allocated, `size`-byte items) to hold one more;
 * 0 when out of memory. The pointer is read and written with memcpy: any object pointer. */
static int reserve(void *items_ptr, int n, int *cap, size_t size) {
    if (n < *cap) return 1;
    void *items;
    memcpy(&items, items_ptr, sizeof items);
    int c = *cap ? 2 * *cap : 32;
    void *p = realloc(items, (size_t)c * size);
    if (!p) return 0;
    memcpy(items_ptr, &p, sizeof p);
    *cap = c;
    return 1;
}

int dl_graph_add_value(dl_graph *g, const char *name, dl_value_kind kind, dl_srcloc loc) {
    if (!reserve(&g->values, g->n_values, &g->cap_values, sizeof *g->values)) return -1;
    dl_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return -1;
    v->kind = kind;
    v->dtype = DL_F32;
    v->producer = -1;
    v->loc = loc;
    return g->n_values++;
}

int dl_graph_add_node(dl_graph *g, const char *name, dl_op_kind kind, dl_srcloc loc) {
    if (!reserve(&g->nodes, g->n_nodes, &g->cap_nodes, sizeof *g->nodes)) return -1;
    dl_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    if (!n->name) return -1;
    n->kind = kind;
    n->loc = loc;
    n->output = -1;
    dl_op_params_default(&n->params);
    return g->n_nodes++;
}

int dl_graph_find_value(const dl_graph *g, const char *name) {
    for (int i = 0; i < g->n_values; i++)
        if (strcmp(g->values[i].name, name) == 0) return i;
    return -1;
}

void dl_graph_where(const dl_graph *g, dl_srcloc loc, char *buf, size_t len) {
    if (loc.line > 0) snprintf(buf, len, "%s:%d:%d: ", g->path ? g->path : "<model>", loc.line, loc.col);
    else snprintf(buf, len, "%s: ", g->path ? g->path : "<model>");
}

int dl_graph_consumers(const dl_graph *g, int v) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) c += g->nodes[i].inputs[j] == v;
    return c;
}

int dl_graph_is_output(const dl_graph *g, int v) {
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}
