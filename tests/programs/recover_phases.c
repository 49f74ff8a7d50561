/* For `lockscope recover`: a recorder killed while the program runs.
 * Phase 1: THREADS threads lock `first` PHASE1 times each, then the
 * program prints "phase1" and waits for the file named by argv[1] to
 * exist. Phase 2: the threads lock `second` PHASE2 times each; the program
 * prints "phase2" and then sleeps until it is killed (the recorder's
 * death kills it). A recovered trace must hold exactly THREADS * PHASE1
 * acquisitions of `first` and THREADS * PHASE2 of `second`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 2
#define PHASE1 3000
#define PHASE2 5000

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t go;
static volatile unsigned long counter;

static void *run(void *p) {
    (void)p;
    for (int i = 0; i < PHASE1; i++) {
        pthread_mutex_lock(&first);
        counter++;
        pthread_mutex_unlock(&first);
    }
    pthread_barrier_wait(&go); /* phase 1 done */
    pthread_barrier_wait(&go); /* the file exists */
    for (int i = 0; i < PHASE2; i++) {
        pthread_mutex_lock(&second);
        counter++;
        pthread_mutex_unlock(&second);
    }
    pthread_barrier_wait(&go);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: recover_phases GO_FILE\n");
        return 2;
    }
    pthread_t t[THREADS];
    pthread_barrier_init(&go, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, run, NULL);
    pthread_barrier_wait(&go);
    printf("phase1\n");
    fflush(stdout);
    while (access(argv[1], F_OK) != 0) usleep(10000);
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&go);
    printf("phase2\n");
    fflush(stdout);
    for (;;) pause();
}
