// Fixture for the preload tests: a known number of each synchronization
// call, printed as ground truth ("key=value" lines). Exits with status 3 so
// the test can check that the exit status passes through unchanged.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 4
#define ITERS 1000
#define TRY_FAILS 37

static pthread_mutex_t m[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static sem_t sem;
static pthread_barrier_t bar;
static long counter[2];
static long spun;

static void *worker(void *arg) {
    long id = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", id);
    pthread_setname_np(pthread_self(), name);
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_t *mx = &m[(id + i) % 2];
        pthread_mutex_lock(mx);
        counter[(id + i) % 2]++;
        pthread_mutex_unlock(mx);
    }
    for (int i = 0; i < 100; i++) {
        if (i % 10 == 0) {
            pthread_rwlock_wrlock(&rw);
        } else {
            pthread_rwlock_rdlock(&rw);
        }
        pthread_rwlock_unlock(&rw);
        pthread_spin_lock(&spin);
        spun++;
        pthread_spin_unlock(&spin);
    }
    sem_post(&sem);
    pthread_barrier_wait(&bar);
    return NULL;
}

static void *trier(void *arg) {
    (void)arg;
    int fails = 0;
    for (int i = 0; i < TRY_FAILS; i++) {
        if (pthread_mutex_trylock(&held) == EBUSY) fails++;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    int rc = pthread_mutex_timedlock(&held, &ts);
    printf("trylock_fail=%d\ntimedlock_rc=%s\n", fails, rc == ETIMEDOUT ? "ETIMEDOUT" : strerror(rc));
    return NULL;
}

int main(void) {
    pthread_spin_init(&spin, 0);
    sem_init(&sem, 0, 0);
    pthread_barrier_init(&bar, NULL, THREADS);
    pthread_t t[THREADS], tr;
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) sem_wait(&sem);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_mutex_lock(&held);
    pthread_create(&tr, NULL, trier, NULL);
    pthread_join(tr, NULL);
    pthread_mutex_unlock(&held);
    errno = 1234;
    int sv = sem_trywait(&sem);
    int e = errno;
    printf("sem_trywait=%d errno=%s\n", sv, e == EAGAIN ? "EAGAIN" : "other");
    printf("mutex_pairs=%d\n", THREADS * ITERS + 1);
    printf("counter=%ld spun=%ld\n", counter[0] + counter[1], spun);
    printf("threads=%d\n", THREADS + 1);
    return 3;
}
