/* options.h — the table-driven option parser shared by `dlrun` and `dlrun check`/`test-ops`: one
 * row per option says how it is parsed, where its value goes, its --help line and its error text. */
#ifndef DLRUN_CLI_OPTIONS_H
#define DLRUN_CLI_OPTIONS_H
#include <stddef.h>
#include <stdio.h>

typedef enum cli_opt_kind {
    CLI_FLAG,   /* no value: sets an int to 1 */
    CLI_STOP,   /* no value: sets an int to 1 and ends parsing; operands are not looked at (--version) */
    CLI_HELP,   /* -h, --help: prints the usage text generated from the table; the command exits 0 */
    CLI_STRING, /* const char *: the value as given */
    CLI_LIST,   /* repeatable: appends to a const char *[MAX], its int count at count_at */
    CLI_INT,    /* an int or long long (by the field's size) in [lo, hi] */
    CLI_WORD,   /* one of words[], stored as that word's int */
    CLI_BYTES,  /* long long byte count in [1, 9e18]: 4000000, 1.5G; suffixes K, M, G are powers of 1024 */
    CLI_SEED,   /* unsigned long long: any 64-bit unsigned decimal */
} cli_opt_kind;

typedef struct cli_word {
    const char *word;
    int value;
} cli_word;

/* One option. Only CLI_FLAG, CLI_STOP and CLI_HELP take no value; the others take one, as
 * --name=VALUE or --name VALUE. */
typedef struct cli_opt {
    const char *name; /* long name without the dashes */
    cli_opt_kind kind;
    size_t at, size;        /* the field filled in the command's options struct (CLI_FIELD); CLI_LIST: the array,
                               whose length is the most values it takes */
    size_t count_at;        /* CLI_LIST: its int count of values given */
    long long lo, hi;       /* CLI_INT: accepted range */
    const cli_word *words;  /* CLI_WORD: accepted words, ended by {NULL, 0} */
    const char *only_for;   /* the one subcommand it is for ("test-ops"), an error under the others; or NULL */
    const char *value_name; /* the value in --help ("N", "NAME"); CLI_WORD with NULL: the words, as a|b|c */
    const char *help;       /* its --help text; each '\n' starts an indented continuation line */
    const char *wants;      /* the error "--NAME wants WANTS, not 'VALUE'"; CLI_WORD with NULL: the words listed */
} cli_opt;

/* The field a row fills: offset and size of member in the options struct type. */
#define CLI_FIELD(type, member) .at = offsetof(type, member), .size = sizeof(((type *)0)->member)

/* A static table's rows and their count, for the last two members of cli_command. */
#define CLI_TABLE(opts) (opts), (int)(sizeof(opts) / sizeof *(opts))

typedef struct cli_command {
    const char *name;       /* as errors name it: "(NAME --help lists the options)" */
    const char *usage_head; /* --help: literal lines before the options */
    const char *usage_tail; /* and after them */
    int label_width;        /* --help: width of the "--name VALUE" column (at least two spaces follow) */
    const cli_opt *opts;
    int n_opts;
} cli_command;

/* --precision: f32, tf32, f16, bf16 as dl_precision values. */
extern const cli_word cli_precision_words[];
/* --layout: auto, nchw, nhwc as dl_layout_mode values; its --help text. */
extern const cli_word cli_layout_words[];
#define CLI_LAYOUT_HELP                                               \
    "layout of 4-D activations (docs/layout.md): auto\n"              \
    "(default): of NHWC at every conv on the CPU backends and each\n" \
    "backend's own, the plan measured faster; nchw; nhwc"

/* Parses the options in argv[1..argc) into the struct at dst, which holds the defaults, for
 * subcommand sub (NULL for none). getopt_long rules: options and operands mix, "--" ends options,
 * an unambiguous prefix names an option. Returns 0 with *operands the index of the first operand
 * (argv is permuted so that the operands come last) — also after a CLI_STOP option; -1 after
 * printing --help; 2 after printing a usage error. */
int cli_parse(const cli_command *cmd, const char *sub, int argc, char **argv, void *dst, int *operands);

/* Prints "dlrun: MESSAGE" and the hint to read --help on stderr; returns 2, the usage exit status. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The --help text: head, one entry per listed row, tail. */
void cli_print_usage(const cli_command *cmd, FILE *f);
#endif
