/* A program idle for most of its life: main sleeps (no lock call at
 * all), then starts one thread that takes a mutex PAIRS times (fewer
 * events than a quarter of its first ring: nothing but its end wakes the
 * recorder's drain) and returns; main joins it and sleeps again before it
 * exits. Usage: idle_then_thread [ms before] [ms after] (default 300 /
 * 300). Prints the mutex address and the pairs taken; the trace must hold
 * exactly those acquisitions, none lost. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PAIRS 100
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;

static void *run(void *arg) {
    (void)arg;
    for (int i = 0; i < PAIRS; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    long before = argc > 1 ? atol(argv[1]) : 300;
    long after = argc > 2 ? atol(argv[2]) : 300;
    sleep_ms(before);
    pthread_t t;
    if (pthread_create(&t, NULL, run, NULL) != 0) return 1;
    if (pthread_join(t, NULL) != 0) return 1;
    sleep_ms(after);
    printf("mutex %p pairs %ld\n", (void *)&m, counter);
    return 0;
}
