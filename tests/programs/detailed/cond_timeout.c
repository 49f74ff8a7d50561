/* Regression fixture: critical sections re-opened by a timed-out
 * condition wait.
 *
 * Thread `waiter` takes `m`, waits on `cv` with a 1 ms timeout that always
 * expires (nobody signals), then increments `counter` with `m` held again
 * and unlocks. Thread `plain` increments `counter` in an ordinary critical
 * section of `m`. Every access to `counter` is therefore under `m`.
 *
 * Sections of `m`: per waiter round two (lock .. wait, timeout .. unlock),
 * per plain round one, plus main's final read. A timed-out wait returns ETIMEDOUT (110); an
 * analysis that opened the re-acquired section on that errno instead of
 * the mutex saw a lock at address 0x6e and `counter` unprotected.
 *
 * stdout: the final counter (deterministic). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 20

pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
long counter;
static int timeouts;

static void *waiter(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&m);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        int rc;
        do {
            rc = pthread_cond_timedwait(&cv, &m, &ts);
        } while (rc == 0); /* spurious wake-up: wait again until the timeout */
        if (rc == ETIMEDOUT)
            timeouts++;
        counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void *plain(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, waiter, NULL);
    pthread_create(&b, NULL, plain, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    /* Read under `m` too, so that every access to `counter` is. */
    pthread_mutex_lock(&m);
    long total = counter;
    int tmo = timeouts;
    pthread_mutex_unlock(&m);
    printf("counter %ld timeouts %d\n", total, tmo);
    return tmo == ROUNDS ? 0 : 1;
}
