/* The program of PinCS Fig. 1: three threads, one reader-writer lock taken
 * for writing; inside, a private counter, the shared counter `shared`
 * (on about half of the iterations, decided by a per-thread coin) and the
 * thread's own element of `shared_array`, then some thinking.
 *
 * Ground truth, for the data-access model (exact, from the logged order
 * of the sections):
 *   - per section: rdops = wrops = rdwr locs = rdwr cachelines = 1 + inc,
 *     rd locs = rd cachelines = 0 (the private counter is on the stack);
 *   - conflicts only through `shared` (intersect locs = 1): C(A, B) = 0.5
 *     exactly when both A and B incremented it;
 *   - `shared_array` fits one cache line, separate from `shared`'s, so
 *     every pair conflicts at cache-line level (false sharing): the line
 *     intersection is 1 + (both incremented).
 * Each read is separated from its write by a call, so that no compiler
 * merges the two accesses into one.
 *
 * stdout: deterministic results. argv[1] (optional): truth file.
 * FIXTURE_SCALE=N runs N times as many iterations (benchmark only). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "truth.h"

#define THREADS 3
#define ITERS 300
#define MAXLOG (THREADS * ITERS)

pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
volatile int shared __attribute__((aligned(64)));
volatile int shared_array[THREADS] __attribute__((aligned(64)));

static int log_thread[MAXLOG], log_inc[MAXLOG], nlog;
static int incs[THREADS];
static int iters = ITERS;

NOTSAN static void note(int thread, int inc) {
    if (nlog < MAXLOG) {
        log_thread[nlog] = thread;
        log_inc[nlog] = inc;
        nlog++;
    }
}

__attribute__((noinline)) static void step(void) {
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static unsigned think(unsigned n) {
    unsigned x = n;
    for (unsigned i = 0; i < n; i++) {
        x = x * 31u + i;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static void *work(void *v) {
    volatile int private = 0;
    int thd_id = (int)(long)v;
    unsigned coin = 7u + 31u * (unsigned)thd_id;
    for (int i = 0; i < iters; i++) {
        coin = coin * 1103515245u + 12345u;
        int inc_shared = (coin >> 16) & 1;
        pthread_rwlock_wrlock(&lock);
        note(thd_id, inc_shared);
        private++;
        if (inc_shared) {
            int s = shared;
            step();
            shared = s + 1;
        }
        int a = shared_array[thd_id];
        step();
        shared_array[thd_id] = a + 1;
        think(20000);
        pthread_rwlock_unlock(&lock);
        incs[thd_id] += inc_shared;
        think(10);
    }
    return NULL;
}

/* p_c and the mean intersections, computed exactly as lockscope occ
 * defines them, from the logged order. */
NOTSAN static void write_truth(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    double p_sum = 0, il_sum = 0, ic_sum = 0;
    long p_n = 0, il_n = 0, ic_n = 0, ops = 0;
    for (int i = 0; i < nlog; i++) {
        ops += 1 + log_inc[i];
        double c_sum = 0;
        long c_n = 0;
        for (int t = 0; t < THREADS; t++) {
            if (t == log_thread[i])
                continue;
            int before = -1, after = -1;
            for (int j = i - 1; j >= 0; j--)
                if (log_thread[j] == t) { before = j; break; }
            for (int j = i + 1; j < nlog; j++)
                if (log_thread[j] == t) { after = j; break; }
            int w[2] = {before, after};
            for (int k = 0; k < 2; k++) {
                if (w[k] < 0)
                    continue;
                int both = log_inc[i] && log_inc[w[k]];
                c_n++;
                if (both) {
                    c_sum += 0.5;
                    il_sum += 1;
                    il_n++;
                }
                ic_sum += 1 + both;
                ic_n++;
            }
        }
        if (c_n) {
            p_sum += c_sum / c_n;
            p_n++;
        }
    }
    fprintf(f, "sections %d\n", nlog);
    fprintf(f, "rdops %.9f\n", (double)ops / nlog);
    fprintf(f, "wrops %.9f\n", (double)ops / nlog);
    fprintf(f, "rdwr_locs %.9f\n", (double)ops / nlog);
    fprintf(f, "rd_locs 0\n");
    fprintf(f, "rdwr_cachelines %.9f\n", (double)ops / nlog);
    fprintf(f, "rd_cachelines 0\n");
    fprintf(f, "pair_conflict %.9f\n", p_n ? p_sum / p_n : 0.0);
    fprintf(f, "intersect_locs %.9f\n", il_n ? il_sum / il_n : 0.0);
    fprintf(f, "intersect_cachelines %.9f\n", ic_n ? ic_sum / ic_n : 0.0);
    for (int t = 0; t < THREADS; t++)
        fprintf(f, "x_acq %d %d\n", t, ITERS);
    fclose(f);
}

int main(int argc, char **argv) {
    pthread_t t[THREADS];
    if (getenv("FIXTURE_SCALE"))
        iters = ITERS * atoi(getenv("FIXTURE_SCALE"));
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int sum = 0;
    for (int i = 0; i < THREADS; i++)
        sum += incs[i];
    printf("shared=%d (expected %d) array=%d,%d,%d\n", shared, sum, shared_array[0],
           shared_array[1], shared_array[2]);
    if (argc > 1)
        write_truth(argv[1]);
    return 0;
}
