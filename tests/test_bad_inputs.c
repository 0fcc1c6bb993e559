/* test_bad_inputs.c — a table of malformed models, safetensors files and .npy files: each must
 * give its own clear one-line message (asserted, with file:line:col for models) and never crash.
 * Plus a mutation loop that corrupts a valid safetensors file byte by byte. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_yaml.h"
#include "npy.h"
#include "safetensors.h"
#include "test_util.h"
#include "weights.h"

#define HEAD "model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nlayers:\n"

typedef struct bad_model {
    const char *text;
    const char *want; /* substring after the file name */
} bad_model;

static const bad_model models[] = {
    {"model: m\ninputs: [\n", ":3:1: malformed YAML"},
    {"model: m\nfoo: 1\ninputs:\n  - {name: x, shape: [1, 3]}\nlayers:\n  - {op: relu}\n", ":2:1: unknown key 'foo'"},
    {HEAD "  - {op: relu, colour: red}\n", ":5:16: relu 'relu_1': unknown key 'colour'"},
    {HEAD "  - {op: convolution}\n", ":5:10: unknown op 'convolution'"},
    {HEAD "  - {name: c, op: conv2d, kernel: 3}\n", ":5:5: conv2d 'c' needs 'filters'"},
    {HEAD "  - {op: conv2d, filters: 4, kernel: big}\n", ":5:38: kernel must be an integer, not 'big'"},
    {HEAD "  - {op: conv2d, filters: 4, kernel: 0}\n", ":5:38: kernel must be at least 1, not 0"},
    {HEAD "  - {name: a, op: relu}\n  - {name: a, op: relu}\n", ":6:12: duplicate layer name 'a'"},
    {HEAD "  - {op: relu, inputs: [nothere]}\n", ":5:25: relu 'relu_1' uses 'nothere', which is not defined before it"},
    {HEAD "  - {name: a, op: relu, inputs: [b]}\n  - {name: b, op: relu, inputs: [a]}\n",
     ":5:34: relu 'a' uses 'b', which is not defined before it (layers must be listed in execution order; cycles are "
     "not allowed)"},
    {HEAD "  - {name: c, op: conv2d, filters: 4, kernel: 1}\n  - {name: s, op: add, inputs: [c, x]}\n",
     ":6:5: add 's': inputs 'c' [1, 4, 8, 8] and 'x' [1, 3, 8, 8] do not broadcast to one shape"},
    {HEAD "  - {name: p, op: maxpool2d, kernel: 2}\n  - {name: j, op: concat, inputs: [x, p]}\n",
     ":6:5: concat 'j': input 'p' [1, 3, 4, 4] does not match 'x' [1, 3, 8, 8] outside axis 1"},
    {HEAD "  - {name: fc, op: linear, units: 10}\n",
     ":5:5: linear 'fc': needs a 2-D input [N, features], got [1, 3, 8, 8] (add a flatten layer before it)"},
    {HEAD "  - {name: c, op: conv2d, filters: 4, kernel: 3, groups: 2}\n",
     ":5:5: conv2d 'c': input channels 3 are not divisible by groups 2"},
    {HEAD "  - {name: c, op: conv2d, filters: 4, kernel: 11}\n",
     ":5:5: conv2d 'c': kernel 11x11 (dilation 1) does not fit the padded input [1, 3, 8, 8]"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 3]}\n", ":1:1: model needs 'layers'"},
    {"model: m\ninputs: []\nlayers:\n  - {op: relu}\n", ":2:9: inputs must be a non-empty list"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 3], dtype: f16}\nlayers:\n  - {op: relu}\n",
     ":3:37: unsupported dtype 'f16'"},
    {HEAD "  - {op: relu, op: relu}\n", ":5:16: duplicate key 'op'"},
    {HEAD "  - {op: conv2d, filters: 4, kernel: 3, bias: maybe}\n", ":5:47: bias must be true or false, not 'maybe'"},
    {HEAD "  - {op: dropout, rate: 1.5}\n", ":5:25: dropout rate must be in [0, 1), not 1.5"},
    {HEAD "  - {name: s, op: softmax, axis: 5}\n", ":5:5: softmax 's': axis 5 is out of range for input [1, 3, 8, 8]"},
    {"- just\n- a list\n", ":1:1: a model must be a mapping"},
    {"", ": empty model file"},
    {HEAD "  - {name: l, op: linear}\n", ":5:5: linear 'l' needs 'units'"},
    {HEAD "  - {name: p, op: maxpool2d, kernel: 2, padding: 2}\n",
     ":5:5: maxpool2d 'p': padding 2 is not less than the window extent 2"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 0, 4]}\nlayers:\n  - {op: relu}\n",
     ":3:26: a dimension must be at least 1, not 0"},
    {HEAD "  - {op: conv2d, filters: 4, kernel: [3, 3, 3]}\n", ":5:38: kernel must have 1 or 2 values, not 3"},
    {HEAD "  - {op: conv3d, filters: 4, kernel: [3, 3]}\n", ":5:38: kernel must have 1 or 3 values, not 2"},
    {HEAD "  - {op: conv3d, filters: 4, kernel: 3, padding: [1, 1, 1, 1]}\n",
     ":5:50: padding must have 1, 3 or 6 values, not 4"},
    {HEAD "  - {name: c, op: conv3d, filters: 4, kernel: 3}\n",
     ":5:5: conv3d 'c': needs a 5-D input [N, C, D, H, W], got [1, 3, 8, 8]"},
    {HEAD "  - {op: clip, min: 1, max: 0}\n", ":5:29: clip min 1 is above max 0"},
    {HEAD "  - {op: reshape, shape: [-1, -1]}\n", ":5:31: only one dimension may be -1"},
    {HEAD "  - {op: reshape, shape: [5, 7]}\n",
     ":5:5: reshape 'reshape_1': cannot reshape [1, 3, 8, 8] (192 elements) to [5, 7]"},
    {HEAD "  - {op: reshape}\n", ":5:5: reshape 'reshape_1' needs 'shape'"},
    {HEAD "  - {op: matmul, inputs: [x]}\n", ":5:26: matmul 'matmul_1' takes at least 2 inputs, not 1"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nconstants:\n  - {name: w, shape: [5, 4]}\nlayers:\n"
     "  - {op: matmul, inputs: [x, w]}\n",
     ":7:5: matmul 'matmul_1': inner dimensions differ: 'x' [1, 3, 8, 8] has 8, 'w' [5, 4] has 5"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 3, 8, 8]}\nconstants:\n  - {name: x, shape: [3, 1, 1]}\nlayers:\n"
     "  - {op: relu}\n",
     ":5:12: duplicate name 'x'"},
    {HEAD "  - {op: avgpool2d, kernel: 2, dilation: 2}\n", ":5:32: avgpool2d 'avgpool2d_1': unknown key 'dilation'"},
    {HEAD "  - {op: relu, \"\": 1}\n",
     ":5:16: relu 'relu_1': unknown key ''"}, /* once a hang, found by the mutation test */
    /* sizes that would overflow an int or an int64_t if computed naively */
    {HEAD "  - {op: maxpool2d, kernel: 65536, dilation: 65536}\n",
     ":5:5: maxpool2d 'maxpool2d_1': kernel 65536x65536 (dilation 65536) does not fit the padded input [1, 3, 8, 8]"},
    {HEAD "  - {op: reshape, shape: [2147483647, 2147483647, 2147483647, 2147483647, 2147483647]}\n",
     ":5:5: reshape 'reshape_1': cannot reshape [1, 3, 8, 8] (192 elements) to [2147483647, 2147483647, 2147483647, "
     "2147483647, 2147483647]"},
    {"model: m\ninputs:\n  - {name: x, shape: [2147483647, 2147483647, 4]}\nlayers:\n  - {op: relu}\n",
     ":3:23: the batch (first dimension) must be between 1 and 1048576, not 2147483647"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 2147483647, 2147483647, 4]}\nlayers:\n  - {op: relu}\n",
     ":3:5: input 'x' at batch 1: shape [1, 2147483647, 2147483647, 4] is more than the 17179869184 elements a tensor "
     "may have"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 65536, 65536, 65536, 65536]}\nlayers:\n  - {op: relu}\n",
     ":3:5: input 'x' at batch 1: shape [1, 65536, 65536, 65536, 65536] is more than the 17179869184 elements a tensor "
     "may have"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 4]}\nconstants:\n  - {name: k, shape: [1073741824, 1073741824, "
     "4]}\nlayers:\n  - {op: relu, inputs: [x]}\n",
     ":5:5: constant 'k' of shape [1073741824, 1073741824, 4] is more than the 17179869184 elements a tensor may have"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 1073741824]}\nlayers:\n  - {op: linear, units: 1073741824}\n",
     ":5:5: linear 'linear_1': weight 'linear_1.weight' of shape [1073741824, 1073741824] is more than the "
     "17179869184 elements a tensor may have"},
    {"model: m\ninputs:\n  - {name: x, shape: [1, 4, 131072, 131072]}\nlayers:\n  - {op: global_avgpool}\n",
     ":3:5: input 'x' at batch 1: shape [1, 4, 131072, 131072] is more than the 17179869184 elements a tensor may "
     "have"},
    /* int64 inputs: token ids for gather, and nowhere else */
    {"model: m\ninputs:\n  - {name: ids, shape: [2, 5], dtype: int64}\nlayers:\n  - {op: relu}\n",
     ":5:5: relu 'relu_1': input 'ids' is int64; relu takes float tensors (int64 feeds gather's indices)"},
    {HEAD "  - {op: gather, inputs: [x, x]}\n",
     ":5:5: gather 'gather_1': input 2 ('x') must be int64 (a model input of dtype int64)"},
    {"model: m\ninputs:\n  - {name: ids, shape: [2, 5], dtype: int8}\nlayers:\n  - {op: relu}\n",
     ":3:39: unsupported dtype 'int8' (an input is f32 or int64)"},
    {"model: m\ninputs:\n  - {name: x, shape: [4, 3]}\n  - {name: ids, shape: [2], dtype: int64}\nlayers:\n"
     "  - {op: gather, inputs: [x, ids]}\noutputs: [gather_1, ids]\n",
     ":7:21: output 'ids' is an int64 input; outputs are f32"},
    {"model: m\ninputs:\n  - {name: x, shape: [4, 3]}\n  - {name: ids, shape: [2], dtype: int64}\nlayers:\n"
     "  - {op: gather, inputs: [x, ids], axis: 2}\n",
     ":6:5: gather 'gather_1': axis 2 is out of range for data 'x' [4, 3]"},
    /* the ABI 1.4 ops: integer lists and names */
    {HEAD "  - {op: transpose, perm: [4294967297, 0, 1, 2]}\n", ":5:27: perm entry 4294967297 is out of range [0, 8)"},
    {HEAD "  - {op: reduce_sum, axes: [4294967298]}\n", ":5:28: axis 4294967298 is out of range [-8, 8)"},
    {HEAD "  - {op: slice, starts: [0], ends: [1], axes: [-9]}\n",
     ":5:48: axes must hold integers of at least -8, not -9"},
    {HEAD "  - {op: transpose, perm: 3}\n", ":5:27: perm must be a list of integers, not a scalar"},
    {HEAD "  - {op: transpose, perm: [0, 1, 2]}\n",
     ":5:5: transpose 'transpose_1': perm has 3 entries for input [1, 3, 8, 8] of rank 4"},
    {HEAD "  - {op: transpose, perm: [0, 1, 1, 2]}\n",
     ":5:5: transpose 'transpose_1': perm is not a permutation of the 4 dimensions of input [1, 3, 8, 8]"},
    {HEAD "  - {op: transpose, perm: [0, x, 1, 2]}\n", ":5:31: perm must hold integers, not 'x'"},
    {HEAD "  - {op: slice, starts: [0], ends: [1, 2]}\n", ":5:36: ends must have as many values as starts (1)"},
    {HEAD "  - {op: slice, starts: [0], ends: [1], steps: [0]}\n", ":5:48: steps must not be 0"},
    {HEAD "  - {op: slice, starts: [9], ends: [10], axes: [2]}\n",
     ":5:5: slice 'slice_1': takes no element along axis 2 of input 'x' [1, 3, 8, 8] (start 9, end 10, step 1)"},
    {HEAD "  - {op: slice, starts: [0], ends: [1], axes: [4]}\n",
     ":5:5: slice 'slice_1': axis 4 is out of range or repeated for input 'x' [1, 3, 8, 8]"},
    {HEAD "  - {op: pad, pads: [1, 1]}\n", ":5:5: pad 'pad_1': pads has 2 values; input 'x' [1, 3, 8, 8] needs 8 (the "
                                           "begin of each dimension, then each end)"},
    {HEAD "  - {op: pad, pads: [0, 0, 1, 1, 0, 0, 1, -1]}\n", ":5:43: pads must hold integers of at least 0, not -1"},
    {HEAD "  - {op: pad, pads: [0, 0, 8, 0, 0, 0, 0, 0], mode: reflect}\n",
     ":5:5: pad 'pad_1': reflect pads of dimension 2 must be below its size 8 in input 'x' [1, 3, 8, 8]"},
    {HEAD "  - {op: pad, pads: [0, 0, 0, 0, 0, 0, 0, 0], mode: mirror}\n",
     ":5:53: mode must be one of constant, reflect, edge, not 'mirror'"},
    {HEAD "  - {op: reduce_mean, axes: [1, -3]}\n",
     ":5:5: reduce_mean 'reduce_mean_1': axis -3 is out of range or repeated for input 'x' [1, 3, 8, 8]"},
    {HEAD "  - {op: gelu, approximate: fast}\n", ":5:29: approximate must be one of none, tanh, not 'fast'"},
    {HEAD "  - {op: resize, size: [4]}\n", ":5:24: size must be [oh, ow], two positive sizes"},
    {HEAD "  - {op: resize, size: [2147483647, 2147483647]}\n",
     ":5:5: resize 'resize_1': output of shape [1, 3, 2147483647, 2147483647] is more than the 17179869184 elements a "
     "tensor may have"},
    {HEAD "  - {op: group_norm, groups: 2}\n",
     ":5:5: group_norm 'group_norm_1': 2 groups do not divide the 3 channels"},
    {HEAD "  - {op: channel_shuffle, groups: 2}\n",
     ":5:5: channel_shuffle 'channel_shuffle_1': 2 groups do not divide the 3 channels of input 'x' [1, 3, 8, 8]"},
    {HEAD "  - {op: channel_shuffle}\n", ":5:5: channel_shuffle 'channel_shuffle_1' needs 'groups'"},
    {HEAD "  - {op: layer_norm, axis: 4}\n",
     ":5:5: layer_norm 'layer_norm_1': axis 4 is out of range for input 'x' [1, 3, 8, 8]"},
};

Test(bad_inputs, models_give_file_line_col_messages) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char *path = tu_write_temp(".yaml", models[i].text, strlen(models[i].text));
        dl_graph *g = (dl_graph *)0x1;
        dl_error err = {{0}};
        dl_status st = dl_model_read_yaml(path, &g, &err);
        cr_expect_eq(st, DL_E_INVALID, "case %zu: status %d", i, st);
        cr_expect_null(g, "case %zu: graph returned on error", i);
        char want[600];
        snprintf(want, sizeof want, "%s%s", path, models[i].want);
        cr_expect(strstr(err.msg, want), "case %zu:\n  got:  %s\n  want: %s", i, err.msg, want);
        cr_expect_null(strchr(err.msg, '\n'), "case %zu: message is not one line", i);
        unlink(path);
        free(path);
    }
}

/* One model text (generated: too long for the table) must fail with `want` after the file name. */
static void expect_model_error(const char *text, const char *want, const char *what) {
    char *path = tu_write_temp(".yaml", text, strlen(text));
    dl_graph *g = (dl_graph *)0x1;
    dl_error err = {{0}};
    dl_status st = dl_model_read_yaml(path, &g, &err);
    cr_expect_eq(st, DL_E_INVALID, "%s: status %d (%s)", what, st, err.msg);
    cr_expect_null(g, "%s: graph returned on error", what);
    char expect[600];
    snprintf(expect, sizeof expect, "%s%s", path, want);
    cr_expect(strstr(err.msg, expect), "%s:\n  got:  %s\n  want: %s", what, err.msg, expect);
    cr_expect_null(strchr(err.msg, '\n'), "%s: message is not one line", what);
    unlink(path);
    free(path);
}

/* text = head + n copies of unit + tail (malloc'd) */
static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *t = malloc(hl + (size_t)n * ul + tl + 1);
    cr_assert(t);
    memcpy(t, head, hl);
    for (int i = 0; i < n; i++) memcpy(t + hl + (size_t)i * ul, unit, ul);
    memcpy(t + hl + (size_t)n * ul, tail, tl + 1);
    return t;
}

/* Nesting is refused at 64 levels (the top-level mapping is the first) while parsing: 10^6 '['
 * once kept libyaml's scanner busy for minutes. */
Test(bad_inputs, nesting_deeper_than_64_levels) {
    char *t = repeat("model: n\ninputs: ", "[", 1000000, "");
    expect_model_error(t, ":2:72: nesting deeper than 64 levels", "10^6 [");
    free(t);
    t = repeat("model: n\ninputs:\n  ", "- ", 100000, "x\n");
    expect_model_error(t, ":3:129: nesting deeper than 64 levels", "block sequences");
    free(t);
    t = repeat("model: n\ninputs: ", "{a: ", 1000, "");
    expect_model_error(t, ":2:261: nesting deeper than 64 levels", "flow mappings");
    free(t);
    /* 63 lists in the top-level mapping: 64 levels, read (and refused by the reader, not the parser) */
    char *open = repeat("model: n\ninputs: ", "[", 63, ""), *closed = repeat(open, "]", 63, "\nlayers: [{op: relu}]\n");
    expect_model_error(closed, ":2:10: each input must be a mapping", "63 lists");
    char *path = tu_write_temp(".yaml", closed, strlen(closed));
    dl_graph *g;
    dl_error err = {{0}};
    cr_expect_eq(dl_model_read_yaml(path, &g, &err), DL_E_INVALID);
    cr_expect_null(strstr(err.msg, "nesting"), "64 levels are allowed: %s", err.msg);
    unlink(path);
    free(path), free(open), free(closed);
}

/* Names are at most 255 characters, so weight names ("<layer>.<suffix>") never collide after
 * truncation (two 600-character layer names differing at their end once gave the same weight). */
Test(bad_inputs, names_longer_than_255_characters) {
    char name[301];
    memset(name, 'a', 300);
    name[300] = 0;
    char text[1024];
    snprintf(text, sizeof text, HEAD "  - {name: %.256s, op: conv2d, filters: 2, kernel: 1}\n", name);
    expect_model_error(text, ":5:12: layer name longer than 255 characters (256)", "layer");
    snprintf(text, sizeof text, "model: m\ninputs:\n  - {name: %s, shape: [1, 4]}\nlayers:\n  - {op: relu}\n", name);
    expect_model_error(text, ":3:12: input name longer than 255 characters (300)", "input");
    snprintf(text, sizeof text,
             "model: m\ninputs:\n  - {name: x, shape: [1, 4]}\nconstants:\n  - {name: %s, shape: [4]}\nlayers:\n"
             "  - {op: relu}\n",
             name);
    expect_model_error(text, ":5:12: constant name longer than 255 characters (300)", "constant");
    /* 255 is allowed, and the two layers' weights keep their full names */
    char b[256];
    memset(b, 'b', 255);
    b[255] = 0;
    snprintf(text, sizeof text,
             HEAD "  - {name: %s, op: conv2d, filters: 2, kernel: 1}\n  - {name: %.254sc, op: conv2d, filters: 2, "
                  "kernel: 1}\n",
             b, b);
    dl_graph *g;
    dl_error err = {{0}};
    cr_assert_eq(dl_model_parse_yaml(text, strlen(text), "long.yaml", &g, &err), DL_OK, "%s", err.msg);
    char w[300];
    snprintf(w, sizeof w, "%s.weight", b);
    cr_expect_geq(dl_graph_find_value(g, w), 0, "a 255-character layer's weight");
    snprintf(w, sizeof w, "%.254sc.bias", b);
    cr_expect_geq(dl_graph_find_value(g, w), 0, "the other layer's bias");
    dl_graph_free(g);
}

/* Anchors and aliases: found through a hash, defined once, complete before use; and a layer's
 * mapping is refused before it is searched when it has more keys than any layer takes, so aliases
 * cannot make the reader walk one huge mapping many times. */
Test(bad_inputs, anchors_and_aliases) {
    expect_model_error(HEAD "  - &l {op: relu}\n  - *l\n  - *nope\n",
                       ":7:5: malformed YAML: alias '*nope' names no complete anchor before it", "undefined");
    expect_model_error(HEAD "  - &l {op: relu}\n  - &l {op: relu}\n",
                       ":6:5: malformed YAML: anchor '&l' is defined twice", "twice");
    expect_model_error(HEAD "  - &l {op: relu, inputs: [*l]}\n",
                       ":5:28: malformed YAML: alias '*l' names no complete anchor before it", "inside itself");
    char *keys = malloc(40 * 16 + 1), *u = keys;
    for (int i = 0; i < 40; i++) u += sprintf(u, "k%d: 1, ", i);
    char *head = malloc(strlen(keys) + 256);
    sprintf(head, HEAD "  - &big {%sop: relu}\n", keys);
    char *t = repeat(head, "  - *big\n", 100000, "");
    expect_model_error(t, ":5:5: layer 1 has 41 keys; a layer has at most 36", "many keys");
    free(t), free(head), free(keys);
    /* many anchors, each used once: linear */
    size_t cap = 64 + 40u * 20000, n = 0;
    char *text = malloc(cap);
    n += (size_t)sprintf(text, "model: m\ninputs: [{name: x, shape: [1, 4]}]\nlayers:\n");
    for (int i = 0; i < 10000; i++) n += (size_t)sprintf(text + n, "  - &a%d {op: relu}\n  - *a%d\n", i, i);
    dl_graph *g;
    dl_error err = {{0}};
    cr_assert_eq(dl_model_parse_yaml(text, n, "anchors.yaml", &g, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(g->n_nodes, 20000);
    dl_graph_free(g);
    free(text);
}

Test(bad_inputs, unreadable_model_file) {
    dl_graph *g;
    dl_error err;
    cr_expect_eq(dl_model_read_yaml("/nonexistent/m.yaml", &g, &err), DL_E_IO);
    cr_expect(strstr(err.msg, "/nonexistent/m.yaml: cannot open: No such file"), "%s", err.msg);
}

/* ---- safetensors ---- */

static const char tiny_model[] =
    "model: tiny\ninputs:\n  - {name: x, shape: [1, 4]}\nlayers:\n  - {name: fc, op: linear, units: 2}\n";

/* A file from a JSON header and raw data bytes. */
static char *st_file(const char *json, const void *data, size_t n) {
    size_t hl = strlen(json);
    size_t total = 8 + hl + n;
    unsigned char *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    char *path = tu_write_temp(".safetensors", buf, total);
    free(buf);
    return path;
}

typedef struct bad_st {
    const char *json; /* NULL: raw bytes below */
    size_t data_bytes;
    const char *want;
} bad_st;

#define W_OK_HDR "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]}"
#define B_OK_HDR "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]}"

static const bad_st sts[] = {
    {"{" W_OK_HDR "," B_OK_HDR "", 40, "header is not valid JSON"},
    {"[1, 2]", 0, "header is not a JSON object"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]}," B_OK_HDR "}", 36,
     "tensor 'fc.bias': data_offsets [32, 40] run past the end of the data (36 bytes; truncated file?)"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,8]}," B_OK_HDR "}", 40,
     "tensor 'fc.weight': data_offsets [0, 8] hold 8 bytes but shape [2, 4] of F32 needs 32"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},\"fc.bias\":{\"dtype\":\"F32\","
     "\"shape\":[2],\"data_offsets\":[28,36]}}",
     40, "tensors 'fc.weight' and 'fc.bias' overlap"},
    {"{\"fc.weight\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,32]}}", 32,
     "tensor 'fc.weight': data_offsets [0, 32] hold 32 bytes but shape [2, 4] of F16 needs 16"},
    {"{\"fc.weight\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,15]}}", 32,
     "tensor 'fc.weight': data_offsets [0, 15] hold 15 bytes but shape [2, 4] of F16 needs 16"},
    {"{\"fc.weight\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,8]}}", 32,
     "tensor 'fc.weight': data_offsets [0, 8] hold 8 bytes but shape [2, 4] of BF16 needs 16"},
    {"{\"fc.weight\":{\"dtype\":\"F64\",\"shape\":[2,4],\"data_offsets\":[0,64]},\"fc.bias\":{\"dtype\":\"F16\","
     "\"shape\":[2],\"data_offsets\":[64,68]}}",
     68, "tensor 'fc.weight' is F64; weights must be F32, F16 or BF16"},
    {"{\"fc.weight\":{\"dtype\":\"F99\",\"shape\":[2,4],\"data_offsets\":[0,32]}}", 32,
     "tensor 'fc.weight': unknown dtype 'F99'"},
    {"{" B_OK_HDR "}", 40, "model needs tensor 'fc.weight' [2, 4], not in the file"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[4,2],\"data_offsets\":[0,32]}," B_OK_HDR "}", 40,
     "tensor 'fc.weight' has shape [4, 2], the model needs [2, 4]"},
    {"{\"fc.weight\":{\"dtype\":\"I64\",\"shape\":[2,4],\"data_offsets\":[0,64]},\"fc.bias\":{\"dtype\":\"F32\","
     "\"shape\":[2],\"data_offsets\":[64,72]}}",
     72, "tensor 'fc.weight' is I64; weights must be F32, F16 or BF16"},
    {"{" W_OK_HDR "," B_OK_HDR ",\"conv9.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}", 44,
     "tensor 'conv9.weight' is not a weight of model 'tiny'"},
    {"{" W_OK_HDR "," W_OK_HDR "}", 40, "tensor 'fc.weight' appears twice"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,-4],\"data_offsets\":[0,32]}}", 32,
     "shape entries must be non-negative integers"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[32,0]}}", 32, "end before they begin"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4]}}", 32, "'data_offsets' must be [begin, end]"},
    {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32.5]}}", 32,
     "data_offsets must be non-negative integers"},
    /* overlaps: each tensor is checked against the furthest end before it, and an empty tensor
     * (which holds no byte) between two others no longer hides their overlap */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],"
     "\"data_offsets\":[8,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "tensors 'a' and 'b' overlap in the data section"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],"
     "\"data_offsets\":[4,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]}}",
     16, "tensors 'a' and 'b' overlap in the data section"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"c\":{\"dtype\":\"F32\",\"shape\":[1],"
     "\"data_offsets\":[4,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
     16, "tensors 'a' and 'c' overlap in the data section"},
};

static dl_graph *tiny(void) {
    dl_graph *g;
    dl_error err;
    cr_assert_eq(dl_model_parse_yaml(tiny_model, strlen(tiny_model), "tiny.yaml", &g, &err), DL_OK, "%s", err.msg);
    return g;
}

Test(bad_inputs, safetensors_files_are_never_trusted) {
    static float zeros[32];
    for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++) {
        char *path = st_file(sts[i].json, zeros, sts[i].data_bytes);
        dl_graph *g = tiny();
        dl_weights *w = (dl_weights *)0x1;
        dl_error err = {{0}};
        dl_status st = dl_weights_bind(g, NULL, path, 1, &w, &err);
        cr_expect_eq(st, DL_E_INVALID, "case %zu: status %d (%s)", i, st, err.msg);
        cr_expect_null(w);
        cr_expect(strstr(err.msg, sts[i].want), "case %zu:\n  got:  %s\n  want: %s", i, err.msg, sts[i].want);
        cr_expect(strstr(err.msg, path) == err.msg, "case %zu: message does not start with the file: %s", i, err.msg);
        cr_expect_null(strchr(err.msg, '\n'), "case %zu: not one line: %s", i, err.msg);
        dl_graph_free(g);
        unlink(path);
        free(path);
    }
}

Test(bad_inputs, safetensors_length_field_lies) {
    unsigned char shortf[5] = {1, 2, 3, 4, 5};
    char *p = tu_write_temp(".safetensors", shortf, sizeof shortf);
    dl_safetensors *st;
    dl_error err;
    cr_expect_eq(dl_safetensors_open(p, &st, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "too short for a safetensors file"), "%s", err.msg);
    unlink(p);
    free(p);
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    p = tu_write_temp(".safetensors", big, sizeof big);
    cr_expect_eq(dl_safetensors_open(p, &st, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "exceeds the file"), "%s", err.msg);
    unlink(p);
    free(p);
    cr_expect_eq(dl_safetensors_open("/nonexistent.safetensors", &st, &err), DL_E_IO);
}

Test(bad_inputs, corrupting_any_byte_never_crashes, .timeout = 120) {
    /* Flip each byte of a valid file's header in turn: open must succeed or fail cleanly. */
    const char *json = "{" W_OK_HDR "," B_OK_HDR "}";
    float data[10];
    tu_fill_uniform(data, 10, 3, -1, 1);
    size_t hl = strlen(json), total = 8 + hl + sizeof data;
    unsigned char *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    memcpy(buf + 8 + hl, data, sizeof data);
    int ok = 0, failed = 0;
    for (size_t pos = 0; pos < 8 + hl; pos++) {
        unsigned char save = buf[pos];
        for (int v = 0; v < 3; v++) {
            buf[pos] = (unsigned char)(v == 0 ? save ^ 0x01 : v == 1 ? '9' : 0xff);
            char *p = tu_write_temp(".safetensors", buf, total);
            dl_safetensors *st = NULL;
            dl_error err = {{0}};
            if (dl_safetensors_open(p, &st, &err) == DL_OK) {
                ok++;
                for (int t = 0; t < st->n_tensors; t++) /* touch every byte it claims */
                    for (size_t b = 0; b < st->tensors[t].nbytes; b++)
                        cr_assert_geq(((const unsigned char *)st->tensors[t].data)[b], 0);
                dl_safetensors_close(st);
            } else {
                failed++;
                cr_assert(err.msg[0]);
            }
            unlink(p);
            free(p);
        }
        buf[pos] = save;
    }
    free(buf);
    cr_expect_gt(failed, 0);
    cr_expect_gt(ok + failed, 100);
}

/* ---- .npy ---- */

static char *npy_file(const char *header, const void *data, size_t n, int version) {
    size_t hl = strlen(header), pre = version == 1 ? 10 : 12;
    unsigned char *buf = malloc(pre + hl + n + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version, buf[7] = 0;
    buf[8] = (unsigned char)(hl & 0xff), buf[9] = (unsigned char)(hl >> 8);
    if (pre == 12) buf[10] = buf[11] = 0;
    memcpy(buf + pre, header, hl);
    if (n) memcpy(buf + pre + hl, data, n);
    char *path = tu_write_temp(".npy", buf, pre + hl + n);
    free(buf);
    return path;
}

Test(bad_inputs, npy_files) {
    static const float zeros[64];
    struct {
        const char *hdr;
        size_t n;
        int version;
        const char *want;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24, 1,
         "Fortran-order arrays are not supported"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 20, 1,
         "data is shorter than its shape needs"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", 16, 1, "dtype '<c8' is not supported"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8, 1, "dtype '>f4' is not supported"},
        {"['descr', '<f4']\n", 8, 1, ".npy header is not a dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }\n", 4, 1,
         "more than 8 dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }\n", 8, 1, "bad dimension"},
        {"{'descr': '<f4', 'shape': (2,), }\n", 8, 1, "lacks descr, fortran_order or shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 8, 9, "format version 9 is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = npy_file(cases[i].hdr, zeros, cases[i].n, cases[i].version);
        float *d = (float *)0x1;
        int64_t shape[8];
        int nd;
        dl_error err = {{0}};
        cr_expect_eq(dl_npy_read(p, &d, shape, &nd, &err), DL_E_INVALID, "case %zu", i);
        cr_expect_null(d, "case %zu", i);
        cr_expect(strstr(err.msg, cases[i].want), "case %zu:\n  got:  %s\n  want: %s", i, err.msg, cases[i].want);
        unlink(p);
        free(p);
    }
    static const char zip[] = "PK\x03\x04 not numpy";
    char *p = tu_write_temp(".npy", zip, sizeof zip - 1);
    float *d;
    int64_t shape[8];
    int nd;
    dl_error err;
    cr_expect_eq(dl_npy_read(p, &d, shape, &nd, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "not a .npy file (bad magic)"), "%s", err.msg);
    unlink(p);
    free(p);
}

/* Every shipped model with bytes flipped, dropped and truncated: parsing must fail cleanly or
 * succeed, never crash (this suite runs under ASan and UBSan in CI). */
Test(bad_inputs, mutated_models_never_crash, .timeout = 300) {
    const char *names[] = {"lenet.yaml", "mlp.yaml", "resnet18.yaml"};
    int failed = 0, parsed = 0;
    for (size_t m = 0; m < sizeof names / sizeof names[0]; m++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", DLRUN_SOURCE_DIR, names[m]);
        FILE *f = fopen(path, "rb");
        cr_assert(f);
        static char text[1 << 16];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        static const char subst[] = "-:[]{},#&*!|>'\"%@` \n\t0x";
        uint64_t seed = 99 + m;
        for (int trial = 0; trial < 400; trial++) {
            static char mut[1 << 16];
            memcpy(mut, text, len);
            size_t n = len;
            float u[3];
            tu_fill_uniform(u, 3, seed++, 0, 1);
            size_t pos = (size_t)(u[0] * (float)(len - 1));
            switch (trial % 4) {
            case 0: mut[pos] = subst[(size_t)(u[1] * (sizeof subst - 1))]; break; /* replace */
            case 1: memmove(mut + pos, mut + pos + 1, n - pos - 1), n--; break;   /* delete */
            case 2: n = pos; break;                                               /* truncate */
            default:
                mut[pos] = (char)(unsigned char)(u[1] * 255); /* a byte, whatever char's sign */
                mut[(size_t)(u[2] * (float)(len - 1))] = '\0';
                break;
            }
            dl_graph *g = NULL;
            dl_error err = {{0}};
            if (dl_model_parse_yaml(mut, n, "mutant.yaml", &g, &err) == DL_OK) {
                parsed++;
                dl_graph_free(g);
            } else {
                failed++;
                cr_assert(err.msg[0] && !strchr(err.msg, '\n'), "a failure must say why in one line");
            }
        }
    }
    cr_expect_gt(failed, 100, "mutations should mostly break the model");
    cr_expect_gt(parsed + failed, 1000);
}

Test(bad_inputs, mutated_npy_files_never_crash, .timeout = 120) {
    float x[60];
    tu_fill_uniform(x, 60, 5, -1, 1);
    int64_t shape[3] = {3, 4, 5};
    char path[] = "/tmp/dlrun-npy-XXXXXX";
    close(mkstemp(path));
    dl_error err;
    cr_assert_eq(dl_npy_write(path, x, shape, 3, &err), DL_OK);
    FILE *f = fopen(path, "rb");
    unsigned char buf[512];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(path);
    int failed = 0;
    for (int trial = 0; trial < 300; trial++) {
        unsigned char mut[512];
        memcpy(mut, buf, len);
        float u[2];
        tu_fill_uniform(u, 2, (uint64_t)trial, 0, 1);
        size_t pos = (size_t)(u[0] * 128); /* the magic, version, length and header dict */
        mut[pos] = (unsigned char)(u[1] * 256);
        char *p = tu_write_temp(".npy", mut, trial % 5 ? len : pos);
        float *d = NULL;
        int64_t s[8];
        int nd;
        if (dl_npy_read(p, &d, s, &nd, &err) == DL_OK) free(d);
        else {
            failed++;
            cr_assert(err.msg[0]);
        }
        unlink(p);
        free(p);
    }
    cr_expect_gt(failed, 50);
}

Test(bad_inputs, a_huge_batch_is_refused_before_anything_is_allocated) {
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_session_options so;
    dl_session_options_init(&so);
    so.batch = (int64_t)1 << 40;
    dl_error err = {{0}};
    dl_status st = tu_open_session(DLRUN_PLUGIN_DIR, tiny_model, &so, &ctx, &m, &s, &err);
    cr_expect_eq(st, DL_E_INVALID, "%s", err.msg);
    cr_expect_null(s);
    cr_expect(strstr(err.msg, "batch must be between 1 and 1048576, not 1099511627776"), "%s", err.msg);
    dl_model_free(m);
    dl_context_free(ctx);
    so.batch = DL_MAX_BATCH; /* a batch within the cap, whose input passes the tensor limit */
    const char wide[] = "model: w\ninputs:\n  - {name: x, shape: [1, 65536, 1024]}\nlayers:\n  - {op: relu}\n";
    st = tu_open_session(DLRUN_PLUGIN_DIR, wide, &so, &ctx, &m, &s, &err);
    cr_expect_eq(st, DL_E_INVALID, "%s", err.msg);
    cr_expect_null(s);
    cr_expect(strstr(err.msg, "shape [1048576, 65536, 1024] is more than the 17179869184 elements"), "%s", err.msg);
    dl_model_free(m);
    dl_context_free(ctx);
}
