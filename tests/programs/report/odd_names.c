/* A thread whose name holds a newline, a tab and an escape sequence takes
 * a mutex 1,000 times while main holds it once for 20 ms.
 * Truth: `truth-odd acquisitions=1000` and the thread's name bytes
 * "odd\nname\tx\033[1m" (15 bytes, under the kernel's 16). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *p) {
    pthread_setname_np(pthread_self(), "odd\nname\tx\033[1m");
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    return p;
}

int main(void) {
    pthread_t t;
    pthread_mutex_lock(&m);
    pthread_create(&t, NULL, worker, NULL);
    usleep(20000);
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);
    printf("truth-odd acquisitions=1000\n");
    return 0;
}
