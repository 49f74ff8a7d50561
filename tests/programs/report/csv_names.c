/* A thread whose name holds a carriage return ("cr\rxy"):
 * `report --csv threads` must quote it (RFC 4180), or a CSV reader splits
 * the row. Takes one lock 10 times so the thread has a row. */
#define _GNU_SOURCE
#include <pthread.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "cr\rxy");
    for (int i = 0; i < 10; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    return 0;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    return 0;
}
