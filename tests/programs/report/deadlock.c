/* A real two-lock deadlock. Thread 1 takes `lock_a`
 * then `lock_b`, thread 2 `lock_b` then `lock_a`; a barrier makes both
 * hold their first lock before taking the second, so they always
 * deadlock. main joins thread 1 forever; alarm(1) kills the process
 * (SIGALRM) so the recording ends.
 *
 * Truth lines (printed before the deadlock):
 * `truth-deadlock a=0x.. b=0x.. line_ab=L line_ba=L` with the lines where
 * each thread blocks. With `inversion` as argument the two threads run
 * one after the other instead: no deadlock, but the inversion remains. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;
static int deadlock = 1;

static void *a_then_b(void *p) {
    (void)p;
    pthread_mutex_lock(&lock_a);
    if (deadlock) pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&lock_b); /* line 25 */
    pthread_mutex_unlock(&lock_b);
    pthread_mutex_unlock(&lock_a);
    return NULL;
}

static void *b_then_a(void *p) {
    (void)p;
    pthread_mutex_lock(&lock_b);
    if (deadlock) pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&lock_a); /* line 35 */
    pthread_mutex_unlock(&lock_a);
    pthread_mutex_unlock(&lock_b);
    return NULL;
}

int main(int argc, char **argv) {
    deadlock = !(argc > 1 && strcmp(argv[1], "inversion") == 0);
    printf("truth-deadlock a=%p b=%p line_ab=25 line_ba=35\n", (void *)&lock_a,
           (void *)&lock_b);
    fflush(stdout);
    pthread_barrier_init(&both_hold, NULL, 2);
    pthread_t t1, t2;
    if (deadlock) {
        alarm(1);
        pthread_create(&t1, NULL, a_then_b, NULL);
        pthread_create(&t2, NULL, b_then_a, NULL);
        pthread_join(t1, NULL); /* never returns */
        pthread_join(t2, NULL);
    } else {
        pthread_create(&t1, NULL, a_then_b, NULL);
        pthread_join(t1, NULL);
        pthread_create(&t2, NULL, b_then_a, NULL);
        pthread_join(t2, NULL);
    }
    puts("no deadlock");
    return 0;
}
