/* 512 threads, each doing 10,000 operations: every operation takes the
 * thread's private mutex, every 4th also a mutex shared by all. */
#include "truth.h"

#define THREADS 512
#define OPS 10000

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static volatile long shared_sum;

struct worker {
    pthread_t th;
    unsigned tid;
    pthread_mutex_t priv;
    unsigned long priv_n, shared_n;
};

static void *run(void *p) {
    struct worker *w = p;
    w->tid = truth_tid();
    for (int i = 0; i < OPS; i++) {
        pthread_mutex_lock(&w->priv);
        w->priv_n++;
        pthread_mutex_unlock(&w->priv);
        if (i % 4 == 0) {
            pthread_mutex_lock(&shared);
            shared_sum++;
            w->shared_n++;
            pthread_mutex_unlock(&shared);
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[THREADS];
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr));
    CHECK(pthread_attr_setstacksize(&attr, 256 * 1024));
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_mutex_init(&w[i].priv, NULL));
        CHECK(pthread_create(&w[i].th, &attr, run, &w[i]));
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(w[i].th, NULL));
    for (int i = 0; i < THREADS; i++) {
        truth(w[i].tid, &w[i].priv, "MutexLock", "done", w[i].priv_n);
        truth(w[i].tid, &w[i].priv, "MutexUnlock", "done", w[i].priv_n);
        truth(w[i].tid, &shared, "MutexLock", "done", w[i].shared_n);
        truth(w[i].tid, &shared, "MutexUnlock", "done", w[i].shared_n);
    }
    printf("many_threads: shared sum %ld\n", shared_sum);
    return 0;
}
