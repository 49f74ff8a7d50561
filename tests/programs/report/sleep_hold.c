/* A lock held across a known sleep while another thread waits for it,
 * and a lock used by one thread only.
 *
 * Ground truth (besides the usual `truth` lines):
 *   hold pid=P tid=T addr=A hold_ns=N fn=hold_and_sleep
 *       the holder's own measurement of its critical section (taken
 *       inside it, so the recorded hold can only be a little longer);
 *   blame pid=P waiter=T holder=T addr=A waiter_fn=wait_for_it holder_fn=hold_and_sleep
 *       the waiter waited for exactly that critical section. */
#include "../truth.h"
#include <time.h>

#define SOLO 1000

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t solo_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int holding;
static unsigned holder_tid, waiter_tid;
static long hold_ns;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) void hold_and_sleep(void) {
    pthread_mutex_lock(&held_lock);
    long t0 = now_ns();
    holding = 1;
    usleep(200000);
    long t1 = now_ns();
    pthread_mutex_unlock(&held_lock);
    hold_ns = t1 - t0;
}

__attribute__((noinline)) void wait_for_it(void) {
    pthread_mutex_lock(&held_lock);
    pthread_mutex_unlock(&held_lock);
}

static void *holder(void *arg) {
    (void)arg;
    holder_tid = truth_tid();
    hold_and_sleep();
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    waiter_tid = truth_tid();
    while (!holding) usleep(1000);
    usleep(20000); /* well inside the holder's sleep */
    wait_for_it();
    for (int i = 0; i < SOLO; i++) {
        pthread_mutex_lock(&solo_lock);
        pthread_mutex_unlock(&solo_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, holder, NULL));
    CHECK(pthread_create(&b, NULL, waiter, NULL));
    CHECK(pthread_join(a, NULL));
    CHECK(pthread_join(b, NULL));
    truth(holder_tid, &held_lock, "MutexLock", "done", 1);
    truth(waiter_tid, &held_lock, "MutexLock", "done", 1);
    truth(waiter_tid, &solo_lock, "MutexLock", "done", SOLO);
    truth(waiter_tid, &solo_lock, "MutexUnlock", "done", SOLO);
    printf("hold pid=%d tid=%u addr=%p hold_ns=%ld fn=hold_and_sleep\n", (int)getpid(), holder_tid,
           (void *)&held_lock, hold_ns);
    printf("blame pid=%d waiter=%u holder=%u addr=%p waiter_fn=wait_for_it holder_fn=hold_and_sleep\n",
           (int)getpid(), waiter_tid, holder_tid, (void *)&held_lock);
    return 0;
}
