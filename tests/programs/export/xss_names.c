/* Threads whose names are markup: the HTML report must show them as text
 * (crates/cli/tests/cli/export_html.rs). Two workers named "<script>" and
 * "<img src=x>" take one lock in turn, the first holding it across a
 * short sleep so that the second waits. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t ready;

static void *first(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "<script>");
    pthread_mutex_lock(&shared_lock);
    pthread_barrier_wait(&ready);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&shared_lock);
    return NULL;
}

static void *second(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "<img src=x>");
    pthread_barrier_wait(&ready);
    pthread_mutex_lock(&shared_lock);
    pthread_mutex_unlock(&shared_lock);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_barrier_init(&ready, NULL, 2);
    pthread_create(&a, NULL, first, NULL);
    pthread_create(&b, NULL, second, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    puts("done");
    return 0;
}
