/* A signal handler that posts a semaphore while its thread is blocked in
 * an interposed call (a contended pthread_mutex_lock). The post must be
 * recorded (or at least counted), never silently dropped.
 *
 * main holds mutex m; worker blocks in pthread_mutex_lock(&m); main sends
 * the worker SIGUSR1, whose handler calls sem_post(&s); main's sem_wait(&s)
 * returns; main unlocks m; the worker gets m and exits.
 * Prints ground truth (truth.h) for the worker's SemPost and MutexLock. */
#include "truth.h"
#include <semaphore.h>
#include <signal.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static sem_t s;
static volatile unsigned worker_tid;
static volatile int posts;

static void on_usr1(int sig) {
    (void)sig;
    sem_post(&s);
    posts++;
}

static void *worker(void *p) {
    (void)p;
    worker_tid = truth_tid();
    CHECK(pthread_mutex_lock(&m));
    CHECK(pthread_mutex_unlock(&m));
    return NULL;
}

int main(void) {
    CHECK(sem_init(&s, 0, 0));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0) die("sigaction", errno);
    CHECK(pthread_mutex_lock(&m));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL));
    /* Let the worker reach the lock and block in it. */
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(pthread_kill(t, SIGUSR1));
    while (sem_wait(&s) != 0) {
        if (errno != EINTR) die("sem_wait", errno);
    }
    CHECK(pthread_mutex_unlock(&m));
    CHECK(pthread_join(t, NULL));
    unsigned me = truth_tid();
    truth(worker_tid, &s, "SemPost", "done", (unsigned long)posts);
    truth(worker_tid, &m, "MutexLock", "done", 1);
    truth(worker_tid, &m, "MutexUnlock", "done", 1);
    truth(me, &s, "SemWait", "done", 1);
    truth(me, &m, "MutexLock", "done", 1);
    truth(me, &m, "MutexUnlock", "done", 1);
    return 0;
}
