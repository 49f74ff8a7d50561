/* Reader-writer lock: 4 readers and 2 writers, plus try-locks whose
 * successes and failures the program counts. */
#include "truth.h"

#define READERS 4
#define WRITERS 2
#define ITERS 5000

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static volatile long value;

struct worker {
    pthread_t th;
    unsigned tid;
    int writer;
    unsigned long rd, wr, tryrd_ok, tryrd_busy, trywr_ok, trywr_busy;
};

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    for (int i = 0; i < ITERS; i++) {
        if (w->writer) {
            CHECK(pthread_rwlock_wrlock(&rw));
            value++;
            w->wr++;
            CHECK(pthread_rwlock_unlock(&rw));
            if (i % 7 == 0) {
                int r = pthread_rwlock_trywrlock(&rw);
                if (r == 0) {
                    w->trywr_ok++;
                    CHECK(pthread_rwlock_unlock(&rw));
                } else if (r == EBUSY) {
                    w->trywr_busy++;
                } else {
                    die("trywrlock", r);
                }
            }
        } else {
            CHECK(pthread_rwlock_rdlock(&rw));
            (void)value;
            w->rd++;
            CHECK(pthread_rwlock_unlock(&rw));
            if (i % 5 == 0) {
                int r = pthread_rwlock_tryrdlock(&rw);
                if (r == 0) {
                    w->tryrd_ok++;
                    CHECK(pthread_rwlock_unlock(&rw));
                } else if (r == EBUSY) {
                    w->tryrd_busy++;
                } else {
                    die("tryrdlock", r);
                }
            }
        }
    }
    return NULL;
}

int main(void) {
    static struct worker w[READERS + WRITERS];
    for (int i = 0; i < READERS + WRITERS; i++) {
        w[i].writer = i >= READERS;
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < READERS + WRITERS; i++) CHECK(pthread_join(w[i].th, NULL));
    for (int i = 0; i < READERS + WRITERS; i++) {
        struct worker *x = &w[i];
        truth(x->tid, &rw, "RwRdlock", "done", x->rd);
        truth(x->tid, &rw, "RwWrlock", "done", x->wr);
        truth(x->tid, &rw, "RwTryRdlock", "done", x->tryrd_ok);
        truth(x->tid, &rw, "RwTryRdlock", "fail", x->tryrd_busy);
        truth(x->tid, &rw, "RwTryWrlock", "done", x->trywr_ok);
        truth(x->tid, &rw, "RwTryWrlock", "fail", x->trywr_busy);
        truth(x->tid, &rw, "RwUnlock", "done", x->rd + x->wr + x->tryrd_ok + x->trywr_ok);
    }
    printf("rwlock: value=%ld\n", value);
    return 0;
}
