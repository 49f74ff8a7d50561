/* Multi-file fixture: main, the lock and the ground truth. argv[1]
 * (optional): truth file. */
#include <stdio.h>
#include <stdlib.h>
#include "shared.h"
#include "../truth.h"

pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
long table[THREADS];

static int log_thread[MAXLOG], log_kind[MAXLOG], nlog;

NOTSAN void note(int thread, int kind) {
    if (nlog < MAXLOG) {
        log_thread[nlog] = thread;
        log_kind[nlog] = kind;
        nlog++;
    }
}

/* kind 0 = lookup (reads table[0]), 1 = store by thread t (writes table[t]) */
NOTSAN static const char *pair_kind(int i) {
    int a = log_kind[i - 1], b = log_kind[i];
    int ta = log_thread[i - 1], tb = log_thread[i];
    if (a == 0 && b == 0)
        return "read_read";
    if ((a == 1 && ta == 0 && b == 0) || (b == 1 && tb == 0 && a == 0))
        return "conflict";
    return "disjoint_write";
}

NOTSAN static void write_truth(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    const char *names[3] = {"read_read", "disjoint_write", "conflict"};
    long n[3] = {0};
    for (int i = 1; i < nlog; i++) {
        if (log_thread[i - 1] == log_thread[i])
            continue;
        const char *k = pair_kind(i);
        for (int j = 0; j < 3; j++)
            if (k == names[j])
                n[j]++;
    }
    fprintf(f, "sections %d\n", nlog);
    fprintf(f, "pairs null_lock 0\npairs read_read %ld\npairs disjoint_write %ld\n", n[0], n[1]);
    fprintf(f, "pairs benign 0\npairs conflict %ld\n", n[2]);
    fclose(f);
}

int main(int argc, char **argv) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("sections=%d table=%ld,%ld,%ld\n", nlog, table[0], table[1], table[2]);
    if (argc > 1)
        write_truth(argv[1]);
    return 0;
}
