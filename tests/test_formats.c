/* test_formats.c — the good paths of the file formats and model reading: every shipped model
 * parses with torchvision's tensor names and shapes, shape inference per op and per batch,
 * safetensors (each dtype kept, in place when aligned; f16/bf16 converted to f32 only on request),
 * .npy round trips, seeded weights. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_yaml.h"
#include "npy.h"
#include "safetensors.h"
#include "tensor_convert.h"
#include "test_util.h"
#include "weights.h"

static dl_graph *load(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s", DLRUN_SOURCE_DIR, name);
    dl_graph *g;
    dl_error err;
    cr_assert_eq(dl_model_read_yaml(path, &g, &err), DL_OK, "%s", err.msg);
    return g;
}

static dl_graph *parse(const char *text) {
    dl_graph *g;
    dl_error err;
    cr_assert_eq(dl_model_parse_yaml(text, strlen(text), "t.yaml", &g, &err), DL_OK, "%s", err.msg);
    return g;
}

/* shapes: a session's (from dl_graph_infer), or NULL for the model's own */
static void expect_shape_in(const dl_graph *g, const dl_shape *shapes, const char *value, const char *want) {
    int v = dl_graph_find_value(g, value);
    cr_assert_geq(v, 0, "no value %s", value);
    const dl_shape *sh = shapes ? &shapes[v] : &g->values[v].shape;
    char s[128];
    dl_shape_str(sh->d, sh->ndim, s, sizeof s);
    cr_expect_str_eq(s, want, "%s", value);
}
#define expect_shape(g, value, want) expect_shape_in(g, NULL, value, want)

Test(models, shipped_models_parse_with_torchvision_names) {
    dl_graph *g = load("vgg.yaml");
    cr_expect_eq(g->n_nodes, 39);
    expect_shape(g, "classifier.6", "[1, 1000]");
    expect_shape(g, "features.0.weight", "[64, 3, 3, 3]");
    expect_shape(g, "features.28.bias", "[512]");
    expect_shape(g, "classifier.0.weight", "[4096, 25088]");
    expect_shape(g, "classifier.6.bias", "[1000]");
    dl_graph_free(g);
    g = load("resnet18.yaml");
    expect_shape(g, "fc", "[1, 1000]");
    expect_shape(g, "conv1.weight", "[64, 3, 7, 7]");
    expect_shape(g, "bn1.running_var", "[64]");
    expect_shape(g, "layer2.0.downsample.0.weight", "[128, 64, 1, 1]");
    expect_shape(g, "layer4.1.bn2.running_mean", "[512]");
    expect_shape(g, "layer4.1.relu2", "[1, 512, 7, 7]");
    cr_expect_lt(dl_graph_find_value(g, "conv1.bias"), 0, "resnet convs have no bias");
    int params = 0;
    for (int i = 0; i < g->n_values; i++) params += g->values[i].kind == DL_VALUE_WEIGHT;
    cr_expect_eq(params, 102, "torchvision resnet18 has 102 tensors besides num_batches_tracked");
    dl_graph_free(g);
    g = load("lenet.yaml");
    expect_shape(g, "prob", "[1, 10]");
    expect_shape(g, "fc1.weight", "[120, 400]");
    dl_graph_free(g);
    g = load("mlp.yaml");
    expect_shape(g, "prob", "[1, 10]");
    dl_graph_free(g);
}

Test(models, batch_changes_every_shape_and_leaves_the_model_alone) {
    dl_graph *g = load("vgg.yaml");
    dl_error err;
    dl_shape *s8 = calloc((size_t)g->n_values, sizeof *s8);
    cr_assert_eq(dl_graph_infer(g, 8, s8, &err), DL_OK, "%s", err.msg);
    expect_shape_in(g, s8, "classifier.6", "[8, 1000]");
    expect_shape_in(g, s8, "features.30", "[8, 512, 7, 7]");
    expect_shape_in(g, s8, "features.0.weight", "[64, 3, 3, 3]");
    expect_shape_in(g, s8, "flatten", "[8, 25088]");
    expect_shape(g, "classifier.6", "[1, 1000]"); /* the model keeps the file's batch */
    expect_shape(g, "flatten", "[1, 25088]");
    free(s8);
    dl_graph_free(g);
}

Test(models, dag_defaults_and_attributes) {
    dl_graph *g = parse(
        "model: dag\n"
        "inputs:\n  - {name: x, shape: [2, 4, 11, 13]}\n"
        "weights: w.safetensors\n"
        "layers:\n"
        "  - {name: a, op: conv2d, filters: 6, kernel: [3, 5], stride: 2, padding: [1, 2], dilation: 1}\n"
        "  - {name: b, op: conv2d, filters: 6, kernel: 3, stride: 2, padding: [0, 1, 2, 1], groups: 2, inputs: [x]}\n"
        "  - {name: j, op: concat, inputs: [a, b]}\n"
        "  - {name: d, op: conv2d, filters: 4, kernel: 3, dilation: 2, padding: 2, bias: false}\n"
        "  - {name: m, op: maxpool2d, kernel: 3, stride: 2, padding: 1, ceil_mode: true}\n"
        "  - {name: p, op: avgpool2d, kernel: 2, count_include_pad: false}\n"
        "  - {op: global_avgpool}\n"
        "  - {name: s, op: softmax, axis: 1}\n"
        "  - {name: bn, op: batchnorm, eps: 0.001, inputs: [a]}\n"
        "  - {name: lr, op: leaky_relu}\n"
        "  - {name: sg, op: sigmoid}\n"
        "  - {name: cl, op: clip, max: 6}\n"
        "outputs: [s, bn]\n");
    expect_shape(g, "a", "[2, 6, 6, 7]");
    expect_shape(g, "b", "[2, 6, 6, 7]");
    expect_shape(g, "b.weight", "[6, 2, 3, 3]");
    expect_shape(g, "j", "[2, 12, 6, 7]");
    expect_shape(g, "d", "[2, 4, 6, 7]");
    expect_shape(g, "m", "[2, 4, 4, 4]");
    expect_shape(g, "p", "[2, 4, 2, 2]");
    expect_shape(g, "global_avgpool_7", "[2, 4, 1, 1]");
    expect_shape(g, "s", "[2, 4, 1, 1]");
    expect_shape(g, "bn.running_mean", "[6]");
    cr_expect_eq(g->n_outputs, 2);
    cr_expect_str_eq(g->weights_path, "w.safetensors");
    const dl_node *a = &g->nodes[0];
    cr_expect_eq(a->params.attrs.pad_begin[1], 2);
    cr_expect_eq(a->params.attrs.kernel[1], 5);
    cr_expect_eq(g->nodes[1].params.attrs.pad_end[0], 2);
    cr_expect_eq(g->nodes[4].params.attrs.stride[0], 2);
    cr_expect_eq(g->nodes[5].params.attrs.stride[1], 2, "a pool's stride defaults to its kernel");
    cr_expect_eq(g->nodes[5].params.attrs.count_include_pad, 0);
    cr_expect_eq(g->nodes[7].params.attrs.axis, 1);
    cr_expect_float_eq(g->nodes[8].params.attrs.epsilon, 0.001f, 1e-9);
    cr_expect_float_eq(g->nodes[9].params.attrs.alpha, 0.01f, 1e-9, "PyTorch's default slope");
    expect_shape(g, "cl", "[2, 6, 6, 7]");
    cr_expect(isinf(g->nodes[11].params.attrs.clip_min) && g->nodes[11].params.attrs.clip_min < 0);
    cr_expect_float_eq(g->nodes[11].params.attrs.clip_max, 6.0f, 1e-9);
    /* conv a: 2*N*OC*OH*OW*(C/g)*KH*KW, from its row in the op table */
    dl_shape shapes[64];
    for (int v = 0; v < g->n_values; v++) shapes[v] = g->values[v].shape;
    dl_op op;
    dl_tensor in[4], out;
    dl_node_op(g, 0, a->inputs, a->n_inputs, shapes, &a->params.attrs, 0, &op, in, &out);
    cr_expect_float_eq(dl_op_def_of(a->kind)->flops(&op), 2.0 * 2 * 6 * 6 * 7 * 4 * 3 * 5, 1e-6);
    dl_graph_free(g);
}

Test(models, weights_path_is_relative_to_the_model_file) {
    const char *t =
        "model: m\ninputs:\n  - {name: x, shape: [1, 2]}\nweights: w.safetensors\nlayers:\n  - {op: relu}\n";
    dl_graph *g;
    dl_error err;
    cr_assert_eq(dl_model_parse_yaml(t, strlen(t), "some/dir/m.yaml", &g, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(g->weights_path, "some/dir/w.safetensors");
    dl_graph_free(g);
}

/* ---- safetensors and weights ---- */

static const char fc_model[] =
    "model: fc\ninputs:\n  - {name: x, shape: [1, 3]}\nlayers:\n  - {name: fc, op: linear, units: 2}\n";

Test(weights, f32_file_round_trip_in_place) {
    float w[6], b[2];
    tu_fill_uniform(w, 6, 1, -1, 1);
    tu_fill_uniform(b, 2, 2, -1, 1);
    const char *names[3] = {"fc.weight", "fc.bias", "fc.num_batches_tracked"};
    const float *data[3] = {w, b, b};
    int nd[3] = {2, 1, 1};
    int64_t ws[2] = {2, 3}, bs[1] = {2}, ns[1] = {1};
    const int64_t *shapes[3] = {ws, bs, ns};
    char path[] = "/tmp/dlrun-st-XXXXXX";
    close(mkstemp(path));
    dl_error err;
    cr_assert_eq(dl_safetensors_write_f32(path, 3, names, data, nd, shapes, &err), DL_OK, "%s", err.msg);
    dl_graph *g = parse(fc_model);
    dl_weights *wt;
    cr_assert_eq(dl_weights_bind(g, NULL, path, 0, &wt, &err), DL_OK, "%s", err.msg);
    int wi = dl_graph_find_value(g, "fc.weight"), bi = dl_graph_find_value(g, "fc.bias");
    cr_expect_eq(memcmp(dl_weights_data(wt, wi), w, sizeof w), 0);
    cr_expect_eq(memcmp(dl_weights_data(wt, bi), b, sizeof b), 0);
    cr_expect_null(dl_weights_data(wt, dl_graph_find_value(g, "x")), "an input has no weight data");
    dl_dtype dt;
    cr_expect_eq(dl_weights_raw(wt, wi, &dt), (const void *)dl_weights_data(wt, wi), "f32 raw is its data");
    cr_expect(dl_dtype_is_f32(dt));
    cr_expect_eq(dl_weights_f32_bytes(wt), 0, "aligned f32 is used in place, not copied");
    dl_weights_free(wt);
    dl_graph_free(g);
    unlink(path);
}

static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)(v & 0xff), p[1] = (unsigned char)(v >> 8); }

/* A safetensors file from a JSON header and the data section; the header is padded with spaces
 * so that the data starts at a multiple of 8 bytes (aligned) or at an odd byte (not). */
static char *st_file(const char *json, const void *data, size_t n, int aligned) {
    size_t hl = strlen(json), pad = aligned ? (8 - hl % 8) % 8 : (hl % 2 ? 0 : 1);
    unsigned char *buf = malloc(8 + hl + pad + n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)(hl + pad) >> (8 * i));
    memcpy(buf + 8, json, hl);
    memset(buf + 8 + hl, ' ', pad);
    if (n) memcpy(buf + 8 + hl + pad, data, n);
    char *path = tu_write_temp(".safetensors", buf, 8 + hl + pad + n);
    free(buf);
    return path;
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* fc.weight [2, 3] and fc.bias [2] of fc_model in one 16-bit dtype, then f32 on request. */
static void expect_16bit_file(const char *dtype, dl_dtype want, const uint16_t *h, const float *exact) {
    unsigned char data[16];
    for (int i = 0; i < 8; i++) put16(data + 2 * i, h[i]);
    char json[256];
    snprintf(json, sizeof json,
             "{\"fc.weight\":{\"dtype\":\"%s\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
             "\"fc.bias\":{\"dtype\":\"%s\",\"shape\":[2],\"data_offsets\":[12,16]}}",
             dtype, dtype);
    for (int aligned = 1; aligned >= 0; aligned--) {
        char *path = st_file(json, data, sizeof data, aligned);
        dl_graph *g = parse(fc_model);
        int wi = dl_graph_find_value(g, "fc.weight"), bi = dl_graph_find_value(g, "fc.bias");
        dl_weights *wt;
        dl_error err;
        cr_assert_eq(dl_weights_bind(g, NULL, path, 0, &wt, &err), DL_OK, "%s", err.msg);
        cr_expect_eq(dl_weights_f32_bytes(wt), 0, "%s (aligned %d): an f32 copy made at bind", dtype, aligned);
        dl_dtype dt = DL_F32;
        const void *raw = dl_weights_raw(wt, wi, &dt);
        cr_assert_not_null(raw);
        cr_expect(dl_dtype_eq(dt, want), "%s: stored as %s", dtype, dl_dtype_name(dt));
        cr_expect_eq(((uintptr_t)raw) % 2, 0, "%s: raw data not aligned for its dtype", dtype);
        cr_expect_eq(memcmp(raw, data, 12), 0, "%s (aligned %d): raw bits differ from the file", dtype, aligned);
        cr_expect_eq(memcmp(dl_weights_raw(wt, bi, NULL), data + 12, 4), 0, "%s: bias bits differ", dtype);
        cr_expect_eq(dl_weights_f32_bytes(wt), 0, "%s: dl_weights_raw made an f32 copy", dtype);
        cr_expect_null(dl_weights_raw(wt, dl_graph_find_value(g, "x"), &dt), "an input has no weight data");
        const float *w = dl_weights_data(wt, wi);
        cr_assert_not_null(w);
        cr_expect_eq(dl_weights_f32_bytes(wt), 6 * sizeof(float), "%s: only the weight asked for is converted", dtype);
        for (int i = 0; i < 6; i++) cr_expect(same_bits(w[i], exact[i]), "%s %d: %g != %g", dtype, i, w[i], exact[i]);
        cr_expect_eq(dl_weights_data(wt, wi), w, "%s: the f32 copy is not cached", dtype);
        cr_expect_eq(dl_weights_f32_bytes(wt), 6 * sizeof(float), "%s: converted twice", dtype);
        const float *b = dl_weights_data(wt, bi);
        for (int i = 0; i < 2; i++)
            cr_expect(same_bits(b[i], exact[6 + i]), "%s bias %d: %g != %g", dtype, i, b[i], exact[6 + i]);
        cr_expect_eq(dl_weights_f32_bytes(wt), 8 * sizeof(float));
        cr_expect_eq(memcmp(dl_weights_raw(wt, wi, NULL), data, 12), 0, "%s: raw data changed", dtype);
        dl_weights_free(wt);
        dl_graph_free(g);
        unlink(path);
        free(path);
    }
}

Test(weights, f16_file_binds_raw_and_converts_on_request) {
    /* 1.0, -2.5, 65504 (max), 2^-24 (smallest subnormal), 0.5, -0, inf, -inf */
    const uint16_t h[8] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x3800, 0x8000, 0x7c00, 0xfc00};
    const float f[8] = {1.0f, -2.5f, 65504.0f, 5.9604644775390625e-08f, 0.5f, -0.0f, INFINITY, -INFINITY};
    expect_16bit_file("F16", DL_F16, h, f);
}

Test(weights, bf16_file_binds_raw_and_converts_on_request) {
    /* 1.0, -3.0, 2^-133 (subnormal), max finite, -0, 1/3 rounded, inf, 0 */
    const uint16_t h[8] = {0x3f80, 0xc040, 0x0001, 0x7f7f, 0x8000, 0x3eab, 0x7f80, 0x0000};
    const float f[8] = {1.0f,     -3.0f, 9.18354961579912e-41f, 3.3895313892515355e38f, -0.0f, 0.333984375f,
                        INFINITY, 0.0f};
    expect_16bit_file("BF16", DL_BF16, h, f);
}

Test(weights, every_16bit_pattern_converts_exactly) {
    /* fc.weight [256, 256] holds each of the 65536 patterns once: the bulk conversion of
     * dl_weights_data must give the bits of the scalar conversions (NaNs included). */
    static const char model[] =
        "model: wide\ninputs:\n  - {name: x, shape: [1, 256]}\nlayers:\n  - {name: fc, op: linear, units: 256}\n";
    unsigned char *data = malloc(2 * 65536 + 2 * 256);
    for (int i = 0; i < 65536; i++) put16(data + 2 * i, (uint16_t)i);
    for (int i = 0; i < 256; i++) put16(data + 2 * 65536 + 2 * i, (uint16_t)(i * 257));
    for (int bf = 0; bf < 2; bf++) {
        const char *dt = bf ? "BF16" : "F16";
        char json[256];
        snprintf(json, sizeof json,
                 "{\"fc.weight\":{\"dtype\":\"%s\",\"shape\":[256,256],\"data_offsets\":[0,131072]},"
                 "\"fc.bias\":{\"dtype\":\"%s\",\"shape\":[256],\"data_offsets\":[131072,131584]}}",
                 dt, dt);
        char *path = st_file(json, data, 2 * 65536 + 2 * 256, 1);
        dl_graph *g = parse(model);
        dl_weights *wt;
        dl_error err;
        cr_assert_eq(dl_weights_bind(g, NULL, path, 0, &wt, &err), DL_OK, "%s", err.msg);
        const float *w = dl_weights_data(wt, dl_graph_find_value(g, "fc.weight"));
        int bad = 0;
        for (int i = 0; i < 65536 && bad < 5; i++) {
            float want = bf ? dl_bf16_to_f32((uint16_t)i) : dl_f16_to_f32((uint16_t)i);
            if (!same_bits(w[i], want)) {
                cr_expect_fail("%s 0x%04x: %g != %g", dt, i, w[i], want);
                bad++;
            }
        }
        cr_expect_eq(dl_weights_f32_bytes(wt), 65536 * sizeof(float), "%s: the bias was converted too", dt);
        dl_weights_free(wt);
        dl_graph_free(g);
        unlink(path);
        free(path);
    }
    free(data);
}

Test(weights, mixed_dtype_file) {
    /* two layers, each weight in another dtype: in place where f32, converted only on request */
    static const char model[] = "model: two\ninputs:\n  - {name: x, shape: [1, 2]}\nlayers:\n"
                                "  - {name: fc1, op: linear, units: 2}\n  - {name: fc2, op: linear, units: 1}\n";
    unsigned char data[28];
    const float f32w[2] = {0.25f, -7.0f}, f32b = 3.5f;
    memcpy(data, f32w, 8);                              /* fc1.weight [2, 2] F32, first row... */
    memcpy(data + 8, f32w, 8);                          /* ...and second */
    put16(data + 16, 0x3c00);                           /* fc1.bias [2] F16: 1, -2 */
    put16(data + 18, 0xc000);                           /* */
    put16(data + 20, 0x4040), put16(data + 22, 0xbf00); /* fc2.weight [1, 2] BF16: 3, -0.5 */
    memcpy(data + 24, &f32b, 4);                        /* fc2.bias [1] F32 */
    const char *json = "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                       "\"fc1.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[16,20]},"
                       "\"fc2.weight\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[20,24]},"
                       "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]}}";
    char *path = st_file(json, data, sizeof data, 1);
    dl_graph *g = parse(model);
    dl_weights *wt;
    dl_error err;
    cr_assert_eq(dl_weights_bind(g, NULL, path, 0, &wt, &err), DL_OK, "%s", err.msg);
    const char *names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    const dl_dtype want[4] = {DL_F32, DL_F16, DL_BF16, DL_F32};
    const float values[4][4] = {{0.25f, -7.0f, 0.25f, -7.0f}, {1.0f, -2.0f}, {3.0f, -0.5f}, {3.5f}};
    const int counts[4] = {4, 2, 2, 1}, offsets[4] = {0, 16, 20, 24};
    for (int i = 0; i < 4; i++) {
        int v = dl_graph_find_value(g, names[i]);
        dl_dtype dt;
        const void *raw = dl_weights_raw(wt, v, &dt);
        cr_expect(dl_dtype_eq(dt, want[i]), "%s is stored as %s", names[i], dl_dtype_name(dt));
        cr_expect_eq(memcmp(raw, data + offsets[i], (size_t)counts[i] * dl_dtype_size(dt)), 0, "%s", names[i]);
        if (dl_dtype_is_f32(dt)) cr_expect_eq((const void *)dl_weights_data(wt, v), raw, "%s not in place", names[i]);
    }
    cr_expect_eq(dl_weights_f32_bytes(wt), 0, "the f32 weights are used in place, the others not asked for yet");
    for (int i = 0; i < 4; i++) {
        const float *d = dl_weights_data(wt, dl_graph_find_value(g, names[i]));
        for (int j = 0; j < counts[i]; j++) cr_expect_eq(d[j], values[i][j], "%s[%d]: %g", names[i], j, d[j]);
    }
    cr_expect_eq(dl_weights_f32_bytes(wt), 4 * sizeof(float), "only fc1.bias and fc2.weight were converted");
    dl_weights_free(wt);
    dl_graph_free(g);
    unlink(path);
    free(path);
}

Test(weights, seeded_init_is_deterministic_and_pytorch_like) {
    dl_graph *g = load("resnet18.yaml");
    dl_weights *a, *b;
    dl_error err;
    cr_assert_eq(dl_weights_bind(g, NULL, NULL, 7, &a, &err), DL_OK, "%s", err.msg);
    int ci = dl_graph_find_value(g, "layer1.0.conv1.weight");
    size_t n = (size_t)dl_shape_numel(&g->values[ci].shape);
    float *first = malloc(n * sizeof *first);
    memcpy(first, dl_weights_data(a, ci), n * sizeof *first);
    double bound = 1.0 / sqrt(64.0 * 9.0), mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(first[i]));
    cr_expect_leq(mx, bound, "kaiming-uniform bound exceeded");
    cr_expect_gt(mx, 0.98 * bound, "the range is not used");
    const float *gamma = dl_weights_data(a, dl_graph_find_value(g, "bn1.weight"));
    const float *mean = dl_weights_data(a, dl_graph_find_value(g, "bn1.running_mean"));
    const float *var = dl_weights_data(a, dl_graph_find_value(g, "bn1.running_var"));
    cr_expect(gamma[0] == 1 && mean[0] == 0 && var[63] == 1);
    dl_dtype dt;
    cr_expect_eq(dl_weights_raw(a, ci, &dt), (const void *)dl_weights_data(a, ci), "seeded weights are f32");
    cr_expect(dl_dtype_is_f32(dt));
    size_t all = 0;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].kind == DL_VALUE_WEIGHT) all += (size_t)dl_shape_numel(&g->values[i].shape) * sizeof(float);
    cr_expect_eq(dl_weights_f32_bytes(a), all, "seeded weights are counted as allocated f32");
    dl_weights_free(a);
    cr_assert_eq(dl_weights_bind(g, NULL, NULL, 7, &b, &err), DL_OK);
    cr_expect_eq(memcmp(first, dl_weights_data(b, ci), n * sizeof *first), 0, "same seed, different weights");
    dl_weights_free(b);
    cr_assert_eq(dl_weights_bind(g, NULL, NULL, 8, &b, &err), DL_OK);
    cr_expect_neq(memcmp(first, dl_weights_data(b, ci), n * sizeof *first), 0, "different seed, same weights");
    dl_weights_free(b);
    free(first);
    dl_graph_free(g);
}

/* ---- .npy ---- */

Test(npy, round_trip_odd_shapes) {
    /* the last spans two of the reader's 65536-element blocks and ends inside the second */
    const int64_t shapes[5][5] = {{7}, {3, 5}, {2, 3, 1, 5, 7}, {0}, {3, 65537}};
    const int nds[5] = {1, 2, 5, 0, 2};
    for (int c = 0; c < 5; c++) {
        int64_t n = 1;
        for (int i = 0; i < nds[c]; i++) n *= shapes[c][i];
        float *x = malloc((size_t)n * sizeof *x);
        tu_fill_uniform(x, (size_t)n, (uint64_t)c, -5, 5);
        char path[] = "/tmp/dlrun-npy-XXXXXX";
        close(mkstemp(path));
        dl_error err;
        cr_assert_eq(dl_npy_write(path, x, shapes[c], nds[c], &err), DL_OK, "%s", err.msg);
        float *y;
        int64_t s[8];
        int nd;
        cr_assert_eq(dl_npy_read(path, &y, s, &nd, &err), DL_OK, "case %d: %s", c, err.msg);
        cr_expect_eq(nd, nds[c]);
        for (int i = 0; i < nd; i++) cr_expect_eq(s[i], shapes[c][i]);
        cr_expect_eq(memcmp(x, y, (size_t)n * sizeof *x), 0);
        free(x);
        free(y);
        unlink(path);
    }
}

/* int64 ids from an '<i4' file of more elements than the reader's 65536-element block */
Test(npy, int64_read_across_blocks) {
    enum { N = 70001 };
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }\n", N);
    size_t len = 10 + (size_t)hl + 4 * (size_t)N;
    unsigned char *file = malloc(len);
    cr_assert(file);
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    file[8] = (unsigned char)hl, file[9] = 0;
    memcpy(file + 10, hdr, (size_t)hl);
    for (int32_t i = 0; i < N; i++) {
        int32_t v = i % 2 ? -i : i;
        memcpy(file + 10 + hl + 4 * i, &v, 4);
    }
    char *path = tu_write_temp(".npy", file, len);
    int64_t *y, s[8];
    int nd;
    dl_error err;
    cr_assert_eq(dl_npy_read_int64(path, &y, s, &nd, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(nd, 1);
    cr_expect_eq(s[0], N);
    int bad = 0;
    for (int64_t i = 0; i < N; i++) bad += y[i] != (i % 2 ? -i : i);
    cr_expect_eq(bad, 0, "%d of %d ids differ", bad, N);
    free(y);
    free(file);
    unlink(path);
    free(path);
}

Test(npy, other_dtypes_are_converted) {
    /* '<f8' [1.5, -2], '<i8' [3, -4], '<f2' [0.5], '|u1' [255] */
    struct {
        const char *descr;
        unsigned char bytes[16];
        size_t n, count;
        float want[2];
    } cases[] = {
        {"<f8", {0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0xc0}, 16, 2, {1.5f, -2.0f}},
        {"<i8", {3, 0, 0, 0, 0, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 16, 2, {3.0f, -4.0f}},
        {"<f2", {0x00, 0x38}, 2, 1, {0.5f}},
        {"|u1", {255}, 1, 1, {255.0f}},
    };
    for (size_t c = 0; c < 4; c++) {
        char hdr[128];
        int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%zu,), }\n",
                          cases[c].descr, cases[c].count);
        unsigned char file[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
        memcpy(file + 10, hdr, (size_t)hl);
        memcpy(file + 10 + hl, cases[c].bytes, cases[c].n);
        char *path = tu_write_temp(".npy", file, 10 + (size_t)hl + cases[c].n);
        float *y;
        int64_t s[8];
        int nd;
        dl_error err;
        cr_assert_eq(dl_npy_read(path, &y, s, &nd, &err), DL_OK, "%s: %s", cases[c].descr, err.msg);
        for (size_t i = 0; i < cases[c].count; i++) cr_expect_eq(y[i], cases[c].want[i], "%s[%zu]", cases[c].descr, i);
        free(y);
        unlink(path);
        free(path);
    }
}
