/* One long wait for the end of the work, as pbzip2's main thread waits
 * for its workers: main waits once on `all_done` while two workers
 * compute for ~300 ms each; the last to finish signals it. One wait,
 * signalled by a thread that never waits on it: not a lock, whatever
 * its share of the threads' time.
 *
 * Truth: `truth-done waits=1 workers=2`. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define WORKERS 2

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_done = PTHREAD_COND_INITIALIZER;
static int remaining = WORKERS, waits;

static void spin_ms(long ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000L + (b.tv_nsec - a.tv_nsec) / 1000000L < ms);
}

static void *worker(void *p) {
    (void)p;
    spin_ms(300);
    pthread_mutex_lock(&done_lock);
    if (--remaining == 0) pthread_cond_signal(&all_done);
    pthread_mutex_unlock(&done_lock);
    return NULL;
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_mutex_lock(&done_lock);
    while (remaining > 0) {
        pthread_cond_wait(&all_done, &done_lock);
        waits++;
    }
    pthread_mutex_unlock(&done_lock);
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    printf("truth-done waits=%d workers=%d\n", waits, WORKERS);
    return 0;
}
