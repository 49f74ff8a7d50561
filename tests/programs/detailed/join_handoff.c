/* Lockset with happens-before: data handed from one thread to
 * another through pthread_create, pthread_join or a barrier is not shared
 * concurrently and needs no lock.
 *
 *   total      only written under `m` by the workers; main reads it after
 *              pthread_join without the lock (the regression case: it used
 *              to be reported as unprotected).
 *   settings   written by main before it creates the threads, then only
 *              read by the workers.
 *   phase_buf  phase 1: worker i writes phase_buf[i]; barrier; phase 2:
 *              worker i reads phase_buf[(i + 1) % THREADS]. No lock.
 *   racy       incremented by every worker with no lock: a real race.
 *   sink[i]    written by worker i under `m`, read by main after the join.
 *
 * Expected `lockscope lockset` (LOCKSCOPE_ALL_ACCESSES=1):
 *   protected: m -> total
 *   unprotected: racy (only)
 *   states: 8 exclusive (total, phase_buf[0..2], racy, sink[0..2]),
 *   1 shared (settings), 0 shared-modified; all 9 handed over at least
 *   once. */
#include <pthread.h>
#include <stdio.h>

#define THREADS 3
#define ITERS 1000

pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
pthread_barrier_t bar;
long total;
long settings;
long phase_buf[THREADS];
long racy;
long sink[THREADS];

static void *worker(void *arg) {
    long id = (long)arg;
    long s = settings;
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&m);
        total += id + 1;
        pthread_mutex_unlock(&m);
        racy++;
    }
    phase_buf[id] = s * (id + 1);
    pthread_barrier_wait(&bar);
    long v = phase_buf[(id + 1) % THREADS];
    pthread_mutex_lock(&m);
    sink[id] = v; /* sink[id]: only this worker, under m, then main */
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    settings = 7;
    pthread_barrier_init(&bar, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* No lock: every writer has been joined. */
    /* One printf: `stderr` would be one more (exclusive) location. */
    printf("total=%ld sink=%ld,%ld,%ld racy=%ld\n", total, sink[0], sink[1], sink[2], racy);
    return 0;
}
