/* Ground truth for `lockscope spin`: two hand-written spinlocks that no
 * library call reveals, built from GCC/clang __atomic builtins.
 *   - `tas_lock`: test-and-set (spin on the exchange itself);
 *   - `ttas_lock`: test-test-and-set (spin on a load, then exchange).
 * THREADS workers (released together by a barrier) each take each lock ITERS times; `tas_data` is only
 * touched under `tas_lock`, `ttas_data` only under `ttas_lock`.
 * Every thread counts its own failed attempts exactly as the analysis
 * defines them: an exchange or a load that found the lock busy.
 * stdout (the ground truth, `key... value` lines):
 *   tas_lock acquisitions N / failed_attempts N
 *   ttas_lock acquisitions N / failed_attempts N
 *   tas_data N / ttas_data N
 * FIXTURE_SCALE=N (environment) runs N times as many iterations: the
 * slowdown benchmark's runs then last long enough (tens of ms) for the
 * recording's fixed start-up costs not to dominate the ratio. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "../detailed/truth.h"

#define THREADS 3
#define ITERS 2000

int tas_lock;
int ttas_lock;
long tas_data;
long ttas_data;

struct Counts {
    long tas_failed, ttas_failed;
};
static struct Counts counts[THREADS];
static pthread_barrier_t start;
static int iters = ITERS;

static inline long tas_acquire(int *l) {
    long failed = 0;
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        failed++;
        sched_yield();
    }
    return failed;
}

static inline long ttas_acquire(int *l) {
    long failed = 0;
    for (;;) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            failed++;
            sched_yield();
        }
        if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
            return failed;
        failed++;
    }
}

static inline void release(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* The truth is kept out of the recorded accesses. */
NOTSAN static void keep(long id, long tf, long ttf) {
    counts[id].tas_failed = tf;
    counts[id].ttas_failed = ttf;
}

static void *worker(void *arg) {
    long id = (long)arg;
    long tf = 0, ttf = 0;
    pthread_barrier_wait(&start);
    for (int i = 0; i < iters; i++) {
        tf += tas_acquire(&tas_lock);
        tas_data += id + 1;
        release(&tas_lock);
        ttf += ttas_acquire(&ttas_lock);
        ttas_data += id + 1;
        release(&ttas_lock);
    }
    keep(id, tf, ttf);
    return NULL;
}

NOTSAN static void report(void) {
    long tf = 0, ttf = 0;
    for (int i = 0; i < THREADS; i++) {
        tf += counts[i].tas_failed;
        ttf += counts[i].ttas_failed;
    }
    printf("tas_lock acquisitions %d\n", THREADS * iters);
    printf("tas_lock failed_attempts %ld\n", tf);
    printf("ttas_lock acquisitions %d\n", THREADS * iters);
    printf("ttas_lock failed_attempts %ld\n", ttf);
    /* Read here, uninstrumented: a read after the joins with no lock
     * held would be (rightly, for Eraser) an unprotected access. */
    printf("tas_data %ld\nttas_data %ld\n", tas_data, ttas_data);
}

/* Kept out of the recorded accesses, like the truth. */
NOTSAN static void read_scale(void) {
    const char *s = getenv("FIXTURE_SCALE");
    if (s && atoi(s) > 0)
        iters = ITERS * atoi(s);
}

int main(void) {
    read_scale();
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    report();
    return 0;
}
