/* cudnn_loader.c — libdlrun-cudnn.so, the cudnn plugin as the host finds it: a small loader that
 * loads the plugin's code (dlrun-cudnn-impl.so, beside it) only where a CUDA device is there to run
 * it. That code needs cuDNN and cuBLASLt, which take about 200 MB of memory and 70 ms to load (the
 * 2-core VM of 2026-11-29: `dlrun` of SqueezeNet on the CPU in 0.17 s and 241 MB with them mapped,
 * 0.10 s and 33 MB without); a machine with no GPU, or no NVIDIA driver, never maps them: the loader
 * asks the driver (libcuda.so.1, opened here, not linked) for a device first and says "no CUDA
 * device" otherwise, as the plugin itself would. With a device, the implementation's entry point is
 * called with the host's table and its answer (the backend, or why not) returned unchanged.
 * The file name of the implementation does not start with "libdlrun-", so the host's scan of the
 * plugin folder never loads it as a plugin of its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrun/plugin.h"

#define IMPL "dlrun-cudnn-impl.so"

/* The driver API's few calls the probe needs (cuda.h's, by value: CUresult is an int). */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_name_fn)(int, const char **);

/* 1 if the NVIDIA driver reports a CUDA device; else 0 and why (the handle closed). */
static int device_there(dl_error *err) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu) return dl_fail(err, DL_E_NODEVICE, "no CUDA device (no NVIDIA driver: libcuda.so.1 not found)"), 0;
    cu_init_fn init;
    cu_count_fn count;
    cu_name_fn name;
    void *a = dlsym(cu, "cuInit"), *b = dlsym(cu, "cuDeviceGetCount"), *c = dlsym(cu, "cuGetErrorName");
    memcpy(&init, &a, sizeof init), memcpy(&count, &b, sizeof count), memcpy(&name, &c, sizeof name);
    int n = 0, rc = init && count ? init(0) : -1;
    if (rc == 0) rc = count(&n);
    if (rc == 0 && n > 0) return 1; /* the handle stays open: the implementation's runtime uses the driver */
    const char *what = "";
    if (rc > 0 && name) name(rc, &what);
    if (rc == 0) dl_fail(err, DL_E_NODEVICE, "no CUDA device");
    else if (rc < 0) dl_fail(err, DL_E_NODEVICE, "no CUDA device (libcuda.so.1 lacks cuInit)");
    else dl_fail(err, DL_E_NODEVICE, "no CUDA device (%s)", what && *what ? what : "the driver failed to start");
    dlclose(cu);
    return 0;
}

DL_PLUGIN_EXPORT const dl_backend *dl_plugin_init(const dl_host *host, dl_error *err) {
    if (!dl_plugin_host_ok(host, err) || !device_there(err)) return NULL;
    Dl_info me;
    if (!dladdr((void *)&device_there, &me) || !me.dli_fname)
        return dl_fail(err, DL_E_IO, "the cudnn plugin cannot find its own file"), NULL;
    const char *slash = strrchr(me.dli_fname, '/');
    char path[4096];
    int len = slash ? (int)(slash - me.dli_fname) : 1;
    if (snprintf(path, sizeof path, "%.*s/%s", len, slash ? me.dli_fname : ".", IMPL) >= (int)sizeof path)
        return dl_fail(err, DL_E_IO, "the cudnn plugin's folder name is too long"), NULL;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { /* "<path>: libcudnn.so.9: cannot open shared object file": the reason after the path */
        const char *e = dlerror(), *after = e ? strstr(e, ": ") : NULL;
        return dl_fail(err, DL_E_NODEVICE, "%s", after ? after + 2 : e ? e : "cannot load " IMPL), NULL;
    }
    void *sym = dlsym(h, DL_PLUGIN_ENTRY);
    if (!sym) {
        dlclose(h);
        return dl_fail(err, DL_E_IO, "%s has no %s", path, DL_PLUGIN_ENTRY), NULL;
    }
    dl_plugin_init_fn init;
    memcpy(&init, &sym, sizeof init);
    const dl_backend *be = init(host, err); /* its handle stays open, as the host keeps plugins' */
    return be;
}
