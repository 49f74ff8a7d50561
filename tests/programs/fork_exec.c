/* fork and exec: the parent locks, forks; the child locks, then execs
 * this same program with `--image2`, whose new image locks again. Every
 * image prints its own truth (gen = its exec generation) and the parent
 * prints the child's pid so the test can check the Fork event. */
#include "truth.h"
#include <sys/wait.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static unsigned long lock_n(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
    return n;
}

struct arg {
    int n;
    unsigned tid;
};
static void *thread_main(void *p) {
    struct arg *a = p;
    a->tid = truth_tid();
    lock_n(a->n);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--image2") == 0) {
        truth_gen = 1;
        /* The new image: main thread and one worker. */
        struct arg a = {.n = 3000};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, thread_main, &a));
        unsigned long n = lock_n(1000);
        CHECK(pthread_join(t, NULL));
        truth(truth_tid(), &m, "MutexLock", "done", n);
        truth(truth_tid(), &m, "MutexUnlock", "done", n);
        truth(a.tid, &m, "MutexLock", "done", a.n);
        truth(a.tid, &m, "MutexUnlock", "done", a.n);
        printf("image2: done\n");
        return 7;
    }
    unsigned long before = lock_n(2000);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) die("fork", errno);
    if (child == 0) {
        unsigned long n = lock_n(1500);
        truth(truth_tid(), &m, "MutexLock", "done", n);
        truth(truth_tid(), &m, "MutexUnlock", "done", n);
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "--image2", (char *)NULL);
        die("execl", errno);
    }
    unsigned long after = lock_n(500);
    int st;
    if (waitpid(child, &st, 0) != child) die("waitpid", errno);
    truth(truth_tid(), &m, "MutexLock", "done", before + after);
    truth(truth_tid(), &m, "MutexUnlock", "done", before + after);
    printf("fork child=%d status=%d\n", (int)child, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
