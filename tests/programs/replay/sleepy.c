/* Two threads take turns holding one mutex while they sleep 5 ms, 20
 * times each: a run of 200 ms with 80 lock calls and almost no CPU work,
 * so the recorder's cost and any preemption are a tiny share of the
 * threads' time whatever the machine's load.
 * stdout: "turns 40" (deterministic). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int turns;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) {
        pthread_mutex_lock(&m);
        turns++;
        usleep(5000);
        pthread_mutex_unlock(&m);
        usleep(100);
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("turns %d\n", turns);
    return 0;
}
