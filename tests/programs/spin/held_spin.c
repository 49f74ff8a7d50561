/* A test-test-and-set lock whose holder keeps it for a while (a short
 * sleep inside the critical section) while the other thread spins on it
 * with atomic loads: long runs of identical busy loads, which detailed
 * mode coalesces by default (one load plus one `AccessRepeat`). `lockscope
 * spin` must count every one of them: the program counts its own busy
 * loads and failed exchanges.
 * stdout: hlock acquisitions N / hlock failed_attempts N. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "../detailed/truth.h"

#define THREADS 2
#define ITERS 20
#define HOLD_US 200

int hlock;
long hdata;
static long failed[THREADS];
static pthread_barrier_t start;

static long acquire(int *l) {
    long f = 0;
    for (;;) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            f++;
            sched_yield();
        }
        if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
            return f;
        f++;
    }
}

static void release(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* The truth is kept out of the recorded accesses. */
NOTSAN static void keep(long id, long f) { failed[id] = f; }

static void *worker(void *arg) {
    long id = (long)arg;
    long f = 0;
    pthread_barrier_wait(&start);
    for (int i = 0; i < ITERS; i++) {
        f += acquire(&hlock);
        hdata++;
        struct timespec d = {0, HOLD_US * 1000L};
        nanosleep(&d, NULL);
        release(&hlock);
    }
    keep(id, f);
    return NULL;
}

NOTSAN static long total(void) {
    long f = 0;
    for (int i = 0; i < THREADS; i++)
        f += failed[i];
    return f;
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("hlock acquisitions %d\n", THREADS * ITERS);
    printf("hlock failed_attempts %ld\n", total());
    return 0;
}
