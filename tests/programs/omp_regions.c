/* Ground truth for the OpenMP region and barrier hooks (gcc -fopenmp):
 * REGIONS parallel regions of THREADS threads, each in two phases
 * separated by an explicit `#pragma omp barrier`:
 *   - phase A: thread THREADS-1 waits until every other thread has
 *     counted itself just before the barrier, then sleeps 5 ms: it is the
 *     last to reach the explicit barrier;
 *   - phase B: thread 0 waits the same way for the others at the end of
 *     the region's body, then sleeps 10 ms: it is the last to reach the
 *     barrier at the region's end, and the region's end is two thirds of
 *     all the waiting.
 * The order is made by the counters, not by sleeps alone: on a loaded
 * machine a thread can be kept off the CPUs for longer than any sleep,
 * but not between counting itself and reaching the barrier (a few
 * instructions) for 5 ms. No data crosses either barrier (each region
 * uses its own counters), so in detailed mode both are redundant.
 * stdout: `omp_thread T tid N` per OpenMP thread, then `regions R`. */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define THREADS 3
#define REGIONS 10

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until `*n` other threads have counted themselves, then `ms`. */
static void last(int *n, int ms) {
    while (__atomic_load_n(n, __ATOMIC_ACQUIRE) < THREADS - 1)
        sched_yield();
    sleep_ms(ms);
}

static long tids[THREADS];
static int at_barrier[REGIONS], at_end[REGIONS];

int main(void) {
    int regions = 0;
    for (int r = 0; r < REGIONS; r++) {
#pragma omp parallel num_threads(THREADS)
        {
            int t = omp_get_thread_num();
            tids[t] = syscall(SYS_gettid);
            if (t == THREADS - 1)
                last(&at_barrier[r], 5);
            else
                __atomic_fetch_add(&at_barrier[r], 1, __ATOMIC_RELEASE);
#pragma omp barrier
            if (t == 0)
                last(&at_end[r], 10);
            else
                __atomic_fetch_add(&at_end[r], 1, __ATOMIC_RELEASE);
        }
        regions++;
    }
    for (int t = 0; t < THREADS; t++)
        printf("omp_thread %d tid %ld\n", t, tids[t]);
    printf("regions %d\n", regions);
    return 0;
}
