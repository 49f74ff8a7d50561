/* A lock built from a flag, a mutex and a condition variable, as
 * Python's GIL is: 3 threads take turns holding
 * `held` for ~20 us, 300 times each. Nearly all waiting is on the
 * condition variable `gil_cond`, ended by the signal in drop_gil.
 *
 * Truth: `truth-gil take_line=25 drop_line=34 rounds=900`. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t gil_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gil_cond = PTHREAD_COND_INITIALIZER;
static int held;
static long work;

static void spin_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < us * 1000);
}

static void take_gil(void) {
    pthread_mutex_lock(&gil_mutex);
    while (held) pthread_cond_wait(&gil_cond, &gil_mutex); /* line 25 */
    held = 1;
    pthread_mutex_unlock(&gil_mutex);
}

__attribute__((noinline)) static void drop_gil(void) {
    pthread_mutex_lock(&gil_mutex);
    held = 0;
    pthread_mutex_unlock(&gil_mutex);
    pthread_cond_signal(&gil_cond); /* line 34 */
}

static void *worker(void *p) {
    (void)p;
    for (int i = 0; i < 300; i++) {
        take_gil();
        work++;
        spin_us(20);
        drop_gil();
    }
    return NULL;
}

int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("truth-gil take_line=25 drop_line=34 rounds=%ld\n", work);
    return 0;
}
