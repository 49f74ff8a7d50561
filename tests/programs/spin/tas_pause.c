/* A hand-written test-and-set spinlock as programs write them: spin on
 * the exchange with a pause, no yield. Two threads each take it ITERS
 * times; the critical section and the work between sections are a few
 * hundred cycles each, so the waiter spins many times per acquisition.
 * Before detailed mode coalesced exchanges that write the value they
 * find, every spin iteration was one event; the slowdown benchmark
 * times it (FIXTURE_SCALE=N runs N times as many iterations).
 * Every thread counts its own failed exchanges, outside the recorded
 * accesses. stdout (ground truth):
 *   tlock acquisitions N / tlock failed_attempts N / tdata N */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../detailed/truth.h"

#define THREADS 2
#define ITERS 2000

int tlock;
long tdata;
static long failed[THREADS];
static int iters = ITERS;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

NOTSAN static void keep(long id, long f) { failed[id] = f; }

static void *worker(void *arg) {
    long id = (long)arg, f = 0;
    for (int i = 0; i < iters; i++) {
        while (__atomic_exchange_n(&tlock, 1, __ATOMIC_ACQUIRE)) {
            f++;
            cpu_relax();
        }
        for (int k = 0; k < 100; k++)
            tdata += k ^ id;
        __atomic_store_n(&tlock, 0, __ATOMIC_RELEASE);
        for (int k = 0; k < 100; k++)
            __asm__ volatile("" ::: "memory");
    }
    keep(id, f);
    return NULL;
}

NOTSAN static void report(void) {
    printf("tlock acquisitions %d\n", THREADS * iters);
    printf("tlock failed_attempts %ld\n", failed[0] + failed[1]);
    printf("tdata %ld\n", tdata);
}

NOTSAN static void read_scale(void) { iters = ITERS * fixture_scale(); }

int main(void) {
    read_scale();
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    report();
    return 0;
}
