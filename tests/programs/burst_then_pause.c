/* Two threads take one mutex 5,000 times each, then the program prints
 *   truth-burst acquisitions=10000
 * and waits, taking no lock, until it is killed (at most 60 s): a
 * program that went idle while its recorder died.
 *
 * Truth: exactly 10,000 acquisitions of `m`, all before the line. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *p) {
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    return p;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("truth-burst acquisitions=10000\n");
    fflush(stdout);
    sleep(60);
    return 0;
}
