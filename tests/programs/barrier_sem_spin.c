/* Barriers, semaphores and pthread spinlocks.
 * - 4 threads pass a barrier 1000 times; each counts its serial returns.
 * - a semaphore ping-pong between threads 0 and 1, plus sem_trywait on an
 *   empty semaphore (always fails) and on a posted one (always succeeds),
 *   and sem_timedwait on a posted one.
 * - all 4 threads take a pthread spinlock, with counted trylocks. */
#include "truth.h"
#include <semaphore.h>
#include <time.h>

#define THREADS 4
#define ROUNDS 1000

static pthread_barrier_t bar;
static pthread_spinlock_t spin;
static sem_t ping, pong, empty_sem, full_sem;
static volatile long spin_value;

struct worker {
    pthread_t th;
    unsigned tid;
    int idx;
    unsigned long serial, waits_ping, waits_pong, posts_ping, posts_pong, try_empty,
        try_full, timed_full, posts_full, spins, spin_try_ok, spin_try_busy;
};

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    for (int r = 0; r < ROUNDS; r++) {
        int b = pthread_barrier_wait(&bar);
        if (b == PTHREAD_BARRIER_SERIAL_THREAD)
            w->serial++;
        else if (b != 0)
            die("pthread_barrier_wait", b);
        if (w->idx == 0) {
            sem_post(&ping);
            w->posts_ping++;
            sem_wait(&pong);
            w->waits_pong++;
        } else if (w->idx == 1) {
            sem_wait(&ping);
            w->waits_ping++;
            sem_post(&pong);
            w->posts_pong++;
        }
        if (r % 10 == 0) {
            if (sem_trywait(&empty_sem) == 0) die("sem_trywait on an empty semaphore", 0);
            w->try_empty++;
            sem_post(&full_sem);
            w->posts_full++;
            if (sem_trywait(&full_sem) != 0) die("sem_trywait", errno);
            w->try_full++;
            sem_post(&full_sem);
            w->posts_full++;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 10;
            if (sem_timedwait(&full_sem, &ts) != 0) die("sem_timedwait", errno);
            w->timed_full++;
        }
        for (int k = 0; k < 5; k++) {
            CHECK(pthread_spin_lock(&spin));
            spin_value++;
            w->spins++;
            CHECK(pthread_spin_unlock(&spin));
        }
        int t = pthread_spin_trylock(&spin);
        if (t == 0) {
            w->spin_try_ok++;
            CHECK(pthread_spin_unlock(&spin));
        } else if (t == EBUSY) {
            w->spin_try_busy++;
        } else {
            die("pthread_spin_trylock", t);
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[THREADS];
    CHECK(pthread_barrier_init(&bar, NULL, THREADS));
    CHECK(pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE));
    sem_init(&ping, 0, 0);
    sem_init(&pong, 0, 0);
    sem_init(&empty_sem, 0, 0);
    sem_init(&full_sem, 0, 0);
    for (int i = 0; i < THREADS; i++) {
        w[i].idx = i;
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(w[i].th, NULL));
    unsigned long serial = 0;
    for (int i = 0; i < THREADS; i++) {
        struct worker *x = &w[i];
        serial += x->serial;
        truth(x->tid, &bar, "BarrierWait", "done", ROUNDS);
        /* arg = 1 on the serial thread's return */
        truth(x->tid, &bar, "BarrierWait", "serial", x->serial);
        truth(x->tid, &ping, "SemPost", "done", x->posts_ping);
        truth(x->tid, &ping, "SemWait", "done", x->waits_ping);
        truth(x->tid, &pong, "SemPost", "done", x->posts_pong);
        truth(x->tid, &pong, "SemWait", "done", x->waits_pong);
        truth(x->tid, &empty_sem, "SemTrywait", "fail", x->try_empty);
        truth(x->tid, &full_sem, "SemTrywait", "done", x->try_full);
        truth(x->tid, &full_sem, "SemTimedwait", "done", x->timed_full);
        truth(x->tid, &full_sem, "SemPost", "done", x->posts_full);
        truth(x->tid, (const void *)&spin, "SpinLock", "done", x->spins);
        truth(x->tid, (const void *)&spin, "SpinTrylock", "done", x->spin_try_ok);
        truth(x->tid, (const void *)&spin, "SpinTrylock", "fail", x->spin_try_busy);
        truth(x->tid, (const void *)&spin, "SpinUnlock", "done", x->spins + x->spin_try_ok);
    }
    printf("barrier_sem_spin: %lu serial returns, spin value %ld\n", serial, spin_value);
    return serial == ROUNDS ? 0 : 1;
}
