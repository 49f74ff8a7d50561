/* What the user-shim fixtures (slow_lock_shim.c, preempted_lock_shim.c)
 * share: the real lock functions behind them, found on first use, and a
 * sleep that goes on after a signal. Each shim is one shared library:
 * these are static in it. */
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

static int (*real_lock)(pthread_mutex_t *);
static int (*real_unlock)(pthread_mutex_t *);

/* glibc's functions (the next definitions after this library's). */
static void resolve_real(void) {
    if (!real_lock) {
        real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
        real_unlock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    }
}

static void pause_ns(long ns) {
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
