/* fuzz_seeds.c — seeds for the model fuzzers from the op table (core/ops/), so they follow it as
 * ops are added. `fuzz_seeds DIR` writes DIR/case-<op>-<n>.yaml: one single-layer model per
 * test-ops case, as `dlrun test-ops` builds them (core/src/check.c, case_graph). `fuzz_seeds
 * --dict` prints libFuzzer dictionary entries: every op name, attribute key and enum choice. */
#include <stdio.h>
#include <string.h>

#include "op_table.h"

static int write_case(const char *dir, const dl_op_def *row, const dl_op_case *c, int index) {
    char path[4096], names[256] = "";
    snprintf(path, sizeof path, "%s/case-%s-%d.yaml", dir, row->name, index);
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    fprintf(f, "# %s: test-ops case '%s'\nmodel: case\ninputs:\n", row->name, c->name);
    const char *p = c->inputs + 1; /* "[[1, 3, 8, 8], [4]]": one input per inner list */
    for (int i = 0; (p = strchr(p, '[')) != NULL; i++) {
        const char *e = strchr(p, ']');
        fprintf(f, "  - {name: x%d, shape: %.*s%s}\n", i, (int)(e - p + 1), p,
                row->int_inputs >> i & 1 ? ", dtype: int64" : "");
        size_t nu = strlen(names);
        snprintf(names + nu, sizeof names - nu, "%sx%d", i ? ", " : "", i);
        p = e + 1;
    }
    fprintf(f, "layers:\n  - {name: op, op: %s%s%s, inputs: [%s]}\n", row->name, c->attrs[0] ? ", " : "", c->attrs,
            names);
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR | fuzz_seeds --dict\n");
        return 2;
    }
    int dict = !strcmp(argv[1], "--dict"), bad = 0;
    for (int k = 0; k < DL_OP_COUNT; k++) {
        const dl_op_def *row = dl_op_def_of(k);
        if (!row) continue;
        if (dict) {
            printf("\"%s\"\n", row->name);
            for (const dl_attr_def *a = row->attrs; a && a->key; a++) {
                printf("\"%s:\"\n", a->key);
                for (const char *const *ch = a->choices; ch && *ch; ch++) printf("\"%s\"\n", *ch);
            }
            continue;
        }
        int index = 0;
        for (const dl_op_case *c = row->cases; c && c->name; c++) bad |= write_case(argv[1], row, c, index++);
    }
    return bad;
}
