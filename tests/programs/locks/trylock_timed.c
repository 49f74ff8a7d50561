/* trylock and timedlock semantics on a mutex held by another thread, and
 * the clocklock variant. Prints one line per check. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t gate;
static volatile int stage;

static struct timespec in_ms(clockid_t clk, long ms) {
    struct timespec t;
    clock_gettime(clk, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
    return t;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char *name(int r) {
    switch (r) {
    case 0: return "0";
    case EBUSY: return "EBUSY";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EINVAL: return "EINVAL";
    default: return strerror(r);
    }
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    __atomic_store_n(&stage, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&stage, __ATOMIC_SEQ_CST) != 2) usleep(1000);
    usleep(30000); /* release while main waits in timedlock */
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_NORMAL);
    pthread_mutex_init(&gate, &a); /* init'd normal mutex */

    printf("trylock free: %s\n", name(pthread_mutex_trylock(&gate)));
    printf("trylock held: %s\n", name(pthread_mutex_trylock(&gate)));
    pthread_mutex_unlock(&gate);

    pthread_t t;
    pthread_create(&t, NULL, holder, NULL);
    while (__atomic_load_n(&stage, __ATOMIC_SEQ_CST) != 1) usleep(1000);
    printf("trylock held by other thread: %s\n", name(pthread_mutex_trylock(&m)));
    double t0 = now_ms();
    struct timespec d = in_ms(CLOCK_REALTIME, 50);
    int r = pthread_mutex_timedlock(&m, &d);
    double waited = now_ms() - t0;
    printf("timedlock held 50ms: %s, waited at least 45ms: %s\n", name(r), waited >= 45 ? "yes" : "no");
    struct timespec bad = {0, 2000000000L};
    printf("timedlock bad time: %s\n", name(pthread_mutex_timedlock(&m, &bad)));
    d = in_ms(CLOCK_MONOTONIC, 20);
    printf("clocklock monotonic held 20ms: %s\n", name(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d)));
    __atomic_store_n(&stage, 2, __ATOMIC_SEQ_CST);
    d = in_ms(CLOCK_REALTIME, 5000);
    r = pthread_mutex_timedlock(&m, &d);
    printf("timedlock released within 5s: %s\n", name(r));
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);
    struct timespec past = {1, 0};
    printf("timedlock free, time in the past: %s\n", name(pthread_mutex_timedlock(&m, &past)));
    pthread_mutex_unlock(&m);
    printf("destroy: %s\n", name(pthread_mutex_destroy(&gate)));
    pthread_mutex_t held;
    pthread_mutex_init(&held, NULL);
    pthread_mutex_lock(&held);
    printf("destroy held: %s\n", name(pthread_mutex_destroy(&held)));
    pthread_mutex_unlock(&held);
    printf("destroy after unlock: %s\n", name(pthread_mutex_destroy(&held)));
    return 0;
}
