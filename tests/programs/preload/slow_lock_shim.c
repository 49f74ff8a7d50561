/* A user's own LD_PRELOAD shim, loaded after lockscope's. Each
 * pthread_mutex_lock that reaches it first has a helper thread take the
 * mutex (through glibc directly, unseen by lockscope) and hold it for
 * 2 ms, then calls the real lock, which waits for the helper's release.
 * To lockscope, whose hook looked at the mutex just before calling on,
 * this is a lock that was free when it looked and then had to be waited
 * for: what happens when another thread takes the lock between the look
 * and the call, made deterministic.
 * Build: gcc -O2 -shared -fPIC -o libslow_lock_shim.so slow_lock_shim.c -ldl -lpthread */
#define _GNU_SOURCE
#include "user_shim.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t *target;
/* The handshake: each side waits for a value only the other one sets,
 * so no step can be missed however late either side runs.
 * 1: main asks the helper to take `target`;
 * 2: the helper holds it;
 * 3: main is about to call the real lock (and will wait in it).
 * The helper releases only once glibc's lock word says somebody waits
 * (2): main is then inside the real call, blocked. */
static int phase;
static int started;
/* The caller's thread id: the helper holds the lock only once the
 * caller is asleep in the kernel. */
static int caller_tid;

/* True when thread `tid` of this process is asleep ('S' in its stat). */
static int asleep(int tid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

static void *helper(void *arg) {
    (void)arg;
    for (;;) {
        while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 1) pause_ns(20000);
        real_lock(target);
        __atomic_store_n(&phase, 2, __ATOMIC_RELEASE);
        while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 3) pause_ns(10000);
        /* glibc's mutex word (first int): 2 = locked, with waiters; and
         * the caller asleep on it, not merely about to be: on two busy
         * CPUs it could stay runnable, off the CPU, between setting the
         * word and its futex wait for longer than the hold, and never
         * sleep (a wait that is indistinguishable from a preemption). */
        while (__atomic_load_n((int *)target, __ATOMIC_ACQUIRE) != 2 ||
               !asleep(__atomic_load_n(&caller_tid, __ATOMIC_ACQUIRE)))
            pause_ns(10000);
        pause_ns(2000000);
        real_unlock(target);
    }
    return 0;
}

/* The helper starts with the program, not inside its first lock call:
 * a thread created in the call made that call's own time (the creation,
 * on busy CPUs milliseconds of it runnable) unlike the others'. */
__attribute__((constructor)) static void start_helper(void) {
    resolve_real();
    if (!__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) {
        pthread_t t;
        pthread_create(&t, 0, helper, 0);
        pthread_detach(t);
    }
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    start_helper();
    target = m;
    __atomic_store_n(&caller_tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    __atomic_store_n(&phase, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&phase, __ATOMIC_ACQUIRE) != 2) pause_ns(10000);
    __atomic_store_n(&phase, 3, __ATOMIC_RELEASE);
    return real_lock(m);
}
