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
 * recording's fixed start-up costs not to dominate the ratio.
 *
 * Built with -DRECORD_FLOOR (plain gcc/clang, not `lockscope cc`), each
 * atomic operation is followed by what detailed mode cannot avoid doing
 * for it, and nothing else: a fenced clock read (lfence; rdtsc: the
 * operation must not be stamped before it completed) and one event of
 * 64 bytes (a 32-byte head and the slot of a short call path, as the
 * runtime writes for these call sites) into a per-thread ring that is
 * pre-faulted and never read. No ABI call, no re-entrancy guard, no
 * recorder threads. The slowdown benchmark times it: the floor of the
 * design on this fixture (against detailed mode's 5x target). x86-64 only. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "../detailed/truth.h"

#ifdef RECORD_FLOOR
#include <stdint.h>
#include <sys/mman.h>
#include <x86intrin.h>
/* 1 MiB per thread, 8 words per event. */
#define FLOOR_WORDS (1u << 17)
static __thread uint64_t *floor_ring;
static __thread uint64_t floor_w;
static void floor_init(void) {
    floor_ring = mmap(0, FLOOR_WORDS * 8, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (floor_ring == MAP_FAILED)
        abort();
}
static inline __attribute__((always_inline)) void floor_event(int *l, int op, int old, int new_) {
    _mm_lfence();
    uint64_t t = __rdtsc();
    uint64_t *e = floor_ring + (floor_w & (FLOOR_WORDS - 1));
    floor_w += 8;
    e[0] = t;
    e[1] = (uint64_t)l;
    e[2] = (uint64_t)__builtin_return_address(0);
    e[3] = (uint64_t)op << 32 | 2;
    e[4] = (uint64_t)(unsigned)old;
    e[5] = (uint64_t)(unsigned)new_;
    e[6] = (uint64_t)__builtin_return_address(0);
    e[7] = (uint64_t)&floor_w;
}
#define EVENT(l, op, old, new_) floor_event(l, op, old, new_)
#else
#define floor_init() ((void)0)
#define EVENT(l, op, old, new_) ((void)0)
#endif

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
    int old;
    while ((old = __atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE), EVENT(l, 1, old, 1), old)) {
        failed++;
        sched_yield();
    }
    return failed;
}

static inline long ttas_acquire(int *l) {
    long failed = 0;
    int v;
    for (;;) {
        while ((v = __atomic_load_n(l, __ATOMIC_RELAXED), EVENT(l, 0, v, v), v)) {
            failed++;
            sched_yield();
        }
        if (!(v = __atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE), EVENT(l, 1, v, 1), v))
            return failed;
        failed++;
    }
}

static inline void release(int *l) {
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
    EVENT(l, 2, 1, 0);
}

/* The truth is kept out of the recorded accesses. */
NOTSAN static void keep(long id, long tf, long ttf) {
    counts[id].tas_failed = tf;
    counts[id].ttas_failed = ttf;
}

static void *worker(void *arg) {
    long id = (long)arg;
    long tf = 0, ttf = 0;
    floor_init();
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
NOTSAN static void read_scale(void) { iters = ITERS * fixture_scale(); }

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
