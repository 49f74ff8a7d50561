/* A hot lock with very short critical sections, taken in a tight loop by
 * twice as many threads as online CPUs (at least 4), which start together
 * (a barrier), so that they contend for it for most of their lives; plus
 * one private lock per thread, never contended. Used by crates/cli/tests/cli/report_advice.rs: the report must
 * recommend a lock algorithm for `hot` and nothing for the private locks.
 *
 * Ground truth: the usual `truth` lines (acquisitions per thread and
 * lock). */
#include "../truth.h"

#define MAX_THREADS 64
#define ITERS 200000

static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start;
static volatile unsigned long counter;
static volatile unsigned spin_sink;

struct worker {
    pthread_t th;
    unsigned tid;
    pthread_mutex_t priv;
    unsigned long n, priv_n;
};

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    int r = pthread_barrier_wait(&start);
    if (r != 0 && r != PTHREAD_BARRIER_SERIAL_THREAD) die("pthread_barrier_wait", r);
    for (int i = 0; i < ITERS; i++) {
        CHECK(pthread_mutex_lock(&hot));
        counter++; /* the whole critical section: one increment */
        CHECK(pthread_mutex_unlock(&hot));
        w->n++;
        /* A little work outside (~100 ns), so that the two threads running
         * at a time keep colliding instead of one re-taking the lock in a
         * long streak. */
        for (int k = 0; k < 64; k++) spin_sink += (unsigned)k;
        if (i % 16 == 0) {
            CHECK(pthread_mutex_lock(&w->priv));
            w->priv_n++;
            CHECK(pthread_mutex_unlock(&w->priv));
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[MAX_THREADS];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int THREADS = cpus < 2 ? 4 : cpus > MAX_THREADS / 2 ? MAX_THREADS : (int)(2 * cpus);
    CHECK(pthread_barrier_init(&start, NULL, (unsigned)THREADS));
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_mutex_init(&w[i].priv, NULL));
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(w[i].th, NULL));
    for (int i = 0; i < THREADS; i++) {
        struct worker *x = &w[i];
        truth(x->tid, &hot, "MutexLock", "done", x->n);
        truth(x->tid, &hot, "MutexUnlock", "done", x->n);
        truth(x->tid, &x->priv, "MutexLock", "done", x->priv_n);
        truth(x->tid, &x->priv, "MutexUnlock", "done", x->priv_n);
    }
    if (counter != (unsigned long)THREADS * ITERS) {
        fprintf(stderr, "counter %lu, expected %lu\n", counter, (unsigned long)THREADS * ITERS);
        return 1;
    }
    return 0;
}
