/* Detached threads, one after another: a server that detaches a thread
 * per connection. Creates N detached threads (default 300), each doing K
 * lock+unlock pairs (default 50) on a shared mutex; the main thread waits
 * for each one's last pair (a semaphore) and gives it a moment to exit
 * before creating the next, so that its buffer can be reused. The main
 * thread locks nothing.
 *
 *   detached_threads [threads [pairs]]
 *
 * Prints the exact counts:
 *   detached_threads threads=N acquisitions=N*K */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long pairs = 50;
static unsigned long total;
static sem_t done;

static void *run(void *p) {
    (void)p;
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&shared);
        total++;
        pthread_mutex_unlock(&shared);
    }
    sem_post(&done);
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 300;
    if (argc > 2) pairs = atol(argv[2]);
    if (n < 1 || n > 100000 || pairs < 0) {
        fprintf(stderr, "usage: detached_threads [threads [pairs]]\n");
        return 2;
    }
    sem_init(&done, 0, 0);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    struct timespec pause = {0, 200 * 1000};
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, run, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
        while (sem_wait(&done) != 0) {
        }
        nanosleep(&pause, NULL);
    }
    pthread_attr_destroy(&a);
    /* `total` is read after every thread's last unlock (each posted after
     * it), so no lock is needed and the main thread locks nothing. */
    printf("detached_threads threads=%ld acquisitions=%lu\n", n, total);
    return 0;
}
