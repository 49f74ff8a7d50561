/* One mutex over four kinds of critical section, one of which truly
 * conflicts: a what-if validation fixture.
 *
 * Each round a worker does private work, then enters one of four
 * sections under the global mutex `big`, in turn:
 *   null_section    takes the lock and does nothing under it;
 *   read_table      reads a table nobody writes;
 *   bump_slot       updates the thread's own slot;
 *   add_counter     updates one counter shared by all threads (the only
 *                   section that needs the lock).
 * The fix (argv[3] = "fixed") takes `big` only in add_counter: the other
 * three run unlocked, the counter's updates still exclude each other, in
 * whatever order the threads arrive. Both versions print the same
 * `counter N sum S`.
 *
 * usage: four_sections THREADS ROUNDS locked|fixed [READS [WORK]]
 *   READS: table reads (and counter/slot steps) per section (default 96),
 *   WORK: private work steps per round (default 300).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE 1024
#define MAXT 16

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static unsigned table[TABLE];
static unsigned long slots[MAXT * 8]; /* a cache line per thread */
static unsigned long counter;
static int fixed, reads = 96, work_steps = 300;
static long rounds;
static pthread_barrier_t start;

static unsigned work(unsigned x, int n)
{
    for (int i = 0; i < n; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

__attribute__((noinline)) static void null_section(void)
{
    if (!fixed)
        pthread_mutex_lock(&big);
    if (!fixed)
        pthread_mutex_unlock(&big);
}

__attribute__((noinline)) static unsigned read_table(unsigned key)
{
    unsigned s = 0;
    if (!fixed)
        pthread_mutex_lock(&big);
    for (int i = 0; i < reads; i++)
        s += table[(key + (unsigned)i * 13u) % TABLE];
    if (!fixed)
        pthread_mutex_unlock(&big);
    return s;
}

__attribute__((noinline)) static void bump_slot(int id, unsigned v)
{
    if (!fixed)
        pthread_mutex_lock(&big);
    unsigned long s = slots[id * 8];
    for (int i = 0; i < reads; i++)
        s = s * 31u + ((v >> (i & 15)) & 1u);
    slots[id * 8] = s;
    if (!fixed)
        pthread_mutex_unlock(&big);
}

__attribute__((noinline)) static void add_counter(unsigned v)
{
    pthread_mutex_lock(&big);
    unsigned long c = counter;
    for (int i = 0; i < reads; i++)
        c += (v >> (i & 7)) & 3u;
    counter = c;
    pthread_mutex_unlock(&big);
}

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned x = (unsigned)id * 2654435761u + 1u, acc = 0;
    pthread_barrier_wait(&start);
    for (long r = 0; r < rounds; r++) {
        x = work(x, work_steps);
        switch (r & 3) {
        case 0: null_section(); break;
        case 1: acc += read_table(x); break;
        case 2: bump_slot(id, x); break;
        default: add_counter(x); break;
        }
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
        table[i] = (unsigned)i * 2246822519u + 7u;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_t t[MAXT];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r + slots[i * 8];
    }
    printf("counter %lu sum %lu\n", counter, sum);
    return 0;
}
