/* Static locks to be named in a stripped build:
 * an array `lru_locks` of 16 mutexes of which element 12 is taken, a
 * struct array `buckets` whose element 3's lock is taken (element size
 * from DWARF, lock at offset 8 inside it: `buckets[3].lock`), a
 * two-dimensional array `grid`, a plain static `stats_lock`,
 * and an exported global `exported_lock` (in .dynsym with -rdynamic).
 * Truth lines: `truth-name addr=0x.. name=NAME count=N`. */
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t lru_locks[16] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER};
struct bucket {
    long hits;
    pthread_mutex_t lock;
    long misses;
};
static struct bucket buckets[8];
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t exported_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void take(pthread_mutex_t *m, int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(m);
        counter++;
        pthread_mutex_unlock(m);
    }
}

/* Two dimensions: element [1][2] is named with both indices. */
static pthread_mutex_t grid[2][3];

int main(void) {
    for (int i = 0; i < 8; i++) pthread_mutex_init(&buckets[i].lock, NULL);
    for (int i = 0; i < 6; i++) pthread_mutex_init(&grid[i / 3][i % 3], NULL);
    take(&grid[1][2], 4);
    take(&lru_locks[12], 12);
    take(&buckets[3].lock, 3);
    take(&stats_lock, 5);
    take(&exported_lock, 7);
    printf("truth-name addr=%p name=lru_locks[12] count=12\n", (void *)&lru_locks[12]);
    printf("truth-name addr=%p name=buckets[3].lock count=3\n", (void *)&buckets[3].lock);
    printf("truth-name addr=%p name=stats_lock count=5\n", (void *)&stats_lock);
    printf("truth-name addr=%p name=grid[1][2] count=4\n", (void *)&grid[1][2]);
    printf("truth-name addr=%p name=exported_lock count=7\n", (void *)&exported_lock);
    printf("counter %ld\n", counter);
    return 0;
}
