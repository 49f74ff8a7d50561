// Micro-benchmark for a recorder goal ("no cost that grows with the thread
// count"): T threads, each locking its own private mutex P times with 20
// iterations of work between pairs; nothing is shared between threads.
// Prints "ns_per_pair=<x>": the slowest thread's time per pair, so the
// figure stays comparable across thread counts when threads run in
// parallel (on fewer CPUs than threads it grows by T/CPUs for everyone,
// recorded or not: compare the recorded/unrecorded ratio per T).
//   private THREADS PAIRS_PER_THREAD
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct worker {
    pthread_t th;
    pthread_mutex_t m;
    long pairs;
    double ns;
    volatile long sink;
    char pad[64];
};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *run(void *p) {
    struct worker *w = p;
    double t0 = now_ns();
    for (long i = 0; i < w->pairs; i++) {
        pthread_mutex_lock(&w->m);
        w->sink++;
        pthread_mutex_unlock(&w->m);
        for (volatile int k = 0; k < 20; k++) {
        }
    }
    w->ns = now_ns() - t0;
    return NULL;
}

int main(int argc, char **argv) {
    int t = argc > 1 ? atoi(argv[1]) : 1;
    long pairs = argc > 2 ? atol(argv[2]) : 1000000L;
    if (t < 1 || t > 1024 || pairs < 1) {
        fprintf(stderr, "usage: private THREADS(1-1024) PAIRS\n");
        return 2;
    }
    struct worker *w = calloc(t, sizeof *w);
    if (!w) return 1;
    for (int i = 0; i < t; i++) {
        pthread_mutex_init(&w[i].m, NULL);
        w[i].pairs = pairs;
        if (pthread_create(&w[i].th, NULL, run, &w[i])) return 1;
    }
    double worst = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(w[i].th, NULL);
        if (w[i].ns > worst) worst = w[i].ns;
    }
    printf("threads=%d pairs=%ld ns_per_pair=%.2f\n", t, pairs, worst / pairs);
    free(w);
    return 0;
}
