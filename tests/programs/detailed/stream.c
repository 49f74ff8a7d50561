/* Streaming fixture for the cost benchmark (issue 13 item 1): each worker
 * reads a small shared table over and over (outside critical sections)
 * and folds it into its own slot, taking a lock only once per block.
 * Most accesses are repeated reads of the same few locations with the
 * same values: what a coalescing recorder would record once.
 * FIXTURE_SCALE=N runs N times as many iterations. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 2
#define ITERS 20000
#define BLOCK 1000

pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
long table[16];
long total;
static int iters = ITERS;

static void *worker(void *arg) {
    long id = (long)arg;
    long acc = 0;
    for (int i = 0; i < iters; i++) {
        acc += table[i & 15] + id;
        if (i % BLOCK == BLOCK - 1) {
            pthread_mutex_lock(&m);
            total += acc;
            pthread_mutex_unlock(&m);
            acc = 0;
        }
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    if (getenv("FIXTURE_SCALE"))
        iters = ITERS * atoi(getenv("FIXTURE_SCALE"));
    for (int i = 0; i < 16; i++)
        table[i] = i;
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("total=%ld\n", total);
    return 0;
}
