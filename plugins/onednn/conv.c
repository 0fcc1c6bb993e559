/* conv.c — conv2d and conv3d on oneDNN: groups (depthwise included), stride, dilation, asymmetric
 * padding, bias, a fused residual as a binary add or a sum post-op and the fused activations as an eltwise post-op;
 * direct, or for 3x3 stride-1 convs by Winograd, and a residual sum conv also by oneDNN's further
 * implementations, as the kernel's variant asks (algo.c chooses). The
 * weights are reordered once, at prepare, into the layout oneDNN picks. Row-major activations either stay NCHW or (the
 * default, faster on AVX2: docs/onednn.md) take oneDNN's blocked layout inside the kernel, reordered at its edges;
 * channels-last ones are given to oneDNN as they lie (its NHWC kernels, no reorder). */
#include <stdio.h>
#include <string.h>

#include "onednn.h"

int odn_winograd_may(const dl_op *op) {
    const dl_op_attrs *a = op->attrs;
    return op->kind == DL_OP_CONV2D && a->kernel[0] == 3 && a->kernel[1] == 3 && a->stride[0] == 1 &&
           a->stride[1] == 1 && a->dilation[0] == 1 && a->dilation[1] == 1 && a->groups == 1;
}

/* The convolution by oneDNN's Winograd kernels (F(2x2, 3x3) and F(4x4, 3x3) on AVX-512, with no
 * activation or relu), which read and write only their own blocked layouts: source and destination
 * are left "any" and reordered at the kernel's edges from and to the tensors' own layouts
 * (row-major or channels-last), the weights once into Winograd's transformed layout. A residual is
 * a sum post-op on it, copied into the blocked destination (a binary add has no Winograd form). */
static dl_status winograd(odn_build *b, const dnnl_memory_desc_t *x_any, const dnnl_memory_desc_t *x_md,
                          const dnnl_memory_desc_t *w_any, const dnnl_memory_desc_t *w_md,
                          const dnnl_memory_desc_t *b_md, const dnnl_memory_desc_t *y_any,
                          const dnnl_memory_desc_t *y_md, int res, const dnnl_dims_t strides, const dnnl_dims_t dilates,
                          const dnnl_dims_t pad_l, const dnnl_dims_t pad_r) {
    if (res && b->s->binary_residual)
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: a residual as a binary add has no Winograd form", b->what);
    dnnl_convolution_desc_t desc;
    ODN_TRY(b, "Winograd convolution descriptor",
            dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_winograd, x_any,
                                                       w_any, b_md, y_any, strides, dilates, pad_l, pad_r));
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, b->op->attrs, res ? y_md : NULL, 1));
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "Winograd convolution");
    odn_tensor_arg args[5] = {{DNNL_ARG_SRC, ODN_INPUT, 0, *x_md},
                              {DNNL_ARG_WEIGHTS, ODN_INPUT, 1, *w_md},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, *y_md},
                              {DNNL_ARG_BIAS, ODN_INPUT, 2, b_md ? *b_md : *y_md},
                              {ODN_ARG_RESIDUAL_IN_DST, ODN_INPUT, res, *y_md}};
    if (!b_md) args[3] = args[4];
    return odn_add_primitive(b, pd, args, 3 + (b_md != NULL) + (res > 0));
}

int odn_impls_may(const odn_state *s, const dl_op *op) {
    return op->kind == DL_OP_CONV2D && dl_op_residual(op) && !s->binary_residual;
}

/* The j-th (j >= 1) implementation oneDNN offers for desc besides its first, counting only its jit
 * and brgemm ones by name (its reference and gemm ones are far slower: gemm with a sum, 18 ms where
 * jit takes 2.5; and oneDNN 2.6 lists brgconv more than once, one per ISA variant, by one name).
 * Its SSE4.1 kernels are left out too: on a CPU with AVX they are never the faster (4 lanes where
 * AVX has 8), and their SSE memory operands fault on an address not 16-byte aligned, which dlrun's
 * tensors need not be (a bias read from a safetensors file: ResNet-18 crashed on an AVX2 CPU). */
static dnnl_status_t further_impl(odn_build *b, const dnnl_convolution_desc_t *desc, const_dnnl_primitive_attr_t attr,
                                  int j, dnnl_primitive_desc_t *pd) {
    dnnl_primitive_desc_iterator_t it;
    dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, desc, attr, b->s->engine, NULL);
    if (st != dnnl_success) return st;
    char seen[1 + ODN_MAX_IMPLS][64] = {{0}};
    int n = 0;
    *pd = NULL;
    do {
        dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = "";
        if (!cand) break;
        dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &impl);
        int fresh =
            n == 0 || ((strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0) && !strstr(impl, "sse41"));
        for (int i = 0; i < n && fresh; i++) fresh = strncmp(seen[i], impl, sizeof seen[i] - 1) != 0;
        if (fresh) snprintf(seen[n++], sizeof seen[0], "%s", impl);
        if (fresh && n == j + 1) *pd = cand;
        else dnnl_primitive_desc_destroy(cand);
    } while (!*pd && n <= ODN_MAX_IMPLS && dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return *pd ? dnnl_success : dnnl_unimplemented;
}

/* A convolution over nsp spatial dimensions (2 or 3), with these per-dimension attributes. */
static dl_status conv(odn_build *b, int nsp, const int32_t *stride, const int32_t *dilation, const int32_t *pad_begin,
                      const int32_t *pad_end) {
    const dl_op *op = b->op;
    const dl_op_attrs *a = op->attrs;
    if (!odn_activation_ok(a->activation))
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: activation %d has no oneDNN post-op", b->what, a->activation);
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1], *y = &op->outputs[0];
    const int res = dl_op_residual(op), g = a->groups, has_bias = op->n_inputs - (res > 0) > 2, nd = nsp + 2;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md, x_any, y_any, w_any;
    ODN_TRY(b, "source", odn_tensor_md(&x_md, x));
    ODN_TRY(b, "destination", odn_tensor_md(&y_md, y));
    /* grouped weights [G, OC/G, C/G, k...]: the same bytes as dlrun's [OC, C/G, k...] */
    int64_t ws[6] = {g, w->shape[0] / g};
    for (int i = 1; i < nd; i++) ws[i + 1] = w->shape[i];
    if (g > 1) ODN_TRY(b, "weights", odn_plain_md(&w_md, nd + 1, ws));
    else ODN_TRY(b, "weights", odn_plain_md(&w_md, nd, w->shape));
    if (has_bias) ODN_TRY(b, "bias", odn_plain_md(&b_md, 1, op->inputs[2].shape));
    /* channels-last activations are given to oneDNN as they lie (its jit kernels take NHWC): no
     * reorder at the kernel's edges, which is what a chain of NHWC ops is for */
    const int blocked = b->s->blocked && !x->strides;
    dnnl_dims_t xd, yd, wd, strides, dilates, pad_l, pad_r;
    for (int i = 0; i < nd; i++) xd[i] = x->shape[i], yd[i] = y->shape[i];
    ODN_TRY(b, "source", dnnl_memory_desc_init_by_tag(&x_any, nd, xd, dnnl_f32, dnnl_format_tag_any));
    ODN_TRY(b, "destination", dnnl_memory_desc_init_by_tag(&y_any, nd, yd, dnnl_f32, dnnl_format_tag_any));
    for (int i = 0; i < w_md.ndims; i++) wd[i] = w_md.dims[i];
    ODN_TRY(b, "weights", dnnl_memory_desc_init_by_tag(&w_any, w_md.ndims, wd, dnnl_f32, dnnl_format_tag_any));
    for (int i = 0; i < nsp; i++) {
        strides[i] = stride[i], dilates[i] = dilation[i] - 1; /* oneDNN counts the gaps */
        pad_l[i] = pad_begin[i], pad_r[i] = pad_end[i];
    }
    dnnl_convolution_desc_t desc;
    if (b->variant == ODN_WINOGRAD)
        return winograd(b, &x_any, &x_md, &w_any, &w_md, has_bias ? &b_md : NULL, &y_any, &y_md, res, strides, dilates,
                        pad_l, pad_r);
    ODN_TRY(b, "convolution descriptor",
            dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
                                                       blocked ? &x_any : &x_md, &w_any, has_bias ? &b_md : NULL,
                                                       blocked ? &y_any : &y_md, strides, dilates, pad_l, pad_r));
    /* A residual is read in the destination's layout: oneDNN's jit kernels take a binary post-op's
     * operand only in that layout (a plain one made it pick its slow gemm kernels: 10-20x), so the
     * layouts come from the convolution without it, and the residual is reordered into them. They
     * are then fixed, source and destination: left "any", oneDNN 2.6 on AVX-512 answered the
     * convolution with the residual by its gemm kernel on plain NCHW (ResNet-50's 1x1 convs with
     * a residual took 18-47 ms each, against 0.8-1.7 ms in the layout chosen without it). */
    dnnl_memory_desc_t r_md = y_md;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_success;
    if (res && blocked) {
        ODN_TRY(b, "attributes", odn_attr_create(&attr, a, NULL, 0));
        st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
        dnnl_primitive_attr_destroy(attr);
        if (st != dnnl_success) return odn_fail(b, st, "convolution");
        r_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        x_any = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        dnnl_primitive_desc_destroy(pd);
        ODN_TRY(b, "convolution descriptor",
                dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
                                                           &x_any, &w_any, has_bias ? &b_md : NULL, &r_md, strides,
                                                           dilates, pad_l, pad_r));
    }
    ODN_TRY(b, "attributes", odn_attr_create(&attr, a, res ? &r_md : NULL, 0));
    st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "convolution");
    int sum = 0;
    if (res && !b->s->binary_residual) {
        /* A sum post-op (dst += result) on the residual, which the kernel may then overwrite in
         * place (kernel_in_place) and, where the host lets it, finds already in dst: no copy. oneDNN
         * 2.6 on AVX-512 also runs it on brgconv where a binary add gets its older jit kernels.
         * ResNet-50 at batch 8, 2 threads: 153 ms with sums in place, 159-161 with binary adds. */
        dnnl_primitive_desc_t with_sum = NULL;
        if ((st = odn_attr_create(&attr, a, &r_md, 1)) != dnnl_success) {
            dnnl_primitive_desc_destroy(pd);
            return odn_fail(b, st, "attributes");
        }
        st = b->variant > ODN_WINOGRAD ? further_impl(b, &desc, attr, b->variant - 1, &with_sum)
                                       : dnnl_primitive_desc_create(&with_sum, &desc, attr, b->s->engine, NULL);
        dnnl_primitive_attr_destroy(attr);
        if (st == dnnl_success) {
            dnnl_primitive_desc_destroy(pd);
            pd = with_sum, sum = 1;
        }
    }
    if (b->variant > ODN_WINOGRAD && !sum) {
        dnnl_primitive_desc_destroy(pd);
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: no further implementation of a conv with a residual sum",
                       b->what);
    }
    odn_tensor_arg args[5] = {{DNNL_ARG_SRC, ODN_INPUT, 0, x_md},
                              {DNNL_ARG_WEIGHTS, ODN_INPUT, 1, w_md},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md},
                              {DNNL_ARG_BIAS, ODN_INPUT, 2, b_md},
                              {sum ? ODN_ARG_RESIDUAL_IN_DST : ODN_ARG_RESIDUAL, ODN_INPUT, res, y_md}};
    if (!has_bias) args[3] = args[4];
    return odn_add_primitive(b, pd, args, 3 + has_bias + (res > 0));
}

dl_status odn_conv2d(odn_build *b) {
    const dl_op_attrs *a = b->op->attrs;
    return conv(b, 2, a->stride, a->dilation, a->pad_begin, a->pad_end);
}

dl_status odn_conv3d(odn_build *b) {
    const dl_op_attrs *a = b->op->attrs;
    return conv(b, 3, a->stride3, a->dilation3, a->pad_begin3, a->pad_end3);
}
