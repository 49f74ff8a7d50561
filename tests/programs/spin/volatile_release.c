/* The embedded idiom: a `volatile int` lock taken with an atomic swap and
 * released with a plain store (`lock = 0;`). The release is a plain
 * access: recorded (without its value) only with
 * LOCKSCOPE_ALL_ACCESSES=1, and then it counts as the release because the
 * owner makes it. Without it, `lockscope spin` rejects the lock and says
 * why. THREADS threads take `vlock` ITERS times each.
 * stdout: vlock acquisitions N / vdata N. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

#include "../detailed/truth.h"

#define THREADS 2
#define ITERS 500

volatile int vlock;
long vdata;
/* Both threads run at once: one that finished before the other was even
 * created would hand `vdata` over (no lock needed, for Eraser). */
static pthread_barrier_t start;

static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < ITERS; i++) {
        while (__atomic_exchange_n(&vlock, 1, __ATOMIC_ACQUIRE))
            sched_yield();
        vdata++;
        vlock = 0;
    }
    return NULL;
}

NOTSAN static void report(void) {
    printf("vlock acquisitions %d\n", THREADS * ITERS);
    printf("vdata %ld\n", vdata);
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    report();
    return 0;
}
