/* What-if fixture: two threads, each working on its own data
 * inside critical sections of one shared lock `big`. The sections never
 * touch the same data, so the lock only serializes them: removing it
 * (compile with -DNOLOCK) lets both threads run in parallel.
 *
 * argv[1] (optional): rounds per thread (default 400). Each section spins
 * for about 50 us of CPU; outside it, about 5 us.
 * stdout: "sum A B" (deterministic). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static long rounds = 400;
static pthread_barrier_t go; /* the workers start together */

struct worker {
    pthread_t th;
    volatile unsigned long acc;
};

static void spin(volatile unsigned long *acc, long n) {
    for (long i = 0; i < n; i++)
        *acc += (unsigned long)i ^ (*acc >> 3);
}

static void *run(void *arg) {
    struct worker *w = arg;
    pthread_barrier_wait(&go);
    for (long r = 0; r < rounds; r++) {
#ifndef NOLOCK
        pthread_mutex_lock(&big);
#endif
        spin(&w->acc, 20000);
#ifndef NOLOCK
        pthread_mutex_unlock(&big);
#endif
        spin(&w->acc, 2000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        rounds = atol(argv[1]);
    static struct worker w[2];
    pthread_barrier_init(&go, NULL, 2);
    for (int i = 0; i < 2; i++)
        pthread_create(&w[i].th, NULL, run, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i].th, NULL);
    printf("sum %lu %lu\n", w[0].acc & 0xff, w[1].acc & 0xff);
    return 0;
}
