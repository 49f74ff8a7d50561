/* The floor of lockscope's recording design for one uncontended
 * lock+unlock pair on this machine: what the recorder cannot avoid doing,
 * with nothing else. Per pair: an unfenced clock read before the lock
 * (the attempt), a fenced one after it (lfence; rdtsc: the acquisition,
 * which must not be stamped before the previous owner's release), one
 * before the unlock (the release), and two 32-byte event slots written to
 * a pre-faulted 16 MiB ring. No interposition, no re-entrancy guard, no
 * drain reading the ring. Prints, best of 5 rounds:
 *   pairs=N bare_ns=X floor_ns=Y clocks_only_ns=Z
 * (bare: the pair alone; clocks_only: the three clock reads without the
 * slot writes). x86-64 only.
 *   pair_floor [pairs]        (default 10000000) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long sink;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000L;
    size_t bytes = 16u << 20, mask = bytes / 8 - 1, w = 0;
    uint64_t *ring = mmap(0, bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (ring == MAP_FAILED) return 1;
    double bare = 1e30, floor = 1e30, clocks = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            pthread_mutex_lock(&m);
            sink++;
            pthread_mutex_unlock(&m);
        }
        double t1 = now_ns();
        for (long i = 0; i < n; i++) {
            uint64_t a = __rdtsc();
            pthread_mutex_lock(&m);
            _mm_lfence();
            uint64_t b = __rdtsc();
            ring[w & mask] = b;
            ring[(w + 1) & mask] = (uint64_t)&m;
            ring[(w + 2) & mask] = a;
            ring[(w + 3) & mask] = 1;
            w += 4;
            sink++;
            uint64_t c = __rdtsc();
            pthread_mutex_unlock(&m);
            ring[w & mask] = c;
            ring[(w + 1) & mask] = (uint64_t)&m;
            ring[(w + 2) & mask] = i;
            ring[(w + 3) & mask] = 2;
            w += 4;
        }
        double t2 = now_ns();
        uint64_t acc = 0;
        for (long i = 0; i < n; i++) {
            acc += __rdtsc();
            pthread_mutex_lock(&m);
            _mm_lfence();
            acc += __rdtsc();
            sink++;
            acc += __rdtsc();
            pthread_mutex_unlock(&m);
        }
        double t3 = now_ns();
        sink += acc;
        if ((t1 - t0) / n < bare) bare = (t1 - t0) / n;
        if ((t2 - t1) / n < floor) floor = (t2 - t1) / n;
        if ((t3 - t2) / n < clocks) clocks = (t3 - t2) / n;
    }
    printf("pairs=%ld bare_ns=%.2f floor_ns=%.2f clocks_only_ns=%.2f\n", n, bare, floor, clocks);
    return 0;
}
