/* One thread holds `held` for argv[1] ms while another waits for it: the
 * waiter's wait is about that long (it starts waiting as soon as the
 * holder holds). Groups of runs with two different holds are what
 * `lockscope diff DIR_A DIR_B` must tell apart. */
#include "../truth.h"
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static volatile int holding;
static long hold_ms;

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&held);
    holding = 1;
    usleep((useconds_t)(hold_ms * 1000));
    pthread_mutex_unlock(&held);
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    while (!holding) usleep(100);
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    return NULL;
}

int main(int argc, char **argv) {
    hold_ms = argc > 1 ? atol(argv[1]) : 50;
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, holder, NULL));
    CHECK(pthread_create(&b, NULL, waiter, NULL));
    CHECK(pthread_join(a, NULL));
    CHECK(pthread_join(b, NULL));
    return 0;
}
