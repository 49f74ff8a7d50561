/* Deterministic output for the "recording changes nothing" test: reads
 * numbers from stdin, sums them in 3 threads under a mutex, writes the
 * lines back on stdout, a note on stderr, and exits with sum % 256. */
#include "truth.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long nums[4096];
static int count, next;
static long total;

static void *run(void *p) {
    (void)p;
    for (;;) {
        pthread_mutex_lock(&m);
        if (next == count) {
            pthread_mutex_unlock(&m);
            return NULL;
        }
        total += nums[next++];
        pthread_mutex_unlock(&m);
    }
}

int main(void) {
    char line[256];
    while (count < 4096 && fgets(line, sizeof line, stdin)) {
        nums[count++] = atol(line);
        printf("read %s", line);
    }
    pthread_t t[3];
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&t[i], NULL, run, NULL));
    for (int i = 0; i < 3; i++) CHECK(pthread_join(t[i], NULL));
    printf("sum %ld of %d numbers\n", total, count);
    fprintf(stderr, "echo_sum: stderr is the program's own\n");
    return (int)(total % 256);
}
