/* A sem_t used as a mutex (initialised to 1, every post by the thread that
 * took it): lockscope must report it as a lock of kind semaphore-lock,
 * with its acquisitions, contention, hold, sites and blame.
 *
 * 4 threads each take the semaphore ITERS times with sem_wait and
 * TRIES_OK times with a successful sem_trywait (failed tries are counted
 * apart), work a little inside and post it back. Main holds it for 50 ms
 * while the threads start, so that each of them waits at least once. Truth lines: per thread,
 * successful waits (op=MutexLock phase=done: what they become in the
 * report), failed tries (op=MutexTrylock phase=fail), and the total
 * `semlock addr=0x.. acquisitions=N`. */
#include "../truth.h"
#include <semaphore.h>
#include <time.h>

#define THREADS 4
#define ITERS 3000
#define TRIES_OK 200

static sem_t lock;
static volatile unsigned long shared;

struct worker {
    pthread_t th;
    unsigned tid;
    unsigned long waits, tries_ok, tries_failed;
};

static void work(void) {
    for (int k = 0; k < 300; k++) shared++;
}

static void *worker_loop(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    for (int i = 0; i < ITERS; i++) {
        if (sem_wait(&lock)) die("sem_wait", errno);
        w->waits++;
        work();
        if (sem_post(&lock)) die("sem_post", errno);
        for (int k = 0; k < 100; k++) __asm__ volatile("" ::: "memory");
    }
    while (w->tries_ok < TRIES_OK) {
        if (sem_trywait(&lock) == 0) {
            w->tries_ok++;
            work();
            if (sem_post(&lock)) die("sem_post", errno);
        } else {
            w->tries_failed++;
        }
    }
    return NULL;
}

int main(void) {
    if (sem_init(&lock, 0, 1)) die("sem_init", errno);
    struct worker w[THREADS] = {0};
    if (sem_wait(&lock)) die("sem_wait", errno);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&w[i].th, NULL, worker_loop, &w[i]));
    struct timespec hold = {0, 50 * 1000 * 1000};
    nanosleep(&hold, NULL);
    if (sem_post(&lock)) die("sem_post", errno);
    truth(truth_tid(), &lock, "MutexLock", "done", 1);
    unsigned long total = 1;
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(w[i].th, NULL));
        truth(w[i].tid, &lock, "MutexLock", "done", w[i].waits + w[i].tries_ok);
        truth(w[i].tid, &lock, "MutexTrylock", "fail", w[i].tries_failed);
        total += w[i].waits + w[i].tries_ok;
    }
    printf("semlock addr=%p acquisitions=%lu\n", (void *)&lock, total);
    return 0;
}
