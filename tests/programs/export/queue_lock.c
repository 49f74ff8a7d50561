/* A work queue whose lock is held across the work (`queue_lock`), and the
 * fixed variant (`queue_lock fixed`) that does the work after releasing
 * it. Used by crates/cli/tests/cli/export_diff.rs: `lockscope diff` of the two
 * recordings must match the lock by its symbol and show its wait and the
 * program's wall time going down. 4 threads x 25 items x 1 ms of work;
 * every run makes exactly 100 acquisitions of queue_lock. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define THREADS 4
#define ITEMS 25

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static int fixed;
static long taken;

static void work(void) {
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ITEMS; i++) {
        pthread_mutex_lock(&queue_lock);
        taken++;
        if (!fixed) work();
        pthread_mutex_unlock(&queue_lock);
        if (fixed) work();
    }
    return NULL;
}

int main(int argc, char **argv) {
    fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("taken=%ld fixed=%d\n", taken, fixed);
    return 0;
}
