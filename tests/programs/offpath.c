/* Critical-path fixture: a lock that is contended but off the
 * critical path.
 *
 * Two helper threads fight over `side` (short sections, heavy
 * contention) and finish early; meanwhile main works (sleeps) alone for
 * much longer, then joins them. The run's wall time is main's work: making
 * `side` faster cannot shorten it, though threads wait for it.
 * stdout: "done" (deterministic). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t side = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long shared_side;
static pthread_barrier_t go; /* the helpers start together */

static void spin(volatile unsigned long *acc, long n) {
    for (long i = 0; i < n; i++)
        *acc += (unsigned long)i ^ (*acc >> 3);
}

static void *helper(void *arg) {
    (void)arg;
    volatile unsigned long mine = 0;
    pthread_barrier_wait(&go);
    for (int r = 0; r < 1000; r++) {
        pthread_mutex_lock(&side);
        spin(&shared_side, 4000);
        pthread_mutex_unlock(&side);
        spin(&mine, 400);
    }
    return NULL;
}

int main(void) {
    pthread_t h[2];
    pthread_barrier_init(&go, NULL, 2);
    for (int i = 0; i < 2; i++)
        pthread_create(&h[i], NULL, helper, NULL);
    /* Main's long stretch: off any lock, and sleeping, so that the
     * helpers have the CPUs to contend on. */
    usleep(150000);
    for (int i = 0; i < 2; i++)
        pthread_join(h[i], NULL);
    puts("done");
    return 0;
}
