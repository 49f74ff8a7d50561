/* Atomics that are not two-valued spinlocks; `lockscope spin` must reject
 * every one of them (and find no spinlock here):
 *   - `hits`: an atomic counter (fetch_add by every thread);
 *   - `ready`: a flag set once by an exchange and never reset;
 *   - `ticket`: a ticket lock; its `next` word is taken with fetch_add,
 *     `serving` counts up at each release.
 * Each lives on its own cache line.
 * stdout: ready was 0 / hits N / ticket acquisitions N / guarded N. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

#define THREADS 3
#define ITERS 300

__attribute__((aligned(64))) long hits;
__attribute__((aligned(64))) int ready;
struct Ticket {
    unsigned next;
    unsigned serving;
} __attribute__((aligned(64)));
struct Ticket ticket;
__attribute__((aligned(64))) long guarded;

static void ticket_lock(struct Ticket *t) {
    unsigned me = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED);
    while (__atomic_load_n(&t->serving, __ATOMIC_ACQUIRE) != me)
        sched_yield();
}

static void ticket_unlock(struct Ticket *t) {
    unsigned s = __atomic_load_n(&t->serving, __ATOMIC_RELAXED);
    __atomic_store_n(&t->serving, s + 1, __ATOMIC_RELEASE);
}

static void *worker(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
        sched_yield();
    for (int i = 0; i < ITERS; i++) {
        __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED);
        ticket_lock(&ticket);
        guarded++;
        ticket_unlock(&ticket);
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    /* The result is used: clang turns an exchange whose result is unused
     * into a store, which would not be a read-modify-write. */
    int was = __atomic_exchange_n(&ready, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("ready was %d\n", was);
    printf("hits %ld\n", __atomic_load_n(&hits, __ATOMIC_RELAXED));
    printf("ticket acquisitions %u\n", __atomic_load_n(&ticket.next, __ATOMIC_RELAXED));
    printf("guarded %ld\n", __atomic_load_n(&guarded, __ATOMIC_RELAXED));
    return 0;
}
