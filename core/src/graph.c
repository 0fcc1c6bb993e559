/* graph.c — building and querying the in-memory model (graph.h): values, nodes, lookups. */
#define _POSIX_C_SOURCE 200809L
#include "graph.h"

#include <limits.h>
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
    for (int i = 0; i < g->n_labels; i++) free(g->labels[i]);
    free(g->labels);
    dl_names_free(&g->value_names);
    free(g->reader_start);
    free(g->reader_node);
    free(g->is_output);
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
    if (dl_names_add(&g->value_names, v->name, g->n_values) < 0) { /* a repeated name keeps the first */
        free(v->name);
        return -1;
    }
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

int dl_graph_find_value(const dl_graph *g, const char *name) { return dl_names_find(&g->value_names, name); }

void dl_graph_where(const dl_graph *g, dl_srcloc loc, char *buf, size_t len) {
    if (loc.line > 0) snprintf(buf, len, "%s:%d:%d: ", g->path ? g->path : "<model>", loc.line, loc.col);
    else snprintf(buf, len, "%s: ", g->path ? g->path : "<model>");
}

int dl_graph_index(dl_graph *g) {
    free(g->reader_start), free(g->reader_node), free(g->is_output);
    size_t nv = (size_t)g->n_values, reads = 0;
    for (int i = 0; i < g->n_nodes; i++) reads += (size_t)g->nodes[i].n_inputs;
    g->reader_start = calloc(nv + 2, sizeof *g->reader_start);
    g->reader_node = malloc((reads + 1) * sizeof *g->reader_node);
    g->is_output = calloc(nv + 1, 1);
    if (!g->reader_start || !g->reader_node || !g->is_output || reads > INT_MAX) {
        free(g->reader_start), free(g->reader_node), free(g->is_output);
        g->reader_start = g->reader_node = NULL, g->is_output = NULL;
        return 0;
    }
    /* counting sort of (value, node) by value: counts at [v + 2], offsets at [v + 1], then filled */
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) g->reader_start[g->nodes[i].inputs[j] + 2]++;
    for (size_t v = 2; v < nv + 2; v++) g->reader_start[v] += g->reader_start[v - 1];
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) g->reader_node[g->reader_start[g->nodes[i].inputs[j] + 1]++] = i;
    for (int i = 0; i < g->n_outputs; i++) g->is_output[g->outputs[i]] = 1;
    return 1;
}

int dl_graph_consumers(const dl_graph *g, int v) {
    if (g->reader_start) return g->reader_start[v + 1] - g->reader_start[v];
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) c += g->nodes[i].inputs[j] == v;
    return c;
}

int dl_graph_is_output(const dl_graph *g, int v) {
    if (g->is_output) return g->is_output[v];
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}
