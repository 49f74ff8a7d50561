/* Many short threads: a thread pool or a server that spawns one thread
 * per connection. Creates N threads (default 1000), at most 16 alive at
 * once, each doing K lock+unlock pairs (default 100) on a mutex shared by
 * all; joins them all.
 *
 *   short_threads [threads [pairs [alive]]]
 *
 * (alive: threads running at once, 1..16, default 16; 1 creates and joins
 * them one after another.)
 *
 * Prints the exact counts:
 *   short_threads threads=N acquisitions=N*K seconds=S */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long pairs = 100;
static unsigned long total;
enum { ALIVE = 16 };

static void *run(void *p) {
    (void)p;
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&shared);
        total++;
        pthread_mutex_unlock(&shared);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2) pairs = atol(argv[2]);
    long alive = argc > 3 ? atol(argv[3]) : ALIVE;
    if (n < 1 || n > 1000000 || pairs < 0 || alive < 1 || alive > ALIVE) {
        fprintf(stderr, "usage: short_threads [threads [pairs [alive]]]\n");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t th[ALIVE];
    long started = 0;
    while (started < n) {
        int k = 0;
        for (; k < alive && started < n; k++, started++) {
            if (pthread_create(&th[k], NULL, run, NULL) != 0) {
                perror("pthread_create");
                return 1;
            }
        }
        for (int j = 0; j < k; j++) pthread_join(th[j], NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("short_threads threads=%ld acquisitions=%lu seconds=%.3f\n", n, total,
           (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
