/* cuda_formats.c — see cuda_formats.h. */
#include "cuda_formats.h"

#include "tensor_convert.h"

int cu_is_binary(int kind) { return kind == DL_OP_ADD || (kind >= DL_OP_MUL && kind <= DL_OP_MAX); }

/* the functions of one element: their kernel reads element i and writes element i */
static int is_unary(int kind) {
    return kind == DL_OP_RELU || kind == DL_OP_LEAKY_RELU || kind == DL_OP_SIGMOID || kind == DL_OP_CLIP ||
           (kind >= DL_OP_SQRT && kind <= DL_OP_SOFTPLUS);
}

int cu_takes_channels_last(int kind, int nhwc) {
    if (nhwc &&
        (kind == DL_OP_CONV2D || kind == DL_OP_MAXPOOL2D || kind == DL_OP_AVGPOOL2D || kind == DL_OP_GLOBAL_AVGPOOL))
        return 1;
    return is_unary(kind) || cu_is_binary(kind) || kind == DL_OP_DROPOUT || kind == DL_OP_BATCHNORM;
}

/* the activation inputs of a kind (the rest are weights) */
static int activations(const dl_op *op) {
    return cu_is_binary(op->kind) ? 2 : op->kind == DL_OP_CONCAT || op->kind == DL_OP_MATMUL ? op->n_inputs : 1;
}

int cu_op_check(const dl_op *op, dl_gpu_type *type, dl_layout *layout, dl_error *why) {
    return cu_op_check_sw(op, 0, type, layout, why);
}

int cu_op_check_sw(const dl_op *op, unsigned flags, dl_gpu_type *type, dl_layout *layout, dl_error *why) {
    int gemm = op->kind == DL_OP_CONV2D || op->kind == DL_OP_LINEAR, gemm16 = (flags & CU_CHECK_GEMM16) != 0;
    if (gemm && !gemm16) {
        for (int i = 0; i <= op->n_inputs; i++) {
            const dl_tensor *t = i < op->n_inputs ? &op->inputs[i] : &op->outputs[0];
            if (!dl_dtype_is_f32(t->dtype))
                return dl_fail(why, DL_E_UNSUPPORTED,
                               "%s: the cuda plugin's GEMM takes f32 only, not %s (f16/bf16: the cudnn plugin)",
                               dl_op_kind_name(op->kind), dl_dtype_name(t->dtype)),
                       0;
        }
    }
    unsigned formats = gemm && !gemm16 ? 0 : DL_ACCEPT_F16 | DL_ACCEPT_BF16;
    if (gemm) formats |= DL_ACCEPT_RESIDUAL;
    if (cu_takes_channels_last(op->kind, (flags & CU_CHECK_NHWC) != 0)) formats |= DL_ACCEPT_CHANNELS_LAST;
    if (!dl_op_check_as(op, formats, why)) return 0;
    /* gather's indices (its last input) are int64 and row-major whatever the storage
     * (dl_op_check_as checked them): the storage type and layout are those of the other tensors */
    dl_op fp = *op;
    if (op->kind == DL_OP_GATHER) fp.n_inputs = 1;
    if (!dl_gpu_one_type(&fp, type, why)) return 0;
    dl_layout l;
    if (!dl_gpu_one_layout(&fp, activations(&fp), &l, why)) return 0;
    /* a broadcast walks the logical (row-major) order: in channels-last memory it would pair the
     * wrong elements */
    if (cu_is_binary(op->kind) && l == DL_LAYOUT_CHANNELS_LAST &&
        (!dl_gpu_same_shape(&op->inputs[0], &op->outputs[0]) || !dl_gpu_same_shape(&op->inputs[1], &op->outputs[0])))
        return dl_fail(why, DL_E_UNSUPPORTED, "%s: broadcasting takes row-major tensors only in the cuda plugin",
                       dl_op_kind_name(op->kind)),
               0;
    if (layout) *layout = l;
    return 1;
}
