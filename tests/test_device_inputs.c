/* test_device_inputs.c — inputs given in device memory (a DLPack device pointer, as from a
 * PyTorch CUDA tensor): copied on the device straight into the buffers the ops there read, the
 * host buffer untouched; downloaded once where a host op reads them too; refused with one line
 * where no backend of the session works in that memory. And host inputs that only uploads read:
 * uploaded from the caller's memory, their host buffer untouched. The "fakedev" test plugin's device memory
 * is host memory, so the device path runs here without a GPU. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "test_util.h"

#define FAKEDEV DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so"
#define CPU DLRUN_PLUGIN_DIR "/libdlrun-cpu.so"
#define N 389

/* keep: no buffer reuse, so that the input's host buffer is its own (the test poisons it) */
static dl_session *open_model(const char *plugins, const char *yaml, int keep, dl_context **ctx, dl_model **m) {
    cr_assert(tu_fresh_cache());
    setenv("DLFAKE_FAKEDEV_US", "0", 1);
    dl_session *s;
    dl_error err = {{0}};
    dl_session_options so;
    dl_session_options_init(&so);
    so.keep_activations = keep;
    cr_assert_eq(tu_open_session(plugins, yaml, &so, ctx, m, &s, &err), DL_OK, "%s", err.msg);
    return s;
}

static void close_all(dl_session *s, dl_model *m, dl_context *ctx) {
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

/* y = relu(x) + x, each op where the model pins it */
static void expect_output(dl_session *s, const float *x) {
    const float *y = dl_session_output(s, 0)->data;
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0) + x[i];
    cr_expect_eq(bad, 0, "%d of %d outputs wrong", bad, N);
}

static dl_tensor device_input(dl_session *s, float *data, int32_t device_type) {
    dl_tensor t = *dl_session_input(s, 0);
    t.data = data;
    t.device = (dl_device){device_type, 0};
    return t;
}

Test(device_inputs, copied_on_the_device_without_touching_host_memory) {
    static const char yaml[] = "model: dev\ninputs:\n  - {name: x, shape: [1, 389]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: fakedev}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(FAKEDEV, yaml, 1, &ctx, &m);
    float x[N], *host = BUF(s, s->g->inputs[0], 0);
    tu_fill_uniform(x, N, 5, -1, 1);
    dl_error err = {{0}};
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg); /* host input first */
    expect_output(s, x);
    for (int i = 0; i < N; i++) host[i] = -7.0f; /* poison: a device run must not read it */
    float xd[N];
    tu_fill_uniform(xd, N, 6, -1, 1);
    dl_tensor dev = device_input(s, xd, 12); /* the fakedev plugin's device type */
    cr_assert_eq(dl_session_run(s, &dev, 1, &err), DL_OK, "%s", err.msg);
    expect_output(s, xd);
    int touched = 0;
    for (int i = 0; i < N; i++) touched += host[i] != -7.0f;
    cr_expect_eq(touched, 0, "the device input went through host memory (%d values written)", touched);
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg); /* and back to a host input */
    expect_output(s, x);
    close_all(s, m, ctx);
}

/* A host input that only uploads read is read by them where the caller keeps it: its host buffer
 * is neither written nor read. Where a host op reads it too, it is copied into that buffer. */
Test(device_inputs, a_host_input_only_uploaded_is_read_where_the_caller_keeps_it) {
    static const char yaml[] = "model: dev\ninputs:\n  - {name: x, shape: [1, 389]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: fakedev}\n";
    static const char mixed[] = "model: dev\ninputs:\n  - {name: x, shape: [1, 389]}\nlayers:\n"
                                "  - {name: a, op: relu, backend: fakedev}\n"
                                "  - {name: b, op: add, inputs: [a, x], backend: cpu}\n";
    for (int host_reads = 0; host_reads < 2; host_reads++) {
        dl_context *ctx;
        dl_model *m;
        dl_session *s = open_model(FAKEDEV ":" CPU, host_reads ? mixed : yaml, 1, &ctx, &m);
        float x[N], *host = BUF(s, s->g->inputs[0], 0);
        for (int i = 0; i < N; i++) host[i] = -7.0f; /* poison: only a copy may replace it */
        dl_error err = {{0}};
        for (int run = 0; run < 2; run++) {
            tu_fill_uniform(x, N, 11 + (uint64_t)run, -1, 1);
            dl_tensor in = *dl_session_input(s, 0);
            in.data = x;
            cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
            expect_output(s, x);
        }
        int touched = 0;
        for (int i = 0; i < N; i++) touched += host[i] != -7.0f;
        if (host_reads) cr_expect_eq(touched, N, "a host op reads the input: its host buffer holds it");
        else cr_expect_eq(touched, 0, "an input only uploaded went through its host buffer (%d values)", touched);
        close_all(s, m, ctx);
    }
}

Test(device_inputs, downloaded_once_where_a_host_op_reads_them) {
    static const char yaml[] = "model: dev\ninputs:\n  - {name: x, shape: [1, 389]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: cpu}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(FAKEDEV ":" CPU, yaml, 0, &ctx, &m);
    float xd[N];
    tu_fill_uniform(xd, N, 7, -1, 1);
    dl_error err = {{0}};
    dl_tensor dev = device_input(s, xd, 12);
    cr_assert_eq(dl_session_run(s, &dev, 1, &err), DL_OK, "%s", err.msg);
    expect_output(s, xd);
    close_all(s, m, ctx);
}

Test(device_inputs, refused_where_no_backend_works_in_that_memory) {
    static const char yaml[] = "model: dev\ninputs:\n  - {name: x, shape: [1, 389]}\nlayers:\n"
                               "  - {name: a, op: relu}\n  - {name: b, op: add, inputs: [a, x]}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s = open_model(CPU, yaml, 0, &ctx, &m);
    float xd[N];
    tu_fill_uniform(xd, N, 8, -1, 1);
    dl_error err = {{0}};
    dl_tensor dev = device_input(s, xd, DL_DEVICE_CUDA);
    cr_assert_eq(dl_session_run(s, &dev, 1, &err), DL_E_INVALID);
    cr_expect(strstr(err.msg, "input 'x' is in device memory (DLPack device type 2, id 0) where no backend"), "%s",
              err.msg);
    cr_expect(!strchr(err.msg, '\n'));
    close_all(s, m, ctx);
}
