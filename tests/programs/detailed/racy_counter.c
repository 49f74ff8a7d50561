/* Lockset ground truth: `protected_total` is only touched with `m` held
 * (main reads it under `m` too); `racy_hits` is incremented by every
 * thread with no lock; `config` is written by main before the threads
 * start and then only read (Eraser's exclusive-then-shared: no report);
 * `table` is a heap block, filled by main before the threads start and
 * then updated under `m`, so `m` protects it too.
 *
 * Expected `lockscope lockset` result (with LOCKSCOPE_ALL_ACCESSES=1):
 *   protected: m -> protected_total, table (read under m), the heap block
 *              allocated by make_table
 *   unprotected: racy_hits
 * stdout: deterministic except for racy_hits, which is printed on stderr
 * (a lost update makes it vary). FIXTURE_SCALE=N runs N times as many
 * iterations (benchmark only). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 3
#define ITERS 2000

pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
long protected_total;
long racy_hits;
long config;
long *table;
static int iters = ITERS;

__attribute__((noinline)) long *make_table(int n) {
    long *t = malloc(sizeof(long) * (size_t)n);
    for (int i = 0; i < n; i++)
        t[i] = 0;
    return t;
}

static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < iters; i++) {
        long c = config;
        pthread_mutex_lock(&m);
        protected_total += c;
        table[(i + id) % 4] += 1;
        pthread_mutex_unlock(&m);
        racy_hits++;
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    config = 2;
    if (getenv("FIXTURE_SCALE"))
        iters = ITERS * atoi(getenv("FIXTURE_SCALE"));
    table = make_table(4);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_lock(&m);
    printf("protected_total=%ld table_sum=%ld\n", protected_total,
           table[0] + table[1] + table[2] + table[3]);
    pthread_mutex_unlock(&m);
    fprintf(stderr, "racy_hits=%ld (%d without lost updates)\n", racy_hits, THREADS * iters);
    return 0;
}
