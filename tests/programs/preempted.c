/* Preemption with a known answer. Two threads pinned to one CPU:
 * a worker that takes and releases a mutex every few microseconds of work
 * for 300 ms of its wall time, and a spinner that burns the same CPU
 * meanwhile. The worker runs about half of the time; the rest it is
 * runnable but preempted (CFS slices of milliseconds). The worker measures
 * its own wall and CPU time (CLOCK_THREAD_CPUTIME_ID) over its loop and
 * prints them:
 *   worker wall_ns=W cpu_ns=C
 * so that W - C is the time it was preempted (it never blocks).
 * With `tail`, the worker takes the mutex once and then only
 * works until it exits: the preemptions fall after its last lock call.
 * With `main`, the main thread is the one that works (and prints the
 * `worker` line): it makes no lock call at all, only creates the spinner
 * and joins it, as many main threads do.
 * With `between` (or no mode), the work is between the critical sections.
 * usage: preempted [ms [between|tail|main]] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static volatile unsigned long sink;
static long run_ms = 300;
static int tail;

static long now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void pin(void) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *spinner(void *arg) {
    (void)arg;
    pin();
    while (!stop) sink++;
    return 0;
}

static void *worker(void *arg) {
    (void)arg;
    pin();
    long w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    if (tail) {
        pthread_mutex_lock(&m);
        sink++;
        pthread_mutex_unlock(&m);
        while (now(CLOCK_MONOTONIC) - w0 < run_ms * 1000000L)
            for (int i = 0; i < 2000; i++) sink += i;
    }
    while (!tail && now(CLOCK_MONOTONIC) - w0 < run_ms * 1000000L) {
        for (int i = 0; i < 2000; i++) sink += i;
        pthread_mutex_lock(&m);
        sink++;
        pthread_mutex_unlock(&m);
    }
    long w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
    printf("worker wall_ns=%ld cpu_ns=%ld\n", w1 - w0, c1 - c0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) run_ms = atol(argv[1]);
    if (argc > 2) {
        tail = argv[2][0] == 't';
    }
    pthread_t s, w;
    if (argc > 2 && argv[2][0] == 'm') {
        pin();
        pthread_create(&s, 0, spinner, 0);
        long w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
        while (now(CLOCK_MONOTONIC) - w0 < run_ms * 1000000L)
            for (int i = 0; i < 2000; i++) sink += i;
        long w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
        stop = 1;
        pthread_join(s, 0);
        printf("worker wall_ns=%ld cpu_ns=%ld\n", w1 - w0, c1 - c0);
        return 0;
    }
    pthread_create(&s, 0, spinner, 0);
    pthread_create(&w, 0, worker, 0);
    pthread_join(w, 0);
    stop = 1;
    pthread_join(s, 0);
    return 0;
}
