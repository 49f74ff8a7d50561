/* A spinlock whose holder sleeps inside the critical section once: the
 * `holder-descheduled` warning's ground truth.
 * Two threads (named "sleeper" and "spinner") take `slock` (a
 * test-test-and-set lock) ITERS times each; in its iteration SLEEP_AT the
 * sleeper calls nanosleep for SLEEP_MS while holding it, and measures
 * that hold itself (from just after the acquisition to just before the
 * release).
 * stdout: slock acquisitions N / sleeper hold_ns N. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "../detailed/truth.h"

#define ITERS 200
#define SLEEP_AT 100
#define SLEEP_MS 50

int slock;
long shared;
static long measured;

static void acquire(int *l) {
    for (;;) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            sched_yield();
        if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
            return;
    }
}

static void release(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

NOTSAN static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

NOTSAN static void keep(long v) { measured = v; }

static void *worker(void *arg) {
    long sleeper = (long)arg;
    pthread_setname_np(pthread_self(), sleeper ? "sleeper" : "spinner");
    for (int i = 0; i < ITERS; i++) {
        acquire(&slock);
        shared++;
        if (sleeper && i == SLEEP_AT) {
            long t0 = now_ns();
            struct timespec d = {0, SLEEP_MS * 1000000L};
            nanosleep(&d, NULL);
            keep(now_ns() - t0);
        }
        release(&slock);
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("slock acquisitions %d\n", 2 * ITERS);
    printf("sleeper hold_ns %ld\n", measured);
    printf("shared %ld\n", shared);
    return 0;
}
