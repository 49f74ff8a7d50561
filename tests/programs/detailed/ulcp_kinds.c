/* ULCP ground truth: one lock, five kinds of critical section.
 *
 *   cs_none  touches no shared data (PerfPlay Fig. 3: a local flag that
 *            is always false guards the shared update)
 *   cs_read  only reads `config`
 *   cs_slot  writes the thread's own slot of `slots`
 *   cs_inc   increments the shared `counter`
 *   cs_same  writes 1 to `flag` (the same value every time)
 *
 * Pairs of consecutive sections of different threads are therefore:
 * null_lock if either is cs_none, read_read for two cs_read, conflict for
 * two cs_inc, benign for two cs_same, disjoint_write otherwise.
 *
 * stdout: deterministic results (identical with and without lockscope).
 * argv[1] (optional): file to write the ground truth to, computed from the
 * logged order of the sections. FIXTURE_SCALE=N in the environment runs N
 * times as many rounds (for the benchmark; the log then keeps only the
 * first ones and no truth should be asked for). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include "truth.h"

#define THREADS 4
/* Enough rounds that every kind of pair occurs even when the scheduler
 * runs threads in long streaks (2 CPUs, 4 threads: with 150 rounds a run
 * sometimes had no read_read pair at all). */
#define ROUNDS 600
#define MAXLOG (THREADS * ROUNDS)

enum { NONE, READ, SLOT, INC, SAME, NKINDS };
static const char *fn_name[NKINDS] = {"cs_none", "cs_read", "cs_slot", "cs_inc", "cs_same"};
static const char *kind_name[5] = {"null_lock", "read_read", "disjoint_write", "benign", "conflict"};

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
long config;          /* set by main before the threads start, then only read */
long slots[THREADS];  /* one per thread */
long counter;         /* shared, incremented */
int flag;             /* always written with 1 */
static int never;     /* 0 at run time; the compiler cannot know */

static int log_thread[MAXLOG], log_kind[MAXLOG], nlog;

NOTSAN static void note(int thread, int kind) {
    if (nlog < MAXLOG) {
        log_thread[nlog] = thread;
        log_kind[nlog] = kind;
        nlog++;
    }
}

__attribute__((noinline)) long cs_none(int id) {
    int local = never;
    pthread_mutex_lock(&lock);
    note(id, NONE);
    if (local)
        counter++;
    pthread_mutex_unlock(&lock);
    return 0;
}

__attribute__((noinline)) long cs_read(int id) {
    pthread_mutex_lock(&lock);
    note(id, READ);
    long v = config;
    pthread_mutex_unlock(&lock);
    return v;
}

__attribute__((noinline)) long cs_slot(int id) {
    pthread_mutex_lock(&lock);
    note(id, SLOT);
    slots[id] += 1;
    pthread_mutex_unlock(&lock);
    return 0;
}

__attribute__((noinline)) long cs_inc(int id) {
    pthread_mutex_lock(&lock);
    note(id, INC);
    counter++;
    pthread_mutex_unlock(&lock);
    return 0;
}

__attribute__((noinline)) long cs_same(int id) {
    pthread_mutex_lock(&lock);
    note(id, SAME);
    flag = 1;
    pthread_mutex_unlock(&lock);
    return 0;
}

static long (*const cs[NKINDS])(int) = {cs_none, cs_read, cs_slot, cs_inc, cs_same};
static long reads[THREADS];
static pthread_barrier_t start;
static int rounds = ROUNDS;

static void *worker(void *arg) {
    int id = (int)(long)arg;
    unsigned x = 12345u + 977u * (unsigned)id;
    long sum = 0;
    pthread_barrier_wait(&start);
    for (int r = 0; r < rounds; r++) {
        x = x * 1103515245u + 12345u;
        sum += cs[(x >> 16) % NKINDS](id);
        /* Let the other threads in, so that consecutive sections come
         * from different threads. */
        sched_yield();
    }
    reads[id] = sum;
    return NULL;
}

static int pair_kind(int a, int b) {
    if (a == NONE || b == NONE) return 0;
    if (a == READ && b == READ) return 1;
    if (a == INC && b == INC) return 4;
    if (a == SAME && b == SAME) return 3;
    return 2;
}

NOTSAN static void write_truth(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    long pairs[5] = {0};
    long site[NKINDS][NKINDS] = {{0}};
    for (int i = 1; i < nlog; i++) {
        if (log_thread[i - 1] == log_thread[i])
            continue;
        int a = log_kind[i - 1], b = log_kind[i];
        pairs[pair_kind(a, b)]++;
        site[a][b]++;
    }
    fprintf(f, "sections %d\n", nlog);
    for (int k = 0; k < 5; k++)
        fprintf(f, "pairs %s %ld\n", kind_name[k], pairs[k]);
    for (int a = 0; a < NKINDS; a++)
        for (int b = 0; b < NKINDS; b++)
            if (site[a][b])
                fprintf(f, "site %s %s %s %ld\n", fn_name[a], fn_name[b],
                        kind_name[pair_kind(a, b)], site[a][b]);
    fclose(f);
}

int main(int argc, char **argv) {
    pthread_t t[THREADS];
    config = 42;
    if (getenv("FIXTURE_SCALE"))
        rounds = ROUNDS * atoi(getenv("FIXTURE_SCALE"));
    pthread_barrier_init(&start, NULL, THREADS);
    never = argc > 99;
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0, slot_sum = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += reads[i];
    }
    for (int i = 0; i < THREADS; i++)
        slot_sum += slots[i];
    /* Each thread's choices are fixed by its seed, so these are too. */
    printf("sections=%d counter=%ld slots=%ld flag=%d config_reads=%ld\n", nlog, counter,
           slot_sum, flag, total / 42);
    if (argc > 1)
        write_truth(argv[1]);
    return 0;
}
