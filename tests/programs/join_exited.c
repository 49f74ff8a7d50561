/* Joins threads that have already exited: each of 6 threads prints its
 * kernel tid and returns at once; main waits until all have exited (their
 * tid fields cleared by the kernel), then joins them in order. The trace
 * must name the joined thread's tid in every join (regression: the join
 * hook read the cleared field and recorded 0). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define N 6
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;
static volatile int done;

static void *run(void *arg) {
    (void)arg;
    pthread_mutex_lock(&out);
    printf("tid %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    done++;
    pthread_mutex_unlock(&out);
    return NULL;
}

int main(void) {
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        if (pthread_create(&t[i], NULL, run, NULL) != 0) return 1;
    /* All have printed; give them time to finish exiting. */
    for (;;) {
        pthread_mutex_lock(&out);
        int d = done;
        pthread_mutex_unlock(&out);
        if (d == N) break;
        usleep(1000);
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < N; i++)
        if (pthread_join(t[i], NULL) != 0) return 2;
    return 0;
}
