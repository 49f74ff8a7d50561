/* Statically initialised mutexes (normal, recursive, adaptive), init'd
 * recursive and error-checking mutexes, and mutexes in heap memory that are
 * init'd, used and destroyed repeatedly; threads > cores increment
 * counters. Prints the totals and the error codes of the special kinds. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>

#define THREADS 6
static int ITERS = 20000; /* per thread: argv[1] */
#define NLOCKS 16

static pthread_mutex_t locks[NLOCKS] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static long counters[NLOCKS];
static pthread_mutex_t rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static long rec_count, rec2_count, adaptive_count;
static pthread_mutex_t errchk;
static pthread_mutex_t rec2;

static void *work(void *arg) {
    unsigned s = (unsigned)(long)arg * 2654435761u + 1;
    for (int i = 0; i < ITERS; i++) {
        s = s * 1103515245u + 12345u;
        int k = (s >> 16) % NLOCKS;
        pthread_mutex_lock(&locks[k]);
        counters[k]++;
        pthread_mutex_unlock(&locks[k]);
        if (i % 8 == 0) {
            pthread_mutex_lock(&rec);
            pthread_mutex_lock(&rec); /* recursive: must not deadlock */
            rec_count++;
            pthread_mutex_unlock(&rec);
            pthread_mutex_unlock(&rec);
            pthread_mutex_lock(&adaptive);
            adaptive_count++;
            pthread_mutex_unlock(&adaptive);
        }
        if (i % 64 == 0) {
            /* A heap mutex: init, use, destroy, free. */
            pthread_mutex_t *h = malloc(sizeof *h);
            pthread_mutex_init(h, NULL);
            pthread_mutex_lock(h);
            pthread_mutex_unlock(h);
            pthread_mutex_destroy(h);
            free(h);
            pthread_mutex_lock(&rec2);
            pthread_mutex_lock(&rec2);
            rec2_count++;
            pthread_mutex_unlock(&rec2);
            pthread_mutex_unlock(&rec2);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) ITERS = atoi(argv[1]);
    if (ITERS < 1) { fprintf(stderr, "usage: static_kinds [ITERATIONS_PER_THREAD]\n"); return 2; }
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&errchk, &a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rec2, &a);
    printf("errorcheck unlock unowned: %s\n", pthread_mutex_unlock(&errchk) == EPERM ? "EPERM" : "other");
    pthread_mutex_lock(&errchk);
    printf("errorcheck relock: %s\n", pthread_mutex_lock(&errchk) == EDEADLK ? "EDEADLK" : "other");
    pthread_mutex_unlock(&errchk);
    printf("recursive trylock while held by self: %d\n", (pthread_mutex_lock(&rec2), pthread_mutex_trylock(&rec2)));
    pthread_mutex_unlock(&rec2);
    pthread_mutex_unlock(&rec2);

    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    long total = 0;
    for (int k = 0; k < NLOCKS; k++) total += counters[k];
    printf("static mutexes: total %ld (expected %d)\n", total, THREADS * ITERS);
    printf("recursive (static): %ld (expected %d)\n", rec_count, THREADS * ((ITERS + 7) / 8));
    printf("recursive (init'd): %ld (expected %d)\n", rec2_count, THREADS * ((ITERS + 63) / 64));
    printf("adaptive: %ld (expected %d)\n", adaptive_count, THREADS * ((ITERS + 7) / 8));
    int ok = total == THREADS * ITERS && rec_count == THREADS * ((ITERS + 7) / 8) &&
             rec2_count == THREADS * ((ITERS + 63) / 64) && adaptive_count == THREADS * ((ITERS + 7) / 8);
    return ok ? 0 : 1;
}
