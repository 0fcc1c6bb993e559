/* pool.c — max, average and global average pooling on oneDNN (pooling_v2, which has dilation),
 * with PyTorch's rules as the cpu plugin has them: ceil_mode becomes extra right padding, which
 * oneDNN never counts in a max or an average that excludes padding; an average that includes
 * padding is refused where a window would reach past the declared padding (oneDNN divides by the
 * whole window, PyTorch only by the part inside the padded input), and every pool where a window
 * holds no input element (PyTorch's value there is not oneDNN's). */
#include "onednn.h"

/* 1 if every output window of this axis has at least one tap inside [0, in). */
static int windows_see_input(int64_t in, int64_t out, int k, int s, int pb, int d) {
    for (int64_t o = 0; o < out; o++) {
        int64_t start = o * s - pb;
        int seen = 0;
        for (int t = 0; t < k && !seen; t++) seen = start + (int64_t)t * d >= 0 && start + (int64_t)t * d < in;
        if (!seen) return 0;
    }
    return 1;
}

dl_status odn_pool(odn_build *b) {
    const dl_op *op = b->op;
    const dl_op_attrs *a = op->attrs;
    const dl_tensor *x = &op->inputs[0], *y = &op->outputs[0];
    int kernel[2], stride[2], pad_l[2], pad_r[2], dil[2];
    dnnl_alg_kind_t alg;
    if (op->kind == DL_OP_GLOBAL_AVGPOOL) {
        alg = dnnl_pooling_avg_exclude_padding;
        for (int i = 0; i < 2; i++)
            kernel[i] = (int)x->shape[2 + i], stride[i] = 1, pad_l[i] = pad_r[i] = 0, dil[i] = 1;
    } else {
        int is_max = op->kind == DL_OP_MAXPOOL2D;
        alg = is_max                 ? dnnl_pooling_max
              : a->count_include_pad ? dnnl_pooling_avg_include_padding
                                     : dnnl_pooling_avg_exclude_padding;
        for (int i = 0; i < 2; i++) {
            int64_t in = x->shape[2 + i], out = y->shape[2 + i];
            kernel[i] = a->kernel[i], stride[i] = a->stride[i], pad_l[i] = a->pad_begin[i];
            dil[i] = is_max ? a->dilation[i] : 1;
            int64_t span = (int64_t)(kernel[i] - 1) * dil[i] + 1;
            /* the right padding that gives exactly `out` windows (ceil_mode's extra windows) */
            int64_t need = (out - 1) * stride[i] + span - in - pad_l[i];
            pad_r[i] = a->ceil_mode && need > a->pad_end[i] ? (int)need : a->pad_end[i];
            if (!windows_see_input(in, out, kernel[i], stride[i], pad_l[i], dil[i]))
                return dl_fail(b->err, DL_E_UNSUPPORTED, "%s: a window entirely in the padding", b->what);
            if (!is_max && a->count_include_pad && need > a->pad_end[i])
                return dl_fail(b->err, DL_E_UNSUPPORTED,
                               "%s: count_include_pad with a ceil_mode window past the padding (oneDNN "
                               "divides by the whole window)",
                               b->what);
        }
    }
    dnnl_memory_desc_t x_md, y_md, x_blk, y_blk;
    ODN_TRY(b, "source", odn_tensor_md(&x_md, x));
    ODN_TRY(b, "destination", odn_tensor_md(&y_md, y));
    /* on NCHW oneDNN 2.6 pools with a plain C loop (simple_nchw, 0.2 GFLOP/s on ResNet-18's max
     * pool); in the 8-channel blocked layout with its JIT kernel, reordered in and out, unless the
     * tensors are channels-last (its JIT kernel takes NHWC as it lies) */
    const int blocked = b->s->blocked && !x->strides;
    dnnl_dims_t xd = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
    dnnl_dims_t yd = {y->shape[0], y->shape[1], y->shape[2], y->shape[3]};
    ODN_TRY(b, "source", dnnl_memory_desc_init_by_tag(&x_blk, 4, xd, dnnl_f32, dnnl_aBcd8b));
    ODN_TRY(b, "destination", dnnl_memory_desc_init_by_tag(&y_blk, 4, yd, dnnl_f32, dnnl_aBcd8b));
    dnnl_dims_t kd = {kernel[0], kernel[1]}, sd = {stride[0], stride[1]};
    dnnl_dims_t dd = {dil[0] - 1, dil[1] - 1}, pl = {pad_l[0], pad_l[1]}, pr = {pad_r[0], pad_r[1]};
    dnnl_pooling_v2_desc_t desc;
    ODN_TRY(b, "pooling descriptor",
            dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, blocked ? &x_blk : &x_md,
                                              blocked ? &y_blk : &y_md, sd, kd, dd, pl, pr));
    dnnl_primitive_attr_t attr;
    ODN_TRY(b, "attributes", odn_attr_create(&attr, NULL, NULL, 0));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, b->s->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return odn_fail(b, st, "pooling");
    odn_tensor_arg args[2] = {{DNNL_ARG_SRC, ODN_INPUT, 0, x_md}, {DNNL_ARG_DST, ODN_OUTPUT, 0, y_md}};
    return odn_add_primitive(b, pd, args, 2);
}
