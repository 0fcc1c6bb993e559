/* conv.c — conv2d on oneDNN: groups (depthwise included), stride, dilation, asymmetric padding,
 * bias, and the fused activations as an eltwise post-op. The weights are reordered once, at
 * prepare, into the layout oneDNN picks; the activations either stay NCHW or (the default, faster
 * on AVX2: docs/onednn.md) take oneDNN's blocked layout inside the kernel, reordered at its edges. */
#include "onednn.h"

dl_status odn_conv2d(odn_build *b) {
    const dl_op *op = b->op;
    const dl_op_attrs *a = op->attrs;
    if (!odn_activation_ok(a->activation))
        return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: activation %d has no oneDNN post-op", b->what, a->activation);
    const dl_tensor *x = &op->inputs[0], *w = &op->inputs[1], *y = &op->outputs[0];
    const int g = a->groups, has_bias = op->n_inputs > 2;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md, x_any, y_any, w_any;
    ODN_TRY(b, "source", odn_plain_md(&x_md, 4, x->shape));
    ODN_TRY(b, "destination", odn_plain_md(&y_md, 4, y->shape));
    /* grouped weights [G, OC/G, C/G, KH, KW]: the same bytes as dlrun's [OC, C/G, KH, KW] */
    int64_t ws[5] = {g, w->shape[0] / g, w->shape[1], w->shape[2], w->shape[3]};
    if (g > 1) ODN_TRY(b, "weights", odn_plain_md(&w_md, 5, ws));
    else ODN_TRY(b, "weights", odn_plain_md(&w_md, 4, w->shape));
    if (has_bias) ODN_TRY(b, "bias", odn_plain_md(&b_md, 1, op->inputs[2].shape));
    const int blocked = b->s->blocked;
    dnnl_dims_t xd = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
    dnnl_dims_t yd = {y->shape[0], y->shape[1], y->shape[2], y->shape[3]};
    ODN_TRY(b, "source", dnnl_memory_desc_init_by_tag(&x_any, 4, xd, dnnl_f32, dnnl_format_tag_any));
    ODN_TRY(b, "destination", dnnl_memory_desc_init_by_tag(&y_any, 4, yd, dnnl_f32, dnnl_format_tag_any));
    dnnl_dims_t wd;
    for (int i = 0; i < w_md.ndims; i++) wd[i] = w_md.dims[i];
    ODN_TRY(b, "weights", dnnl_memory_desc_init_by_tag(&w_any, w_md.ndims, wd, dnnl_f32, dnnl_format_tag_any));
    dnnl_dims_t strides = {a->stride[0], a->stride[1]};
    dnnl_dims_t dilates = {a->dilation[0] - 1, a->dilation[1] - 1}; /* oneDNN counts the gaps */
    dnnl_dims_t pad_l = {a->pad_begin[0], a->pad_begin[1]}, pad_r = {a->pad_end[0], a->pad_end[1]};
    dnnl_convolution_desc_t desc;
    ODN_TRY(b, "convolution descriptor",
            dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
                                                       blocked ? &x_any : &x_md, &w_any, has_bias ? &b_md : NULL,
                                                       blocked ? &y_any : &y_md, strides, dilates, pad_l, pad_r));
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, a));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "convolution");
    odn_tensor_arg args[4] = {{DNNL_ARG_SRC, ODN_INPUT, 0, x_md},
                              {DNNL_ARG_WEIGHTS, ODN_INPUT, 1, w_md},
                              {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md},
                              {DNNL_ARG_BIAS, ODN_INPUT, 2, b_md}};
    return odn_add_primitive(b, pd, args, has_bias ? 4 : 3);
}
