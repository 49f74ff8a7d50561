/* Contended mutex workload for the wall-time and distortion benchmarks:
 *   contended THREADS OPS_PER_THREAD
 * Each thread takes one shared mutex OPS times; the critical section and
 * the work between acquisitions are a few dozen ns each, so the lock is
 * contended but not saturated. Prints the elapsed time and how many
 * acquisitions found the mutex taken, as the program itself saw it: a
 * relaxed load of the lock word (glibc's first field, nonzero while
 * held) just before each pthread_mutex_lock, counted per thread. That
 * is the ground truth of the distortion benchmark, with nothing
 * interposed (a counting shim's extra trylock is itself an atomic on the
 * lock's cache line), and it is measured the same way with or without a
 * recorder: under `lockscope record` the trace must agree with it.
 *   threads=N ops=N own_contended=N elapsed_ms=X */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long shared;
static long ops;
static unsigned long own_contended;

static void *run(void *arg) {
    unsigned long x = (unsigned long)arg;
    unsigned long busy = 0;
    for (long i = 0; i < ops; i++) {
        busy += __atomic_load_n((int *)&m, __ATOMIC_RELAXED) != 0;
        pthread_mutex_lock(&m);
        shared = shared * 31 + x;
        pthread_mutex_unlock(&m);
        for (int k = 0; k < 40; k++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    }
    __atomic_fetch_add(&own_contended, busy, __ATOMIC_RELAXED);
    return (void *)x;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    ops = argc > 2 ? atol(argv[2]) : 100000;
    if (threads < 1 || threads > 4096) return 2;
    pthread_t *t = calloc(threads, sizeof *t);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)(long)i);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("threads=%d ops=%ld own_contended=%lu elapsed_ms=%.2f\n", threads, ops * threads,
           own_contended, (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    return 0;
}
