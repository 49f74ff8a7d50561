/* A hand-made barrier (a mutex, a condition variable, a counter and a
 * generation number, as PARSEC's parsec_barrier and many programs write
 * it) with known instances and redundancy. The phases are
 * those of barrier_phases.c, with `hbar_wait` in place of
 * pthread_barrier_wait. Three workers, ROUNDS rounds of two phases:
 *
 *   phase A: worker i writes in[r % 2][i]
 *   sync_inputs():  hbar_wait   NEEDED: phase B reads a neighbour's slot
 *   phase B: worker i reads in[r % 2][(i + 1) % 3], writes out[i]
 *   sync_outputs(): hbar_wait   REDUNDANT by construction (double
 *            buffering; out[i] is private until main reads it)
 *
 * Every hbar_wait: the first two arrivals wait on `bar.cond`; the third
 * broadcasts it while holding `bar.mutex`. Worker 2 arrives last at every
 * sync_inputs (it waits for the others' announcements, then sleeps 5 ms),
 * so it is the broadcaster there.
 *
 * Not a barrier: `done_cond`, signalled (not broadcast) by each worker
 * when it finishes, waited on by main.
 *
 * Expected `lockscope barriers` (LOCKSCOPE_ALL_ACCESSES=1):
 *   one barrier (mutex+condvar), `bar`: 2 * ROUNDS = 8 instances, 3
 *   participants each, 4 redundant; context sync_inputs: 4 instances, 0
 *   redundant; sync_outputs: 4 instances, 4 redundant; last arriver at
 *   every sync_inputs: the thread running worker 2. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#if defined(__clang__)
#define NOINL __attribute__((noinline))
#else
#define NOINL __attribute__((noinline, noipa))
#endif

#define THREADS 3
#define ROUNDS 4

struct hbar {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int count;
    int n;
    unsigned gen;
};

struct hbar bar = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, THREADS, 0};
long in[2][THREADS];
long out[THREADS];
int announced;
pthread_mutex_t done_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
int done;

NOINL void hbar_wait(struct hbar *b) {
    pthread_mutex_lock(&b->mutex);
    unsigned gen = b->gen;
    if (++b->count == b->n) {
        b->count = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cond);
    } else {
        while (gen == b->gen)
            pthread_cond_wait(&b->cond, &b->mutex);
    }
    pthread_mutex_unlock(&b->mutex);
}

NOINL void sync_inputs(void) { hbar_wait(&bar); }
NOINL void sync_outputs(void) { hbar_wait(&bar); }

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
    pthread_mutex_lock(&done_mutex);
    done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&done_mutex);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_mutex_lock(&done_mutex);
    while (done < THREADS)
        pthread_cond_wait(&done_cond, &done_mutex);
    pthread_mutex_unlock(&done_mutex);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("out=%ld,%ld,%ld\n", out[0], out[1], out[2]);
    return 0;
}
