/* Producer/consumer over a bounded buffer with condition variables:
 * several producers and consumers, pthread_cond_wait, pthread_cond_timedwait
 * (on a monotonic-clock condvar) and pthread_cond_broadcast for shutdown.
 * Prints totals that do not depend on the interleaving. Exit status 0 when
 * every item was consumed exactly once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <errno.h>

#define CAP 8
#define PRODUCERS 3
#define CONSUMERS 4
static long ITEMS = 20000; /* items per producer: argv[1] */

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; /* static init */
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty; /* monotonic clock, set up in main */
static long buf[CAP];
static int head, count, producers_left = PRODUCERS;
static long consumed_sum, consumed_n, timeouts_seen;
static unsigned char *seen;

static void *producer(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < ITEMS; i++) {
        pthread_mutex_lock(&m);
        while (count == CAP)
            pthread_cond_wait(&not_full, &m);
        buf[(head + count) % CAP] = id * ITEMS + i;
        count++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&m);
    }
    pthread_mutex_lock(&m);
    producers_left--;
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&m);
        while (count == 0 && producers_left > 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            t.tv_nsec += 2000000; /* 2 ms */
            if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
            int r = pthread_cond_timedwait(&not_empty, &m, &t);
            if (r == ETIMEDOUT) timeouts_seen++;
            else if (r != 0) { fprintf(stderr, "timedwait: %d\n", r); exit(3); }
        }
        if (count == 0) { pthread_mutex_unlock(&m); return NULL; }
        long v = buf[head];
        head = (head + 1) % CAP;
        count--;
        consumed_sum += v;
        consumed_n++;
        if (seen[v]++) { fprintf(stderr, "item %ld consumed twice\n", v); exit(4); }
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&m);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) ITEMS = atol(argv[1]);
    if (ITEMS < 1) { fprintf(stderr, "usage: condvar_pc [ITEMS_PER_PRODUCER]\n"); return 2; }
    seen = calloc(PRODUCERS * ITEMS, 1);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&not_empty, &ca);
    pthread_t p[PRODUCERS], c[CONSUMERS];
    for (long i = 0; i < CONSUMERS; i++) pthread_create(&c[i], NULL, consumer, NULL);
    for (long i = 0; i < PRODUCERS; i++) pthread_create(&p[i], NULL, producer, (void *)i);
    for (int i = 0; i < PRODUCERS; i++) pthread_join(p[i], NULL);
    for (int i = 0; i < CONSUMERS; i++) pthread_join(c[i], NULL);
    long n = (long)PRODUCERS * ITEMS;
    printf("consumed %ld items, sum %ld (expected %ld)\n", consumed_n, consumed_sum, n * (n - 1) / 2);
    for (long i = 0; i < n; i++)
        if (seen[i] != 1) { printf("item %ld seen %d times\n", i, seen[i]); return 1; }
    printf("every item consumed exactly once\n");
    return consumed_sum == n * (n - 1) / 2 ? 0 : 1;
}
