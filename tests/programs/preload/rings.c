// Fixture: 200 joinable threads created and joined one after the other
// (half of them leave through pthread_exit), and one detached thread.
// Prints how many ring files are still mapped in this process at the end
// (from /proc/self/maps): joined threads' rings are kept for reuse up to
// the free list's size (128) and unmapped beyond it; the main thread's and
// the detached thread's stay.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static sem_t done;

static void *work(void *arg) {
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    if ((long)arg % 2) pthread_exit(NULL);
    return NULL;
}

static void *detached(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    sem_post(&done);
    return NULL;
}

int main(void) {
    sem_init(&done, 0, 0);
    for (long i = 0; i < 200; i++) {
        pthread_t t;
        pthread_create(&t, NULL, work, (void *)i);
        pthread_join(t, NULL);
    }
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t d;
    pthread_create(&d, &a, detached, NULL);
    sem_wait(&done);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int rings = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, ".ring")) rings++;
    fclose(f);
    printf("mapped_rings=%d\n", rings);
    return 0;
}
