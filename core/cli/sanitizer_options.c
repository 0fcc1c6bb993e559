/* sanitizer_options.c — the AddressSanitizer build's defaults, for the CLI and the test programs
 * (tests/CMakeLists.txt links this file into each): intercept_tls_get_addr=0. GCC 12's sanitizer
 * runtime misreads the dynamic TLS blocks of glibc >= 2.25 (it takes a block at a particular page
 * offset for one with a glibc 2.19 header), and LeakSanitizer's tracer then faults scanning a bogus
 * range when a dlopen'ed library with thread_local data (oneDNN, in the onednn plugin) has run on an
 * OpenMP worker thread (google/sanitizers#1322, #1409). Static TLS and everything else are still
 * scanned. ASAN_OPTIONS given in the environment add to these. Nothing in other builds. */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "intercept_tls_get_addr=0"; }
#else
typedef int dl_no_sanitizer_options; /* an empty file is not ISO C */
#endif
