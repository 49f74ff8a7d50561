/* Barrier redundancy and imbalance with known answers (as in the thesis,
 * ch. 3). Three workers, ROUNDS rounds of two phases on one barrier:
 *
 *   phase A: worker i writes in[r % 2][i]
 *   sync_inputs():  barrier   NEEDED: phase B reads a neighbour's slot
 *   phase B: worker i reads in[r % 2][(i + 1) % 3], writes out[i]
 *   sync_outputs(): barrier   REDUNDANT by construction: nothing written
 *            in phase B is touched by another worker in the next phase A
 *            (out[i] is private until main reads it after the joins), and
 *            the next phase A writes the other half of the double buffer,
 *            which nobody read in phase B.
 *
 * Imbalance: worker 2 arrives last at every sync_inputs: before calling it
 * it waits until the two others have announced (atomic counter) that they
 * are about to call it, then sleeps 5 ms. The counter is only touched in
 * phase A (never adjacent to sync_outputs), so it adds no dependence
 * across the redundant barrier.
 *
 * Expected `lockscope barriers` (LOCKSCOPE_ALL_ACCESSES=1):
 *   one barrier, `bar`: 2 * ROUNDS = 8 instances, 4 redundant;
 *   context sync_inputs: 4 instances, 0 redundant;
 *   context sync_outputs: 4 instances, 4 redundant;
 *   last arriver at every sync_inputs: the thread running worker 2. */
#include <pthread.h>
#include <stdio.h>
#include <sched.h>
#include <unistd.h>

#if defined(__clang__)
#define NOINL __attribute__((noinline))
#else
#define NOINL __attribute__((noinline, noipa))
#endif

#define THREADS 3
#define ROUNDS 4

pthread_barrier_t bar;
long in[2][THREADS];
long out[THREADS];
int announced;

NOINL void sync_inputs(void) { pthread_barrier_wait(&bar); }
NOINL void sync_outputs(void) { pthread_barrier_wait(&bar); }

static void *worker(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        in[r % 2][id] = id * 10 + r;
        if (id == 2) {
            while (__atomic_load_n(&announced, __ATOMIC_ACQUIRE) < 2 * (r + 1))
                sched_yield();
            usleep(5000);
        } else {
            __atomic_fetch_add(&announced, 1, __ATOMIC_RELEASE);
        }
        sync_inputs();
        out[id] += in[r % 2][(id + 1) % THREADS];
        sync_outputs();
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&bar, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("out=%ld,%ld,%ld\n", out[0], out[1], out[2]);
    return 0;
}
