/* Counts the SIGINTs it receives. After the first one it waits 500 ms
 * more (a duplicate would arrive by then), prints
 *   sigint_count=N
 * and exits 0: a server's graceful shutdown, which a second signal would
 * turn into a forced one. Gives up after 10 s (prints sigint_count=0). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t count;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void on_int(int sig) {
    (void)sig;
    count++;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    printf("ready\n");
    fflush(stdout);
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 1000 && count == 0; i++) {
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
        nanosleep(&tick, NULL);
    }
    if (count) {
        struct timespec grace = {0, 500 * 1000 * 1000};
        while (nanosleep(&grace, &grace) != 0) {
        }
    }
    printf("sigint_count=%d\n", (int)count);
    return 0;
}
