/* A fluidanimate-like lock load: 2 threads (or argv[1]) each take one of
 * 4096 fine-grained cell mutexes per step, with a short critical section
 * and a little work between steps, so that together they do several
 * million lock acquisitions per second with rare contention (PARSEC
 * fluidanimate: ~6M/s over 2 threads, 0.35-0.44% contended).
 *
 *   fluid_like [threads [steps_per_thread [work]]]
 *       defaults: 2 threads, 2,000,000 steps, work 40
 *
 * Prints the exact number of acquisitions made and the rate:
 *   fluid_like threads=T acquisitions=N seconds=S acq_per_s=R */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CELLS 4096

static pthread_mutex_t cell[CELLS];
static double density[CELLS];
static long steps = 2000000, work = 40;

struct worker {
    pthread_t th;
    unsigned seed;
    unsigned long acq;
    double local;
};

static void *run(void *p) {
    struct worker *w = p;
    unsigned x = w->seed;
    double acc = 0;
    for (long i = 0; i < steps; i++) {
        x = x * 1103515245u + 12345u;
        unsigned c = (x >> 8) % CELLS;
        /* Work outside the lock: a neighbourhood computation. */
        for (long k = 0; k < work; k++) acc = acc * 0.999 + (double)((x >> (k & 7)) & 15);
        pthread_mutex_lock(&cell[c]);
        density[c] += acc * 1e-9;
        w->acq++;
        pthread_mutex_unlock(&cell[c]);
    }
    w->local = acc;
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2) steps = atol(argv[2]);
    if (argc > 3) work = atol(argv[3]);
    if (threads < 1 || threads > 256 || steps < 0 || work < 0) {
        fprintf(stderr, "usage: fluid_like [threads(1-256) [steps [work]]]\n");
        return 2;
    }
    for (int i = 0; i < CELLS; i++) pthread_mutex_init(&cell[i], NULL);
    struct worker w[256] = {0};
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i].seed = 12345u + 7919u * (unsigned)i;
        if (pthread_create(&w[i].th, NULL, run, &w[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    unsigned long total = 0;
    double sink = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].th, NULL);
        total += w[i].acq;
        sink += w[i].local;
    }
    double dt = now_s() - t0;
    printf("fluid_like threads=%d acquisitions=%lu seconds=%.3f acq_per_s=%.0f sink=%.3f\n", threads,
           total, dt, total / dt, sink > 0 ? 1.0 : 0.0);
    return 0;
}
