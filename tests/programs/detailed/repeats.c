/* Repeated identical accesses: main reads `flag` 1000
 * times (same value) and stores 7 into `out` 1000 times, then reads
 * `out` once. Volatile keeps every access.
 *
 * Expected with LOCKSCOPE_ALL_ACCESSES=1:
 *   without coalescing: 1000 Read events of flag, 1000 Write events of out;
 *   with LOCKSCOPE_COALESCE=1: one Read of flag + one AccessRepeat (999),
 *   one Write of out + one AccessRepeat (999).
 *   `lockscope deadwrites` either way: 1000 writes, 999 dead (7992 bytes),
 *   one (dead, killing) pair, store_out -> store_out, 999 instances. */
#include <stdio.h>

#if defined(__clang__)
#define NOINL __attribute__((noinline))
#else
#define NOINL __attribute__((noinline, noipa))
#endif

volatile long flag = 1;
volatile long out;

NOINL long read_flag(void) {
    long s = 0;
    for (int i = 0; i < 1000; i++)
        s += flag;
    return s;
}

NOINL void store_out(void) {
    for (int i = 0; i < 1000; i++)
        out = 7;
}

int main(void) {
    long s = read_flag();
    store_out();
    printf("s=%ld out=%ld\n", s, out);
    return 0;
}
