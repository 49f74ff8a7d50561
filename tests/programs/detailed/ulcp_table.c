/* Unnecessary lock contention with a known fix (validates `whatif --ulcp-free`).
 *
 * Worker threads look numbers up in a read-only table under one global
 * mutex (`lookup`, a read_read ULCP with every other lookup) and, now and
 * then, bump their own counter under the same mutex (`bump`, a
 * disjoint_write ULCP: each thread writes its own slot). Nothing the
 * threads do under the lock conflicts, so the lock is unnecessary; the
 * fixed version (argv[3] = "fixed") takes no lock and computes the same.
 *
 * usage: ulcp_table THREADS ROUNDS locked|fixed [READS [WORK]]
 * READS: table reads per lookup (default 128), WORK: steps of private
 * work per round outside the lock (default 40); larger values make
 * longer sections and rounds.
 * Prints `sum N` (identical in both versions) on stdout.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE 512
#define MAXT 16

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned table[TABLE];
static unsigned long counts[MAXT * 8]; /* one cache line per thread */
static int fixed;
static long rounds;
static int reads = 128, work_steps = 40;
static pthread_barrier_t start;

static unsigned work(unsigned x, int n)
{
    /* Private work outside the lock. */
    for (int i = 0; i < n; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

__attribute__((noinline)) static unsigned lookup(unsigned key)
{
    unsigned s = 0;
    if (!fixed)
        pthread_mutex_lock(&table_lock);
    for (int i = 0; i < reads; i++)
        s += table[(key + (unsigned)i * 7u) % TABLE];
    if (!fixed)
        pthread_mutex_unlock(&table_lock);
    return s;
}

__attribute__((noinline)) static void bump(int id, unsigned v)
{
    if (!fixed)
        pthread_mutex_lock(&table_lock);
    counts[id * 8] += v & 1u;
    if (!fixed)
        pthread_mutex_unlock(&table_lock);
}

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned x = (unsigned)id * 2654435761u, acc = 0;
    pthread_barrier_wait(&start);
    for (long r = 0; r < rounds; r++) {
        x = work(x, work_steps);
        acc += lookup(x);
        if (r % 4 == 0)
            bump(id, acc);
    }
    return (void *)(unsigned long)acc;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: %s THREADS ROUNDS locked|fixed [READS [WORK]]\n", argv[0]);
        return 2;
    }
    if (argc > 4)
        reads = atoi(argv[4]);
    if (argc > 5)
        work_steps = atoi(argv[5]);
    int n = atoi(argv[1]);
    rounds = atol(argv[2]);
    fixed = strcmp(argv[3], "fixed") == 0;
    if (n < 1 || n > MAXT || rounds < 1 || reads < 1 || work_steps < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    for (int i = 0; i < TABLE; i++)
        table[i] = (unsigned)i * 31u + 7u;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_t t[MAXT];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r + counts[i * 8];
    }
    printf("sum %lu\n", sum);
    return 0;
}
