/* Threads still waiting when the program ends (report: idle workers are
 * not hangs). Three workers take 6 items from a queue behind `qlock` and
 * `qcond`, then wait on `qcond` for work that never comes; a fourth
 * thread blocks on `gate`, which main holds. Once the three are inside
 * pthread_cond_wait (main reads `waiting` under `qlock`, which each
 * released there) and the fourth sleeps in the kernel (its /proc syscall
 * is futex), main:
 *   - `exit`: returns from main (status 0): the three condition waits are
 *     idle at exit, the lock wait is still a hang;
 *   - `kill`: dies by SIGTERM (status 143): all four are hangs.
 * Truth line: `truth-idle workers=3 gate=0x..` (printed before the end). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static int items = 6;
static int waiting; /* workers inside pthread_cond_wait, under qlock */
static volatile pid_t gate_tid;

static void *worker(void *p) {
    (void)p;
    pthread_mutex_lock(&qlock);
    for (;;) {
        while (items == 0) {
            waiting++;
            pthread_cond_wait(&qcond, &qlock);
            waiting--;
        }
        items--;
    }
    return NULL;
}

static void *gatekeeper(void *p) {
    (void)p;
    gate_tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&gate); /* never returns: main holds it */
    return NULL;
}

/* True when thread `tid` sleeps in futex(2) (syscall 202 on x86-64). */
static int in_futex(pid_t tid) {
    char path[64], buf[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n > 4 && strncmp(buf, "202 ", 4) == 0;
}

int main(int argc, char **argv) {
    int kill_mode = argc > 1 && strcmp(argv[1], "kill") == 0;
    pthread_t t[4];
    pthread_mutex_lock(&gate);
    for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_create(&t[3], NULL, gatekeeper, (void *)3L);
    printf("truth-idle workers=3 gate=%p\n", (void *)&gate);
    fflush(stdout);
    for (;;) {
        pthread_mutex_lock(&qlock);
        int idle = items == 0 && waiting == 3;
        pthread_mutex_unlock(&qlock);
        if (idle && gate_tid && in_futex(gate_tid)) break;
        usleep(1000);
    }
    if (kill_mode) raise(SIGTERM);
    return 0;
}
