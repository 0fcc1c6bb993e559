/* report.c — what `dlrun` prints: the summary, placement, top-5, latency, the per-op profile
 * table, the backend list, and the same facts as JSON (--json). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

static void mib(uint64_t bytes, char out[32]) { snprintf(out, 32, "%.1f MiB", (double)bytes / 1048576.0); }
/* bytes in KiB under 1 MiB, else MiB */
static void kib_mib(uint64_t bytes, char out[32]) {
    if (bytes < 1048576) snprintf(out, 32, "%.1f KiB", (double)bytes / 1024.0);
    else mib(bytes, out);
}

/* Step k's time in the profile: its median over the timed runs, or (none kept) its mean. A mean
 * would carry one slow run into every op's figure (the first run's page faults, a JIT's build). */
static double step_ms(const cli_timing *t, int k, const dl_step_info *i) {
    if (t && t->op_median_ms) return t->op_median_ms[k];
    return i->runs ? i->total_ms / (double)i->runs : i->last_ms;
}

/* Top-k of row `item` of a [N, C] output, as probabilities (softmax applied unless already one). */
static int top_k(const dl_tensor *y, int64_t item, int k, int *idx, double *prob) {
    if (y->ndim != 2 || y->shape[1] < 2 || item >= y->shape[0]) return 0;
    const float *row = (const float *)y->data + item * y->shape[1];
    int64_t c = y->shape[1];
    double sum = 0, mx = -INFINITY;
    int is_prob = 1;
    for (int64_t j = 0; j < c; j++) {
        if (row[j] < 0 || row[j] > 1) is_prob = 0;
        sum += row[j];
        if (row[j] > mx) mx = row[j];
    }
    if (fabs(sum - 1.0) > 1e-3) is_prob = 0;
    double z = 0;
    if (!is_prob)
        for (int64_t j = 0; j < c; j++) z += exp(row[j] - mx);
    if (k > c) k = (int)c;
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int64_t j = 0; j < c; j++) {
            int taken = 0;
            for (int q = 0; q < t; q++) taken |= idx[q] == j;
            if (!taken && (best < 0 || row[j] > row[best])) best = (int)j;
        }
        idx[t] = best;
        prob[t] = is_prob ? row[best] : exp(row[best] - mx) / z;
    }
    return k;
}

typedef struct summary {
    double flops;
    int ops, copies, casts; /* COPY steps: moves between domains, conversions of format */
    int elided, views;      /* concats whose inputs were written into them; transposes that are views
                               of a layout (their input's memory read as their output) */
    char placement[512];    /* "cpu 38" or "cpu 30, cuda 8" */
} summary;

static void summarize(const dl_session *s, summary *sum) {
    memset(sum, 0, sizeof *sum);
    const char *names[16];
    int counts[16], nb = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        if (st.kind == DL_STEP_COPY) {
            sum->copies += !strncmp(st.op, "copy", 4);
            sum->casts += strcmp(st.op, "copy") != 0;
            continue;
        }
        sum->ops++;
        sum->flops += st.flops;
        const int view = st.kind == DL_STEP_ELIDED && !strcmp(st.op, "transpose");
        sum->elided += st.kind == DL_STEP_ELIDED && !view;
        sum->views += view;
        if (st.kind == DL_STEP_FUSED || st.kind == DL_STEP_ELIDED) continue;
        int b = 0;
        while (b < nb && strcmp(names[b], st.backend)) b++;
        if (b == nb && nb < 16) {
            names[nb] = st.backend;
            counts[nb++] = 0;
        }
        if (b < nb) counts[b]++;
    }
    for (int b = 0; b < nb; b++) {
        size_t u = strlen(sum->placement);
        snprintf(sum->placement + u, sizeof sum->placement - u, "%s%s %d op%s", b ? ", " : "", names[b], counts[b],
                 counts[b] == 1 ? "" : "s");
    }
}

static void print_placement(const dl_session *s) {
    printf("\n%-28s %-15s %-10s %-10s %s\n", "layer", "op", "chosen", "storage", "candidates (measured ms; * cached)");
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        printf("%-28s %-15s %-10s %-10s", pi.layer, pi.op, pi.chosen, pi.storage ? pi.storage : "f32");
        for (int c = 0; c < pi.n_candidates; c++) {
            const dl_placement_candidate *pc = &pi.candidates[c];
            if (pi.n_candidates == 1) printf(" %s (only candidate)", pc->backend);
            else if (pc->ms < 0) printf(" %s (failed)", pc->backend);
            else printf(" %s %.3f%s", pc->backend, pc->ms, pc->cached ? "*" : "");
        }
        printf("\n");
    }
    int copies = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        if (st.kind != DL_STEP_COPY) continue;
        if (!copies++) printf("copies and casts inserted:\n");
        printf("  %-26s %-20s %s (%.0f bytes)\n", st.layer, st.op, st.backend, st.bytes);
    }
    if (!copies) printf("copies and casts inserted: none\n");
    printf("\n");
}

/* The top-5 classes: for item 0 on one line ("6 (0.5650)  8 (0.4153) ..."), or where the model has
 * labels one class a line with its name; for each image where --image gave them. */
static void print_top5(const dl_model *m, const dl_tensor *y, const cli_timing *t) {
    int64_t items = t->images && y->ndim == 2 ? y->shape[0] : 1;
    int labels = dl_model_label_count(m) > 0;
    for (int64_t item = 0; item < items; item++) {
        int idx[5];
        double prob[5];
        int k = top_k(y, item, 5, idx, prob);
        if (!k) return;
        if (t->images) printf("top-%d (%s):", k, t->images[item]);
        else printf("top-%d%s:", k, y->shape[0] > 1 ? " (item 0)" : "");
        for (int i = 0; i < k; i++) {
            const char *name = dl_model_label(m, idx[i]);
            if (labels) printf("\n  %d. %.4f  %s (%d)", i + 1, prob[i], name ? name : "?", idx[i]);
            else printf("  %d (%.4f)", idx[i], prob[i]);
        }
        printf("\n");
    }
}

void cli_print_text(const cli_options *o, const dl_model *m, const dl_session *s, const cli_timing *t) {
    summary sum;
    summarize(s, &sum);
    const dl_tensor *x = dl_session_input(s, 0), *y = dl_session_output(s, 0);
    char xs[96], ys[96];
    shape_str(x->shape, x->ndim, xs, sizeof xs);
    shape_str(y->shape, y->ndim, ys, sizeof ys);
    printf("model %s: %d layers, input %s -> output %s, %.2f GFLOP per run\n", dl_model_name(m),
           dl_model_layer_count(m), xs, ys, sum.flops * 1e-9);
    /* activations fused into their producer, by op, residual adds fused into a conv or linear,
     * and batchnorms folded into a conv */
    static const char *const acts[] = {"relu", "silu", "hard_swish", "gelu", "clip", "leaky_relu", "sigmoid"};
    enum { N_ACTS = sizeof acts / sizeof acts[0] };
    int fused[N_ACTS] = {0}, folded = 0, adds = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        if (st.kind != DL_STEP_FUSED || !st.op) continue;
        folded += !strcmp(st.op, "batchnorm");
        adds += !strcmp(st.op, "add");
        for (int a = 0; a < N_ACTS; a++) fused[a] += !strcmp(st.op, acts[a]);
    }
    printf("placement: %s", sum.placement);
    for (int a = 0; a < N_ACTS; a++)
        if (fused[a]) printf(" (+%d %s fused)", fused[a], acts[a]);
    if (adds) printf(" (+%d residual add%s fused)", adds, adds == 1 ? "" : "s");
    if (folded) printf(" (+%d batchnorm folded)", folded);
    if (sum.elided) printf(" (+%d concat elided: inputs written into it)", sum.elided);
    if (sum.views) printf(" (+%d transpose%s elided: a view of the layout)", sum.views, sum.views == 1 ? "" : "s");
    if (sum.copies) printf("; %d cop%s between memory domains", sum.copies, sum.copies == 1 ? "y" : "ies");
    if (sum.casts) printf("; %d conversion%s of storage format", sum.casts, sum.casts == 1 ? "" : "s");
    printf("\n");
    printf("layout: %s\n", dl_session_layout(s));
    if (dl_session_input_count(s) && dl_session_input(s, 0)->ndim && dl_session_input(s, 0)->shape[0] > 1)
        printf("batch: %s\n", dl_session_batching(s));
    int timed, cached;
    const char *cache;
    dl_session_placement_stats(s, &timed, &cached, &cache);
    if (timed || cached)
        printf("placement: %d timed, %d cached%s%s\n", timed, cached, cache ? " in " : "", cache ? cache : "");
    int cold;
    uint64_t llc, weights;
    dl_session_placement_cold(s, &cold, &llc, &weights);
    if (cold) {
        char w[32], c[32];
        kib_mib(weights, w), kib_mib(llc, c);
        printf("placement: %d ops timed with their weights out of cache (the model's %s of weights exceed the %s "
               "last-level cache)\n",
               cold, w, c);
    }
    if (o->placement) print_placement(s);
    if (o->profile) {
        printf("\n%-28s %-15s %-18s %-20s %10s %9s %6s\n", "layer", "op", "backend", "output shape", "time ms",
               "GFLOP/s", "share");
        double total = 0;
        for (int i = 0; i < dl_session_step_count(s); i++) {
            dl_step_info st;
            dl_session_step(s, i, &st);
            if (st.kind != DL_STEP_FUSED) total += step_ms(t, i, &st);
        }
        for (int i = 0; i < dl_session_step_count(s); i++) {
            dl_step_info st;
            dl_session_step(s, i, &st);
            char sh[64];
            shape_str(st.shape, st.ndim, sh, sizeof sh);
            if (st.kind == DL_STEP_FUSED) {
                printf("%-28s %-15s fused into %s\n", st.layer, st.op, st.backend);
                continue;
            }
            if (st.kind == DL_STEP_ELIDED) {
                printf("%-28s %-15s elided: %s\n", st.layer, st.op,
                       strcmp(st.op, "transpose") ? "its inputs were written into it"
                                                  : "its input's memory is its output, channels-last <-> row-major");
                continue;
            }
            double ms = step_ms(t, i, &st);
            char rate[16] = "-";
            if (st.kind == DL_STEP_COPY && ms > 0) snprintf(rate, sizeof rate, "%.1f GB/s", st.bytes / ms * 1e-6);
            else if (st.flops > 0 && ms > 0) snprintf(rate, sizeof rate, "%.1f", st.flops / ms * 1e-6);
            printf("%-28s %-15s %-18s %-20s %10.3f %9s %5.1f%%\n", st.layer, st.op, st.backend, sh, ms, rate,
                   total > 0 ? 100.0 * ms / total : 0.0);
        }
        printf("%-28s %-15s %-18s %-20s %10.3f %9.1f\n", "total", "", "", "", total,
               total > 0 ? sum.flops / total * 1e-6 : 0.0);
        if (t && t->op_median_ms && t->op_median_runs < t->runs)
            printf("(each op's median over its last %d of the %d runs)\n", t->op_median_runs, t->runs);
        printf("\n");
    }
    if (o->profile) {
        printf("memory plan (per domain): %-6s %12s %12s %12s %12s\n", "", "planned", "lower bound", "no reuse",
               "weights");
        for (int i = 0; i < dl_session_memory_count(s); i++) {
            dl_memory_info mi;
            dl_session_memory(s, i, &mi);
            char a[32], b[32], c[32], d[32];
            mib(mi.peak_bytes, a), mib(mi.lower_bound_bytes, b), mib(mi.naive_bytes, c), mib(mi.weight_bytes, d);
            printf("  %-30s %12s %12s %12s %12s\n", mi.domain, a, b, c, d);
        }
        printf("\n");
    }
    print_top5(m, y, t);
    if (t->runs == 1)
        printf("latency: %.2f ms (1 run; use --iterations and --warmup for a measurement)\n", t->median_ms);
    else
        printf("latency: median %.2f ms, min %.2f ms, max %.2f ms over %d runs; %.2f images/s\n", t->median_ms,
               t->min_ms, t->max_ms, t->runs, (double)t->batch * 1000.0 / t->median_ms);
    if (t->gpu) /* where tensors cross to a device, the model's own time apart from the transfers */
        printf("phases (median): inputs %.3f ms, compute %.3f ms (min %.3f, max %.3f), outputs %.3f ms\n",
               t->median.inputs_ms, t->median.compute_ms, t->compute_min_ms, t->compute_max_ms, t->median.outputs_ms);
    int by_event, by_sync;
    dl_session_last_run_handovers(s, &by_event, &by_sync);
    if (by_event + by_sync) /* backends sharing a device took turns */
        printf("hand-overs between backends sharing a device, last run: %d by event, %d by synchronize\n", by_event,
               by_sync);
}

static cJSON *shape_json(const int64_t *shape, int ndim) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < ndim; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[i]));
    return a;
}

void cli_print_json(const cli_options *o, const dl_model *m, const dl_session *s, const cli_timing *t) {
    summary sum;
    summarize(s, &sum);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", dl_model_name(m));
    cJSON_AddStringToObject(root, "file", o->model);
    cJSON_AddNumberToObject(root, "layers", dl_model_layer_count(m));
    const dl_tensor *x = dl_session_input(s, 0), *y = dl_session_output(s, 0);
    cJSON_AddItemToObject(root, "input_shape", shape_json(x->shape, x->ndim));
    cJSON_AddItemToObject(root, "output_shape", shape_json(y->shape, y->ndim));
    cJSON_AddNumberToObject(root, "gflop", sum.flops * 1e-9);
    cJSON_AddStringToObject(root, "layout", dl_session_layout(s));
    cJSON_AddStringToObject(root, "batching", dl_session_batching(s));
    cJSON_AddNumberToObject(root, "micro_batch", (double)dl_session_micro_batch(s));
    cJSON *lat = cJSON_AddObjectToObject(root, "latency_ms");
    cJSON_AddNumberToObject(lat, "median", t->median_ms);
    cJSON_AddNumberToObject(lat, "min", t->min_ms);
    cJSON_AddNumberToObject(lat, "max", t->max_ms);
    cJSON *ph = cJSON_AddObjectToObject(root, "phases_ms"); /* medians; dl_session_last_run_times */
    cJSON_AddNumberToObject(ph, "inputs", t->median.inputs_ms);
    cJSON_AddNumberToObject(ph, "compute", t->median.compute_ms);
    cJSON_AddNumberToObject(ph, "compute_min", t->compute_min_ms);
    cJSON_AddNumberToObject(ph, "compute_max", t->compute_max_ms);
    cJSON_AddNumberToObject(ph, "outputs", t->median.outputs_ms);
    int by_event, by_sync;
    dl_session_last_run_handovers(s, &by_event, &by_sync);
    cJSON *ho = cJSON_AddObjectToObject(root, "handovers"); /* the last run's */
    cJSON_AddNumberToObject(ho, "by_event", by_event);
    cJSON_AddNumberToObject(ho, "by_sync", by_sync);
    cJSON_AddNumberToObject(root, "runs", t->runs);
    cJSON_AddNumberToObject(root, "images_per_s", (double)t->batch * 1000.0 / t->median_ms);
    cJSON *steps = cJSON_AddArrayToObject(root, "ops");
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info st;
        dl_session_step(s, i, &st);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "layer", st.layer);
        cJSON_AddStringToObject(e, "op", st.op);
        if (st.kind == DL_STEP_FUSED) cJSON_AddStringToObject(e, "fused_into", st.backend);
        else cJSON_AddStringToObject(e, st.kind == DL_STEP_COPY ? "route" : "backend", st.backend);
        if (st.kind == DL_STEP_ELIDED) cJSON_AddBoolToObject(e, "elided", 1);
        cJSON_AddItemToObject(e, "output_shape", shape_json(st.shape, st.ndim));
        if (st.kind != DL_STEP_FUSED && st.kind != DL_STEP_ELIDED) {
            /* per-op times only when profiled: otherwise a GPU op's time is only its enqueueing */
            double ms = step_ms(t, i, &st);
            if (o->profile) cJSON_AddNumberToObject(e, "time_ms", ms);
            if (st.kind == DL_STEP_COPY) cJSON_AddNumberToObject(e, "bytes", st.bytes);
            else {
                cJSON_AddNumberToObject(e, "gflop", st.flops * 1e-9);
                if (o->profile) cJSON_AddNumberToObject(e, "gflops_per_s", ms > 0 ? st.flops / ms * 1e-6 : 0);
            }
        }
        cJSON_AddItemToArray(steps, e);
    }
    cJSON *pl = cJSON_AddObjectToObject(root, "placement");
    int timed, cached;
    const char *cache;
    dl_session_placement_stats(s, &timed, &cached, &cache);
    cJSON_AddNumberToObject(pl, "timed", timed);
    cJSON_AddNumberToObject(pl, "cached", cached);
    if (cache) cJSON_AddStringToObject(pl, "cache", cache);
    int cold;
    uint64_t llc, weights;
    dl_session_placement_cold(s, &cold, &llc, &weights);
    cJSON_AddNumberToObject(pl, "cold_ops", cold);
    cJSON_AddNumberToObject(pl, "cache_bytes", (double)llc);
    cJSON_AddNumberToObject(pl, "weight_bytes", (double)weights);
    cJSON *nodes = cJSON_AddArrayToObject(pl, "ops");
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "layer", pi.layer);
        cJSON_AddStringToObject(e, "chosen", pi.chosen);
        cJSON *cands = cJSON_AddArrayToObject(e, "candidates");
        for (int c = 0; c < pi.n_candidates; c++) {
            cJSON *ce = cJSON_CreateObject();
            cJSON_AddStringToObject(ce, "backend", pi.candidates[c].backend);
            if (pi.n_candidates > 1) cJSON_AddNumberToObject(ce, "ms", pi.candidates[c].ms);
            cJSON_AddBoolToObject(ce, "cached", pi.candidates[c].cached);
            cJSON_AddItemToArray(cands, ce);
        }
        cJSON_AddItemToArray(nodes, e);
    }
    cJSON *mem = cJSON_AddArrayToObject(root, "memory");
    for (int i = 0; i < dl_session_memory_count(s); i++) {
        dl_memory_info mi;
        dl_session_memory(s, i, &mi);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "domain", mi.domain);
        cJSON_AddNumberToObject(e, "peak_bytes", (double)mi.peak_bytes);
        cJSON_AddNumberToObject(e, "lower_bound_bytes", (double)mi.lower_bound_bytes);
        cJSON_AddNumberToObject(e, "naive_bytes", (double)mi.naive_bytes);
        cJSON_AddNumberToObject(e, "weight_bytes", (double)mi.weight_bytes);
        cJSON_AddItemToArray(mem, e);
    }
    int64_t items = t->images && y->ndim == 2 ? y->shape[0] : 1;
    cJSON *images = t->images ? cJSON_AddArrayToObject(root, "images") : NULL;
    for (int64_t item = 0; item < items; item++) {
        int idx[5];
        double prob[5];
        int k = top_k(y, item, 5, idx, prob);
        if (!k) break;
        cJSON *top = cJSON_CreateArray();
        for (int i = 0; i < k; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "class", idx[i]);
            if (dl_model_label(m, idx[i])) cJSON_AddStringToObject(e, "label", dl_model_label(m, idx[i]));
            cJSON_AddNumberToObject(e, "probability", prob[i]);
            cJSON_AddItemToArray(top, e);
        }
        if (item == 0) cJSON_AddItemToObject(root, "top5", images ? cJSON_Duplicate(top, 1) : top);
        if (images) { /* each image's file and its top-5 */
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "file", t->images[item]);
            cJSON_AddItemToObject(e, "top5", top);
            cJSON_AddItemToArray(images, e);
        }
    }
    char *text = cJSON_Print(root);
    if (text) puts(text);
    free(text);
    cJSON_Delete(root);
}

void cli_print_backends(const dl_context *ctx, int json) {
    int n = dl_context_plugin_count(ctx);
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json && n == 0) printf("no plugins found (looked beside libdlrun and in $DLRUN_PLUGIN_PATH)\n");
    for (int i = 0; i < n; i++) {
        const dl_plugin_info *p = dl_context_plugin(ctx, i);
        if (json) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", p->name);
            cJSON_AddStringToObject(e, "path", p->path);
            cJSON_AddBoolToObject(e, "loaded", p->loaded);
            cJSON_AddStringToObject(e, p->loaded ? "description" : "reason", p->loaded ? p->description : p->reason);
            if (p->queue_family) cJSON_AddStringToObject(e, "queue_family", p->queue_family);
            cJSON_AddItemToArray(arr, e);
        } else if (p->loaded) {
            printf("%-8s loaded   %s\n         %s\n", p->name, p->description, p->path);
            if (p->queue_family) printf("         hands the device over by events: %s\n", p->queue_family);
        } else {
            printf("%-8s skipped  %s\n         %s\n", p->name, p->reason, p->path);
        }
    }
    if (json) {
        char *text = cJSON_Print(arr);
        if (text) puts(text);
        free(text);
        cJSON_Delete(arr);
    }
}
