/* Ground truth for the OpenMP region and barrier hooks (gcc -fopenmp):
 * REGIONS parallel regions of THREADS threads, each in two phases
 * separated by an explicit `#pragma omp barrier`:
 *   - phase A: OpenMP thread t sleeps (1 + 4t) ms, so thread THREADS-1
 *     is the last to reach the explicit barrier, by 4 ms at least;
 *   - phase B: thread 0 sleeps 8 ms, the others nothing, so thread 0 is
 *     the last to reach the barrier at the region's end.
 * Sleeping, not computing: the order of arrival does not depend on how
 * the threads share the CPUs.
 * stdout: `omp_thread T tid N` per OpenMP thread, then `regions R`. */
#define _GNU_SOURCE
#include <omp.h>
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

static long tids[THREADS];

int main(void) {
    int regions = 0;
    for (int r = 0; r < REGIONS; r++) {
#pragma omp parallel num_threads(THREADS)
        {
            int t = omp_get_thread_num();
            tids[t] = syscall(SYS_gettid);
            sleep_ms(1 + 4 * t);
#pragma omp barrier
            if (t == 0)
                sleep_ms(8);
        }
        regions++;
    }
    for (int t = 0; t < THREADS; t++)
        printf("omp_thread %d tid %ld\n", t, tids[t]);
    printf("regions %d\n", regions);
    return 0;
}
