/* Semaphores used as semaphores: none of them may be reported as a lock.
 *
 * - `items` (initial 0) and `slots` (initial SLOTS): a bounded
 *   producer-consumer queue; the producer posts `items` and waits
 *   `slots`, the consumer the reverse, ITEMS times each.
 * - `done` (initial 0), a hand-off: a count that stays in {0, 1}, but
 *   posted by the producer and taken by main (another thread).
 * - `pool` (initial 2): a counting semaphore two threads hold at once.
 * Truth: `sem addr=0x.. waits=N posts=N` per semaphore. */
#include "../truth.h"
#include <semaphore.h>

#define ITEMS 2000
#define SLOTS 4

static sem_t items, slots, done, pool;
static pthread_barrier_t both_in;
static volatile unsigned long queue[SLOTS];

static void *producer(void *arg) {
    (void)arg;
    for (unsigned long i = 0; i < ITEMS; i++) {
        if (sem_wait(&slots)) die("sem_wait", errno);
        queue[i % SLOTS] = i;
        if (sem_post(&items)) die("sem_post", errno);
    }
    if (sem_post(&done)) die("sem_post", errno);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    unsigned long sum = 0;
    for (unsigned long i = 0; i < ITEMS; i++) {
        if (sem_wait(&items)) die("sem_wait", errno);
        sum += queue[i % SLOTS];
        if (sem_post(&slots)) die("sem_post", errno);
    }
    return (void *)sum;
}

static void *pool_user(void *arg) {
    (void)arg;
    if (sem_wait(&pool)) die("sem_wait", errno);
    /* Both threads hold a unit of the pool here at once. */
    int b = pthread_barrier_wait(&both_in);
    if (b != 0 && b != PTHREAD_BARRIER_SERIAL_THREAD) die("pthread_barrier_wait", b);
    if (sem_post(&pool)) die("sem_post", errno);
    return NULL;
}

int main(void) {
    if (sem_init(&items, 0, 0) || sem_init(&slots, 0, SLOTS) || sem_init(&done, 0, 0) ||
        sem_init(&pool, 0, 2))
        die("sem_init", errno);
    CHECK(pthread_barrier_init(&both_in, NULL, 2));
    pthread_t p, c, u1, u2;
    CHECK(pthread_create(&p, NULL, producer, NULL));
    CHECK(pthread_create(&c, NULL, consumer, NULL));
    if (sem_wait(&done)) die("sem_wait", errno);
    CHECK(pthread_join(p, NULL));
    CHECK(pthread_join(c, NULL));
    CHECK(pthread_create(&u1, NULL, pool_user, NULL));
    CHECK(pthread_create(&u2, NULL, pool_user, NULL));
    CHECK(pthread_join(u1, NULL));
    CHECK(pthread_join(u2, NULL));
    printf("sem addr=%p waits=%d posts=%d\n", (void *)&items, ITEMS, ITEMS);
    printf("sem addr=%p waits=%d posts=%d\n", (void *)&slots, ITEMS, ITEMS);
    printf("sem addr=%p waits=1 posts=1\n", (void *)&done);
    printf("sem addr=%p waits=2 posts=2\n", (void *)&pool);
    return 0;
}
