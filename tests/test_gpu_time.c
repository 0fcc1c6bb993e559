/* test_gpu_time.c — dl_gpu_time (plugins/cuda_common/gpu.c) hands back the CUDA error it saw, not
 * a time and not "no error": a launch refused by the timed function (as a kernel launcher returns
 * launched()'s error), and a failing stream or event call. Built where the CUDA plugins are
 * (linked with their common library and the static CUDA runtime); needs no GPU: the dl_gpu here
 * has no events, so a run on a GPU fails at the first event record, and a run without one fails
 * at the first wait on the stream. */
#include <criterion/criterion.h>
#include <string.h>

#if DLRUN_TEST_GPU_TIME
#include "gpu.h"

/* a timed function whose launch is refused, counting its calls */
static int refused(void *arg) {
    (*(int *)arg)++;
    return (int)cudaErrorInvalidConfiguration;
}

/* a timed function that launches nothing and succeeds */
static int nothing(void *arg) {
    (*(int *)arg)++;
    return 0;
}

static void gpu_without_events(dl_gpu *g) {
    memset(g, 0, sizeof *g);
    cr_assert_eq(pthread_mutex_init(&g->lock, NULL), 0);
    g->has_lock = 1;
}

Test(gpu_time, a_refused_launch_comes_back_as_its_error) {
    dl_gpu g;
    gpu_without_events(&g);
    int calls = 0;
    cudaError_t e = cudaSuccess;
    cr_expect_lt(dl_gpu_time(&g, 3, refused, &calls, &e), 0.0);
    cr_expect_eq(e, cudaErrorInvalidConfiguration, "got %d (%s)", (int)e, cudaGetErrorName(e));
    cr_expect_eq(calls, 1, "the warm-up failed, so nothing was timed");
    cr_expect_lt(dl_gpu_time(&g, 3, refused, &calls, NULL), 0.0, "the error out-parameter is optional");
    pthread_mutex_destroy(&g.lock);
}

Test(gpu_time, a_failing_stream_or_event_call_is_an_error_not_a_time) {
    dl_gpu g;
    gpu_without_events(&g);
    int calls = 0, count = 0;
    int gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    cudaError_t e = cudaSuccess;
    double ms = dl_gpu_time(&g, 3, nothing, &calls, &e);
    cr_expect_lt(ms, 0.0, "no time may come from events that were never recorded");
    cr_expect_neq(e, cudaSuccess, "the failing call's error comes back");
    cr_expect_eq(calls, 1, "the warm-up ran, then the %s failed", gpu ? "event record" : "wait on the stream");
    if (gpu) /* without a driver the runtime's failed start is reported by every call, whatever is done */
        cr_expect_eq(cudaGetLastError(), cudaSuccess, "the error is not left behind for a later, unrelated check");
    pthread_mutex_destroy(&g.lock);
}
#else
Test(gpu_time, needs_the_cuda_runtime) { cr_skip_test("built without nvcc: no CUDA runtime to link"); }
#endif
