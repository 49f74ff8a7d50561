/* The minimal counting shim the distortion benchmark compares against:
 * an LD_PRELOAD library whose pthread_mutex_lock tries the lock first and
 * counts the acquisition as contended when the try fails, then takes it.
 * Two relaxed atomic increments and one extra trylock: about as little as
 * a shim can do while still telling contended from uncontended. Prints
 * its counts on stderr at exit:
 *   count_shim acquisitions=N contended=M
 * Build: gcc -O2 -shared -fPIC -o libcount_shim.so count_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

static int (*real_lock)(pthread_mutex_t *);
static unsigned long acquisitions, contended;

int pthread_mutex_lock(pthread_mutex_t *m) {
    if (!real_lock) real_lock = dlsym(RTLD_NEXT, "pthread_mutex_lock");
    __atomic_fetch_add(&acquisitions, 1, __ATOMIC_RELAXED);
    if (pthread_mutex_trylock(m) == 0) return 0;
    __atomic_fetch_add(&contended, 1, __ATOMIC_RELAXED);
    return real_lock(m);
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "count_shim acquisitions=%lu contended=%lu\n", acquisitions, contended);
}
