/* clock.h — the monotonic clock in milliseconds, and a comparison for sorting times (medians). */
#ifndef DLRUN_CLOCK_H
#define DLRUN_CLOCK_H
#include <time.h>

static inline double dl_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static inline int dl_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#endif
