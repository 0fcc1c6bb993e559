/* elementwise.c — rows of the ops whose output element i comes from input element i: relu,
 * leaky_relu, sigmoid, clip, dropout (identity at inference), add (numpy broadcasting) and
 * batchnorm (inference: a per-channel affine map). Also the helpers other rows share. */
#include "op_rows.h"

int dl_infer_same(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    (void)cx, (void)why;
    dl_shape_of(&op->inputs[0], y);
    return 1;
}

int dl_check_channel_groups(const dl_op *op, const dl_infer_ctx *cx, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char s[200];
    if (x->ndim < 2)
        DL_NO(why, "needs an input with channels in dimension 1, got %s", dl_in_str(op, cx, 0, s, sizeof s));
    const int g = op->attrs->groups;
    if (g < 1 || x->shape[1] % g)
        DL_NO(why, "%d groups do not divide the %lld channels of input %s", g, (long long)x->shape[1],
              dl_in_str(op, cx, 0, s, sizeof s));
    return 1;
}

int dl_is_vec(const dl_tensor *t, int64_t n) { return t->ndim == 1 && t->shape[0] == n; }

double dl_flops_numel(const dl_op *op) { return (double)dl_tensor_numel(&op->outputs[0]); }
double dl_flops_none(const dl_op *op) { return (void)op, 0.0; }

/* ---- activations ---- */

const dl_op_def dl_op_row_relu = {
    .name = "relu",
    .abi_minor = 0,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"relu", "[[2, 3, 5, 7]]", "", 1}, {"relu 1-D odd", "[[1, 1001]]", "", 1}, {0}},
    .infer = dl_infer_same,
    .flops = dl_flops_numel,
};

const dl_op_def dl_op_row_leaky_relu = {
    .name = "leaky_relu",
    .abi_minor = 1,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){{"alpha", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.alpha), -INFINITY, INFINITY, 0.01, 0}, {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"leaky_relu", "[[2, 3, 5, 7]]", "alpha: 0.2", 1}, {0}},
    .infer = dl_infer_same,
    .flops = dl_flops_numel,
};

static double sigmoid_flops(const dl_op *op) { return 4.0 * (double)dl_tensor_numel(&op->outputs[0]); }

const dl_op_def dl_op_row_sigmoid = {
    .name = "sigmoid",
    .abi_minor = 1,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"sigmoid wide range", "[[3, 101]]", "", 30}, {0}},
    .infer = dl_infer_same,
    .flops = sigmoid_flops,
};

static int clip_validate(const dl_op_params *p, const char **key, char *msg, size_t len) {
    if (p->attrs.clip_min <= p->attrs.clip_max) return 1;
    *key = "max";
    snprintf(msg, len, "clip min %g is above max %g", (double)p->attrs.clip_min, (double)p->attrs.clip_max);
    return 0;
}

static int clip_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    if (!(op->attrs->clip_min <= op->attrs->clip_max)) DL_NO(why, "clip min is above max");
    return dl_infer_same(op, cx, y, why);
}

const dl_op_def dl_op_row_clip = {
    .name = "clip",
    .abi_minor = 1,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){{"min", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.clip_min), -INFINITY, INFINITY, -INFINITY, 0},
                              {"max", DL_ATTR_FLOAT, 0, DL_ATTR_AT(attrs.clip_max), -INFINITY, INFINITY, INFINITY, 0},
                              {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"clip", "[[2, 3, 5, 7]]", "min: -0.5, max: 0.25", 1},
                                  {"clip min only", "[[1, 77]]", "min: 0", 1},
                                  {0}},
    .validate = clip_validate,
    .infer = clip_infer,
    .flops = dl_flops_numel,
};

const dl_op_def dl_op_row_dropout = {
    .name = "dropout",
    .abi_minor = 0,
    .flags = DL_OPF_ELEMENTWISE,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs =
        (const dl_attr_def[]){{"rate", DL_ATTR_FLOAT, DL_ATTR_IGNORED | DL_ATTR_OPEN_HI, 0, 0, 1, 0, "dropout rate"},
                              {0}},
    .nmse = DL_NMSE_EXACT,
    .cases = (const dl_op_case[]){{"dropout", "[[2, 3, 5, 7]]", "rate: 0.5", 1}, {0}},
    .infer = dl_infer_same,
    .flops = dl_flops_none,
};

/* ---- add ---- */

int dl_infer_broadcast(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *a = &op->inputs[0], *b = &op->inputs[1];
    char as[160], bs[160];
    if (!dl_broadcast(a->shape, a->ndim, b->shape, b->ndim, y))
        DL_NO(why, "inputs %s and %s do not broadcast to one shape", dl_in_str(op, cx, 0, as, sizeof as),
              dl_in_str(op, cx, 1, bs, sizeof bs));
    return 1;
}

/* ABI 1.2 gave add numpy broadcasting: a 1.1 plugin assumes equal shapes. */
static uint32_t add_minor(const dl_op *op) {
    const dl_tensor *a = &op->inputs[0], *b = &op->inputs[1];
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    return same ? 0 : 2;
}

const dl_op_def dl_op_row_add = {
    .name = "add",
    .abi_minor = 0,
    .flags = DL_OPF_ELEMENTWISE | DL_OPF_FUSES_RELU,
    .min_inputs = 2,
    .max_inputs = 2,
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"add", "[[3, 7, 5, 3], [3, 7, 5, 3]]", "", 1},
                                  {"add broadcast channel", "[[3, 7, 5, 3], [7, 1, 1]]", "", 1},
                                  {"add broadcast both", "[[2, 1, 5], [3, 1]]", "", 1},
                                  {0}},
    .infer = dl_infer_broadcast,
    .flops = dl_flops_numel,
    .abi_minor_of = add_minor,
};

/* ---- batchnorm ---- */

static void batchnorm_weights(const dl_op_params *p, const dl_shape *x, dl_shape *w) {
    (void)p;
    for (int i = 0; i < 4; i++) w[i] = (dl_shape){1, {x->d[1]}};
}

static int batchnorm_infer(const dl_op *op, const dl_infer_ctx *cx, dl_shape *y, dl_error *why) {
    const dl_tensor *x = &op->inputs[0];
    char s[128];
    if (x->ndim < 2) DL_NO(why, "needs an input with channels in dimension 1, got %s", dl_shape_txt(x, s, sizeof s));
    for (int i = 1; i < 5; i++)
        if (!dl_is_vec(&op->inputs[i], x->shape[1]))
            DL_NO(why, "parameters must be [%lld], got %s", (long long)x->shape[1],
                  dl_shape_txt(&op->inputs[i], s, sizeof s));
    if (!(op->attrs->epsilon > 0)) DL_NO(why, "eps must be positive");
    return dl_infer_same(op, cx, y, why);
}

static double batchnorm_flops(const dl_op *op) { return 2.0 * (double)dl_tensor_numel(&op->outputs[0]); }

const dl_op_def dl_op_row_batchnorm = {
    .name = "batchnorm",
    .abi_minor = 0,
    .flags = DL_OPF_ELEMENTWISE | DL_OPF_FUSES_RELU,
    .min_inputs = 1,
    .max_inputs = 1,
    .weights = (const dl_weight_def[]){{"weight", DL_INIT_ONES, 0},
                                       {"bias", DL_INIT_ZEROS, 0},
                                       {"running_mean", DL_INIT_ZEROS, 0},
                                       {"running_var", DL_INIT_ONES, 0},
                                       {0}},
    .attrs =
        (const dl_attr_def[]){{"eps", DL_ATTR_FLOAT, DL_ATTR_OPEN_LO, DL_ATTR_AT(attrs.epsilon), 0, INFINITY, 1e-5, 0},
                              {0}},
    .nmse = DL_NMSE_ROUNDING,
    .cases = (const dl_op_case[]){{"batchnorm", "[[2, 5, 3, 7]]", "eps: 0.001", 2},
                                  {"batchnorm 2-D", "[[4, 9]]", "", 2},
                                  {0}},
    .weight_shapes = batchnorm_weights,
    .infer = batchnorm_infer,
    .flops = batchnorm_flops,
};
