/* test_reproducers.c — every hostile-input reproducer of issue 20, run through the dlrun command:
 * the files in tests/data/bad/ and the few made at run time (FIFOs, a deeply nested file). Each
 * must end with its exact exit status (2: bad input, 1: a resource limit) and one line saying
 * why (a usage error adds "(dlrun --help lists the options)"); under the ASan+UBSan build (tools/test) the same runs
 * also prove no overflow on the way. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#define BAD DLRUN_SOURCE_DIR "/tests/data/bad/"
#define LENET DLRUN_SOURCE_DIR "/models/lenet.yaml"

typedef struct repro {
    const char *args;    /* dlrun's arguments; "@" stands for the scratch folder of run-time files */
    int exit_status;     /* 2 bad input, 1 a resource limit */
    const char *message; /* a part of the one line on stderr */
} repro;

static const repro cases[] = {
    /* defect 1: a weight's size overflowing 64 bits was a heap overflow */
    {BAD "constant_overflow.yaml", 2,
     "constant_overflow.yaml:4:13: constant 'k' of shape [1073741824, 1073741824, 4] is more than the 17179869184 "
     "elements a tensor may have"},
    {BAD "linear_weight_overflow.yaml", 2,
     "linear_weight_overflow.yaml:5:5: linear 'fc': weight 'fc.weight' of shape [1073741824, 1073741824] is more"},
    {BAD "conv_weight_overflow.yaml", 2,
     "conv_weight_overflow.yaml:5:5: conv2d 'conv': weight 'conv.weight' of shape [1073741824, 65536, 1, 1] is more"},
    /* defect 2: an input whose byte count wrapped to 0 */
    {BAD "input_overflow_pool.yaml", 2,
     "input_overflow_pool.yaml:3:10: input 'x' at batch 1: shape [1, 4, 1073741824, 1073741824] is more than"},
    /* defect 3: signed overflow in shape arithmetic */
    {BAD "dilation_overflow.yaml", 2,
     "dilation_overflow.yaml:5:5: conv2d 'conv': kernel 65536x65536 (dilation 65536) does not fit the padded input"},
    {BAD "batch_overflow.yaml", 2,
     "batch_overflow.yaml:4:28: the batch (first dimension) must be between 1 and 1048576, not 2147483647"},
    {BAD "numel_overflow.yaml", 2, "input 'x' at batch 65536: shape [65536, 65536, 65536, 65536] is more than"},
    {BAD "flatten_overflow.yaml", 2, "shape [1, 2147483647, 2147483647, 2147483647] is more than"},
    {LENET " --batch 2000000", 2, "--batch must be between 1 and 1048576, not '2000000'"},
    /* defect 5: special files never block */
    {"@/fifo", 2, "/fifo: not a regular file (a FIFO)"},
    {LENET " --weights @/fifo", 2, "/fifo: not a regular file (a FIFO)"},
    {LENET " --input @/fifo", 2, "/fifo: not a regular file (a FIFO)"},
    {LENET " --weights @", 2, ": not a regular file (a directory)"},
    /* defect 6: memory limits that hold; files checked before allocating */
    {BAD "seeded_over_max_memory.yaml --max-memory 1M", 1,
     "model 'seeded_over_max_memory' at batch 1 needs 9.3 GiB of host memory (seeded weights, inputs), but "
     "--max-memory allows 1.0 MiB"},
    {LENET " --input " BAD "npy_declares_1e12.npy", 2,
     "npy_declares_1e12.npy: .npy shape holds more than the 17179869184 elements a tensor may have"},
    {LENET " --input " BAD "npy_short_data.npy", 2,
     "npy_short_data.npy: data is shorter than its shape needs (3136 bytes, the file has 16)"},
    /* defect 4: what took minutes stops at a limit at once (files made at run time) */
    {"@/nested.yaml", 2, "nested.yaml:2:72: nesting deeper than 64 levels"},
    {"@/too_many_layers.yaml", 2, "too_many_layers.yaml:4:3: more than 250000 layers (250001)"},
    {"@/too_many_nodes.yaml", 2, "too_many_nodes.yaml:2:8000000: more than 4000000 YAML values, lists and mappings"},
    /* defect 7 */
    {BAD "long_layer_name.yaml", 2, "long_layer_name.yaml:5:12: layer name longer than 255 characters (300)"},
    {LENET " --weights " BAD "overlap_hidden_by_empty.safetensors", 2,
     "overlap_hidden_by_empty.safetensors: tensors 'A' and 'B' overlap in the data section"},
    {"check " LENET " --seed -1", 2, "--seed wants a non-negative integer, not '-1'"},
};

/* Writes dir/name: head, then `line` n times. */
static void write_repeated(const char *dir, const char *name, const char *head, const char *line, int n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(head, f);
    for (int i = 0; i < n; i++) fputs(line, f);
    fputs("\n", f);
    cr_assert_eq(fclose(f), 0);
}

/* "@" in args replaced by dir. */
static char *expand(const char *args, const char *dir) {
    size_t n = strlen(args) + 1;
    for (const char *p = args; *p; p++) n += *p == '@' ? strlen(dir) : 0;
    char *out = malloc(n), *o = out;
    cr_assert(out);
    for (const char *p = args; *p; p++) {
        if (*p == '@') o = stpcpy(o, dir);
        else *o++ = *p;
    }
    *o = 0;
    return out;
}

/* Runs dlrun with args and checks the status and that the output is the one expected line. */
static void expect_refused(const char *args, int status, const char *message) {
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd, "env -u DLRUN_PLUGIN_PATH %s %s </dev/null", DLRUN_CLI, args) > 0);
    int rc = tu_run(cmd, &out);
    const char *text = out ? out : "";
    cr_expect_eq(rc, status, "dlrun %s: exit %d, want %d: %s", args, rc, status, text);
    cr_expect(strstr(text, message), "dlrun %s:\n  got:  %s  want: %s", args, text, message);
    const char *nl = strchr(text, '\n');
    if (nl && !strncmp(nl + 1, "(dlrun", 6)) nl = strchr(nl + 1, '\n'); /* a usage error's pointer to --help */
    cr_expect(nl && nl[1] == 0, "dlrun %s: not one line: %s", args, text);
    cr_expect(!strncmp(text, "dlrun: ", 7), "dlrun %s: %s", args, text);
    free(out);
    free(cmd);
}

Test(reproducers, each_ends_with_its_status_and_one_line) {
    char dir[] = "/tmp/dlrun-repro-XXXXXX";
    cr_assert(mkdtemp(dir));
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    write_repeated(dir, "nested.yaml", "model: n\ninputs: ", "[", 1000000); /* once minutes in libyaml */
    write_repeated(dir, "too_many_layers.yaml", "model: deep\ninputs: [{name: x, shape: [1, 4]}]\nlayers:\n",
                   "  - {op: relu}\n", 250001);
    write_repeated(dir, "too_many_nodes.yaml", "model: n\ninputs: [", "1,", 4000001);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *args = expand(cases[i].args, dir);
        expect_refused(args, cases[i].exit_status, cases[i].message);
        free(args);
    }
    unlink(fifo);
    char path[128];
    snprintf(path, sizeof path, "%s/nested.yaml", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/too_many_layers.yaml", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/too_many_nodes.yaml", dir);
    unlink(path);
    rmdir(dir);
}

Test(reproducers, a_fifo_in_the_plugin_path_is_skipped) {
    char dir[] = "/tmp/dlrun-repro-XXXXXX";
    cr_assert(mkdtemp(dir));
    char fifo[80], *cmd, *out = NULL;
    snprintf(fifo, sizeof fifo, "%s/libdlrun-fifo.so", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s %s --list-backends", dir, DLRUN_CLI) > 0);
    cr_expect_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(out && strstr(out, "fifo     skipped  not a regular file (a FIFO)"), "%s", out);
    cr_expect(out && strstr(out, "cpu      loaded"), "%s", out);
    free(out);
    free(cmd);
    unlink(fifo);
    rmdir(dir);
}
