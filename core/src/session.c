/* session.c — a model bound to weights and backends: the stages of session.h in order, then
 * memory per domain, copies between domains, prepared kernels, and the run loop (which allocates
 * nothing). The model is only read, so sessions of one model may be built and run at once. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "oprun.h"
#include "plugin_store.h"
#include "rng.h"
#include "session.h"
#include "timing_cache.h"

size_t dl_session_value_bytes(const dl_session *s, int v) {
    return (size_t)dl_shape_numel(&s->shape[v]) * dl_dtype_size(s->g->values[v].dtype);
}

const float *dl_session_weight(const dl_session *s, int v) {
    return s->fuse.weight && s->fuse.weight[v] ? s->fuse.weight[v] : dl_weights_data(s->weights, v);
}

const void *dl_session_weight_stored(const dl_session *s, int v, dl_dtype *dtype) {
    if (s->fuse.weight && s->fuse.weight[v]) return *dtype = DL_F32, s->fuse.weight[v];
    return dl_weights_raw(s->weights, v, dtype);
}

int dl_session_node_inputs(const dl_session *s, int node, int *ins) {
    const dl_node *n = &s->g->nodes[node];
    memcpy(ins, n->inputs, (size_t)n->n_inputs * sizeof *ins);
    int count = n->n_inputs;
    if (s->fuse.extra_input && s->fuse.extra_input[node] >= 0) ins[count++] = s->fuse.extra_input[node];
    if (s->fuse.residual && s->fuse.residual[node] >= 0) ins[count++] = s->fuse.residual[node];
    return count;
}

void dl_session_op_view(const dl_session *s, int node, const dl_op_attrs *attrs, dl_op *op, dl_tensor *in,
                        dl_tensor *out) {
    int ins[DL_MAX_OP_INPUTS], count = dl_session_node_inputs(s, node, ins);
    dl_node_op(s->g, node, ins, count, s->shape, attrs, s->opt.precision, op, in, out);
}

void dl_session_options_init(dl_session_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->seed = 1;
}

int dl_session_root(const dl_session *s, int v) {
    while (s->alias[v] != v) v = s->alias[v];
    return v;
}
#define root dl_session_root

static int domain_of(dl_session *s, const dl_backend *be) {
    if (be->device.device_type == DL_DEVICE_CPU) return 0;
    for (int d = 1; d < s->n_doms; d++)
        if (s->doms[d].device.device_type == be->device.device_type &&
            s->doms[d].device.device_id == be->device.device_id)
            return d;
    if (s->n_doms == DL_MAX_DOMAINS) return -1;
    s->doms[s->n_doms] = (dl_domain){be->device, be};
    return s->n_doms++;
}

dl_status dl_session_alloc(dl_session *s, int d, size_t bytes, void **p, dl_error *err) {
    if (bytes == 0) bytes = 64;
    if (d == 0) {
        *p = NULL;
        if (posix_memalign(p, 64, bytes) != 0) return dl_fail(err, DL_E_NOMEM, "out of host memory (%zu bytes)", bytes);
        return DL_OK;
    }
    const dl_backend *be = s->doms[d].be;
    dl_error e = {{0}};
    if (be->alloc(be->self, bytes, p, &e) != DL_OK)
        return dl_fail(err, DL_E_NOMEM, "%s: cannot allocate %zu bytes: %s", be->name, bytes, e.msg);
    return DL_OK;
}

static void dom_free(dl_session *s, int d, void *p) {
    if (!p) return;
    if (d == 0) free(p);
    else s->doms[d].be->free(s->doms[d].be->self, p);
}

static dl_step *add_step(dl_session *s, dl_step_kind kind, dl_error *err) {
    if (s->n_steps == s->cap_steps) {
        int cap = s->cap_steps ? 2 * s->cap_steps : 64;
        dl_step *p = realloc(s->steps, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        s->steps = p;
        s->cap_steps = cap;
    }
    dl_step *st = &s->steps[s->n_steps++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->node = -1;
    st->value = -1;
    return st;
}

int dl_session_home(const dl_session *s, int v) {
    int p = s->g->values[v].producer;
    if (p < 0) return 0;
    return s->node_place[s->fuse.into[p] >= 0 ? s->fuse.into[p] : p];
}

/* Make value v (a root) available in place p (or its row-major twin for weights and tensors that
 * are not 4-D); returns that place, or -1 with err set. Weights are converted and copied now,
 * once, outside the plan; activations get a COPY step here in the run order and a planned slot. */
static int ensure_in(dl_session *s, int v, int p, dl_error *err) {
    p = dl_place_of_value(s, v, p);
    if (BUF(s, v, p) || dl_slot_find(s, v, p) >= 0) return p;
    if (s->g->values[v].kind == DL_VALUE_WEIGHT) return dl_place_weight(s, v, p, err) == DL_OK ? p : -1;
    int from = dl_session_home(s, v), k = s->n_steps;
    size_t n = dl_session_place_bytes(s, v, p);
    dl_slot_use(s, dl_slot_find(s, v, from), k);
    if (dl_slot_add(s, v, p, n, k) < 0) return dl_fail(err, DL_E_NOMEM, "out of memory"), -1;
    dl_step *cp = add_step(s, DL_STEP_COPY, err);
    if (!cp) return dl_fail(err, DL_E_NOMEM, "out of memory"), -1;
    cp->value = v;
    cp->src_place = from;
    cp->src_dom = s->places[from].dom;
    cp->place = p;
    cp->dom = s->places[p].dom;
    cp->bytes = n;
    return dl_step_plan_transfer(s, cp, err) == DL_OK ? p : -1;
}

int dl_session_input_place(const dl_session *s, int i, int j) {
    return j == 0 && s->view_in[i] >= 0 ? s->view_in[i] : s->node_place[i];
}

static dl_status build_op_step(dl_session *s, int i, dl_error *err) {
    const dl_node *n = &s->g->nodes[i];
    int p = s->node_place[i], d = s->node_dom[i];
    int ins[DL_MAX_OP_INPUTS], n_in = dl_session_node_inputs(s, i, ins), at[DL_MAX_OP_INPUTS];
    for (int j = 0; j < n_in; j++)
        if ((at[j] = ensure_in(s, root(s, ins[j]), dl_session_input_place(s, i, j), err)) < 0) return DL_E_NOMEM;
    int k = s->n_steps;
    for (int j = 0; j < n_in; j++) dl_slot_use(s, dl_slot_find(s, root(s, ins[j]), at[j]), k);
    dl_step *st = add_step(s, DL_STEP_OP, err);
    if (!st) return dl_fail(err, DL_E_NOMEM, "out of memory");
    st->node = i;
    st->ws_slot = -1;
    st->be = s->place.be[i];
    st->place = p;
    st->dom = d;
    st->attrs = s->fuse.attrs[i];
    st->in = calloc((size_t)n_in + 1, sizeof *st->in);
    st->constant = calloc((size_t)n_in + 1, 1);
    st->strides = calloc(4 * ((size_t)n_in + 2), sizeof *st->strides);
    if (!st->in || !st->constant || !st->strides) return dl_fail(err, DL_E_NOMEM, "out of memory");
    /* st->attrs is stored in the step; op.attrs must point at the step's own copy, and the
     * steps array may still grow, so the pointer is fixed up after building (fix_pointers). */
    dl_session_op_view(s, i, &st->attrs, &st->op, st->in, &st->out);
    unsigned char is_weight[DL_MAX_OP_INPUTS];
    dl_session_weight_flags(s, i, is_weight);
    dl_op_apply_format(&st->op, st->in, &st->out, is_weight, s->places[p].fmt, st->strides);
    if (s->view_in[i] >= 0) dl_tensor_apply_format(&st->in[0], s->places[s->view_in[i]].fmt, st->strides);
    st->flops = dl_op_def_of(n->kind)->flops(&st->op);
    for (int j = 0; j < n_in; j++) {
        int r = root(s, ins[j]);
        st->in[j].device = st->be->device;
        /* Weights carry data at prepare time; activations only at run time. */
        st->constant[j] = s->g->values[r].kind == DL_VALUE_WEIGHT;
        st->in[j].data = st->constant[j] ? BUF(s, r, at[j]) : NULL;
    }
    st->out.device = st->be->device;
    int o = root(s, n->output), po = dl_place_of_value(s, o, p);
    if (dl_slot_find(s, o, po) < 0 && dl_slot_add(s, o, po, dl_session_place_bytes(s, o, po), k) < 0)
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    return DL_OK;
}

/* An op step or an elided concat: both carry the op's tensors (an elided one for dl_session_step_op). */
static int has_op(const dl_step *st) { return st->kind == DL_STEP_OP || st->kind == DL_STEP_ELIDED; }

static void fix_pointers(dl_session *s) {
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *st = &s->steps[k];
        if (!has_op(st)) continue;
        st->op.attrs = &st->attrs;
        st->op.inputs = st->in;
        st->op.outputs = &st->out;
    }
}

/* Prepares the kernels of steps [from, to) that have none (a prefix's session: those of its nodes up
 * to prepare_to_node; a session whose first layers a cached choice runs otherwise: from
 * prepare_from_node); each workspace becomes a slot that lives for its step only. */
static dl_status prepare_steps(dl_session *s, int from, int to, dl_error *err) {
    for (int k = from; k < to; k++) {
        dl_step *st = &s->steps[k];
        if (st->kind != DL_STEP_OP || st->kernel) continue;
        /* the ABI's prepare sees the weights' data only: after a plan (dl_session_prepare_rest) the
         * activations point into the arena, and a plugin would take them for weights */
        void *data[DL_MAX_OP_INPUTS + 1], *out = st->out.data;
        const int n_in = st->op.n_inputs < DL_MAX_OP_INPUTS ? st->op.n_inputs : DL_MAX_OP_INPUTS;
        for (int j = 0; j < n_in; j++) {
            data[j] = st->in[j].data;
            if (!st->constant[j]) st->in[j].data = NULL;
        }
        st->out.data = NULL;
        dl_error e = {{0}};
        dl_status rc = st->be->prepare(st->be->self, &st->op, &st->kernel, &st->workspace, &e);
        for (int j = 0; j < n_in; j++) st->in[j].data = data[j];
        st->out.data = out;
        if (rc != DL_OK)
            return dl_fail(err, DL_E_RUNTIME, "%s: cannot prepare %s '%s': %s", st->be->name,
                           dl_op_kind_name(s->g->nodes[st->node].kind), st->op.name, e.msg);
        if (st->workspace && (st->ws_slot = dl_slot_add(s, -1, st->place, st->workspace, k)) < 0)
            return dl_fail(err, DL_E_NOMEM, "out of memory");
    }
    return DL_OK;
}

/* The events hand-overs between a device's backends record (handover.c), made now so that runs
 * allocate none: per device domain, its owner (which copies) and every backend with ops there. */
static void prepare_handovers(dl_session *s) {
    for (int d = 1; d < s->n_doms; d++) {
        const dl_backend *bes[DL_HANDOVER_BACKENDS] = {s->doms[d].be};
        int n = 1;
        for (int k = 0; k < s->n_steps && n < DL_HANDOVER_BACKENDS; k++) {
            const dl_step *st = &s->steps[k];
            int seen = st->kind != DL_STEP_OP || st->dom != d;
            for (int i = 0; i < n && !seen; i++) seen = bes[i] == st->be;
            if (!seen) bes[n++] = st->be;
        }
        dl_handover_prepare(&s->handover, bes, n);
    }
}

static dl_status prepare_kernels(dl_session *s, dl_error *err) {
    const int nn = s->g->n_nodes, to = s->prepare_to_node, from = s->prepare_from_node;
    return prepare_steps(s, from > 0 && from <= nn ? s->node_step[from] : 0,
                         to >= 0 && to < nn ? s->node_step[to + 1] : s->n_steps, err);
}

dl_status dl_session_replan(dl_session *s, dl_error *err) {
    void *old[DL_MAX_DOMAINS];
    for (int d = 0; d < s->n_doms; d++) old[d] = s->mem[d].arena, s->mem[d].arena = NULL;
    dl_status st = dl_session_plan_memory(s, err);
    for (int d = 0; d < s->n_doms; d++) dom_free(s, d, st == DL_OK ? old[d] : s->mem[d].arena);
    if (st != DL_OK) {
        for (int d = 0; d < s->n_doms; d++) s->mem[d].arena = old[d];
        return st;
    }
    dl_session_point_steps(s);
    return DL_OK;
}

dl_status dl_session_prepare_rest(dl_session *s, dl_error *err) {
    if (s->prepare_from_node <= 0) return DL_OK;
    const int nn = s->g->n_nodes, from = s->prepare_from_node;
    dl_status st = prepare_steps(s, 0, from <= nn ? s->node_step[from] : s->n_steps, err);
    if (st == DL_OK) st = dl_session_replan(s, err); /* with the new workspaces */
    if (st == DL_OK) s->prepare_from_node = 0;       /* else a later call tries again, and fails as well */
    return st;
}

void dl_session_point_steps(dl_session *s) {
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *st = &s->steps[k];
        if (!has_op(st)) continue;
        const dl_node *n = &s->g->nodes[st->node];
        int ins[DL_MAX_OP_INPUTS], n_in = dl_session_node_inputs(s, st->node, ins);
        for (int j = 0; j < n_in; j++) {
            int r = root(s, ins[j]);
            st->in[j].data = BUF(s, r, dl_place_of_value(s, r, dl_session_input_place(s, st->node, j)));
        }
        int o = root(s, n->output);
        st->out.data = BUF(s, o, dl_place_of_value(s, o, st->place));
    }
    for (int i = 0; i < s->g->n_outputs; i++) s->outputs[i].data = BUF(s, root(s, s->g->outputs[i]), 0);
}

/* Which domain each node runs in; fused nodes alias their output to their input. */
static dl_status assign_domains(dl_session *s, dl_error *err) {
    const dl_graph *g = s->g;
    /* a device domain's copier, as placement priced it, owns the domain (its memory and copies),
     * where an op runs there */
    for (int k = 0; k < s->place.n_copiers; k++)
        for (int i = 0; i < g->n_nodes; i++)
            if (s->fuse.into[i] < 0 && dl_same_domain(s->place.be[i], s->place.copier[k])) {
                if (domain_of(s, s->place.copier[k]) < 0)
                    return dl_fail(err, DL_E_UNSUPPORTED, "too many memory domains");
                break;
            }
    for (int i = 0; i < g->n_nodes; i++) {
        if (s->fuse.into[i] >= 0) {
            s->alias[g->nodes[i].output] = g->nodes[i].inputs[s->fuse.via[i]];
            continue;
        }
        int d = domain_of(s, s->place.be[i]);
        if (d < 0) return dl_fail(err, DL_E_UNSUPPORTED, "too many memory domains");
        s->node_dom[i] = d;
    }
    return DL_OK;
}

static dl_tensor host_view(const dl_session *s, int v) {
    return (dl_tensor){NULL, {DL_DEVICE_CPU, 0}, s->shape[v].ndim, s->g->values[v].dtype, s->shape[v].d, NULL, 0};
}

/* The steps in run order: ops (and fused markers), with the copies they need before them. */
static dl_status build_steps(dl_session *s, dl_error *err) {
    const dl_graph *g = s->g;
    for (int v = 0; v < g->n_values; v++) /* inputs get a host buffer, written before step 0 */
        if (g->values[v].kind == DL_VALUE_INPUT && dl_slot_add(s, v, 0, dl_session_value_bytes(s, v), -1) < 0)
            return dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        s->node_step[i] = s->n_steps;
        if (s->fuse.into[i] < 0) {
            dl_status st = build_op_step(s, i, err);
            if (st != DL_OK) return st;
            continue;
        }
        dl_step *f = add_step(s, DL_STEP_FUSED, err);
        if (!f) return dl_fail(err, DL_E_NOMEM, "out of memory");
        f->node = i;
        f->be = s->place.be[i];
        if (asprintf(&f->label, "%s (fused)", g->nodes[s->fuse.into[i]].name) < 0) f->label = NULL;
    }
    s->node_step[g->n_nodes] = s->n_steps;
    s->outputs = calloc((size_t)g->n_outputs, sizeof *s->outputs);
    s->inputs = calloc((size_t)g->n_inputs, sizeof *s->inputs);
    s->in_dev = calloc((size_t)g->n_inputs, sizeof *s->in_dev);
    s->in_src = calloc((size_t)g->n_inputs, sizeof *s->in_src);
    s->in_dom = calloc((size_t)g->n_inputs, sizeof *s->in_dom);
    s->in_host_mask = calloc((size_t)g->n_inputs, sizeof *s->in_host_mask);
    if (!s->outputs || !s->inputs || !s->in_dev || !s->in_src || !s->in_dom || !s->in_host_mask)
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int i = 0; i < g->n_outputs; i++) {
        if (ensure_in(s, root(s, g->outputs[i]), 0, err) < 0) return DL_E_NOMEM;
        s->outputs[i] = host_view(s, g->outputs[i]);
    }
    for (int i = 0; i < g->n_inputs; i++) s->inputs[i] = host_view(s, g->inputs[i]);
    /* keep_activations: every slot lives to the end, so nothing is reused or overwritten. */
    if (s->opt.keep_activations)
        for (int i = 0; i < s->n_slots; i++) dl_slot_use(s, i, s->n_steps);
    /* Outputs must outlive the run: their host slots live past the last step. */
    for (int i = 0; i < g->n_outputs; i++) dl_slot_use(s, dl_slot_find(s, root(s, g->outputs[i]), 0), s->n_steps);
    return DL_OK;
}

/* The run's phases: copies before the first op that runs are inputs, copies after the last outputs. */
static void find_phases(dl_session *s) {
    s->first_op = s->n_steps, s->last_op = -1;
    for (int k = 0; k < s->n_steps; k++)
        if (s->steps[k].kind == DL_STEP_OP) {
            if (s->last_op < 0) s->first_op = k;
            s->last_op = k;
        }
}

static dl_status build(dl_session *s, dl_error *err) {
    const dl_graph *g = s->g;
    int nv = g->n_values, nn = g->n_nodes;
    s->buf = calloc((size_t)nv * DL_MAX_PLACES, sizeof *s->buf);
    s->owned = calloc((size_t)nv * DL_MAX_PLACES, 1);
    s->alias = malloc((size_t)nv * sizeof *s->alias);
    s->node_dom = calloc((size_t)nn + 1, sizeof *s->node_dom);
    s->node_place = calloc((size_t)nn + 1, sizeof *s->node_place);
    s->view_in = malloc(((size_t)nn + 1) * sizeof *s->view_in);
    s->node_step = calloc((size_t)nn + 1, sizeof *s->node_step);
    s->slot_of = calloc((size_t)nv * DL_MAX_PLACES, sizeof *s->slot_of);
    if (!s->slot_of || !s->buf || !s->owned || !s->alias || !s->node_dom || !s->node_place || !s->view_in ||
        !s->node_step)
        return dl_fail(err, DL_E_NOMEM, "out of memory");
    for (int v = 0; v < nv; v++) s->alias[v] = v;
    s->n_doms = 1;
    s->doms[0] = (dl_domain){{DL_DEVICE_CPU, 0}, NULL};
    dl_trace *tr = s->trace; /* each stage a span of the trace, if any */
    int span = dl_trace_begin(tr, "fold batchnorm", "create");
    dl_status st = dl_fold_batchnorm(s, err);
    dl_trace_end(tr, span);
    dl_session_layout_ask(s);
    if (st == DL_OK) {
        span = dl_trace_begin(tr, "placement", "create");
        st = dl_session_place(s, err);
        dl_trace_arg_num(tr, span, "timed", s->place.timed);
        dl_trace_arg_num(tr, span, "cached", s->place.cached);
        dl_trace_end(tr, span);
    }
    if (st != DL_OK) return st;
    span = dl_trace_begin(tr, "fuse, storage, steps", "create");
    dl_fuse_epilogues(s);
    st = assign_domains(s, err);
    if (st == DL_OK) st = dl_choose_storage(s, err);
    if (st == DL_OK) st = build_steps(s, err);
    if (st == DL_OK) {
        dl_elide_views(s);
        dl_elide_concats(s);
        find_phases(s);
        dl_session_plan_inputs(s);
    }
    dl_trace_arg_num(tr, span, "steps", s->n_steps);
    dl_trace_end(tr, span);
    if (st != DL_OK) return st;
    fix_pointers(s);
    /* Preparing allocates on the real shapes (cuDNN's algorithm search, tile timing): a batch too
     * big must be refused before that, by the plan of the activations alone. */
    span = dl_trace_begin(tr, "check memory", "create");
    st = dl_session_check_memory(s, err);
    dl_trace_end(tr, span);
    if (st == DL_OK && s->prepare_to_node < 0) s->prepare_from_node = dl_micro_batch_prepare_from(s);
    if (st == DL_OK) {
        span = dl_trace_begin(tr, "prepare kernels", "create");
        st = prepare_kernels(s, err);
        dl_trace_end(tr, span);
    }
    if (st == DL_OK) {
        span = dl_trace_begin(tr, "plan memory", "create");
        st = dl_session_plan_memory(s, err);
        dl_trace_end(tr, span);
    }
    if (st == DL_OK) dl_session_point_steps(s);
    if (st == DL_OK) st = dl_trace_prepare(tr, s, err);
    if (st == DL_OK) prepare_handovers(s);
    return st;
}

static dl_status check_options(dl_context *ctx, const dl_session_options *o, dl_error *err) {
    if (o->backend && !dl_context_backend(ctx, o->backend)) {
        char names[256] = "";
        for (int i = 0; i < ctx->n_plugins; i++) {
            if (!ctx->plugins[i].be) continue;
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", u ? ", " : "", ctx->plugins[i].be->name);
        }
        return dl_fail(err, DL_E_INVALID, "unknown backend '%s' (loaded: %s)", o->backend, names[0] ? names : "none");
    }
    if (o->precision < DL_PRECISION_F32 || o->precision > DL_PRECISION_BF16)
        return dl_fail(err, DL_E_INVALID, "unknown precision %d", o->precision);
    if (o->batch < 0 || o->batch > DL_MAX_BATCH)
        return dl_fail(err, DL_E_INVALID, "batch must be between 1 and %d, not %lld", DL_MAX_BATCH,
                       (long long)o->batch);
    if (o->layout < DL_LAYOUT_MODE_AUTO || o->layout > DL_LAYOUT_MODE_NHWC)
        return dl_fail(err, DL_E_INVALID, "unknown layout %d (auto 0, nchw 1, nhwc 2)", o->layout);
    return DL_OK;
}

static void auto_by_runs(dl_session **sp, dl_model *m);

dl_status dl_session_create_as(dl_context *ctx, dl_model *m, const dl_session_options *opt, int forced_ask,
                               dl_session **out, dl_error *err) {
    return dl_session_create_prefix(ctx, m, opt, forced_ask, -1, out, err);
}

dl_status dl_session_create_prefix(dl_context *ctx, dl_model *m, const dl_session_options *opt, int forced_ask,
                                   int last_node, dl_session **out, dl_error *err) {
    double t_create = dl_now_ms();
    *out = NULL;
    dl_session *s = calloc(1, sizeof *s);
    if (!s) return dl_fail(err, DL_E_NOMEM, "out of memory");
    s->prepare_to_node = last_node;
    dl_session_options_init(&s->opt);
    /* an older caller's smaller struct: the members it lacks keep their defaults (trace 0) */
    if (opt) memcpy(&s->opt, opt, opt->struct_size < sizeof s->opt ? opt->struct_size : sizeof s->opt);
    s->opt.struct_size = sizeof s->opt;
    s->forced_ask = forced_ask;
    s->ctx = ctx;
    s->g = m->g;
    dl_status st = check_options(ctx, &s->opt, err);
    if (st == DL_OK && s->opt.trace && !(s->trace = dl_trace_new(t_create)))
        st = dl_fail(err, DL_E_NOMEM, "out of memory");
    dl_trace *tr = s->trace;
    int whole = dl_trace_begin(tr, "dl_session_create", "create"), span = dl_trace_begin(tr, "infer shapes", "create");
    dl_trace_arg_str(tr, whole, "model", s->g->name);
    if (st == DL_OK && !(s->shape = calloc((size_t)s->g->n_values + 1, sizeof *s->shape)))
        st = dl_fail(err, DL_E_NOMEM, "out of memory");
    if (st == DL_OK) st = dl_graph_infer(s->g, s->opt.batch, s->shape, err);
    dl_trace_end(tr, span);
    if (st == DL_OK) {
        span = dl_trace_begin(tr, "bind weights", "create");
        const char *wpath = s->opt.weights_path ? s->opt.weights_path : s->g->weights_path;
        dl_trace_arg_str(tr, span, "weights", wpath ? wpath : "seeded");
        st = dl_session_check_weights(s, wpath ? 0 : dl_weights_seeded_bytes(s->g, s->shape), err);
        if (st == DL_OK) st = dl_weights_bind(s->g, s->shape, wpath, s->opt.seed, &s->weights, err);
        dl_trace_end(tr, span);
    }
    if (st == DL_OK) st = build(s, err);
    if (st == DL_OK && s->other_ask) {
        span = dl_trace_begin(tr, "auto: both plans run", "create");
        const dl_session *first = s;
        auto_by_runs(&s, m);
        if (s == first) dl_trace_end(tr, span);
        else tr = NULL; /* the twin won: its own trace, its creation's spans, replaces the one freed with s */
    }
    if (st == DL_OK && s->g->n_inputs) dl_trace_arg_num(tr, whole, "batch", (double)s->shape[s->g->inputs[0]].d[0]);
    dl_trace_end(tr, whole);
    if (st != DL_OK) {
        dl_session_free(s);
        return st;
    }
    *out = s;
    return DL_OK;
}

/* dl_session_create under the options as the caller's struct gave them. */
static dl_status create(dl_context *ctx, dl_model *m, dl_session_options o, dl_session **out, dl_error *err) {
    int nd = 0;
    const int64_t *declared = NULL;
    const int64_t batch = o.batch > 0 ? o.batch : dl_model_input(m, 0, &nd, &declared) && nd > 0 ? declared[0] : 1;
    if (o.micro_batch < 0 || (o.micro_batch > 0 && o.micro_batch < batch && batch % o.micro_batch))
        return dl_fail(err, DL_E_INVALID, "micro-batch %lld must divide the batch, %lld", (long long)o.micro_batch,
                       (long long)batch);
    const int threads = ctx->host.n_threads;
    if (o.parts_at_once < 0 || o.parts_at_once > threads || o.parts_at_once > DL_PARTS_AT_ONCE_MAX)
        return dl_fail(err, DL_E_INVALID, "parts at once (%d) must be 0 (auto), 1, or at most the threads (%d)",
                       (int)o.parts_at_once, threads < DL_PARTS_AT_ONCE_MAX ? threads : DL_PARTS_AT_ONCE_MAX);
    if (o.parts_at_once > 1 && o.micro_batch >= batch)
        return dl_fail(err, DL_E_INVALID, "parts at once (%d) need the batch, %lld, in parts (micro-batch under it)",
                       (int)o.parts_at_once, (long long)batch);
    if (o.micro_batch > 0 && o.micro_batch < batch) { /* asked: parts only */
        dl_session_options part = o;
        part.batch = part.micro_batch = o.micro_batch;
        const int64_t parts = batch / o.micro_batch;
        const int at_once = o.parts_at_once > parts ? (int)parts : o.parts_at_once;
        dl_status st = at_once > 1 ? dl_session_create_at_once(ctx, m, &part, parts, at_once, out, err)
                                   : dl_session_create_as(ctx, m, &part, 0, out, err);
        if (st == DL_OK && at_once < 2) st = dl_session_make_parts(*out, parts, err);
        if (st != DL_OK) {
            dl_session_free(*out);
            *out = NULL;
            return st;
        }
        char ways[96] = "";
        if (at_once > 1)
            snprintf(ways, sizeof ways, ", %d at a time on %d thread%s each", at_once, threads / at_once,
                     threads / at_once == 1 ? "" : "s");
        snprintf((*out)->batch_desc, sizeof(*out)->batch_desc, "%lld in %lld parts of %lld%s (asked)", (long long)batch,
                 (long long)parts, (long long)o.micro_batch, ways);
        return DL_OK;
    }
    dl_status st = dl_session_create_as(ctx, m, &o, 0, out, err);
    if (st != DL_OK) return st;
    snprintf((*out)->batch_desc, sizeof(*out)->batch_desc, "%lld at once", (long long)batch);
    if (o.micro_batch == 0 && (st = dl_session_auto_parts(out, m, err)) != DL_OK) {
        dl_session_free(*out);
        *out = NULL;
        return st;
    }
    return DL_OK;
}

dl_status dl_session_create(dl_context *ctx, dl_model *m, const dl_session_options *opt, dl_session **out,
                            dl_error *err) {
    dl_session_options o;
    dl_session_options_init(&o);
    if (opt) memcpy(&o, opt, opt->struct_size < sizeof o ? opt->struct_size : sizeof o);
    o.struct_size = sizeof o;
    *out = NULL;
    /* what plugins measure at prepare (dl_host.cache_get) is measured again under --retune, and
     * kept for the next process once the session is made */
    const int was = dl_plugin_store_retune(o.retune != 0);
    dl_status st = create(ctx, m, o, out, err);
    dl_plugin_store_retune(was);
    dl_plugin_store_save(ctx);
    return st;
}

/* ---- --layout auto: both plans run end to end ---- */

/* A plan's cost summed op by op misleads where the ops, each timed alone, find their weights and
 * workspace in cache, and in the model's run do not: the layers before evicted them. ResNet-18 at
 * batch 1: each backend's own layout 7.18 ms op by op and 9.30 ms a run, NHWC 7.29 and 8.45 (its
 * Winograd convs' transformed filters, 4x the filters, are read from memory in the run). So where
 * the two plans' sums lie within AUTO_RUN_RATIO of each other and one takes AUTO_RUN_MIN_MS or
 * more, the other plan is built too (a twin session), both run in turn on the same seeded input,
 * and the faster is kept. Their medians go into the timing cache, keyed by a hash of the kept
 * plan, so that the next session of the same model on the same plugins builds only the winner. */
#define AUTO_RUN_RATIO 1.5
#define AUTO_RUN_MIN_MS 1.0
#define AUTO_WARMUP 2 /* untimed runs of each: oneDNN's first runs of a conv take 15-20 ms more */
#define AUTO_ROUNDS 3 /* timed runs of each, in turn, at least (more within the budget); the median kept */

static const char *ask_name(int ask) {
    return ask == DL_ASK_CL_CONVS_HOST ? "nhwc at every conv on the host" : "each backend's own";
}

dl_tensor *dl_session_seeded_inputs(const dl_session *s, dl_error *err) {
    const int n = s->g->n_inputs;
    dl_tensor *in = calloc((size_t)(n ? n : 1), sizeof *in);
    if (!in) return dl_fail(err, DL_E_NOMEM, "out of memory"), NULL;
    for (int i = 0; i < n; i++) {
        in[i] = *dl_session_input(s, i);
        const int64_t cnt = dl_tensor_numel(&in[i]);
        if (!(in[i].data = calloc((size_t)(cnt ? cnt : 1), dl_dtype_size(in[i].dtype)))) {
            dl_session_free_inputs(s, in);
            return dl_fail(err, DL_E_NOMEM, "out of memory"), NULL;
        }
        if (dl_dtype_is_f32(in[i].dtype)) { /* int64 indices stay 0: valid for any gather */
            dl_rng r;
            dl_rng_seed(&r, dl_rng_derive(1, dl_session_input_name(s, i)));
            for (int64_t e = 0; e < cnt; e++) ((float *)in[i].data)[e] = dl_rng_uniform(&r, -1, 1);
        }
    }
    return in;
}

void dl_session_free_inputs(const dl_session *s, dl_tensor *in) {
    for (int i = 0; in && i < s->g->n_inputs; i++) free(in[i].data);
    free(in);
}

/* s and t run in turn on seeded inputs: AUTO_WARMUP untimed runs each, then `rounds` rounds, and
 * more (to DL_RUN_BOTH_MAX_ROUNDS) while the timed runs have taken under DL_RUN_BOTH_BUDGET_MS: a
 * median of three runs of a 7 ms model once came out 30 % off on this project's VM, and the cache
 * kept the wrong layout for good (GoogLeNet at batch 1: NHWC "8.60 ms a run", 6.4-6.8 since).
 * Their median times in ms[0] and ms[1]. Their traces are set aside meanwhile and their steps'
 * times cleared afterwards: these runs are not the caller's. */
dl_status dl_session_run_both(dl_session *s, dl_session *t, int rounds, double ms[2], dl_error *err) {
    return dl_session_run_both_steps(s, t, rounds, ms, (double *const[2]){NULL, NULL}, err);
}

/* a run's steps as s reports them (dl_session_step): its prefix's first */
static int reported_steps(const dl_session *s) {
    return s->prefix ? s->prefix_steps + s->n_steps - s->first_step : s->n_steps;
}

dl_status dl_session_run_both_steps(dl_session *s, dl_session *t, int rounds, double ms[2], double *const step_ms[2],
                                    dl_error *err) {
    if (rounds < 1 || rounds > DL_RUN_BOTH_MAX_ROUNDS) rounds = AUTO_ROUNDS;
    const int n = s->g->n_inputs;
    dl_tensor *in = dl_session_seeded_inputs(s, err);
    dl_status st = in ? DL_OK : DL_E_NOMEM;
    dl_session *both[2] = {s, t}, *prefix = s->prefix;
    dl_trace *kept[2] = {s->trace, t->trace};
    s->trace = t->trace = NULL;
    double runs[2][DL_RUN_BOTH_MAX_ROUNDS], spent = 0;
    int r = -AUTO_WARMUP;
    for (; st == DL_OK && r < DL_RUN_BOTH_MAX_ROUNDS && (r < rounds || spent < DL_RUN_BOTH_BUDGET_MS); r++)
        for (int k = 0; st == DL_OK && k < 2; k++) {
            const int which = k ^ ((r + AUTO_WARMUP) % 2); /* the order alternates each round */
            dl_session *x = both[which];
            if (s == t) s->prefix = which ? prefix : NULL; /* one session: without its prefix, then with it */
            /* twice in a row, the second timed: a run straight after the other session's finds
             * that session's data in the caches, and a plan with a small working set (a batch in
             * parts) loses what it wins in a model's repeated runs (SqueezeNet at batch 8, parts
             * of 1: 19.5 ms against 18.3 at once in turn, 18.5 against 21.9 each on its own) */
            st = dl_session_run(x, in, n, err);
            const double t0 = dl_now_ms();
            if (st == DL_OK) st = dl_session_run(x, in, n, err);
            if (r >= 0) spent += runs[which][r] = dl_now_ms() - t0;
        }
    s->prefix = prefix;
    for (int k = 0; k < 2; k++) {
        both[k]->trace = kept[k];
        for (int j = 0; step_ms[k] && j < reported_steps(both[k]); j++) {
            dl_step_info si;
            dl_session_step(both[k], j, &si);
            step_ms[k][j] = si.runs > 0 ? si.total_ms / si.runs : 0;
        }
        dl_session_reset_profile(both[k]);
        if (st != DL_OK) continue;
        qsort(runs[k], (size_t)r, sizeof runs[k][0], dl_cmp_double);
        ms[k] = r % 2 ? runs[k][r / 2] : (runs[k][r / 2 - 1] + runs[k][r / 2]) / 2;
    }
    dl_session_free_inputs(s, in);
    return st;
}

static void auto_by_runs(dl_session **sp, dl_model *m) {
    dl_session *s = *sp, *t = NULL;
    const int ask = s->layout_ask, other = s->other_ask - 1;
    const double lo = s->plan_ms[0] < s->plan_ms[1] ? s->plan_ms[0] : s->plan_ms[1];
    const double hi = s->plan_ms[0] < s->plan_ms[1] ? s->plan_ms[1] : s->plan_ms[0];
    s->other_ask = 0;
    if (hi < AUTO_RUN_MIN_MS || hi > lo * AUTO_RUN_RATIO) return; /* the sums decide */
    const char *runs = getenv("DLRUN_LAYOUT_RUNS"); /* "0": the sums decide (tools/test's sanitizer builds) */
    if (runs && strcmp(runs, "0") == 0) return;
    char key[2][96], warn[600];
    const unsigned long long h = (unsigned long long)dl_session_plan_hash(s);
    snprintf(key[0], sizeof key[0], "auto-layout;plan=%016llx;ask=%d;run", h, ask);
    snprintf(key[1], sizeof key[1], "auto-layout;plan=%016llx;ask=%d;run", h, other);
    dl_tcache *cache = dl_tcache_open(s->opt.retune, warn, sizeof warn);
    double ms[2];
    const int cached = cache && dl_tcache_get(cache, key[0], &ms[0]) && dl_tcache_get(cache, key[1], &ms[1]);
    dl_error e = {{0}};
    dl_status st = DL_OK;
    if (!cached || ms[1] < ms[0]) st = dl_session_create_as(s->ctx, m, &s->opt, 1 + other, &t, &e);
    if (st == DL_OK && !cached) st = dl_session_prepare_rest(s, &e); /* runs all of it now */
    if (st == DL_OK && !cached) st = dl_session_run_both(s, t, AUTO_ROUNDS, ms, &e);
    if (st == DL_OK && !cached && cache) {
        dl_tcache_put(cache, key[0], ms[0]);
        dl_tcache_put(cache, key[1], ms[1]);
        dl_tcache_save(cache, warn, sizeof warn);
    }
    dl_tcache_free(cache);
    char desc[sizeof s->layout_desc];
    if (st != DL_OK) { /* the twin could not be built or run (memory): the sums decide */
        snprintf(desc, sizeof desc, "%s (auto: %.2f ms op by op, against %.2f ms for %s; no runs: %.60s)",
                 ask_name(ask), s->plan_ms[0], s->plan_ms[1], ask_name(other), e.msg);
        dl_session_free(t);
        memcpy(s->layout_desc, desc, sizeof desc);
        return;
    }
    const int swap = ms[1] < ms[0];
    snprintf(desc, sizeof desc, "%s (auto: %.2f ms a run, against %.2f ms for %s; op by op %.2f and %.2f)",
             ask_name(swap ? other : ask), ms[swap], ms[!swap], ask_name(swap ? ask : other), s->plan_ms[swap],
             s->plan_ms[!swap]);
    if (swap) {
        t->place.timed += s->place.timed, t->place.cached += s->place.cached;
        dl_session_free(s);
        *sp = s = t;
    } else {
        dl_session_free(t);
    }
    memcpy(s->layout_desc, desc, sizeof desc);
}

void dl_session_free(dl_session *s) {
    if (!s) return;
    dl_session_free_input_buffers(s);
    dl_session_parts_free(s);
    dl_trace_free(s->trace); /* before the kernels: they may hold the backends' events */
    dl_handover_free(&s->handover);
    dl_trace_free(s->prof_trace);
    for (int k = 0; k < s->n_steps; k++) {
        dl_step *st = &s->steps[k];
        if (st->kernel) st->be->release(st->be->self, st->kernel);
        free(st->in);
        free(st->constant);
        free(st->label);
        free(st->strides);
        free(st->staging);
        free(st->staging2);
    }
    free(s->steps);
    if (s->buf) {
        for (int v = 0; v < s->g->n_values; v++)
            for (int p = 0; p < s->n_places; p++)
                if (s->owned[(size_t)v * DL_MAX_PLACES + (size_t)p]) dom_free(s, s->places[p].dom, BUF(s, v, p));
    }
    for (int d = 0; d < s->n_doms; d++) dom_free(s, d, s->mem[d].arena);
    free(s->slots);
    free(s->slot_of);
    free(s->buf);
    free(s->owned);
    free(s->alias);
    free(s->node_dom);
    free(s->node_place);
    free(s->view_in);
    free(s->node_step);
    dl_session_free(s->prefix);
    dl_fusion_free(&s->fuse);
    dl_placement_free(&s->place);
    free(s->inputs);
    free(s->in_dev);
    free(s->in_src);
    free(s->in_dom);
    free(s->in_host_mask);
    free(s->outputs);
    dl_weights_free(s->weights);
    free(s->shape);
    dl_context *own = s->own_ctx; /* its plugins made this session's kernels: freed last */
    free(s);
    dl_context_free(own);
}

/* Every backend that queued work in the run, and each device domain's owner, waited for. */
static dl_status sync_all(dl_session *s, const dl_queues *q, dl_error *err) {
    const dl_backend *owners[DL_MAX_DOMAINS];
    for (int d = 0; d < s->n_doms; d++) owners[d] = s->doms[d].be;
    return dl_queues_finish(q, owners, s->n_doms, err);
}

/* A run of s runs steps of s, of its prefix's session and of its siblings (parts at once): each
 * adds its hand-overs to its own counts, cleared as the run begins. */
void dl_session_last_run_handovers(const dl_session *s, int *by_event, int *by_sync) {
    *by_event = s->handover.run_waits, *by_sync = s->handover.run_syncs;
    if (s->prefix) *by_event += s->prefix->handover.run_waits, *by_sync += s->prefix->handover.run_syncs;
    for (int i = 0; i < s->n_sibs; i++)
        *by_event += s->sibs[i]->handover.run_waits, *by_sync += s->sibs[i]->handover.run_syncs;
}

dl_status dl_session_run(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err) {
    s->handover.run_waits = s->handover.run_syncs = 0;
    if (s->prefix) s->prefix->handover.run_waits = s->prefix->handover.run_syncs = 0;
    for (int i = 0; i < s->n_sibs; i++) s->sibs[i]->handover.run_waits = s->sibs[i]->handover.run_syncs = 0;
    return s->prefix      ? dl_session_run_prefixed(s, inputs, n_inputs, err)
           : s->parts > 1 ? dl_session_run_parts(s, inputs, n_inputs, err)
                          : dl_session_run_plan(s, inputs, n_inputs, err);
}

dl_status dl_session_run_plan(dl_session *s, const dl_tensor *inputs, int n_inputs, dl_error *err) {
    return dl_session_run_steps(s, inputs, n_inputs, 0, s->n_steps, err);
}

/* A run stopped by an error rc: every backend's queue is waited for first (their errors not
 * reported: rc is), so that nothing still queued reads the caller's inputs (an upload from a
 * page-locked input buffer is a DMA from where it is) or writes the session's memory once the run
 * has returned. */
static dl_status stopped(dl_session *s, const dl_queues *q, dl_status rc) {
    dl_error ignored = {{0}};
    (void)sync_all(s, q, &ignored);
    s->handover.run_waits += q->waits, s->handover.run_syncs += q->syncs;
    return rc;
}

dl_status dl_session_run_steps(dl_session *s, const dl_tensor *inputs, int n_inputs, int from, int to, dl_error *err) {
    double t_start = dl_now_ms();
    dl_queues q = {0}; /* hand-overs between backends sharing a device (handover.c) */
    dl_status in_rc = inputs ? dl_session_take_inputs(s, inputs, n_inputs, err) : DL_OK;
    if (in_rc != DL_OK) return stopped(s, &q, in_rc);
    const int first_op = s->first_op, last_op = s->last_op;
    /* a profiled run times device steps by their backends' events (no synchronize after each) */
    dl_trace *tr = s->trace ? s->trace : s->profiling ? s->prof_trace : NULL;
    dl_trace_run_start(tr);
    double t_compute = t_start, t_outputs = t_start;
    for (int k = from; k < to; k++) {
        dl_step *st = &s->steps[k];
        if (k == first_op) { /* the inputs are where the first op reads them */
            dl_status rc = k ? sync_all(s, &q, err) : DL_OK;
            if (rc != DL_OK) return stopped(s, &q, rc);
            t_compute = dl_now_ms();
        }
        if (st->kind == DL_STEP_FUSED || st->kind == DL_STEP_ELIDED) continue;
        double t0 = dl_now_ms();
        dl_status rc;
        if (st->kind == DL_STEP_COPY) { /* the domains' owners copy */
            rc = dl_hand_over(&s->handover, &q, st->src_dom, s->doms[st->src_dom].be, err);
            if (rc == DL_OK) rc = dl_hand_over(&s->handover, &q, st->dom, s->doms[st->dom].be, err);
            if (rc == DL_OK && !dl_session_input_copy(s, st, &rc, err)) rc = dl_step_transfer(s, st, err);
        } else {
            dl_error e = {{0}};
            rc = dl_hand_over(&s->handover, &q, st->dom, st->be, err);
            if (tr) dl_trace_op_event(tr, k, 0);
            if (rc == DL_OK && (rc = st->be->run(st->be->self, st->kernel, st->in, &st->out, st->ws, &e)) != DL_OK)
                dl_fail(err, rc, "%s '%s' failed on %s: %s", dl_op_kind_name(s->g->nodes[st->node].kind), st->op.name,
                        st->be->name, e.msg);
            if (tr) dl_trace_op_event(tr, k, 1);
        }
        if (rc == DL_OK && s->profiling && st->dom != 0 && !dl_trace_on_device(tr, k)) rc = sync_all(s, &q, err);
        if (rc != DL_OK) return stopped(s, &q, rc);
        if (k == last_op && (rc = sync_all(s, &q, err)) != DL_OK) return stopped(s, &q, rc); /* the ops are done */
        double t1 = dl_now_ms(), ms = t1 - t0;
        if (k == last_op) t_outputs = t1;
        st->last_ms = ms;
        st->total_ms += ms;
        st->runs++;
        if (tr) dl_trace_step(tr, k, t0, t1);
    }
    dl_status rc = sync_all(s, &q, err);
    double t_end = dl_now_ms();
    if (last_op < 0) t_compute = t_outputs = t_end;              /* no op: everything was copying */
    else if (first_op >= to) t_compute = t_outputs = t_end;      /* a range before the ops */
    else if (last_op < from || last_op >= to) t_outputs = t_end; /* a range without the last op */
    s->last_run = (dl_run_times){t_compute - t_start, t_outputs - t_compute, t_end - t_outputs};
    s->handover.run_waits += q.waits, s->handover.run_syncs += q.syncs;
    if (tr && rc == DL_OK) {
        dl_trace_run_end(tr, t_start, t_end, &s->last_run);
        for (int k = 0; s->profiling && k < s->n_steps; k++) { /* the device's time replaces the host's */
            dl_step *st = &s->steps[k];
            double ms;
            if (!dl_trace_device_ms(tr, k, &ms)) continue; /* only op steps are timed on the device */
            st->total_ms += ms - st->last_ms;
            st->last_ms = ms;
        }
    }
    return rc;
}

void dl_session_last_run_times(const dl_session *s, dl_run_times *t) { *t = s->last_run; }

int dl_session_input_count(const dl_session *s) { return s->g->n_inputs; }
const dl_tensor *dl_session_input(const dl_session *s, int i) {
    return i >= 0 && i < s->g->n_inputs ? &(s->parts > 1 ? s->whole_in : s->inputs)[i] : NULL;
}
const char *dl_session_input_name(const dl_session *s, int i) {
    return i >= 0 && i < s->g->n_inputs ? s->g->values[s->g->inputs[i]].name : NULL;
}
int dl_session_output_count(const dl_session *s) { return s->g->n_outputs; }
const dl_tensor *dl_session_output(const dl_session *s, int i) {
    return i >= 0 && i < s->g->n_outputs ? &(s->parts > 1 ? s->whole_out : s->outputs)[i] : NULL;
}
const char *dl_session_output_name(const dl_session *s, int i) {
    return i >= 0 && i < s->g->n_outputs ? s->g->values[s->g->outputs[i]].name : NULL;
}

int dl_session_step_count(const dl_session *s) { return reported_steps(s); }

/* The session whose step *i (made its index there) is step i of a run of s: a session with a
 * prefix reports the prefix's steps that run, then its own from first_step (batch_prefix.c). */
static const dl_session *step_owner(const dl_session *s, int *i) {
    if (!s->prefix || *i < 0) return s;
    if (*i < s->prefix_steps) return s->prefix;
    *i += s->first_step - s->prefix_steps;
    return s;
}

void dl_session_step(const dl_session *s, int i, dl_step_info *info) {
    memset(info, 0, sizeof *info);
    const dl_session *w = s;
    s = step_owner(w, &i);
    if (i < 0 || i >= s->n_steps) return;
    const dl_step *st = &s->steps[i];
    /* a run's steps: every part's */
    const double parts = s != w ? (double)w->prefix_parts : s->parts > 1 ? (double)s->parts : 1.0;
    info->kind = st->kind;
    info->flops = st->flops * parts;
    info->last_ms = st->last_ms;
    info->total_ms = st->total_ms;
    info->runs = st->runs;
    int v = st->kind == DL_STEP_COPY ? st->value : s->g->nodes[st->node].output;
    info->ndim = s->shape[v].ndim;
    info->shape = s->shape[v].d;
    if (st->kind == DL_STEP_COPY) {
        info->layer = s->g->values[v].name;
        info->op = st->what;
        info->backend = st->label;
        info->bytes = (double)st->bytes * parts;
        return;
    }
    const dl_node *n = &s->g->nodes[st->node];
    info->layer = n->name;
    info->op = dl_op_kind_name(n->kind);
    info->backend = st->kind == DL_STEP_FUSED ? st->label : st->be->name;
}

int64_t dl_session_input_bound(const dl_session *s, int i) {
    if (i < 0 || i >= s->g->n_inputs) return 0;
    int v = s->g->inputs[i];
    if (s->g->values[v].dtype.code != DL_DTYPE_INT) return 0;
    int64_t bound = INT64_MAX;
    for (int k = 0; k < s->g->n_nodes; k++) {
        const dl_node *n = &s->g->nodes[k];
        if (n->kind != DL_OP_GATHER || n->inputs[1] != v) continue;
        int64_t size = s->shape[n->inputs[0]].d[n->params.attrs.axis];
        if (size < bound) bound = size;
    }
    return bound == INT64_MAX ? 0 : bound;
}

const dl_op *dl_session_step_op(const dl_session *s, int i, const unsigned char **constant) {
    s = step_owner(s, &i);
    if (i < 0 || i >= s->n_steps || !has_op(&s->steps[i])) return NULL;
    if (constant) *constant = s->steps[i].constant;
    return &s->steps[i].op;
}

void dl_session_reset_profile(dl_session *s) {
    for (int k = 0; k < s->n_steps; k++) {
        s->steps[k].last_ms = s->steps[k].total_ms = 0;
        s->steps[k].runs = 0;
    }
    if (s->prefix) dl_session_reset_profile(s->prefix);
}

/* Profiling times each step on a backend with timing events (ABI 1.6) by those events, as a trace
 * does: a session made without a trace gets one of its own for that, never written. Where it
 * cannot be made, or a backend has no events, the step is synchronized and timed on the host. */
void dl_session_set_profiling(dl_session *s, int on) {
    if (s->prefix) dl_session_set_profiling(s->prefix, on);
    s->profiling = on;
    if (!on || s->trace || s->prof_trace) return;
    dl_error e;
    if ((s->prof_trace = dl_trace_new(dl_now_ms())) && dl_trace_prepare(s->prof_trace, s, &e) != DL_OK) {
        dl_trace_free(s->prof_trace);
        s->prof_trace = NULL;
    }
}

int dl_session_memory_count(const dl_session *s) { return s->n_doms; }

void dl_session_memory(const dl_session *s, int i, dl_memory_info *info) {
    memset(info, 0, sizeof *info);
    if (i < 0 || i >= s->n_doms) return;
    info->domain = dl_domain_name(s, i);
    info->peak_bytes = s->mem[i].peak;
    info->naive_bytes = s->mem[i].naive;
    info->lower_bound_bytes = s->mem[i].lower_bound;
    /* the host's: weights placement converted there, plus the seeded, copied and folded ones */
    info->weight_bytes = s->mem[i].weights + (i == 0 ? dl_session_host_weights(s) : 0);
    if (i == 0 && s->prefix) { /* the prefix's arena and weights beside this one's */
        dl_memory_info p;
        dl_session_memory(s->prefix, 0, &p);
        info->peak_bytes += p.peak_bytes, info->naive_bytes += p.naive_bytes;
        info->lower_bound_bytes += p.lower_bound_bytes, info->weight_bytes += p.weight_bytes;
    }
    for (int k = 0; i == 0 && k < s->n_sibs; k++) { /* parts at once: each sibling's plan beside this one's */
        dl_memory_info p;
        dl_session_memory(s->sibs[k], 0, &p);
        info->peak_bytes += p.peak_bytes, info->naive_bytes += p.naive_bytes;
        info->lower_bound_bytes += p.lower_bound_bytes, info->weight_bytes += p.weight_bytes;
    }
}
