/* test_placement.c — measured placement with fake backends whose op times, copy costs, supported
 * ops and memory domains the test sets (tests/plugins/fake_backend.c): the choice follows the
 * measured times, transfer costs tip it, a small op between two device ops stays on the device,
 * pins and --backend are obeyed, --no-fallback errors, and the timing cache hits, misses,
 * survives corruption and --retune, holds each key once; backends sharing a device hand it over in
 * order, are switched between only where an op saves more than the hand-over, and copy through
 * the one with the cheaper transfers. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrun/dlrun.h"
#include "op_table.h"
#include "oprun.h"
#include "test_util.h"
#include "timing_cache.h"

/* The CLI also loads the cpu plugin from its default folder: three candidates per op there. */
/* The CLI also loads the plugins beside libdlrun: the cpu plugin, and where it is built the onednn
 * plugin, a fourth candidate for each op of chain3 below (two relus and a dropout). */
#if DLRUN_HAVE_ONEDNN
#define CHAIN3_FIRST "placement: 8 timed, 4 cached in"
#define CHAIN3_ALL "placement: 0 timed, 12 cached"
#define CHAIN3_PROGRESS "placement: timing op 1 of 12"
#else
#define CHAIN3_FIRST "placement: 6 timed, 3 cached in"
#define CHAIN3_ALL "placement: 0 timed, 9 cached"
#define CHAIN3_PROGRESS "placement: timing op 1 of 9"
#endif
#define FAKES DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so"

static const char *cache_dir;           /* the current test's, from tu_fresh_cache */
static const char *plugin_path = FAKES; /* the plugins session() loads */

static void fresh_cache(void) { cr_assert((cache_dir = tu_fresh_cache())); }

static void fresh_env(void) {
    static const char *vars[] = {"DLFAKE_FAKEDEV_US",         "DLFAKE_FAKECPU_US",       "DLFAKE_FAKEDEV_COPY_US",
                                 "DLFAKE_FAKEDEV_OPS",        "DLFAKE_FAKECPU_OPS",      "DLFAKE_FAKEDEV_DROPOUT_US",
                                 "DLFAKE_FAKECPU_DROPOUT_US", "DLFAKE_FAKECPU_IN_PLACE", "DLRUN_PLUGIN_PATH",
                                 "DLRUN_LAYOUT_RUNS",         "DLRUN_MICRO_BATCH_RUNS",  "DLRUN_CACHE_BYTES"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    fresh_cache();
}

static dl_session *session(const char *yaml, dl_session_options *so, dl_context **ctx, dl_model **m, dl_error *err,
                           dl_status *st) {
    dl_context_options co = {sizeof co, 1, 0, plugin_path, 1};
    cr_assert_eq(dl_context_create(&co, ctx, err), DL_OK);
    char *path = tu_write_temp(".yaml", yaml, strlen(yaml));
    cr_assert_eq(dl_model_load(path, m, err), DL_OK, "%s", err->msg);
    unlink(path);
    free(path);
    dl_session_options def;
    dl_session_options_init(&def);
    dl_session *s = NULL;
    *st = dl_session_create(*ctx, *m, so ? so : &def, &s, err);
    return s;
}

static void close_all(dl_session *s, dl_model *m, dl_context *ctx) {
    dl_session_free(s);
    dl_model_free(m);
    dl_context_free(ctx);
}

/* The backend each layer of s runs on, space-separated ("fakedev fakedev fakecpu"). */
static void placed(const dl_session *s, char *got, size_t len) {
    got[0] = 0;
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        snprintf(got + strlen(got), len - strlen(got), "%s%s", i ? " " : "", pi.chosen);
    }
}

/* Runs s on x[n] filled with seeded uniform values; its first output. */
static const float *run_filled(dl_session *s, float *x, size_t n, uint64_t seed) {
    dl_error err = {{0}};
    tu_fill_uniform(x, n, seed, -1, 1);
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    return dl_session_output(s, 0)->data;
}

/* A session of yaml over the two fake backends that share one device (as cuda and cudnn), each
 * copying in copy_us microseconds where given. */
#define TWO_ON_ONE_DEVICE DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev2.so"
static void open_two_on_one_device(const char *yaml, const char *copy_us, dl_context **ctx, dl_model **m,
                                   dl_session **s) {
    dl_error err = {{0}};
    if (copy_us) setenv("DLFAKE_FAKEDEV_COPY_US", copy_us, 1), setenv("DLFAKE_FAKEDEV2_COPY_US", copy_us, 1);
    dl_session_options so;
    dl_session_options_init(&so);
    cr_assert_eq(tu_open_session(TWO_ON_ONE_DEVICE, yaml, &so, ctx, m, s, &err), DL_OK, "%s", err.msg);
}

/* "fakedev fakedev fakecpu": the backend each layer runs on */
static void expect_placement(const char *yaml, const char *want, dl_session_options *so) {
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, so, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    char got[256];
    placed(s, got, sizeof got);
    cr_expect_str_eq(got, want, "%s", got);
    /* and it runs (its outputs are not checked here) */
    dl_tensor in = *dl_session_input(s, 0);
    const size_t n = (size_t)dl_tensor_numel(&in);
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    tu_fill_uniform(x, n, 3, -1, 1);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    free(x);
    close_all(s, m, ctx);
}

static const char chain3[] = "model: chain\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
                             "  - {name: a, op: relu}\n  - {name: b, op: dropout}\n  - {name: c, op: relu}\n";

Test(placement, follows_measured_times) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "100", 1);
    setenv("DLFAKE_FAKECPU_US", "1000", 1);
    expect_placement(chain3, "fakedev fakedev fakedev", NULL);
    setenv("DLFAKE_FAKEDEV_US", "1000", 1);
    setenv("DLFAKE_FAKECPU_US", "100", 1);
    fresh_cache(); /* the fakes' times changed: a cache would (rightly) remember the old ones */
    expect_placement(chain3, "fakecpu fakecpu fakecpu", NULL);
}

/* Timing allocates a layer's input and output; past --max-memory that is refused before timing,
 * as the plan that needs them at once would be. */
Test(placement, timing_within_max_memory) {
    fresh_env();
    const char big[] = "model: big\ninputs:\n  - {name: x, shape: [1, 4194304]}\nlayers:\n  - {name: a, op: relu}\n";
    dl_session_options so;
    dl_session_options_init(&so);
    so.max_memory = 24 << 20; /* the 16 MiB input fits; with the relu's 16 MiB output it does not */
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(big, &so, &ctx, &m, &err, &st);
    cr_expect_eq(st, DL_E_NOMEM, "%s", err.msg);
    cr_expect_null(s);
    cr_expect(strstr(err.msg, "relu 'a' needs 32.0 MiB of host memory with its inputs, output and the weights, but "
                              "--max-memory allows 24.0 MiB"),
              "%s", err.msg);
    close_all(s, m, ctx);
}

Test(placement, transfer_costs_tip_the_choice) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "100", 1);
    setenv("DLFAKE_FAKECPU_US", "400", 1);
    setenv("DLFAKE_FAKEDEV_COPY_US", "2000", 1); /* 3 x 300 us saved < 2 copies */
    expect_placement(chain3, "fakecpu fakecpu fakecpu", NULL);
}

Test(placement, small_op_between_device_ops_stays_on_the_device) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "100", 1);
    setenv("DLFAKE_FAKECPU_US", "3000", 1);
    setenv("DLFAKE_FAKEDEV_DROPOUT_US", "500", 1);
    setenv("DLFAKE_FAKECPU_DROPOUT_US", "300", 1); /* faster on the host by 200 us ... */
    setenv("DLFAKE_FAKEDEV_COPY_US", "1000", 1);   /* ... but two copies cost 2000 */
    expect_placement(chain3, "fakedev fakedev fakedev", NULL);
    setenv("DLFAKE_FAKEDEV_COPY_US", "0", 1); /* free copies: the dropout moves */
    fresh_cache();
    expect_placement(chain3, "fakedev fakecpu fakedev", NULL);
}

/* 2,000 layers all reading the input (placement's DAG path; the input's readers are tracked per
 * backend in a tree, not walked for every move): layers alternate relu and dropout, and when the
 * device runs only relu, each op goes where it runs fastest and the input is copied once. */
static void fan_out(const char *want_relu, const char *want_dropout) {
    enum { N = 2000 };
    size_t cap = 64 + N * 48, n = 0;
    char *yaml = malloc(cap);
    n += (size_t)snprintf(yaml, cap, "model: fan\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n");
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(yaml + n, cap - n, "  - {op: %s, inputs: [x]}\n", i % 2 ? "dropout" : "relu");
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, NULL, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        cr_assert_str_eq(pi.chosen, i % 2 ? want_dropout : want_relu, "layer %d (%s)", i, pi.op);
    }
    int copies = 0;
    for (int i = 0; i < dl_session_step_count(s); i++) {
        dl_step_info si;
        dl_session_step(s, i, &si);
        copies += si.kind == DL_STEP_COPY;
    }
    cr_expect_leq(copies, 2, "the input copied in once and the output back, not per layer: %d", copies);
    dl_tensor in = *dl_session_input(s, 0);
    float x[512];
    tu_fill_uniform(x, 512, 3, -1, 1);
    in.data = x;
    cr_assert_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
    close_all(s, m, ctx);
    free(yaml);
}

Test(placement, one_input_read_by_2000_layers) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "10", 1);
    setenv("DLFAKE_FAKECPU_US", "300", 1);
    fan_out("fakedev", "fakedev");
    setenv("DLFAKE_FAKEDEV_OPS", "RELU", 1);
    fresh_cache();
    fan_out("fakedev", "fakecpu");
}

static const char residual[] = "model: res\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
                               "  - {name: a, op: relu}\n  - {name: b, op: dropout}\n  - {name: c, op: relu}\n"
                               "  - {name: s, op: add, inputs: [c, a]}\n  - {name: r, op: relu}\n";

Test(placement, dag_with_a_residual_connection) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "100", 1);
    setenv("DLFAKE_FAKECPU_US", "1000", 1);
    setenv("DLFAKE_FAKEDEV_COPY_US", "50", 1);
    expect_placement(residual, "fakedev fakedev fakedev fakedev fakedev", NULL);
    setenv("DLFAKE_FAKEDEV_COPY_US", "5000", 1);
    fresh_cache();
    expect_placement(residual, "fakecpu fakecpu fakecpu fakecpu fakecpu", NULL);
}

Test(placement, pins_and_forced_backend_are_obeyed) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "100", 1);
    setenv("DLFAKE_FAKECPU_US", "1000", 1);
    const char pinned[] =
        "model: chain\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
        "  - {name: a, op: relu}\n  - {name: b, op: dropout, backend: fakecpu}\n  - {name: c, op: relu}\n";
    expect_placement(pinned, "fakedev fakecpu fakedev", NULL);
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "fakecpu";
    expect_placement(chain3, "fakecpu fakecpu fakecpu", &so);
}

Test(placement, no_fallback_turns_fallbacks_into_errors) {
    fresh_env();
    setenv("DLFAKE_FAKECPU_OPS", "ADD", 1); /* fakecpu cannot run relu */
    const char pinned[] = "model: chain\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
                          "  - {name: a, op: relu, backend: fakecpu}\n";
    expect_placement(pinned, "fakedev", NULL); /* falls back, with a warning */
    dl_session_options so;
    dl_session_options_init(&so);
    so.no_fallback = 1;
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(pinned, &so, &ctx, &m, &err, &st);
    cr_expect_eq(st, DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "relu 'a' is pinned to backend 'fakecpu', but not in DLFAKE ops (--no-fallback)"), "%s",
              err.msg);
    close_all(s, m, ctx);
    /* a device backend is loaded but cannot run dropout: only the host one can */
    setenv("DLFAKE_FAKECPU_OPS", "RELU,DROPOUT", 1);
    setenv("DLFAKE_FAKEDEV_OPS", "RELU", 1);
    s = session(chain3, &so, &ctx, &m, &err, &st);
    cr_expect_eq(st, DL_E_UNSUPPORTED);
    cr_expect(strstr(err.msg, "no device backend can run dropout 'b' and --no-fallback forbids the CPU"), "%s",
              err.msg);
    close_all(s, m, ctx);
}

static void stats_of(const char *yaml, int retune, int *timed, int *cached) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.retune = retune;
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, &so, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    dl_session_placement_stats(s, timed, cached, NULL);
    close_all(s, m, ctx);
}

Test(placement, timing_cache_hit_miss_retune) {
    fresh_env();
    int t, c;
    stats_of(chain3, 0, &t, &c);
    cr_expect_eq(t, 4, "first run: relu and dropout on two backends");
    cr_expect_eq(c, 2, "the second relu has the first one's signature");
    stats_of(chain3, 0, &t, &c);
    cr_expect_eq(t, 0, "second run times nothing");
    cr_expect_eq(c, 6);
    const char wider[] = "model: chain\ninputs:\n  - {name: x, shape: [1, 1024]}\nlayers:\n  - {name: a, op: relu}\n";
    stats_of(wider, 0, &t, &c);
    cr_expect_eq(t, 2, "new shapes miss");
    stats_of(chain3, 1, &t, &c);
    cr_expect_eq(t, 4, "--retune measures again");
    cr_expect_eq(c, 2);
}

static int dlrun(const char *args, char **out) {
    char *cmd;
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=%s %s %s", FAKES, cache_dir, DLRUN_CLI, args) > 0);
    int rc = tu_run(cmd, out);
    free(cmd);
    return rc;
}

/* How many times `needle` occurs in the file at path. */
static int occurrences(const char *path, const char *needle) {
    char *out = NULL, cmd[512];
    snprintf(cmd, sizeof cmd, "grep -o '%s' %s | wc -l", needle, path);
    cr_assert_eq(tu_run(cmd, &out), 0);
    int n = atoi(out);
    free(out);
    return n;
}

/* A whole file into memory (the caller frees), and back */
static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*size);
    cr_assert(b && fread(b, 1, *size, f) == *size);
    fclose(f);
    return b;
}
static void write_all(const char *path, const unsigned char *b, size_t size) {
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(b, 1, size, f) == size && fclose(f) == 0, "%s", path);
}

/* The GNU build ID note's bytes in an ELF file (its offset and length), from its program headers */
static void build_id_at(const unsigned char *f, size_t size, size_t *at, size_t *len) {
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
    *len = 0;
    cr_assert(size > sizeof *eh && memcmp(f, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64);
    for (int i = 0; i < eh->e_phnum; i++) {
        const Elf64_Phdr *ph = (const Elf64_Phdr *)(f + eh->e_phoff + (size_t)i * eh->e_phentsize);
        if (ph->p_type != PT_NOTE) continue;
        for (size_t o = ph->p_offset; o + sizeof(Elf64_Nhdr) <= ph->p_offset + ph->p_filesz;) {
            const Elf64_Nhdr *nh = (const Elf64_Nhdr *)(f + o);
            const size_t name = (nh->n_namesz + 3u) & ~3u, desc = (nh->n_descsz + 3u) & ~3u;
            if (nh->n_type == NT_GNU_BUILD_ID && memcmp(f + o + sizeof *nh, "GNU", 4) == 0) {
                *at = o + sizeof *nh + name, *len = nh->n_descsz;
                return;
            }
            o += sizeof *nh + name + desc;
        }
    }
}

/* A plugin rebuilt with other code is measured anew: the cache keys on the file's build ID, so a
 * copy of the same build elsewhere hits and a copy with one byte of its ID changed misses. (Each
 * copy has its own file: a loaded plugin stays mapped, so a file is never rewritten under it.) */
Test(placement, timing_cache_keys_on_the_plugin_build) {
    fresh_env();
    size_t size, at, len;
    unsigned char *f = read_all(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so", &size);
    build_id_at(f, size, &at, &len);
    cr_assert(len > 0, "the fake plugin has a build ID note (the linker's --build-id)");
    char same[128], other[128], path[2][320];
    snprintf(same, sizeof same, "%s/same/libdlrun-fakecpu.so", cache_dir);
    snprintf(other, sizeof other, "%s/other/libdlrun-fakecpu.so", cache_dir);
    for (int i = 0; i < 2; i++) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/%s", cache_dir, i ? "other" : "same");
        cr_assert_eq(mkdir(dir, 0700), 0);
        snprintf(path[i], sizeof path[i], "%s/libdlrun-fakedev.so:%s", DLRUN_TEST_PLUGIN_DIR, i ? other : same);
    }
    write_all(same, f, size);
    f[at] ^= 0xff;
    write_all(other, f, size);
    free(f);
    int t, c;
    stats_of(chain3, 0, &t, &c);
    cr_expect_eq(t, 4, "the plugins as built: relu and dropout on two backends");
    plugin_path = path[0];
    stats_of(chain3, 0, &t, &c);
    cr_expect_eq(t, 0, "a copy of the same build elsewhere: its times are kept");
    plugin_path = path[1];
    stats_of(chain3, 0, &t, &c);
    cr_expect_eq(t, 2, "another build of fakecpu: its relu and dropout are timed again, fakedev's are not");
    plugin_path = FAKES;
    char cache[128];
    snprintf(cache, sizeof cache, "%s/dlrun/timing-cache.json", cache_dir);
    cr_expect_eq(occurrences(cache, "build=id:"), 6, "2 signatures on fakedev and on each build of fakecpu");
}

/* An empty cache folder and the cache file's path in it (not written yet). */
static void cache_file(char *path, size_t len) {
    fresh_cache();
    snprintf(path, len, "%s/dlrun", cache_dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, len, "%s/dlrun/timing-cache.json", cache_dir);
}

/* The cache file with these entries (JSON members), written in place or renamed over it (as
 * another process's save does). */
static void write_cache(const char *path, const char *entries, int by_rename) {
    char tmp[300], text[512];
    snprintf(tmp, sizeof tmp, "%s.other", path);
    snprintf(text, sizeof text, "{\"format\": \"dlrun-timing-cache\", \"version\": 1, \"entries\": {%s}}", entries);
    FILE *f = fopen(by_rename ? tmp : path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    if (by_rename) cr_assert_eq(rename(tmp, path), 0);
}

/* Each key is held once: a file with a key twice is refused (and rebuilt), since either time
 * could be the stale one; put replaces a key's time, so get never returns an older one. */
Test(placement, timing_cache_keys_are_unique) {
    char path[256], warn[600];
    cache_file(path, sizeof path);
    write_cache(path, "\"k\": 1, \"j\": 2, \"k\": 3", 0);
    dl_tcache *c = dl_tcache_open(0, warn, sizeof warn);
    cr_assert(c);
    cr_expect(strstr(warn, "is unusable (a key appears twice); rebuilding it"), "%s", warn);
    double ms = -1;
    cr_expect_eq(dl_tcache_get(c, "k", &ms), 0, "nothing from a refused file is used");
    cr_expect_eq(dl_tcache_get(c, "j", &ms), 0);
    dl_tcache_put(c, "k", 5);
    dl_tcache_put(c, "k", 6);
    cr_expect(dl_tcache_get(c, "k", &ms) && ms == 6, "put replaces: %g", ms);
    cr_expect(dl_tcache_save(c, warn, sizeof warn), "%s", warn);
    dl_tcache_free(c);
    cr_expect_eq(occurrences(path, "\"k\""), 1, "the file holds the key once");
    c = dl_tcache_open(0, warn, sizeof warn);
    cr_expect_str_empty(warn);
    cr_expect(dl_tcache_get(c, "k", &ms) && ms == 6, "read back: %g", ms);
    dl_tcache_put(c, "k", 7); /* and replacing a time read from the file */
    cr_expect(dl_tcache_get(c, "k", &ms) && ms == 7, "put after reading: %g", ms);
    cr_expect(dl_tcache_save(c, warn, sizeof warn), "%s", warn);
    dl_tcache_free(c);
    cr_expect_eq(occurrences(path, "\"k\""), 1);
    c = dl_tcache_open(0, warn, sizeof warn);
    cr_expect(dl_tcache_get(c, "k", &ms) && ms == 7, "read back: %g", ms);
    dl_tcache_free(c);
}

/* The file as this process last read or wrote it is kept (timing_cache.c: a process opens the cache
 * up to five times), and read again once it changed: replaced by another process (a rename), or
 * rewritten in place; a save merges the file as it is then. */
Test(placement, timing_cache_reads_a_changed_file_again) {
    char path[256], warn[600];
    cache_file(path, sizeof path);
    write_cache(path, "\"a\": 1", 0);
    double ms = -1;
    for (int i = 0; i < 2; i++) { /* read, then from what was kept */
        dl_tcache *c = dl_tcache_open(0, warn, sizeof warn);
        cr_expect(dl_tcache_get(c, "a", &ms) && ms == 1, "open %d: a = %g", i, ms);
        dl_tcache_free(c);
    }
    write_cache(path, "\"a\": 2, \"b\": 3", 1); /* another process's save */
    dl_tcache *c = dl_tcache_open(0, warn, sizeof warn);
    cr_expect(dl_tcache_get(c, "a", &ms) && ms == 2, "after a rename: a = %g", ms);
    cr_expect(dl_tcache_get(c, "b", &ms) && ms == 3, "after a rename: b = %g", ms);
    dl_tcache_free(c);
    write_cache(path, "\"a\": 4", 0); /* an edit in place */
    c = dl_tcache_open(0, warn, sizeof warn);
    cr_expect(dl_tcache_get(c, "a", &ms) && ms == 4, "after an edit: a = %g", ms);
    cr_expect_not(dl_tcache_get(c, "b", &ms), "b was kept after the edit removed it");
    write_cache(path, "\"a\": 4, \"z\": 9", 1); /* meanwhile, another process adds z */
    dl_tcache_put(c, "y", 1);
    cr_expect(dl_tcache_save(c, warn, sizeof warn), "%s", warn);
    dl_tcache_free(c);
    cr_expect_eq(occurrences(path, "\"z\""), 1, "the save dropped what another process wrote");
    cr_expect_eq(occurrences(path, "\"y\""), 1);
    c = dl_tcache_open(0, warn, sizeof warn); /* what the save wrote, kept */
    cr_expect(dl_tcache_get(c, "y", &ms) && ms == 1 && dl_tcache_get(c, "z", &ms) && ms == 9);
    dl_tcache_free(c);
}

Test(placement, corrupt_or_foreign_cache_is_rebuilt_and_concurrent_writers_are_safe) {
    fresh_env();
    char *model = tu_write_temp(".yaml", chain3, strlen(chain3)), *out, args[512], path[256];
    snprintf(path, sizeof path, "%s/dlrun/timing-cache.json", cache_dir);
    snprintf(args, sizeof args, "%s --placement", model);
    cr_assert_eq(dlrun(args, &out), 0, "%s", out);
    cr_expect(strstr(out, CHAIN3_FIRST), "%s", out);
    cr_expect(strstr(out, "fakedev 0."), "--placement lists measured times: %s", out);
    cr_expect(strstr(out, "copies and casts inserted:"), "%s", out);
    cr_expect_null(strstr(out, "timing op"), "no progress line when stderr is not a terminal: %s", out);
    free(out);
    const char *bad[] = {"garbage{", "{\"format\": \"dlrun-timing-cache\", \"version\": 99, \"entries\": {}}",
                         "{\"format\": \"dlrun-timing-cache\", \"version\": 1, \"entries\": {\"k\": \"fast\"}}"};
    const char *why[] = {"(it is not JSON); rebuilding it",
                         "(it was written by another version of dlrun); rebuilding it",
                         "(an entry is not a time); rebuilding it"};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        cr_assert_eq(dlrun(model, &out), 0, "%s", out);
        cr_expect(strstr(out, why[i]), "case %d: %s", i, out);
        cr_expect(strstr(out, CHAIN3_FIRST), "a bad cache is never trusted: %s", out);
        free(out);
        cr_assert_eq(dlrun(model, &out), 0);
        cr_expect(strstr(out, CHAIN3_ALL), "rebuilt: %s", out);
        free(out);
    }
    /* four processes re-timing at once: the file stays whole */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "for i in 1 2 3 4; do DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=%s %s %s --retune >/dev/null 2>&1 & done; wait",
             FAKES, cache_dir, DLRUN_CLI, model);
    cr_assert_eq(tu_run(cmd, NULL), 0);
    cr_assert_eq(dlrun(model, &out), 0);
    cr_expect(strstr(out, CHAIN3_ALL), "after concurrent writers: %s", out);
    cr_expect_null(strstr(out, "unusable"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "script -qec 'DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=%s %s %s --retune' /dev/null", FAKES,
             cache_dir, DLRUN_CLI, model);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, CHAIN3_PROGRESS), "progress line on a terminal: %s", out);
    free(out);
    unlink(model);
    free(model);
}

/* Both fakes' hand-over counts (DLFAKE_<NAME>_WAIT): out[0] waits queued, out[1] synchronizes,
 * out[2] events made. */
static void handovers(long out[3]) {
    out[0] = out[1] = out[2] = 0;
    for (int i = 0; i < 2; i++) {
        void *sym = tu_fake_symbol(i ? "fakedev2" : "fakedev", "dlfake_handovers");
        cr_assert(sym);
        void (*counts)(long *);
        long c[3];
        memcpy(&counts, &sym, sizeof counts);
        counts(c);
        out[0] += c[0], out[1] += c[1], out[2] += c[2];
    }
}

/* The model of the tests below, layers pinned to alternate between the two fakes; its output
 * checked after one run, whose hand-overs are counted into got[2] (the fakes' waits and
 * synchronizes) and, as the session counts them, into ho[2] (by event, by synchronize). The run
 * makes no event: the session made them (runs allocate nothing). */
static void alternating_run(long got[2], int ho[2]) {
    setenv("DLFAKE_FAKEDEV_ASYNC", "1", 1);
    setenv("DLFAKE_FAKEDEV2_ASYNC", "1", 1);
    setenv("DLFAKE_FAKEDEV_US", "0", 1);
    setenv("DLFAKE_FAKEDEV2_US", "0", 1);
    static const char yaml[] = "model: handover\ninputs:\n  - {name: x, shape: [1, 513]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: add, inputs: [a, x], backend: fakedev2}\n"
                               "  - {name: c, op: relu, backend: fakedev}\n"
                               "  - {name: d, op: add, inputs: [c, x], backend: fakedev2}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    open_two_on_one_device(yaml, NULL, &ctx, &m, &s);
    char where[128];
    placed(s, where, sizeof where);
    cr_expect_str_eq(where, "fakedev fakedev2 fakedev fakedev2");
    float x[513];
    long before[3], after[3];
    handovers(before);
    const float *y = run_filled(s, x, 513, 11);
    handovers(after);
    cr_expect_eq(after[2], before[2], "the run made %ld events", after[2] - before[2]);
    got[0] = after[0] - before[0], got[1] = after[1] - before[1];
    dl_session_last_run_handovers(s, &ho[0], &ho[1]);
    int bad = 0;
    for (int i = 0; i < 513; i++) {
        float a = x[i] > 0 ? x[i] : 0, c = a + x[i] > 0 ? a + x[i] : 0;
        bad += y[i] != c + x[i];
    }
    cr_expect_eq(bad, 0, "%d of 513 outputs read work another backend had not finished", bad);
    close_all(s, m, ctx);
    unsetenv("DLFAKE_FAKEDEV_ASYNC");
    unsetenv("DLFAKE_FAKEDEV2_ASYNC");
    unsetenv("DLFAKE_FAKEDEV2_US");
}

/* Two backends in one device domain (as cuda and cudnn on one GPU), each queueing work like a
 * stream (DLFAKE_*_ASYNC): when the domain changes hands the session must wait for the previous
 * backend, and before reading the output for the last one, or it reads results not yet computed. */
Test(placement, backends_sharing_a_device_hand_over_in_order) {
    fresh_env();
    long got[2];
    int ho[2];
    alternating_run(got, ho);
    cr_expect_eq(got[0], 0, "no backend here can wait for another's events");
    cr_expect(ho[0] == 0 && ho[1] >= 3, "a, b, c, d: %d hand-overs by event, %d by synchronize", ho[0], ho[1]);
}

/* The same pair with ABI 1.14 (DLFAKE_*_WAIT: one queue family): each hand-over is an event the
 * second queue waits for, where the host would synchronize the first; the fakes then run a queue
 * only as far as the events it waits for allow, so a wait missing or on the wrong backend leaves the
 * outputs wrong. The same run with DLRUN_HANDOVER=sync makes each of those waits a synchronize. */
Test(placement, backends_sharing_a_device_hand_over_by_events) {
    fresh_env();
    static const char *const env[] = {"DLFAKE_FAKEDEV_EVENT_US", "DLFAKE_FAKEDEV2_EVENT_US", "DLFAKE_FAKEDEV_WAIT",
                                      "DLFAKE_FAKEDEV2_WAIT"};
    for (int i = 0; i < 4; i++) setenv(env[i], "0", 1);
    long ev[2], sync[2];
    int ho[2];
    alternating_run(ev, ho);
    cr_expect(ho[0] >= 3 && ho[1] == 0, "%d hand-overs by event, %d by synchronize", ho[0], ho[1]);
    /* a wait that fails: that hand-over by synchronizing instead, the outputs still right */
    setenv("DLFAKE_FAKEDEV2_WAIT_FAILS", "1", 1);
    long fell[2];
    alternating_run(fell, ho);
    unsetenv("DLFAKE_FAKEDEV2_WAIT_FAILS");
    cr_expect(ho[0] >= 1 && ho[1] >= 2, "fakedev2's waits failing: %d by event, %d by synchronize", ho[0], ho[1]);
    /* and the command line says how the last run handed the device over */
    static const char yaml[] = "model: turns\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: dropout, backend: fakedev2}\n"
                               "  - {name: c, op: relu, backend: fakedev}\n";
    char *model = tu_write_temp(".yaml", yaml, strlen(yaml)), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=%s %s %s --iterations 2", TWO_ON_ONE_DEVICE,
                       cache_dir, DLRUN_CLI, model) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "hand-overs between backends sharing a device, last run: 2 by event, 0 by synchronize"), "%s",
              out);
    free(out);
    free(cmd);
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s %s --list-backends", TWO_ON_ONE_DEVICE, DLRUN_CLI) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "fakedev2 loaded   fake backend for placement tests\n") &&
                  strstr(out, "fakedev2.so\n         hands the device over by events: fake queues"),
              "%s", out);
    free(out);
    free(cmd);
    cr_assert(asprintf(&cmd, "DLRUN_PLUGIN_PATH=%s XDG_CACHE_HOME=%s %s %s --iterations 2", TWO_ON_ONE_DEVICE,
                       cache_dir, DLRUN_CLI, model) > 0);
    setenv("DLRUN_HANDOVER", "sync", 1);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    cr_expect(strstr(out, "last run: 0 by event, 2 by synchronize"), "%s", out);
    free(out);
    free(cmd);
    unlink(model);
    free(model);
    alternating_run(sync, ho);
    unsetenv("DLRUN_HANDOVER");
    for (int i = 0; i < 4; i++) unsetenv(env[i]);
    cr_expect_geq(ev[0], 3, "a, b, c, d hand the device over 3 times or more: %ld waits", ev[0]);
    cr_expect_eq(sync[0], 0, "DLRUN_HANDOVER=sync: %ld waits", sync[0]);
    cr_expect_eq(sync[1], ev[1] + ev[0], "each wait (%ld) a synchronize with DLRUN_HANDOVER=sync: %ld against %ld",
                 ev[0], sync[1], ev[1]);
}

/* With hand-overs by events the host synchronizes a backend only at the end of the run, so it must
 * synchronize every backend that queued work, not only the last one or the device's owner: an
 * error a queue reports at synchronize (a kernel's fault) is the run's error. fakedev runs the
 * first layer and the last (and owns the device), fakedev2 the one between, and fails. */
Test(placement, every_queue_that_worked_reports_its_errors) {
    fresh_env();
    static const char *const env[] = {"DLFAKE_FAKEDEV_EVENT_US", "DLFAKE_FAKEDEV2_EVENT_US", "DLFAKE_FAKEDEV_WAIT",
                                      "DLFAKE_FAKEDEV2_WAIT",    "DLFAKE_FAKEDEV_ASYNC",     "DLFAKE_FAKEDEV2_ASYNC"};
    for (int i = 0; i < 6; i++) setenv(env[i], i < 4 ? "0" : "1", 1); /* events on, queues asynchronous */
    static const char yaml[] = "model: fails\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakedev}\n"
                               "  - {name: b, op: relu, backend: fakedev2}\n"
                               "  - {name: c, op: relu, backend: fakedev}\n";
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    dl_session_options so;
    dl_session_options_init(&so);
    dl_error err = {{0}};
    setenv("DLFAKE_FAKEDEV2_FAIL_SYNC", "1", 1);
    cr_assert_eq(tu_open_session(TWO_ON_ONE_DEVICE, yaml, &so, &ctx, &m, &s, &err), DL_OK, "%s", err.msg);
    float x[64];
    tu_fill_uniform(x, 64, 5, -1, 1);
    dl_tensor in = *dl_session_input(s, 0);
    in.data = x;
    long before[3], after[3];
    handovers(before);
    cr_expect_neq(dl_session_run(s, &in, 1, &err), DL_OK, "fakedev2's queue error was not reported");
    handovers(after);
    cr_expect(strstr(err.msg, "fake queue error") != NULL, "%s", err.msg);
    cr_expect_gt(after[0], before[0], "the device was handed over by an event");
    close_all(s, m, ctx);
    unsetenv("DLFAKE_FAKEDEV2_FAIL_SYNC");
    for (int i = 0; i < 6; i++) unsetenv(env[i]);
}

/* Placement over two backends sharing a device (fakedev and fakedev2, as cuda and cudnn on one GPU,
 * each queueing work like a stream): the layers whose names start with "b" on fakedev2 and the rest
 * on fakedev are each faster by 100-200 us (relus faster on fakedev2 too where relu2 is set); "want"
 * is the placement expected. The output is checked (relu(x), plus x where the model ends in an
 * add): with hand-overs in the wrong order it reads work not yet done. */
static void shared_device(const char *yaml, const char *copy_us, int relu2, const char *want) {
    fresh_env();
    static const char *env[][2] = {{"DLFAKE_FAKEDEV_ASYNC", "1"},        {"DLFAKE_FAKEDEV2_ASYNC", "1"},
                                   {"DLFAKE_FAKEDEV_RELU_US", "200"},    {"DLFAKE_FAKEDEV2_RELU_US", "400"},
                                   {"DLFAKE_FAKEDEV_DROPOUT_US", "400"}, {"DLFAKE_FAKEDEV2_DROPOUT_US", "200"},
                                   {"DLFAKE_FAKEDEV_ADD_US", "350"},     {"DLFAKE_FAKEDEV2_ADD_US", "250"}};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) setenv(env[i][0], env[i][1], 1);
    if (relu2) setenv("DLFAKE_FAKEDEV2_RELU_US", "100", 1);
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    open_two_on_one_device(yaml, copy_us, &ctx, &m, &s);
    char got[128];
    placed(s, got, sizeof got);
    cr_expect_str_eq(got, want, "copies of %s us: %s", copy_us, got);
    float x[512];
    const float *y = run_filled(s, x, 512, 9);
    const int add = strstr(yaml, "op: add") != NULL;
    int bad = 0;
    for (int i = 0; i < 512; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0) + (add ? x[i] : 0);
    cr_expect_eq(bad, 0, "%s: %d of 512 outputs wrong", got, bad);
    close_all(s, m, ctx);
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) unsetenv(env[i][0]);
    unsetenv("DLFAKE_FAKEDEV2_COPY_US");
}

/* Each time the device passes from one backend to the other, the session waits for the first one's
 * queue (hand_over in session.c); placement prices that wait at the backend's small transfer's
 * latency. Where it is about nothing (copies free), each op goes where it is faster; where a
 * hand-over (about 2 ms) costs more than an op saves, the whole model stays on one backend (the one
 * faster over all: fakedev by 200 us on the chain, 100 us on the DAG). Both of placement's paths: the
 * exact one of chains and the descent of DAGs (x read twice). */
static const char handover_dag[] = "model: dag\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
                                   "  - {name: a, op: relu}\n  - {name: b, op: dropout}\n  - {name: c, op: relu}\n"
                                   "  - {name: b2, op: add, inputs: [c, x]}\n";

Test(placement, backends_sharing_a_device_switch_only_where_it_pays) {
    shared_device(chain3, "0", 0, "fakedev fakedev2 fakedev");
    shared_device(chain3, "2000", 0, "fakedev fakedev fakedev");
    shared_device(handover_dag, "0", 0, "fakedev fakedev2 fakedev fakedev2");
    shared_device(handover_dag, "2000", 0, "fakedev fakedev fakedev fakedev");
}

/* Where the two can hand the device over by events (ABI 1.14), placement prices a hand-over at the
 * host's record and wait, not at the synchronize (2 ms here): each op goes where it is faster, and
 * the outputs stay right. With DLRUN_HANDOVER=sync the session would synchronize, and placement
 * prices it so. */
Test(placement, hand_overs_by_events_cost_no_synchronize) {
    static const char *const env[] = {"DLFAKE_FAKEDEV_EVENT_US", "DLFAKE_FAKEDEV2_EVENT_US", "DLFAKE_FAKEDEV_WAIT",
                                      "DLFAKE_FAKEDEV2_WAIT"};
    for (int i = 0; i < 4; i++) setenv(env[i], "0", 1);
    shared_device(chain3, "2000", 0, "fakedev fakedev2 fakedev");
    shared_device(handover_dag, "2000", 0, "fakedev fakedev2 fakedev fakedev2");
    setenv("DLRUN_HANDOVER", "sync", 1);
    shared_device(chain3, "2000", 0, "fakedev fakedev fakedev");
    unsetenv("DLRUN_HANDOVER");
    for (int i = 0; i < 4; i++) unsetenv(env[i]);
}

/* 3,000 layers, each reading the one before, an add among them also reading the input (the DAG
 * path; a move's nearest ops on the device are found in a tree, not by walking the layers between):
 * with hand-overs about free, each relu goes to fakedev and each dropout to fakedev2, 50 us faster
 * there; with hand-overs of about 2 ms, everything stays on one backend. */
static void long_shared(const char *copy_us, int mixed) {
    enum { N = 3000 };
    size_t cap = 96 + N * 64, n = 0;
    char *yaml = malloc(cap);
    cr_assert(yaml);
    n += (size_t)snprintf(yaml, cap, "model: long\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n");
    for (int i = 0; i < N; i++) {
        static const char *const ops[3] = {"relu", "dropout", "add"};
        char prev[16] = "x";
        if (i) snprintf(prev, sizeof prev, "l%d", i - 1);
        n += (size_t)snprintf(yaml + n, cap - n, "  - {name: l%d, op: %s, inputs: [%s%s]}\n", i, ops[i * 7 % 11 % 3],
                              prev, i * 7 % 11 % 3 == 2 ? ", x" : "");
    }
    fresh_env();
    static const char *env[][2] = {{"DLFAKE_FAKEDEV_ASYNC", "1"},
                                   {"DLFAKE_FAKEDEV2_ASYNC", "1"},
                                   {"DLFAKE_FAKEDEV2_US", "100"},
                                   {"DLFAKE_FAKEDEV_RELU_US", "50"},
                                   {"DLFAKE_FAKEDEV2_DROPOUT_US", "50"}};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) setenv(env[i][0], env[i][1], 1);
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    open_two_on_one_device(yaml, copy_us, &ctx, &m, &s);
    int on2 = 0, wrong = 0;
    for (int i = 0; i < dl_session_placement_count(s); i++) {
        dl_placement_info pi;
        dl_session_placement(s, i, &pi);
        const int two = !strcmp(pi.chosen, "fakedev2");
        on2 += two;
        if (mixed && strcmp(pi.op, "add")) wrong += two != !strcmp(pi.op, "dropout");
    }
    if (mixed) cr_expect_eq(wrong, 0, "%d relus or dropouts not where they are faster", wrong);
    else cr_expect(on2 == 0 || on2 == N, "%d of %d layers on fakedev2, the rest on fakedev", on2, N);
    close_all(s, m, ctx);
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) unsetenv(env[i][0]);
    unsetenv("DLFAKE_FAKEDEV2_COPY_US");
    free(yaml);
}

Test(placement, three_thousand_layers_on_a_shared_device) {
    long_shared("0", 1);
    long_shared("2000", 0);
}

/* A view run in place costs nothing on either backend, but the session hands the device over
 * before it all the same: the dropout between two relus faster on fakedev2 goes with them, not to
 * fakedev (loaded first, so the one a tie of times would pick). */
Test(placement, a_view_in_place_is_a_hand_over_too) {
    setenv("DLFAKE_FAKEDEV_IN_PLACE", "1", 1);
    setenv("DLFAKE_FAKEDEV2_IN_PLACE", "1", 1);
    shared_device(chain3, "2000", 1, "fakedev2 fakedev2 fakedev2");
    shared_device(handover_dag, "2000", 1, "fakedev2 fakedev2 fakedev2 fakedev2");
    unsetenv("DLFAKE_FAKEDEV_IN_PLACE");
    unsetenv("DLFAKE_FAKEDEV2_IN_PLACE");
}

/* The backend of a device with the cheaper transfers makes the copies there, whichever backend runs
 * the ops: placement prices the copies so, and the session has it copy. fakedev runs every op 200
 * us faster but copies in 1 ms, fakedev2 in none: every op goes to fakedev (where pricing each
 * backend's own copies sent them all to fakedev2, 600 us slower), and fakedev2 copies in and out. */
Test(placement, the_cheaper_copier_of_a_device_makes_its_copies) {
    fresh_env();
    setenv("DLFAKE_FAKEDEV_US", "200", 1);
    setenv("DLFAKE_FAKEDEV2_US", "400", 1);
    setenv("DLFAKE_FAKEDEV_COPY_US", "1000", 1);
    setenv("DLFAKE_FAKEDEV2_COPY_US", "0", 1);
    dl_context *ctx;
    dl_model *m;
    dl_session *s;
    open_two_on_one_device(chain3, NULL, &ctx, &m, &s);
    char got[128], copies[256] = "";
    placed(s, got, sizeof got);
    cr_expect_str_eq(got, "fakedev fakedev fakedev");
    for (int k = 0; k < dl_session_step_count(s); k++) {
        dl_step_info si;
        dl_session_step(s, k, &si);
        if (si.kind == DL_STEP_COPY)
            snprintf(copies + strlen(copies), sizeof copies - strlen(copies), "%s%s", copies[0] ? " " : "", si.backend);
    }
    cr_expect_str_eq(copies, "host->fakedev2 fakedev2->host");
    float x[512];
    const float *y = run_filled(s, x, 512, 5);
    int bad = 0;
    for (int i = 0; i < 512; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0);
    cr_expect_eq(bad, 0, "%d of 512 outputs wrong", bad);
    close_all(s, m, ctx);
    unsetenv("DLFAKE_FAKEDEV2_US");
    unsetenv("DLFAKE_FAKEDEV2_COPY_US");
}

/* A copy a backend runs in place (a reshape, dropout or flatten whose output takes its input's
 * memory) costs it nothing, however slowly it copies when timed alone: the dropout between two
 * relus pinned to fakecpu stays there (timed at 3 ms) rather than going to fakedev (0.1 ms,
 * transfers free), where it went before. */
/* A value read in another layout costs a transpose (ABI 1.9). With --layout auto (the model has a
 * depthwise conv) or nhwc the host asks the cpu plugin for channels-last at both convs. The dropout
 * between is free on either backend (a view in place); the fake backend (host memory, row-major
 * only) is listed first and wins the tie, unless the two transposes around it count (nchw: none). */
static const char nhwc_chain[] = "model: nhwc\ninputs:\n  - {name: x, shape: [1, 16, 64, 64]}\nlayers:\n"
                                 "  - {name: r0, op: dropout}\n"
                                 "  - {name: d1, op: conv2d, filters: 16, kernel: 3, padding: 1, groups: 16}\n"
                                 "  - {name: r1, op: dropout}\n"
                                 "  - {name: c2, op: conv2d, filters: 16, kernel: 1}\n";

static void nhwc_chain_placement(int layout, const char *want) {
    fresh_env();
    setenv("DLFAKE_FAKECPU_IN_PLACE", "1", 1);
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so:" DLRUN_PLUGIN_DIR "/libdlrun-cpu.so";
    dl_session_options so;
    dl_session_options_init(&so);
    so.no_fuse = 1;
    so.layout = layout;
    expect_placement(nhwc_chain, want, &so);
    unsetenv("DLFAKE_FAKECPU_IN_PLACE");
    plugin_path = FAKES;
}

Test(placement, transposes_count_where_a_backend_asks_for_channels_last) {
    nhwc_chain_placement(DL_LAYOUT_MODE_NCHW, "fakecpu cpu fakecpu cpu");
    nhwc_chain_placement(DL_LAYOUT_MODE_NHWC, "fakecpu cpu cpu cpu");
}

/* --layout auto places the model twice, each backend's own layout and NHWC at every conv on the
 * host, every op timed, and keeps the cheaper plan: timedcpu (the cpu plugin, waiting 20 ms an op
 * in the layout named) on a dense conv and a relu, alone (one candidate an op: timed all the same)
 * and beside fakecpu. */
static void auto_layout(const char *slow, const char *backend, const char *want_layout, const char *want_storage) {
    fresh_env();
    setenv(slow, "20000", 1);
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so:" DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so";
    static const char yaml[] = "model: dense\ninputs:\n  - {name: x, shape: [1, 8, 12, 10]}\nlayers:\n"
                               "  - {name: c, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                               "  - {name: r, op: relu}\n";
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = backend;
    so.no_fuse = 1;
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, &so, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    const char *got = dl_session_layout(s);
    cr_expect(strstr(got, want_layout) == got && strstr(got, "(auto: ") && strstr(got, " ms measured, against "),
              "%s slow: %s", slow, got);
    dl_placement_info pi;
    dl_session_placement(s, 0, &pi);
    cr_expect_str_eq(pi.chosen, "timedcpu");
    cr_expect_str_eq(pi.storage, want_storage, "%s slow: the conv's storage", slow);
    int timed, cached;
    dl_session_placement_stats(s, &timed, &cached, NULL);
    cr_expect_geq(timed, 4, "both ops timed in both plans: %d", timed);
    close_all(s, m, ctx);
    unsetenv(slow);
    plugin_path = FAKES;
}

Test(placement, auto_layout_keeps_the_plan_measured_faster) {
    auto_layout("DLFAKE_TIMEDCPU_NHWC_US", "timedcpu", "each backend's own", "f32");
    auto_layout("DLFAKE_TIMEDCPU_NCHW_US", "timedcpu", "nhwc at every conv on the host", "f32 nhwc");
    auto_layout("DLFAKE_TIMEDCPU_NCHW_US", NULL, "nhwc at every conv on the host", "f32 nhwc");
}

/* A conv whose output a residual add takes is timed with that residual fused, as it will run:
 * timedcpu waits 30 ms more in each run of an op prepared with a residual. c2 + c1 fuses into c2,
 * whose timing has a cache key of its own (";residual") and takes 30 ms or more, where c1's (the
 * same shapes, no residual) takes a few microseconds; with the fusion off (DLRUN_FUSE_RESIDUAL=0)
 * no conv is timed with one. Layout auto times every op, one candidate or not. Returns the
 * residual timing found in the cache (-1: none) and the largest other conv timing in *plain. */
static double residual_timings(double *plain) {
    static const char yaml[] = "model: res\ninputs:\n  - {name: x, shape: [1, 8, 12, 10]}\nlayers:\n"
                               "  - {name: c1, op: conv2d, filters: 8, kernel: 3, padding: 1}\n"
                               "  - {name: c2, op: conv2d, filters: 8, kernel: 3, padding: 1}\n"
                               "  - {name: add, op: add, inputs: [c2, c1]}\n";
    fresh_cache();
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "timedcpu";
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, &so, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    char path[4096]; /* the cache under XDG_CACHE_HOME (whichever plan auto kept, and whether its own
                        placement opened the cache or was handed it) */
    snprintf(path, sizeof path, "%s/dlrun/timing-cache.json", cache_dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char line[4096];
    double res = -1;
    *plain = -1;
    while (fgets(line, sizeof line, f)) { /* "key":\tms, one entry a line */
        const char *colon = strstr(line, "\":");
        if (!strstr(line, "\"op=conv2d;") || !colon) continue;
        const double ms = strtod(colon + 2, NULL);
        if (colon - line > 9 && !strncmp(colon - 9, ";residual", 9)) res = ms > res ? ms : res;
        else *plain = ms > *plain ? ms : *plain;
    }
    fclose(f);
    close_all(s, m, ctx);
    return res;
}

Test(placement, a_conv_is_timed_with_the_residual_it_will_take) {
    fresh_env();
    setenv("DLFAKE_TIMEDCPU_RESIDUAL_US", "30000", 1);
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so";
    double plain, res = residual_timings(&plain);
    cr_expect(res >= 30 && plain >= 0 && plain < 15, "with the residual %.3f ms, without %.3f ms", res, plain);
    setenv("DLRUN_FUSE_RESIDUAL", "0", 1);
    res = residual_timings(&plain);
    cr_expect(res < 0 && plain >= 0 && plain < 15, "fusion off: with a residual %.3f ms, without %.3f ms", res, plain);
    unsetenv("DLRUN_FUSE_RESIDUAL");
    unsetenv("DLFAKE_TIMEDCPU_RESIDUAL_US");
    plugin_path = FAKES;
}

/* A timing whose runs a shared machine disturbed is taken again: timedcpu waits 30 ms more in 3
 * of the first op's 5 timed runs (its median 30 ms), and the cache keeps every conv's time under
 * 15 ms. */
Test(placement, a_disturbed_timing_is_taken_again) {
    fresh_env();
    setenv("DLFAKE_TIMEDCPU_DISTURB_US", "30000", 1);
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so";
    double plain, res = residual_timings(&plain);
    cr_expect(plain >= 0 && plain < 15 && res < 15, "the convs' times in the cache: %.3f ms, with a residual %.3f ms",
              plain, res);
    unsetenv("DLFAKE_TIMEDCPU_DISTURB_US");
    plugin_path = FAKES;
}

/* An op is timed as a session runs it: where its kernel may write its output over an input
 * (kernel_in_place, ABI 1.10: a conv summing a residual into its destination), the timing runs
 * pass them so. fakecpu's add waits 40 ms in a run whose output is not over input 1. */
Test(placement, a_kernel_that_writes_over_an_input_is_timed_so) {
    fresh_env();
    setenv("DLFAKE_FAKECPU_OVER_INPUT1_US", "40000", 1);
    static const char yaml[] = "model: sum\ninputs:\n  - {name: x, shape: [1, 4096]}\nlayers:\n"
                               "  - {name: r, op: relu}\n"
                               "  - {name: a, op: add, inputs: [r, x]}\n";
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, NULL, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    dl_placement_info pi;
    dl_session_placement(s, 1, &pi);
    double ms = -1;
    for (int c = 0; c < pi.n_candidates; c++)
        if (!strcmp(pi.candidates[c].backend, "fakecpu")) ms = pi.candidates[c].ms;
    cr_expect(ms >= 0 && ms < 20, "the add on fakecpu timed at %.3f ms", ms);
    close_all(s, m, ctx);
    unsetenv("DLFAKE_FAKECPU_OVER_INPUT1_US");
}

/* Where the two plans' sums lie close, auto runs both end to end and keeps the faster run, which
 * may not be the smaller sum: timedcpu waits 2.5 ms an op channels-last and 3 ms row-major, in
 * every run, so NHWC sums less (5 ms against 6); and 20 ms more an op channels-last in a model's
 * runs only (its input in the session's arena, not in a buffer of its own), so each backend's own
 * layout runs faster. A second session of the model finds the two runs' times in the timing cache
 * and builds only the winner; --retune runs both again. */
static dl_session *auto_session(int retune, dl_context **ctx, dl_model **m) {
    static const char yaml[] = "model: dense\ninputs:\n  - {name: x, shape: [1, 8, 12, 10]}\nlayers:\n"
                               "  - {name: c, op: conv2d, filters: 16, kernel: 3, padding: 1}\n"
                               "  - {name: r, op: relu}\n";
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "timedcpu";
    so.no_fuse = 1;
    so.retune = retune;
    dl_error err;
    dl_status st;
    dl_session *s = session(yaml, &so, ctx, m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    return s;
}

Test(placement, auto_layout_runs_both_plans_where_their_sums_are_close) {
    fresh_env();
    setenv("DLFAKE_TIMEDCPU_NHWC_US", "2500", 1);
    setenv("DLFAKE_TIMEDCPU_NCHW_US", "3000", 1);
    setenv("DLFAKE_TIMEDCPU_RUN_NHWC_US", "20000", 1);
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so";
    for (int round = 0; round < 3; round++) { /* measured, from the cache, measured again (--retune) */
        dl_context *ctx;
        dl_model *m;
        dl_session *s = auto_session(round == 2, &ctx, &m);
        const char *got = dl_session_layout(s);
        cr_expect(strstr(got, "each backend's own (auto: ") == got, "round %d: %s", round, got);
        double run_own, run_nhwc, sum_own, sum_nhwc;
        cr_assert_eq(sscanf(got,
                            "each backend's own (auto: %lf ms a run, against %lf ms for nhwc at every conv on "
                            "the host; op by op %lf and %lf)",
                            &run_own, &run_nhwc, &sum_own, &sum_nhwc),
                     4, "round %d: %s", round, got);
        cr_expect(run_nhwc > run_own + 30 && sum_nhwc < sum_own, "round %d: %s", round, got);
        dl_placement_info pi;
        dl_session_placement(s, 0, &pi);
        cr_expect_str_eq(pi.storage, "f32", "round %d: the conv row-major", round);
        /* the kept session runs (the twin's runs are not its own: no step has run) */
        dl_step_info si;
        dl_session_step(s, 0, &si);
        cr_expect_eq(si.runs, 0, "round %d", round);
        const dl_tensor *x = dl_session_input(s, 0);
        float *data = calloc((size_t)dl_tensor_numel(x), sizeof(float));
        dl_tensor in = *x;
        in.data = data;
        dl_error err;
        cr_expect_eq(dl_session_run(s, &in, 1, &err), DL_OK, "%s", err.msg);
        free(data);
        close_all(s, m, ctx);
    }
    unsetenv("DLFAKE_TIMEDCPU_NHWC_US");
    unsetenv("DLFAKE_TIMEDCPU_NCHW_US");
    unsetenv("DLFAKE_TIMEDCPU_RUN_NHWC_US");
    plugin_path = FAKES;
}

/* An op timed channels-last is cached apart from the same op timed row-major: with one cache, a
 * session in nhwc after one in nchw times its ops anew (the depthwise conv and the relu after it,
 * each on the cpu and onednn plugins), and a second session in either layout finds them all. */
static int timed_in(int layout) {
    dl_session_options so;
    dl_session_options_init(&so);
    so.layout = layout;
    so.no_fuse = 1;
    dl_context *ctx;
    dl_model *m;
    dl_error err;
    dl_status st;
    static const char yaml[] = "model: dw\ninputs:\n  - {name: x, shape: [1, 16, 20, 20]}\nlayers:\n"
                               "  - {name: d, op: conv2d, filters: 16, kernel: 3, padding: 1, groups: 16}\n"
                               "  - {name: r, op: relu}\n";
    dl_session *s = session(yaml, &so, &ctx, &m, &err, &st);
    cr_assert_eq(st, DL_OK, "%s", err.msg);
    int timed, cached;
    const char *path;
    dl_session_placement_stats(s, &timed, &cached, &path);
    close_all(s, m, ctx);
    return timed;
}

Test(placement, timings_of_each_layout_are_cached_apart) {
    if (!DLRUN_HAVE_ONEDNN) cr_skip_test("needs a second host backend (the onednn plugin is not built)");
    fresh_env();
    plugin_path = DLRUN_PLUGIN_DIR "/libdlrun-cpu.so:" DLRUN_PLUGIN_DIR "/libdlrun-onednn.so";
    cr_expect_eq(timed_in(DL_LAYOUT_MODE_NCHW), 4);
    cr_expect_eq(timed_in(DL_LAYOUT_MODE_NHWC), 4, "the NHWC session read the NCHW timings");
    cr_expect_eq(timed_in(DL_LAYOUT_MODE_NHWC), 0);
    cr_expect_eq(timed_in(DL_LAYOUT_MODE_NCHW), 0);
    plugin_path = FAKES;
}

Test(placement, views_stay_where_they_run_in_place) {
    fresh_env();
    setenv("DLFAKE_FAKECPU_IN_PLACE", "1", 1);
    setenv("DLFAKE_FAKECPU_DROPOUT_US", "3000", 1);
    static const char yaml[] = "model: views\ninputs:\n  - {name: x, shape: [1, 512]}\nlayers:\n"
                               "  - {name: a, op: relu, backend: fakecpu}\n  - {name: b, op: dropout}\n"
                               "  - {name: c, op: relu, backend: fakecpu}\n";
    expect_placement(yaml, "fakecpu fakecpu fakecpu", NULL);
    unsetenv("DLFAKE_FAKECPU_IN_PLACE");
    fresh_cache();
    expect_placement(yaml, "fakecpu fakedev fakecpu", NULL);
}

/* The timing cache's conv2d entries under cache_dir: how many keys end in ";cold" (timed with
 * the caches emptied first) and how many do not, for the conv whose output has `filters`
 * channels (";out=[1, <filters>, "). */
static void conv_keys(int filters, int *cold, int *warm) {
    char path[4096], line[4096], out[32];
    snprintf(path, sizeof path, "%s/dlrun/timing-cache.json", cache_dir);
    snprintf(out, sizeof out, ";out=[1, %d, ", filters);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    *cold = *warm = 0;
    while (fgets(line, sizeof line, f)) { /* "key":\tms, one entry a line */
        const char *colon = strstr(line, "\":");
        if (!strstr(line, "\"op=conv2d;") || !strstr(line, out) || !colon) continue;
        if (colon - line > 5 && !strncmp(colon - 5, ";cold", 5)) ++*cold;
        else ++*warm;
    }
    fclose(f);
}

/* Where the model's weights exceed the last-level cache (DLRUN_CACHE_BYTES stands for it here:
 * 64 KiB), an op with at least 1/32 of that in weights is timed with the caches emptied before
 * each run, as it will run in the model (its weights evicted by the others' since its last run),
 * under a timing key of its own; an op with less is timed warm. The session says how many ops
 * and what it compared. Under a cache larger than the weights, nothing is timed cold. */
Test(placement, weight_heavy_ops_are_timed_with_their_weights_out_of_cache) {
    static const char yaml[] = "model: heavy\ninputs:\n  - {name: x, shape: [1, 32, 12, 10]}\nlayers:\n"
                               "  - {name: big, op: conv2d, filters: 64, kernel: 3, padding: 1}\n"
                               "  - {name: small, op: conv2d, filters: 4, kernel: 1}\n";
    const uint64_t weights = (64 * 32 * 9 + 64 + 4 * 64 + 4) * 4; /* 74.8 KiB; small's 1 KiB */
    fresh_env();
    plugin_path = DLRUN_TEST_PLUGIN_DIR "/libdlrun-timedcpu.so";
    dl_session_options so;
    dl_session_options_init(&so);
    so.backend = "timedcpu";
    for (int under = 0; under < 2; under++) {
        fresh_cache();
        setenv("DLRUN_CACHE_BYTES", under ? "65536" : "1048576", 1);
        dl_context *ctx;
        dl_model *m;
        dl_error err;
        dl_status st;
        dl_session *s = session(yaml, &so, &ctx, &m, &err, &st);
        cr_assert_eq(st, DL_OK, "%s", err.msg);
        int cold_ops = -1, big_cold, big_warm, small_cold, small_warm;
        uint64_t llc = 0, w = 0;
        dl_session_placement_cold(s, &cold_ops, &llc, &w);
        cr_expect_eq(llc, under ? 65536u : 1048576u, "the cache size compared: %llu", (unsigned long long)llc);
        cr_expect_eq(w, weights, "the model's weights: %llu bytes", (unsigned long long)w);
        cr_expect_eq(cold_ops, under, "ops timed cold: %d", cold_ops);
        conv_keys(64, &big_cold, &big_warm);
        conv_keys(4, &small_cold, &small_warm);
        cr_expect(under ? big_cold > 0 && !big_warm : !big_cold && big_warm > 0,
                  "the big conv's timings: %d cold, %d warm", big_cold, big_warm);
        cr_expect(!small_cold && small_warm > 0, "the small conv's timings: %d cold, %d warm", small_cold, small_warm);
        close_all(s, m, ctx);
    }
    unsetenv("DLRUN_CACHE_BYTES");
    plugin_path = FAKES;
}

/* ---- one op run as placement times it (oprun.c) ---- */

/* relu on [1, 16, 9, 11] on `be`, output to `out` (NULL: placement's way, guards alone checked). */
static dl_op_result run_relu(const dl_backend *be, dl_op_scratch *sc, float *out, int iterations) {
    static int64_t shape[4] = {1, 16, 9, 11};
    static float x[16 * 9 * 11];
    for (int i = 0; i < 16 * 9 * 11; i++) x[i] = (float)(i % 7) - 3.0f;
    dl_op_params p;
    dl_op_params_default(&p);
    dl_tensor in = {x, {DL_DEVICE_CPU, 0}, 4, DL_F32, shape, NULL, 0}, y = in;
    y.data = NULL;
    dl_op op = {sizeof op, DL_OP_RELU, "relu", &p.attrs, 1, &in, 1, &y, DL_PRECISION_F32};
    const unsigned char isw[1] = {0};
    dl_op_result r;
    dl_error err = {{0}};
    cr_assert_eq(dl_run_op(be, &op, isw, out, iterations, sc, &r, &err), DL_OK, "%s", err.msg);
    cr_assert(r.supported, "%s", r.why);
    return r;
}

/* An op timed cold (sc->cold) on a host backend starts each run, warm-ups included, with an
 * eviction read of that many bytes; on a device backend none, as the host's caches do not hold
 * its memory; and none where cold is 0. */
Test(placement, a_cold_timing_empties_the_caches_before_each_run) {
    dl_error err = {{0}};
    const dl_backend *host = tu_load_backend(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so", 1, &err);
    cr_assert(host, "%s", err.msg);
    const dl_backend *dev = tu_load_backend(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakedev.so", 1, &err);
    cr_assert(dev, "%s", err.msg);
    dl_op_scratch sc = {0};
    sc.random = 1, sc.cold = (size_t)1 << 20;
    run_relu(host, &sc, NULL, 5);
    cr_expect_eq(sc.evictions, 2 + 5, "host: %lu runs began with the caches emptied", sc.evictions);
    cr_expect(sc.evict && sc.evict_cap >= sc.cold, "the eviction buffer: %zu bytes", sc.evict_cap);
    sc.evictions = 0;
    run_relu(dev, &sc, NULL, 5);
    cr_expect_eq(sc.evictions, 0, "device: %lu", sc.evictions);
    sc.cold = 0;
    run_relu(host, &sc, NULL, 5);
    cr_expect_eq(sc.evictions, 0, "cold 0: %lu", sc.evictions);
    dl_op_scratch_free(&sc);
    cr_expect(!sc.evict && !sc.evict_cap, "freed");
    const dl_backend *loaded[] = {host, dev};
    for (int b = 0; b < 2; b++)
        if (DL_BACKEND_HAS(loaded[b], destroy)) loaded[b]->destroy(loaded[b]->self);
}

/* The runs of one timing: two warm-ups and `iterations` after the checked run; where that run
 * takes over 20 ms, at most three and no warm-up (a batch of 10000 spent a minute in placement
 * running 1 GB ops eight times each). The buffers of a scratch are kept from one op to the next,
 * and the output's guards are checked where its data are not read back too (relu_overrun). */
Test(placement, one_op_timed_as_placement_times_it) {
    setenv("DLFAKE_FAKECPU_RELU_US", "100", 1);
    dl_error err = {{0}};
    const dl_backend *fast = tu_load_backend(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so", 1, &err);
    cr_assert(fast, "%s", err.msg);
    void *h = dlopen(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so", RTLD_NOW | RTLD_NOLOAD);
    cr_assert(h);
    int (*runs)(void);
    void *sym = dlsym(h, "dlfake_runs");
    cr_assert(sym);
    memcpy(&runs, &sym, sizeof runs);
    dl_op_scratch sc = {0};
    sc.random = 1;
    int before = runs();
    dl_op_result r = run_relu(fast, &sc, NULL, 5);
    cr_expect_eq(runs() - before, 1 + 2 + 5, "a fast op: the checked run, two warm-ups, five timed");
    cr_expect(r.guards_ok == 1 && r.ms >= 0.1, "guards %d, %.3f ms", r.guards_ok, r.ms);
    void *kept = sc.p[DL_MAX_OP_INPUTS];
    cr_assert(kept);
    run_relu(fast, &sc, NULL, 5);
    cr_expect_eq(sc.p[DL_MAX_OP_INPUTS], kept, "the output's buffer kept for the next op");
    float out[16 * 9 * 11];
    run_relu(fast, NULL, out, 0);
    cr_expect(out[0] == 0.0f && out[4] == 1.0f && out[6] == 3.0f, "relu read back: %g %g %g", out[0], out[4], out[6]);
    dlclose(h);

    setenv("DLFAKE_FAKECPU_RELU_US", "25000", 1); /* read at init: a second plugin, slow */
    const dl_backend *slow = tu_load_backend(DLRUN_TEST_PLUGIN_DIR "/libdlrun-fakecpu.so", 1, &err);
    cr_assert(slow, "%s", err.msg);
    before = runs();
    r = run_relu(slow, &sc, NULL, 5);
    cr_expect_eq(runs() - before, 1 + 3, "a slow op: the checked run and three timed");
    cr_expect(r.ms >= 25.0, "%.3f ms", r.ms);

    const dl_backend *over = tu_load_backend(DLRUN_TEST_PLUGIN_DIR "/libdlrun-relu_overrun.so", 1, &err);
    cr_assert(over, "%s", err.msg);
    cr_expect_eq(run_relu(over, &sc, NULL, 1).guards_ok, 0, "a write past the output, found without reading it");
    cr_expect_eq(run_relu(over, NULL, out, 0).guards_ok, 0, "found where it is read back");
    dl_op_scratch_free(&sc);
    const dl_backend *loaded[] = {fast, slow, over};
    for (int b = 0; b < 3; b++)
        if (DL_BACKEND_HAS(loaded[b], destroy)) loaded[b]->destroy(loaded[b]->self);
}
