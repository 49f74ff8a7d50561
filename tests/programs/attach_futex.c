// Ground truth for attach mode (`lockscope record -p PID`): threads take
// a hand-written futex lock (Drepper's three-state mutex, "Futexes Are
// Tricky" §6) for a given number of seconds and log every FUTEX_WAIT
// that slept (returned 0) with its CLOCK_MONOTONIC start and end, and
// every FUTEX_WAKE that woke a thread, so that a test can count exactly
// the blocking waits inside the window an attached recorder saw.
//
// usage: attach_futex THREADS SECONDS LOGFILE [pthread]
// prints: "iterations N counter C" (C == N: the lock excluded).
// With `pthread`, the lock is the pthread mutex `pm` instead (glibc waits
// in its own code: nothing is logged), for the kind a report gives it.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOG (1 << 20)

static atomic_int word;  // 0 free, 1 held, 2 held with waiters
static pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
static int use_pthread;
static long counter;

struct rec { long long start, end; char kind; };
static struct rec log_[MAX_LOG];
static atomic_long nlog;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void note(long long s, long long e, char kind) {
    long i = atomic_fetch_add(&nlog, 1);
    if (i < MAX_LOG) {
        log_[i].start = s;
        log_[i].end = e;
        log_[i].kind = kind;
    }
}

static void lock(void) {
    if (use_pthread) {
        pthread_mutex_lock(&pm);
        return;
    }
    int c = 0;
    if (atomic_compare_exchange_strong(&word, &c, 1))
        return;
    if (c != 2)
        c = atomic_exchange(&word, 2);
    while (c != 0) {
        long long s = now_ns();
        long r = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        if (r == 0)
            note(s, now_ns(), 'W');
        c = atomic_exchange(&word, 2);
    }
}

static void unlock(void) {
    if (use_pthread) {
        pthread_mutex_unlock(&pm);
        return;
    }
    if (atomic_fetch_sub(&word, 1) != 1) {
        atomic_store(&word, 0);
        long long s = now_ns();
        long r = syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        if (r > 0)
            note(s, now_ns(), 'K');
    }
}

static long long deadline;

static void *worker(void *arg) {
    long n = 0;
    volatile unsigned x = 0;
    while (now_ns() < deadline) {
        lock();
        counter++;
        for (int i = 0; i < 3000; i++)
            x += i;
        unlock();
        for (int i = 0; i < 1000; i++)
            x += i;
        n++;
    }
    return (void *)n;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "pthread") == 0)) {
        fprintf(stderr, "usage: %s THREADS SECONDS LOGFILE [pthread]\n", argv[0]);
        return 2;
    }
    use_pthread = argc == 5;
    int threads = atoi(argv[1]);
    double seconds = atof(argv[2]);
    if (threads < 1 || threads > 64 || seconds <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    deadline = now_ns() + (long long)(seconds * 1e9);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    long n = atomic_load(&nlog);
    if (n > MAX_LOG) {
        fprintf(stderr, "log full: %ld records\n", n);
        return 1;
    }
    for (long i = 0; i < n; i++)
        fprintf(f, "%c %lld %lld\n", log_[i].kind, log_[i].start, log_[i].end);
    fclose(f);
    printf("iterations %ld counter %ld\n", total, counter);
    return 0;
}
