/* A lock held across a 20 ms sleep, 30 times, while two other threads
 * wait for it and take it briefly: the waiting is the sleeping holder's
 * section, which no lock algorithm shortens. The advice must put
 * "reduce hold" (shorten hold_and_sleep's section) first.
 *
 * Truth: `truth-sleep rounds=30 hold_ms=20 waiters=2`. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define ROUNDS 30

static pthread_mutex_t slow_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static long taken;

__attribute__((noinline)) static void hold_and_sleep(void) {
    pthread_mutex_lock(&slow_lock);
    usleep(20000);
    pthread_mutex_unlock(&slow_lock);
}

static void *sleeper(void *p) {
    (void)p;
    for (int i = 0; i < ROUNDS; i++) {
        hold_and_sleep();
        usleep(500); /* let the waiters in between */
    }
    stop = 1;
    return NULL;
}

static void *waiter(void *p) {
    (void)p;
    while (!stop) {
        pthread_mutex_lock(&slow_lock);
        taken++;
        pthread_mutex_unlock(&slow_lock);
        usleep(100);
    }
    return NULL;
}

int main(void) {
    pthread_t s, w[2];
    pthread_create(&s, NULL, sleeper, NULL);
    for (int i = 0; i < 2; i++) pthread_create(&w[i], NULL, waiter, NULL);
    pthread_join(s, NULL);
    for (int i = 0; i < 2; i++) pthread_join(w[i], NULL);
    printf("truth-sleep rounds=%d hold_ms=20 waiters=2\n", ROUNDS);
    return 0;
}
