// Fixture: thread exits other than returning. A thread blocked in
// pthread_cond_wait is cancelled (the unwind crosses the recorder's hook
// and runs the cleanup handler, which unlocks the mutex); another thread
// leaves through pthread_exit from a nested call. Prints what the program
// observed.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int cleanups;

static void unlock_it(void *arg) {
    cleanups++;
    pthread_mutex_unlock((pthread_mutex_t *)arg);
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    pthread_cleanup_push(unlock_it, &m);
    for (;;) pthread_cond_wait(&c, &m);
    pthread_cleanup_pop(1);
    return NULL;
}

static void leave(long v) { pthread_exit((void *)v); }

static void *exiter(void *arg) {
    (void)arg;
    leave(42);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, waiter, NULL);
    usleep(50000);
    pthread_cancel(a);
    pthread_join(a, &ra);
    pthread_create(&b, NULL, exiter, NULL);
    pthread_join(b, &rb);
    // The mutex must be free again (the cleanup handler ran).
    int free_again = pthread_mutex_trylock(&m) == 0;
    printf("canceled=%d cleanups=%d exit_value=%ld mutex_free=%d\n", ra == PTHREAD_CANCELED, cleanups,
           (long)rb, free_again);
    return 0;
}
