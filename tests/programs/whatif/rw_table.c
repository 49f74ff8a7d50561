/* A read-mostly table behind one lock: a what-if validation fixture for
 * reader-writer scenarios.
 *
 * Each round a worker does private work, then either looks up (reads
 * READS entries) or, with probability UPDATES per thousand, updates
 * (rewrites READS entries) the shared table. argv[3] picks the lock:
 *   mutex    one pthread mutex for both (the program as written);
 *   rwlock   a pthread rwlock with glibc's default attributes (readers
 *            preferred): lookups read-lock, updates write-lock;
 *   rwlock-wp the same, with PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP.
 * The sequence of lookups and updates of each thread is fixed by its
 * seed; the printed `checksum` depends on the interleaving only through
 * the table's contents, `lookups L updates U` never.
 *
 * usage: rw_table THREADS ROUNDS mutex|rwlock|rwlock-wp UPDATES_PER_MILLE [READS [WORK]]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE 2048
#define MAXT 16

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw;
static unsigned table[TABLE];
static int mode; /* 0 mutex, 1 rwlock */
static int reads = 128, work_steps = 300, per_mille;
static long rounds;
static pthread_barrier_t start;
static unsigned long n_lookups[MAXT * 8], n_updates[MAXT * 8];

static unsigned work(unsigned x, int n)
{
    for (int i = 0; i < n; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

__attribute__((noinline)) static unsigned lookup(unsigned key)
{
    unsigned s = 0;
    if (mode == 0)
        pthread_mutex_lock(&m);
    else
        pthread_rwlock_rdlock(&rw);
    for (int i = 0; i < reads; i++)
        s += table[(key + (unsigned)i * 5u) % TABLE];
    if (mode == 0)
        pthread_mutex_unlock(&m);
    else
        pthread_rwlock_unlock(&rw);
    return s;
}

__attribute__((noinline)) static void update(unsigned key)
{
    if (mode == 0)
        pthread_mutex_lock(&m);
    else
        pthread_rwlock_wrlock(&rw);
    for (int i = 0; i < reads; i++)
        table[(key + (unsigned)i * 5u) % TABLE] += key | 1u;
    if (mode == 0)
        pthread_mutex_unlock(&m);
    else
        pthread_rwlock_unlock(&rw);
}

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned x = (unsigned)id * 2654435761u + 3u, acc = 0, dice = (unsigned)id * 40503u + 11u;
    pthread_barrier_wait(&start);
    for (long r = 0; r < rounds; r++) {
        x = work(x, work_steps);
        dice = dice * 1664525u + 1013904223u;
        if ((dice >> 8) % 1000u < (unsigned)per_mille) {
            update(x);
            n_updates[id * 8]++;
        } else {
            acc += lookup(x);
            n_lookups[id * 8]++;
        }
    }
    return (void *)(unsigned long)acc;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 7) {
        fprintf(stderr, "usage: %s THREADS ROUNDS mutex|rwlock|rwlock-wp UPDATES_PER_MILLE [READS [WORK]]\n",
                argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    rounds = atol(argv[2]);
    per_mille = atoi(argv[4]);
    if (argc > 5)
        reads = atoi(argv[5]);
    if (argc > 6)
        work_steps = atoi(argv[6]);
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    if (strcmp(argv[3], "mutex") == 0) {
        mode = 0;
    } else if (strcmp(argv[3], "rwlock") == 0) {
        mode = 1;
    } else if (strcmp(argv[3], "rwlock-wp") == 0) {
        mode = 1;
        pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    } else {
        fprintf(stderr, "unknown lock %s\n", argv[3]);
        return 2;
    }
    if (n < 1 || n > MAXT || rounds < 1 || per_mille < 0 || per_mille > 1000 || reads < 1 ||
        work_steps < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    pthread_rwlock_init(&rw, &a);
    for (int i = 0; i < TABLE; i++)
        table[i] = (unsigned)i * 2246822519u + 7u;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_t t[MAXT];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    unsigned long l = 0, u = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r;
        l += n_lookups[i * 8];
        u += n_updates[i * 8];
    }
    printf("lookups %lu updates %lu checksum %lu\n", l, u, sum);
    return 0;
}
