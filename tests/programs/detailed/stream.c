/* Streaming and spinning fixture for the cost benchmark (coalescing of
 * repeated accesses). Workers first spin on an atomic flag that main sets after 20 ms
 * (every spin iteration is an atomic load: recorded in every detailed
 * mode), then stream over one location: ITERS plain reads of `config`
 * (outside critical sections: recorded with LOCKSCOPE_ALL_ACCESSES=1),
 * taking a lock once per block. Both are runs of identical accesses,
 * what LOCKSCOPE_COALESCE=1 records once with a count.
 * FIXTURE_SCALE=N runs N times as many iterations. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 2
#define ITERS 20000
#define BLOCK 1000

pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
volatile long config = 3;
long total;
int go;
static int iters = ITERS;

static void *worker(void *arg) {
    long id = (long)arg;
    long acc = 0;
    int n = iters; /* one location streamed, not two */
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        ;
    for (int i = 0; i < n; i++) {
        acc += config + id;
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
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    usleep(20000);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("total=%ld\n", total);
    return 0;
}
