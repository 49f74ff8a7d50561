/* A thread still inside a critical section when its process ends.
 * The worker takes the mutex `m` (uncontended), then `n` inside it, tells
 * main through a plain flag (nothing lockscope hooks, so the worker
 * records nothing after its acquisitions), and waits in pause(). Main
 * then ends the process:
 *   held_at_exit exit   exit(0) from main
 *   held_at_exit kill   raise(SIGKILL) from main
 * Ground truth: the worker acquired `m` once and `n` once, in that
 * order, and released neither. stdout: "m=0x... n=0x..." (before the
 * end). Lockscope writes an uncontended acquisition after its
 * critical section (with the thread's next event); these acquisitions
 * have no next event and must still be in the trace. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t n = PTHREAD_MUTEX_INITIALIZER;
static volatile int inside;

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    pthread_mutex_lock(&n);
    inside = 1;
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "exit";
    if (strcmp(mode, "exit") != 0 && strcmp(mode, "kill") != 0) {
        fprintf(stderr, "usage: held_at_exit exit|kill\n");
        return 2;
    }
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    while (!inside)
        usleep(100);
    printf("m=%p n=%p\n", (void *)&m, (void *)&n);
    fflush(stdout);
    if (strcmp(mode, "kill") == 0)
        raise(SIGKILL);
    exit(0);
}
