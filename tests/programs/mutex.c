/* Mutexes: a hot shared lock taken from two call sites, a heap lock taken
 * with timedlock, a private lock per thread, trylock successes and
 * failures counted. Exits with status 3 (the recorder must pass it on). */
#include "truth.h"
#include <time.h>

#define THREADS 4
#define ITERS 20000

static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *heap_lock;

struct worker {
    pthread_t th;
    unsigned tid;
    pthread_mutex_t priv;
    unsigned long from_a, from_b, try_ok, try_busy, timed, priv_n;
    volatile unsigned long shared_sum;
};

/* Two distinct call sites of pthread_mutex_lock(&hot). */
__attribute__((noinline)) void lock_from_a(void *arg) {
    struct worker *w = arg;
    pthread_mutex_lock(&hot);
    w->shared_sum++;
    pthread_mutex_unlock(&hot);
    w->from_a++;
}
__attribute__((noinline)) void lock_from_b(void *arg) {
    struct worker *w = arg;
    pthread_mutex_lock(&hot);
    w->shared_sum += 2;
    pthread_mutex_unlock(&hot);
    w->from_b++;
}

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    for (int i = 0; i < ITERS; i++) {
        if (i % 3 == 0)
            lock_from_b(w);
        else
            lock_from_a(w);
        pthread_mutex_lock(&w->priv);
        w->priv_n++;
        pthread_mutex_unlock(&w->priv);
        if (i % 10 == 0) {
            int r = pthread_mutex_trylock(&hot);
            if (r == 0) {
                w->try_ok++;
                pthread_mutex_unlock(&hot);
            } else if (r == EBUSY) {
                w->try_busy++;
            } else {
                die("pthread_mutex_trylock", r);
            }
        }
        if (i % 100 == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 10;
            CHECK(pthread_mutex_timedlock(heap_lock, &ts));
            w->timed++;
            pthread_mutex_unlock(heap_lock);
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[THREADS];
    heap_lock = malloc(sizeof *heap_lock);
    CHECK(pthread_mutex_init(heap_lock, NULL));
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_mutex_init(&w[i].priv, NULL));
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(w[i].th, NULL));
    for (int i = 0; i < THREADS; i++) {
        struct worker *x = &w[i];
        truth(x->tid, &hot, "MutexLock", "done", x->from_a + x->from_b);
        truth_site(x->tid, &hot, "MutexLock", "lock_from_a", lock_from_a, x->from_a);
        truth_site(x->tid, &hot, "MutexLock", "lock_from_b", lock_from_b, x->from_b);
        truth(x->tid, &hot, "MutexTrylock", "done", x->try_ok);
        truth(x->tid, &hot, "MutexTrylock", "fail", x->try_busy);
        truth(x->tid, &hot, "MutexUnlock", "done", x->from_a + x->from_b + x->try_ok);
        truth(x->tid, &x->priv, "MutexLock", "done", x->priv_n);
        truth(x->tid, &x->priv, "MutexUnlock", "done", x->priv_n);
        truth(x->tid, heap_lock, "MutexTimedlock", "done", x->timed);
        truth(x->tid, heap_lock, "MutexUnlock", "done", x->timed);
    }
    printf("mutex: done\n");
    fflush(stdout);
    exit(3);
}
