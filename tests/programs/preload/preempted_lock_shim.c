/* A user's own LD_PRELOAD shim, loaded after lockscope's. Each
 * pthread_mutex_lock that reaches it takes the mutex at once, has a
 * helper thread queue for it (so glibc's lock word says "locked,
 * waiters"), and then keeps the calling thread runnable but off its CPU
 * for 2 ms: the caller and a CPU hog are pinned to one CPU and the caller
 * yields to the hog. To lockscope, whose hook looked at the mutex just
 * before calling on, this is a call that took 2 ms although the lock was
 * free, after which the word says waiters: what a hidden wait looks like,
 * but the thread was preempted while holding the lock, not asleep
 * waiting for it (as the mutex fixture was on a loaded machine).
 * Build: gcc -O2 -shared -fPIC -o libpreempted_lock_shim.so preempted_lock_shim.c -ldl -lpthread */
#define _GNU_SOURCE
#include "user_shim.h"
#include <pthread.h>
#include <sched.h>
#include <time.h>

static pthread_mutex_t *target;
static int go;      /* 1: the helper is asked to queue for `target` */
static int hog_on;  /* 1: the hog spins */
static int started;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Queues for the mutex when asked, through glibc directly (unseen by
 * lockscope), and lets it go as soon as it has it. */
static void *helper(void *arg) {
    (void)arg;
    for (;;) {
        while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) pause_ns(20000);
        real_lock(target);
        real_unlock(target);
        __atomic_store_n(&go, 0, __ATOMIC_RELEASE);
    }
    return 0;
}

/* Burns CPU 0 while asked to. */
static void *hog(void *arg) {
    (void)arg;
    pin(0);
    for (;;) {
        while (!__atomic_load_n(&hog_on, __ATOMIC_ACQUIRE)) pause_ns(20000);
        while (__atomic_load_n(&hog_on, __ATOMIC_ACQUIRE)) {
        }
    }
    return 0;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    resolve_real();
    if (!__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) {
        pin(0);
        pthread_t t;
        pthread_create(&t, 0, helper, 0);
        pthread_detach(t);
        pthread_create(&t, 0, hog, 0);
        pthread_detach(t);
    }
    int rc = real_lock(m);
    target = m;
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    /* glibc's mutex word (first int): 2 = locked, with waiters. */
    long t0 = now_ns();
    while (__atomic_load_n((int *)m, __ATOMIC_ACQUIRE) != 2 && now_ns() - t0 < 100000000L)
        pause_ns(10000);
    __atomic_store_n(&hog_on, 1, __ATOMIC_RELEASE);
    t0 = now_ns();
    while (now_ns() - t0 < 2000000L) sched_yield();
    __atomic_store_n(&hog_on, 0, __ATOMIC_RELEASE);
    return rc;
}
