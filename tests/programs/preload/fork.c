// Fixture: the parent locks 100 times, forks; the child locks 50 times and
// exits with 7; the parent waits and locks 10 more times. Prints the
// child's pid and exit status as ground truth.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void pairs(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    }
}

int main(void) {
    pairs(100);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        pairs(50);
        exit(7);
    }
    int st = 0;
    waitpid(c, &st, 0);
    pairs(10);
    printf("child=%d status=%d\n", (int)c, WEXITSTATUS(st));
    return 0;
}
