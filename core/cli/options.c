/* options.c — the option parser of options.h: getopt_long over a struct option array built from a
 * command's table, values checked and stored per row kind, and --help generated from the same rows. */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/dlrun.h"

enum { CLI_MAX_OPTS = 48, CLI_OPT_BASE = 256, CLI_EXIT_USAGE = 2 };
/* What applying one option asks of the parse loop; an error answers CLI_EXIT_USAGE. */
enum { APPLY_NEXT = 0, APPLY_STOP = 1, APPLY_HELP = -1 };

const cli_word cli_precision_words[] = {{"f32", DL_PRECISION_F32},
                                        {"tf32", DL_PRECISION_TF32},
                                        {"f16", DL_PRECISION_F16},
                                        {"bf16", DL_PRECISION_BF16},
                                        {NULL, 0}};

const cli_word cli_layout_words[] = {
    {"auto", DL_LAYOUT_MODE_AUTO}, {"nchw", DL_LAYOUT_MODE_NCHW}, {"nhwc", DL_LAYOUT_MODE_NHWC}, {NULL, 0}};

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlrun: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(%s --help lists the options)\n", cmd->name);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

static int takes_value(cli_opt_kind kind) { return kind != CLI_FLAG && kind != CLI_STOP && kind != CLI_HELP; }

/* The words joined by sep, the last two by last: "f32, tf32, f16 or bf16", "test|perf". */
static void join_words(const cli_word *w, const char *sep, const char *last, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; w[i].word && used < len; i++) {
        const char *before = i == 0 ? "" : w[i + 1].word ? sep : last;
        used += (size_t)snprintf(buf + used, len - used, "%s%s", before, w[i].word);
    }
}

/* ---- --help ---------------------------------------------------------------------------------- */

static void option_label(const cli_opt *o, char *buf, size_t len) {
    if (o->kind == CLI_HELP) {
        snprintf(buf, len, "-h, --%s", o->name);
        return;
    }
    char words[128] = "";
    const char *value = o->value_name;
    if (!value && o->kind == CLI_WORD) {
        join_words(o->words, "|", "|", words, sizeof words);
        value = words;
    }
    snprintf(buf, len, "--%s%s%s", o->name, value ? " " : "", value ? value : "");
}

/* "  --name VALUE   help", the help's further lines indented to its column. */
static void print_option_usage(const cli_opt *o, int width, FILE *f) {
    char label[192];
    option_label(o, label, sizeof label);
    int pad = (int)strlen(label) + 2 > width ? 2 : width - (int)strlen(label);
    fprintf(f, "  %s%*s", label, pad, "");
    const char *line = o->help ? o->help : "";
    for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1)
        fprintf(f, "%.*s\n%*s", (int)(nl - line), line, width + 2, "");
    fprintf(f, "%s\n", line);
}

void cli_print_usage(const cli_command *cmd, FILE *f) {
    fputs(cmd->usage_head, f);
    for (int i = 0; i < cmd->n_opts; i++) print_option_usage(&cmd->opts[i], cmd->label_width, f);
    fputs(cmd->usage_tail, f);
}

/* ---- values ---------------------------------------------------------------------------------- */

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_seed(const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || (v && strchr(s, '-'))) return 0; /* strtoull wraps "-1" to 2^64 - 1 */
    *out = v;
    return 1;
}

static double byte_suffix(char c) {
    switch (c) {
    case 'K':
    case 'k': return 1024.0;
    case 'M':
    case 'm': return 1048576.0;
    case 'G':
    case 'g': return 1073741824.0;
    default: return 1.0;
    }
}

static int parse_bytes(const char *s, long long *out) {
    char *end;
    errno = 0;
    double b = strtod(s, &end);
    double mult = byte_suffix(*end);
    if (mult > 1) end++;
    if (errno || end == s || *end || !(b * mult >= 1) || b * mult > 9e18) return 0;
    *out = (long long)(b * mult);
    return 1;
}

static int parse_word(const cli_word *w, const char *s, int *out) {
    for (; w->word; w++)
        if (!strcmp(w->word, s)) {
            *out = w->value;
            return 1;
        }
    return 0;
}

static int bad_value(const cli_command *cmd, const cli_opt *o, const char *arg) {
    char words[128];
    const char *wants = o->wants;
    if (!wants && o->kind == CLI_WORD) {
        join_words(o->words, ", ", " or ", words, sizeof words);
        wants = words;
    }
    long long any;
    if (o->kind == CLI_INT && parse_int(arg, o->hi, LLONG_MAX, &any)) /* a number past the range */
        return cli_usage_error(cmd, "--%s must be between %lld and %lld, not '%s'", o->name, (long long)o->lo,
                               (long long)o->hi, arg);
    return cli_usage_error(cmd, "--%s wants %s, not '%s'", o->name, wants ? wants : "a value", arg);
}

/* Appends arg to the row's list, refusing one past its length. */
static int append_value(const cli_command *cmd, const cli_opt *o, const char *arg, char *dst) {
    int n;
    memcpy(&n, dst + o->count_at, sizeof n);
    if ((size_t)n == o->size / sizeof arg) return cli_usage_error(cmd, "at most %d --%s options", n, o->name);
    memcpy(dst + o->at + (size_t)n * sizeof arg, &arg, sizeof arg);
    n++;
    memcpy(dst + o->count_at, &n, sizeof n);
    return APPLY_NEXT;
}

/* Checks and stores a number or word value; the field's type follows the kind (int for CLI_INT when
 * the field is that size, else long long). */
static int store_number(const cli_command *cmd, const cli_opt *o, const char *arg, char *field) {
    long long v;
    unsigned long long u;
    int w;
    switch (o->kind) {
    case CLI_INT:
        if (!parse_int(arg, o->lo, o->hi, &v)) return bad_value(cmd, o, arg);
        if (o->size == sizeof w) w = (int)v, memcpy(field, &w, sizeof w);
        else memcpy(field, &v, sizeof v);
        return APPLY_NEXT;
    case CLI_WORD:
        if (!parse_word(o->words, arg, &w)) return bad_value(cmd, o, arg);
        memcpy(field, &w, sizeof w);
        return APPLY_NEXT;
    case CLI_BYTES:
        if (!parse_bytes(arg, &v)) return bad_value(cmd, o, arg);
        memcpy(field, &v, sizeof v);
        return APPLY_NEXT;
    case CLI_SEED:
        if (!parse_seed(arg, &u)) return bad_value(cmd, o, arg);
        memcpy(field, &u, sizeof u);
        return APPLY_NEXT;
    default: return bad_value(cmd, o, arg);
    }
}

static int apply(const cli_command *cmd, const char *sub, const cli_opt *o, const char *arg, char *dst) {
    static const int one = 1;
    if (o->only_for && (!sub || strcmp(sub, o->only_for)))
        return cli_usage_error(cmd, "--%s is for %s", o->name, o->only_for);
    switch (o->kind) {
    case CLI_HELP: cli_print_usage(cmd, stdout); return APPLY_HELP;
    case CLI_FLAG: memcpy(dst + o->at, &one, sizeof one); return APPLY_NEXT;
    case CLI_STOP: memcpy(dst + o->at, &one, sizeof one); return APPLY_STOP;
    case CLI_STRING: memcpy(dst + o->at, &arg, sizeof arg); return APPLY_NEXT;
    case CLI_LIST: return append_value(cmd, o, arg, dst);
    default: return store_number(cmd, o, arg, dst + o->at);
    }
}

/* ---- the table ------------------------------------------------------------------------------- */

/* The field size each kind writes (CLI_INT: int or long long; CLI_LIST: a whole number of strings). */
static int row_fits(const cli_opt *o) {
    switch (o->kind) {
    case CLI_HELP: return 1;
    case CLI_FLAG:
    case CLI_STOP:
    case CLI_WORD: return o->size == sizeof(int) && (o->kind != CLI_WORD || o->words);
    case CLI_STRING: return o->size == sizeof(const char *);
    case CLI_LIST: return o->size >= sizeof(const char *) && o->size % sizeof(const char *) == 0;
    case CLI_INT: return (o->size == sizeof(int) || o->size == sizeof(long long)) && o->lo <= o->hi;
    case CLI_BYTES: return o->size == sizeof(long long);
    case CLI_SEED: return o->size == sizeof(unsigned long long);
    }
    return 0;
}

/* getopt_long's view of the table: row i answers CLI_OPT_BASE + i; 0 when a row is malformed. */
static int build_longopts(const cli_command *cmd, struct option *longopts) {
    if (cmd->n_opts > CLI_MAX_OPTS) return 0;
    for (int i = 0; i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        if (!row_fits(o)) return 0;
        longopts[i] =
            (struct option){o->name, takes_value(o->kind) ? required_argument : no_argument, NULL, CLI_OPT_BASE + i};
    }
    longopts[cmd->n_opts] = (struct option){NULL, 0, NULL, 0};
    return 1;
}

/* The row getopt_long's answer c names (-h: the CLI_HELP row), or NULL for an unknown option. */
static const cli_opt *row_for(const cli_command *cmd, int c) {
    if (c >= CLI_OPT_BASE && c < CLI_OPT_BASE + cmd->n_opts) return &cmd->opts[c - CLI_OPT_BASE];
    for (int i = 0; c == 'h' && i < cmd->n_opts; i++)
        if (cmd->opts[i].kind == CLI_HELP) return &cmd->opts[i];
    return NULL;
}

int cli_parse(const cli_command *cmd, const char *sub, int argc, char **argv, void *dst, int *operands) {
    struct option longopts[CLI_MAX_OPTS + 1];
    if (!build_longopts(cmd, longopts)) return cli_usage_error(cmd, "%s", "internal error: malformed option table");
    optind = 1;
    opterr = 0;
    int c, rc = APPLY_NEXT;
    while (rc == APPLY_NEXT && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const cli_opt *o = row_for(cmd, c);
        if (c == ':') rc = cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        else if (!o) rc = cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        else rc = apply(cmd, sub, o, optarg, dst);
    }
    *operands = optind;
    return rc == APPLY_STOP ? 0 : rc;
}
