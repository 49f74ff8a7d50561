/* Dead writes with exactly known answers (DeadSpy, thesis ch. 5).
 * Every store is in its own non-inlined function, so that the compiler
 * cannot remove the dead ones and every store has its own context.
 *
 * Main, before the threads:
 *   init_a    a = 1        8 B   dead on 8 (killed by reset_a)
 *   reset_a   a = 2        8 B
 *   use_a     reads a
 *   fill_u    u.l = -1     8 B   dead on 4 (killed by patch_lo)
 *   patch_lo  u.i[0] = 5   4 B   dead on 2 (killed by patch_s1)
 *   patch_s1  u.s[1] = 7   2 B
 *   use_u     reads u.l
 *   fill_u    u.l = -1     8 B   dead on 4 (killed by clear_hi)
 *   clear_hi  u.i[1] = 0   4 B
 *   use_u     reads u.l
 * Two workers, ordered by a barrier:
 *   worker 0: put_x        x = 1   8 B   dead on 8 (killed by worker 1)
 *   barrier
 *   worker 1: overwrite_x  x = 2   8 B
 *   barrier
 *   worker 0: use_x        reads x
 *
 * Expected `lockscope deadwrites` (LOCKSCOPE_ALL_ACCESSES=1):
 *   writes 9, bytes written 58, dead bytes 26, dead writes 5 (init_a,
 *   fill_u twice, patch_lo, put_x), 8 dead bytes across threads; pairs by
 *   bytes: (init_a, reset_a) 8 B 1, (put_x, overwrite_x) 8 B 1 across
 *   threads, (fill_u, clear_hi) 4 B 1, (fill_u, patch_lo) 4 B 1,
 *   (patch_lo, patch_s1) 2 B 1. */
#include <pthread.h>
#include <stdio.h>

#if defined(__clang__)
#define NOINL __attribute__((noinline))
#else
#define NOINL __attribute__((noinline, noipa))
#endif

long a;
union {
    long l;
    int i[2];
    short s[4];
} u;
long x;
long sum;
pthread_barrier_t bar;

NOINL void init_a(void) { a = 1; }
NOINL void reset_a(void) { a = 2; }
NOINL long use_a(void) { return a; }
NOINL void fill_u(void) { u.l = -1; }
NOINL void patch_lo(void) { u.i[0] = 5; }
NOINL void patch_s1(void) { u.s[1] = 7; }
NOINL void clear_hi(void) { u.i[1] = 0; }
NOINL long use_u(void) { return u.l; }
NOINL void put_x(void) { x = 1; }
NOINL void overwrite_x(void) { x = 2; }
NOINL long use_x(void) { return x; }

static void *worker(void *arg) {
    long id = (long)arg;
    long r = 0;
    if (id == 0)
        put_x();
    pthread_barrier_wait(&bar);
    if (id == 1)
        overwrite_x();
    pthread_barrier_wait(&bar);
    if (id == 0)
        r = use_x();
    return (void *)r;
}

int main(void) {
    long r = 0;
    init_a();
    reset_a();
    r += use_a();
    fill_u();
    patch_lo();
    patch_s1();
    r += use_u();
    fill_u();
    clear_hi();
    r += use_u();
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++) {
        void *v;
        pthread_join(t[i], &v);
        r += (long)v;
    }
    printf("r=%ld\n", r);
    return 0;
}
