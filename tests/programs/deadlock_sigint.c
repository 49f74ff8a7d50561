/* Two threads deadlocked on two mutexes, until Ctrl-C. Thread 1 takes
 * `lock_a` then `lock_b`, thread 2 `lock_b` then `lock_a`; a barrier makes
 * both hold their first lock before taking the second, so they always
 * deadlock. main prints
 *   ready a=0x.. b=0x..
 * once both hold their first lock, then joins thread 1 forever: the
 * program ends only by a signal (SIGINT from the test, as Ctrl-C sends it
 * to the whole process group; alarm(30) is a safety net).
 * Ground truth: each thread acquired its first lock once and is still
 * waiting for its second when the program is killed; nothing is ever
 * released. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

static void *a_then_b(void *p) {
    (void)p;
    pthread_mutex_lock(&lock_a);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&lock_b); /* never returns */
    return NULL;
}

static void *b_then_a(void *p) {
    (void)p;
    pthread_mutex_lock(&lock_b);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(&lock_a); /* never returns */
    return NULL;
}

int main(void) {
    alarm(30);
    /* Three parties: main learns that both threads hold their first lock. */
    pthread_barrier_init(&both_hold, NULL, 3);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, a_then_b, NULL);
    pthread_create(&t2, NULL, b_then_a, NULL);
    pthread_barrier_wait(&both_hold);
    printf("ready a=%p b=%p\n", (void *)&lock_a, (void *)&lock_b);
    fflush(stdout);
    pthread_join(t1, NULL); /* never returns */
    return 0;
}
