/* test_torch_parity.c — VGG-16 and ResNet-18 on the CPU backend, given torchvision weights and an
 * input, agree with PyTorch's output (relative L2 error below 1e-4). The reference comes from
 * tools/torch_reference.py run by Debian's python3 with python3-torch (tools/setup installs it). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/dlrun.h"
#include "test_util.h"

static void check_model(const char *torch_name, const char *yaml) {
    char dir[] = "/tmp/dlrun-parity-XXXXXX";
    cr_assert(mkdtemp(dir));
    char *cmd, *out;
    cr_assert(asprintf(&cmd, "/usr/bin/python3 %s/tools/torch_reference.py %s %s --seed 3", DLRUN_SOURCE_DIR,
                       torch_name, dir) > 0);
    int rc = tu_run(cmd, &out);
    cr_assert_eq(rc, 0, "reference generation failed (is python3-torch installed? run tools/setup): %s", out);
    free(cmd);
    free(out);
    cr_assert(asprintf(&cmd,
                       "env -u DLRUN_PLUGIN_PATH %s %s/models/%s --backend cpu --weights %s/%s.safetensors "
                       "--input %s/input.npy --output %s/got.npy",
                       DLRUN_CLI, DLRUN_SOURCE_DIR, yaml, dir, torch_name, dir, dir) > 0);
    rc = tu_run(cmd, &out);
    cr_assert_eq(rc, 0, "dlrun failed: %s", out);
    free(cmd);
    free(out);
    char path[256];
    float *want = NULL, *got = NULL;
    int64_t ws[8], gs[8];
    int wn, gn;
    dl_error err;
    snprintf(path, sizeof path, "%s/expected.npy", dir);
    cr_assert_eq(dl_npy_read(path, &want, ws, &wn, &err), DL_OK, "%s", err.msg);
    snprintf(path, sizeof path, "%s/got.npy", dir);
    cr_assert_eq(dl_npy_read(path, &got, gs, &gn, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(wn, 2);
    cr_assert_eq(gn, 2);
    cr_assert_eq(gs[1], ws[1]);
    double num = 0, den = 0;
    for (int64_t i = 0; i < ws[0] * ws[1]; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    double rel = sqrt(num / den);
    printf("%s: relative L2 error vs PyTorch %.3g\n", torch_name, rel);
    cr_expect(den > 0, "reference output is all zeros");
    cr_expect_lt(rel, 1e-4, "%s: relative L2 error %.3g", torch_name, rel);
    free(want);
    free(got);
    cr_assert(asprintf(&cmd, "rm -rf %s", dir) > 0);
    tu_run(cmd, NULL);
    free(cmd);
}

Test(torch_parity, vgg16, .timeout = 600) { check_model("vgg16", "vgg.yaml"); }
Test(torch_parity, resnet18, .timeout = 600) { check_model("resnet18", "resnet18.yaml"); }
