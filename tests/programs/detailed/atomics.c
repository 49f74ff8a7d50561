/* Runtime ground truth: atomics of every width, compare-exchange that
 * succeeds and fails, heap blocks, struct copies and memcpy/memset inside
 * a critical section. Run single-threaded so that every value is known:
 *   - `hits` (64-bit) gets 1000 fetch_add(1) from 0 and ends at 1000;
 *   - `flag32`: compare_exchange(0 -> 1) succeeds once, then (0 -> 2)
 *     fails once, seeing 1;
 *   - `byte8` gets an exchange 0 -> 7 and `half16` a store of 300;
 *   - 3 blocks of 24, 100 and 4096 bytes are allocated (one realloc'd to
 *     200) and freed;
 *   - inside the critical section `total` is written with 5, then 6:
 *     its value at release is 6.
 * stdout: deterministic. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic long hits;
_Atomic int flag32;
_Atomic char byte8;
_Atomic short half16;
pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
volatile long total; /* volatile: both stores stay */
struct Rec { long a, b, c; } rec_src = {1, 2, 3}, rec_dst;
char buf[64];

int main(void) {
    for (int i = 0; i < 1000; i++)
        atomic_fetch_add(&hits, 1);
    int expected = 0;
    int ok1 = atomic_compare_exchange_strong(&flag32, &expected, 1);
    expected = 0;
    int ok2 = atomic_compare_exchange_strong(&flag32, &expected, 2);
    char old8 = atomic_exchange(&byte8, 7);
    atomic_store(&half16, 300);
    char *p = malloc(24);
    char *q = malloc(100);
    char *r = malloc(4096);
    p[0] = 'p';
    q[0] = 'q';
    q = realloc(q, 200);
    memset(r, 1, 4096);
    pthread_mutex_lock(&m);
    total = 5;
    rec_dst = rec_src;
    memcpy(buf, r, sizeof buf);
    total = 6;
    pthread_mutex_unlock(&m);
    printf("hits=%ld cas=%d,%d seen=%d old8=%d half=%d total=%ld rec=%ld buf=%d %c%c\n",
           (long)hits, ok1, ok2, expected, old8, (int)half16, total, rec_dst.c, buf[10], p[0],
           q[0]);
    free(p);
    free(q);
    free(r);
    return 0;
}
