/* A user's own LD_PRELOAD lock shim, loaded after lockscope's: counts
 * every pthread_mutex_lock call that reaches it and forwards it. Prints at
 * exit (stderr):
 *   lock_count_shim calls=N
 * Build: gcc -O2 -shared -fPIC -o liblock_count_shim.so lock_count_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static int (*real_lock)(pthread_mutex_t *);
static unsigned long calls;

int pthread_mutex_lock(pthread_mutex_t *m) {
    if (!real_lock) real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
    return real_lock(m);
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "lock_count_shim calls=%lu\n", calls);
}
