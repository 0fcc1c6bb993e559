/* test_cpu_conv3d.c — the CPU plugin's conv3d (plugins/cpu/ops/conv3d.c) against a naive loop in
 * double on random inputs with odd sizes: strides, dilations, asymmetric padding, groups, depth
 * taps that fall into padding, bias and fused activations; in f32 and each storage format
 * (OP_TEST), on the packed GEMM and on the per-slice path; and a workspace past any memory
 * refused at prepare. */
#define _GNU_SOURCE
#include "op_harness.h"

typedef struct conv3d_case {
    int n, c, d, h, w, oc;
    int k[3], s[3], pb[3], pe[3], dil[3];
    int groups, bias, act;
} conv3d_case;

static double act_of(int act, double v) {
    switch (act) {
    case DL_ACT_RELU: return v > 0 ? v : 0;
    case DL_ACT_SILU: return v / (1 + exp(-v));
    default: return v;
    }
}

static void check(conv3d_case t) {
    dl_op_attrs a;
    attrs(&a);
    int o[3], in_sz[3] = {t.d, t.h, t.w};
    for (int i = 0; i < 3; i++) {
        a.kernel3[i] = t.k[i], a.stride3[i] = t.s[i], a.pad_begin3[i] = t.pb[i], a.pad_end3[i] = t.pe[i];
        a.dilation3[i] = t.dil[i];
        o[i] = (in_sz[i] + t.pb[i] + t.pe[i] - t.dil[i] * (t.k[i] - 1) - 1) / t.s[i] + 1;
    }
    a.groups = t.groups, a.activation = t.act;
    const int cg = t.c / t.groups, ocg = t.oc / t.groups;
    tt in[3] = {MAKE(-1, 1, t.n, t.c, t.d, t.h, t.w), MAKE(-0.5f, 0.5f, t.oc, cg, t.k[0], t.k[1], t.k[2]),
                MAKE(-1, 1, t.oc)};
    tt y = MAKE(0, 1, t.n, t.oc, o[0], o[1], o[2]);
    run_op(DL_OP_CONV3D, &a, in, t.bias ? 3 : 2, &y);
    double *ref = calloc((size_t)y.n, sizeof *ref);
    int64_t e = 0;
    for (int i = 0; i < t.n; i++)
        for (int oc = 0; oc < t.oc; oc++)
            for (int z = 0; z < o[0]; z++)
                for (int yy = 0; yy < o[1]; yy++)
                    for (int xx = 0; xx < o[2]; xx++, e++) {
                        double s = t.bias ? in[2].data[oc] : 0;
                        const int g = oc / ocg;
                        for (int ci = 0; ci < cg; ci++)
                            for (int td = 0; td < t.k[0]; td++)
                                for (int ty = 0; ty < t.k[1]; ty++)
                                    for (int tx = 0; tx < t.k[2]; tx++) {
                                        int iz = z * t.s[0] - t.pb[0] + td * t.dil[0];
                                        int iy = yy * t.s[1] - t.pb[1] + ty * t.dil[1];
                                        int ix = xx * t.s[2] - t.pb[2] + tx * t.dil[2];
                                        if (iz < 0 || iz >= t.d || iy < 0 || iy >= t.h || ix < 0 || ix >= t.w) continue;
                                        s +=
                                            (double)in[0]
                                                .data[(((int64_t)(i * t.c + g * cg + ci) * t.d + iz) * t.h + iy) * t.w +
                                                      ix] *
                                            in[1]
                                                .data[(((int64_t)(oc * cg + ci) * t.k[0] + td) * t.k[1] + ty) * t.k[2] +
                                                      tx];
                                    }
                        ref[e] = act_of(t.act, s);
                    }
    char what[128];
    snprintf(what, sizeof what, "conv3d c%d oc%d k%dx%dx%d s%d,%d,%d g%d act%d", t.c, t.oc, t.k[0], t.k[1], t.k[2],
             t.s[0], t.s[1], t.s[2], t.groups, t.act);
    expect_close(&y, ref, 1e-10, what);
    free(ref), free(y.data);
    for (int i = 0; i < 3; i++) free(in[i].data);
}

OP_TEST(conv3d_cases) {
    /* 3x3x3, padding 1 all round, bias and relu */
    check((conv3d_case){1, 3, 5, 9, 7, 5, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, 1, DL_ACT_RELU});
    /* a video stem: 3x7x7, stride [1, 2, 2], batch 2 */
    check((conv3d_case){2, 3, 6, 13, 11, 4, {3, 7, 7}, {1, 2, 2}, {1, 3, 3}, {1, 3, 3}, {1, 1, 1}, 1, 1, DL_ACT_NONE});
    /* spatial only (kd 1) and temporal only (3x1x1, stride 2 in depth), no bias */
    check((conv3d_case){1, 6, 4, 7, 9, 7, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, 0, DL_ACT_SILU});
    check((conv3d_case){1, 5, 9, 5, 6, 3, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 0, 0}, {1, 1, 1}, 1, 1, DL_ACT_NONE});
    /* groups, dilation, asymmetric padding; a depth tap wholly in padding for the first slices */
    check((conv3d_case){1, 6, 7, 8, 7, 9, {2, 3, 2}, {1, 1, 2}, {3, 0, 2}, {0, 1, 1}, {2, 1, 2}, 3, 1, DL_ACT_NONE});
    /* depthwise, stride 2 everywhere */
    check((conv3d_case){2, 4, 5, 6, 5, 4, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 4, 1, DL_ACT_RELU});
    /* wide enough that the GEMM's columns split across threads (OH * OW = 1023) */
    check((conv3d_case){1, 8, 3, 33, 31, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1, 1, DL_ACT_NONE});
}

/* A conv3d whose column buffer would pass 2^50 bytes is refused at prepare, not given a
 * wrapped-around workspace. */
Test(cpu_ops, conv3d_refuses_a_workspace_past_any_memory) {
    dl_op_attrs a;
    attrs(&a);
    a.kernel3[0] = a.kernel3[1] = a.kernel3[2] = 1 << 10;
    int64_t xs[5] = {1, 1 << 10, 1 << 10, 1 << 20, 1 << 20}, ws[5] = {1, 1 << 10, 1 << 10, 1 << 10, 1 << 10},
            ys[5] = {1, 1, 1, (1 << 20) - (1 << 10) + 1, (1 << 20) - (1 << 10) + 1};
    expect_workspace_refused(DL_OP_CONV3D, &a, 5, xs, ws, ys);
}

/* The same cases on the path for a weight known only at run (the per-slice OpenBLAS product),
 * which DLRUN_CPU_NO_PACKED selects for a constant one too. */
Test(cpu_ops, conv3d_cases_unpacked) {
    setenv("DLRUN_CPU_NO_PACKED", "1", 1); /* each Criterion test runs in a process of its own */
    mode = f32_mode;
    conv3d_cases();
}
