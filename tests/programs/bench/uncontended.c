// Micro-benchmark: N uncontended lock+unlock pairs on one mutex, one
// thread. Prints "ns_per_pair=<x>" (best of 5 rounds, to dampen noise on a
// shared machine). Run with and without the recorder to get its cost:
//   uncontended [pairs]          (default 10000000)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile long sink;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000L;
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            pthread_mutex_lock(&m);
            sink++;
            pthread_mutex_unlock(&m);
        }
        double per = (now_ns() - t0) / n;
        if (per < best) best = per;
    }
    printf("pairs=%ld ns_per_pair=%.2f\n", n, best);
    return 0;
}
