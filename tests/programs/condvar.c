/* Condition variables: 2 producers and 2 consumers on a bounded buffer
 * (one mutex, two condition variables). Every wait, signal and lock call
 * is counted by the thread that makes it. */
#include "truth.h"

#define PRODUCERS 2
#define CONSUMERS 2
#define ITEMS 20000 /* per producer; consumers take ITEMS*PRODUCERS/CONSUMERS each */
#define CAP 8

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static long buf[CAP];
static int head, count;

struct worker {
    pthread_t th;
    unsigned tid;
    int producer;
    unsigned long locks, waits_full, waits_empty, sig_full, sig_empty;
    long sum;
};

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = truth_tid();
    long n = w->producer ? ITEMS : (long)ITEMS * PRODUCERS / CONSUMERS;
    for (long i = 0; i < n; i++) {
        CHECK(pthread_mutex_lock(&m));
        w->locks++;
        if (w->producer) {
            while (count == CAP) {
                w->waits_full++;
                CHECK(pthread_cond_wait(&not_full, &m));
            }
            buf[(head + count) % CAP] = i;
            count++;
            w->sum += i;
            w->sig_empty++;
            CHECK(pthread_cond_signal(&not_empty));
        } else {
            while (count == 0) {
                w->waits_empty++;
                CHECK(pthread_cond_wait(&not_empty, &m));
            }
            w->sum += buf[head];
            head = (head + 1) % CAP;
            count--;
            w->sig_full++;
            CHECK(pthread_cond_signal(&not_full));
        }
        CHECK(pthread_mutex_unlock(&m));
    }
    return NULL;
}

int main(void) {
    static struct worker w[PRODUCERS + CONSUMERS];
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        w[i].producer = i < PRODUCERS;
        CHECK(pthread_create(&w[i].th, NULL, run, &w[i]));
    }
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) CHECK(pthread_join(w[i].th, NULL));
    long produced = 0, consumed = 0;
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        struct worker *x = &w[i];
        truth(x->tid, &m, "MutexLock", "done", x->locks);
        truth(x->tid, &m, "MutexUnlock", "done", x->locks);
        truth(x->tid, &not_full, "CondWait", "done", x->waits_full);
        truth(x->tid, &not_empty, "CondWait", "done", x->waits_empty);
        truth(x->tid, &not_full, "CondSignal", "done", x->sig_full);
        truth(x->tid, &not_empty, "CondSignal", "done", x->sig_empty);
        if (x->producer)
            produced += x->sum;
        else
            consumed += x->sum;
    }
    printf("condvar: produced %ld consumed %ld\n", produced, consumed);
    return produced == consumed ? 0 : 1;
}
