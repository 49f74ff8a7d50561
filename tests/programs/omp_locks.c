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
 * exactly. `omp_locks [ITERS]`: ITERS defaults to 20,000. The critical sections do a little work so that the threads
 * meet in them and some calls wait. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>

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
