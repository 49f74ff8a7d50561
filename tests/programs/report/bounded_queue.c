/* A bounded queue (capacity 4) between one fast producer and two slow
 * consumers: the producer spends most of its time waiting on `notfull`,
 * the consumers wait on `notempty` only at the start. These waits are
 * flow control, not a lock: producer and consumers run at the same
 * time, and the thread that signals `notfull` (a consumer) never waits
 * on it. "condition variable ... is used as a lock" must not fire.
 *
 * Truth: `truth-queue items=N consumed=N` (every item produced once and
 * consumed once). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define CAP 4
#define ITEMS 400
#define CONSUMERS 2

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t notfull = PTHREAD_COND_INITIALIZER;
static pthread_cond_t notempty = PTHREAD_COND_INITIALIZER;
static int buf[CAP], head, len, finished;
static long consumed;

static void spin_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < us * 1000);
}

static void *producer(void *p) {
    (void)p;
    for (int i = 0; i < ITEMS; i++) {
        pthread_mutex_lock(&qlock);
        while (len == CAP) pthread_cond_wait(&notfull, &qlock);
        buf[(head + len++) % CAP] = i;
        pthread_cond_signal(&notempty);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    finished = 1;
    pthread_cond_broadcast(&notempty);
    pthread_mutex_unlock(&qlock);
    return NULL;
}

static void *consumer(void *p) {
    (void)p;
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (len == 0 && !finished) pthread_cond_wait(&notempty, &qlock);
        if (len == 0) {
            pthread_mutex_unlock(&qlock);
            return NULL;
        }
        head = (head + 1) % CAP;
        len--;
        consumed++;
        pthread_cond_signal(&notfull);
        pthread_mutex_unlock(&qlock);
        spin_us(200); /* the work on the item, outside the lock */
    }
}

int main(void) {
    pthread_t prod, cons[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) pthread_create(&cons[i], NULL, consumer, NULL);
    pthread_create(&prod, NULL, producer, NULL);
    pthread_join(prod, NULL);
    for (int i = 0; i < CONSUMERS; i++) pthread_join(cons[i], NULL);
    printf("truth-queue items=%d consumed=%ld\n", ITEMS, consumed);
    return 0;
}
