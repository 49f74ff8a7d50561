/* A critical section whose fixed version does half the work: a what-if
 * validation fixture for `--shrink`.
 *
 * Each round a worker does private work, then under the mutex `state_lock`
 * folds its value into a shared state with STEPS dependent steps
 * (`fold_state`). The fix (argv[3] = "half") does STEPS/2 steps of twice
 * the stride, as an optimised section would: half the time under the
 * lock, the same private work.
 *
 * usage: half_section THREADS ROUNDS full|half [STEPS [WORK]]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT 16

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long state = 1;
static int half, steps = 200, work_steps = 400;
static long rounds;
static pthread_barrier_t start;

static unsigned work(unsigned x, int n)
{
    for (int i = 0; i < n; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

__attribute__((noinline)) static void fold_state(unsigned v)
{
    pthread_mutex_lock(&state_lock);
    unsigned long s = state;
    int n = half ? steps / 2 : steps;
    for (int i = 0; i < n; i++)
        s = s * 6364136223846793005ul + (v ^ (unsigned)i);
    state = s;
    pthread_mutex_unlock(&state_lock);
}

static void *worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned x = (unsigned)id * 2654435761u + 5u;
    pthread_barrier_wait(&start);
    for (long r = 0; r < rounds; r++) {
        x = work(x, work_steps);
        fold_state(x);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: %s THREADS ROUNDS full|half [STEPS [WORK]]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    rounds = atol(argv[2]);
    half = strcmp(argv[3], "half") == 0;
    if (argc > 4)
        steps = atoi(argv[4]);
    if (argc > 5)
        work_steps = atoi(argv[5]);
    if (n < 1 || n > MAXT || rounds < 1 || steps < 2 || work_steps < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_t t[MAXT];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("rounds %ld\n", rounds * n);
    return 0;
}
