/* The main thread names a worker thread (pthread_setname_np(worker, ...)),
 * the worker names itself afterwards. Prints the ground truth: each
 * thread's kernel tid and the names, in the order they were set. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_barrier_t named;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pid_t worker_tid;

static void *worker(void *arg) {
    (void)arg;
    worker_tid = gettid();
    pthread_barrier_wait(&named); /* 1: tid published */
    pthread_barrier_wait(&named); /* 2: main has named us */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    pthread_setname_np(pthread_self(), "ls-self");
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_barrier_init(&named, NULL, 2);
    pthread_setname_np(pthread_self(), "ls-main");
    pthread_create(&t, NULL, worker, NULL);
    pthread_barrier_wait(&named);
    pthread_setname_np(t, "ls-by-main");
    pthread_barrier_wait(&named);
    pthread_join(t, NULL);
    printf("name tid=%d name=ls-main\n", (int)gettid());
    printf("name tid=%d name=ls-by-main\n", (int)worker_tid);
    printf("name tid=%d name=ls-self\n", (int)worker_tid);
    return 0;
}
