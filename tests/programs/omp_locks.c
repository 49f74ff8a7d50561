/* Ground truth for the OpenMP hooks (gcc -fopenmp, libgomp): THREADS
 * threads of one parallel region each take, ITERS times,
 *   - the unnamed `#pragma omp critical` (libgomp's own lock, recorded
 *     under the address of libgomp's GOMP_critical_start),
 *   - `#pragma omp critical (tally)` (the lock word is the compiler's
 *     `.gomp_critical_user_tally`),
 *   - an omp_lock_t with omp_set_lock / omp_unset_lock,
 *   - a second omp_lock_t with omp_test_lock until it succeeds, counting
 *     the attempts that failed.
 * Every thread counts its own calls and prints truth lines (truth.h
 * format) after the region; the test compares them with the trace
 * exactly. `omp_locks [ITERS [wait]]`: ITERS defaults to 20,000; with
 * `wait`, threads 0 and 1 then meet once more on the omp_lock_t in a way
 * that makes thread 1 wait, whatever the load. The critical sections do a little work so that the threads
 * meet in them and some calls wait. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <string.h>
#include <time.h>

#include "truth.h"

#define THREADS 3
#define ITERS 20000

/* The compiler's lock variable of `critical (tally)`: a dot in its name,
 * so only an asm label can name it from C. */
extern void *gomp_tally __asm__(".gomp_critical_user_tally");

static omp_lock_t set_lk, test_lk;
static volatile long unnamed_sum, tally_sum, set_sum, test_sum;

struct Counts {
    unsigned tid;
    long unnamed, tally, set, test_ok, test_failed;
};
static struct Counts counts[THREADS];

static void work(volatile long *x) {
    for (int i = 0; i < 20; i++)
        *x += i;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : ITERS;
    int handshake = argc > 2 && strcmp(argv[2], "wait") == 0;
    omp_init_lock(&set_lk);
    omp_init_lock(&test_lk);
#pragma omp parallel num_threads(THREADS)
    {
        int me = omp_get_thread_num();
        struct Counts c = {.tid = truth_tid()};
        for (int i = 0; i < iters; i++) {
#pragma omp critical
            {
                work(&unnamed_sum);
                c.unnamed++;
            }
#pragma omp critical(tally)
            {
                work(&tally_sum);
                c.tally++;
            }
            omp_set_lock(&set_lk);
            work(&set_sum);
            c.set++;
            omp_unset_lock(&set_lk);
            while (!omp_test_lock(&test_lk))
                c.test_failed++;
            work(&test_sum);
            c.test_ok++;
            omp_unset_lock(&test_lk);
        }
        /* One wait that happens whatever the machine's load (on two busy
         * CPUs the loop above can run with no call that waited): thread 0
         * holds set_lk until thread 1 is queued for it, so thread 1's
         * omp_set_lock finds it held. Only
         * with `wait`: the detailed-mode test wants every section to
         * touch its lock's counter. */
        if (handshake && omp_get_num_threads() >= 2 && me < 2) {
            /* Thread 0 takes the lock only once thread 1 is out of its
             * loop (which takes the lock too: holding it before that
             * would deadlock both). */
            static int ready, holding, about;
            if (me == 0) {
                while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
                    ;
                omp_set_lock(&set_lk);
                c.set++;
                __atomic_store_n(&holding, 1, __ATOMIC_RELEASE);
                while (!__atomic_load_n(&about, __ATOMIC_ACQUIRE))
                    ;
                /* Until thread 1 queues: libgomp's lock word leaves 1
                 * ("locked") for "locked, waiters" in its slow path, after
                 * the recorder's hook looked at it. At most 5 s, in case a
                 * libgomp keeps its word otherwise. */
                struct timespec ts = {0, 1000 * 1000};
                for (int i = 0; i < 5000 && __atomic_load_n((int *)&set_lk, __ATOMIC_ACQUIRE) == 1; i++)
                    nanosleep(&ts, NULL);
                omp_unset_lock(&set_lk);
            } else {
                __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
                while (!__atomic_load_n(&holding, __ATOMIC_ACQUIRE))
                    ;
                __atomic_store_n(&about, 1, __ATOMIC_RELEASE);
                omp_set_lock(&set_lk);
                c.set++;
                omp_unset_lock(&set_lk);
            }
        }
        counts[me] = c;
    }
    if (omp_get_max_threads() < 1)
        return 1;
    /* libgomp's own GOMP_critical_start: the preloaded one is what the
     * program's symbol resolves to. */
    void *gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *unnamed = gomp ? dlvsym(gomp, "GOMP_critical_start", "GOMP_1.0") : NULL;
    if (!unnamed) {
        fprintf(stderr, "libgomp's GOMP_critical_start not found\n");
        return 2;
    }
    int threads = 0;
    for (int t = 0; t < THREADS; t++) {
        struct Counts *c = &counts[t];
        if (!c->tid)
            continue; /* fewer threads than asked for */
        threads++;
        truth(c->tid, unnamed, "MutexLock", "done", c->unnamed);
        truth(c->tid, unnamed, "MutexUnlock", "done", c->unnamed);
        truth(c->tid, &gomp_tally, "MutexLock", "done", c->tally);
        truth(c->tid, &gomp_tally, "MutexUnlock", "done", c->tally);
        truth(c->tid, &set_lk, "MutexLock", "done", c->set);
        truth(c->tid, &set_lk, "MutexUnlock", "done", c->set);
        truth(c->tid, &test_lk, "MutexTrylock", "done", c->test_ok);
        truth(c->tid, &test_lk, "MutexTrylock", "fail", c->test_failed);
        truth(c->tid, &test_lk, "MutexUnlock", "done", c->test_ok);
    }
    printf("threads %d sums %ld %ld %ld %ld\n", threads, unnamed_sum, tally_sum, set_sum,
           test_sum);
    omp_destroy_lock(&set_lk);
    omp_destroy_lock(&test_lk);
    return 0;
}
