/* Killed mid-run. Phase 1: 3 threads lock a mutex a known number of times
 * and are joined; the truth of phase 1 is printed. Phase 2: the threads
 * lock a second mutex forever; 50 ms later the process raises SIGKILL.
 * The trace must hold all of phase 1 and a well-formed prefix of phase 2. */
#include "truth.h"
#include <signal.h>
#include <time.h>

#define THREADS 3
static pthread_mutex_t m1 = PTHREAD_MUTEX_INITIALIZER, m2 = PTHREAD_MUTEX_INITIALIZER;

struct worker {
    pthread_t th;
    unsigned tid;
    int phase;
    unsigned long n;
};

static void *run(void *p) {
    struct worker *w = p;
    w->tid = truth_tid();
    if (w->phase == 1) {
        for (int i = 0; i < 10000; i++) {
            pthread_mutex_lock(&m1);
            w->n++;
            pthread_mutex_unlock(&m1);
        }
    } else {
        /* Slow enough (work between pairs) that the recorder keeps up
         * and nothing is lost: the test checks the pairs. */
        volatile unsigned long x = 1;
        for (;;) {
            pthread_mutex_lock(&m2);
            pthread_mutex_unlock(&m2);
            for (int k = 0; k < 300; k++) x = x * 6364136223846793005UL + 1;
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[THREADS], v[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i].phase = 1;
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(w[i].th, NULL));
    for (int i = 0; i < THREADS; i++) {
        truth(w[i].tid, &m1, "MutexLock", "done", w[i].n);
        truth(w[i].tid, &m1, "MutexUnlock", "done", w[i].n);
    }
    printf("truth-m2 addr=%p\n", (void *)&m2);
    fflush(stdout);
    for (int i = 0; i < THREADS; i++) {
        v[i].phase = 2;
        CHECK(pthread_create(&v[i].th, NULL, run, &v[i]));
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return 0;
}
