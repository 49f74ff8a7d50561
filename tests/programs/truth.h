/* Ground truth printing shared by the record fixtures.
 *
 * Every fixture counts what it did itself and prints one line per
 * (thread, object, operation, outcome) after all threads have joined:
 *
 *   truth pid=P gen=G tid=T addr=0x... op=MutexLock phase=done count=N
 *   truth pid=P gen=G tid=T addr=0x... op=MutexLock site=FUNC fn=0x... count=N
 *
 * `op` is the lockscope_format::Op name of the call, `phase` done or fail
 * (the outcome of the call), `site=FUNC fn=ADDR`: calls made from
 * function FUNC, which starts at ADDR (its size is read with nm).
 * The tests compare these with the trace exactly. */
#ifndef LOCKSCOPE_TRUTH_H
#define LOCKSCOPE_TRUTH_H
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int truth_gen = 0; /* exec generation of this image */

static inline unsigned truth_tid(void) { return (unsigned)syscall(SYS_gettid); }

__attribute__((unused)) static void truth(unsigned tid, const void *addr, const char *op, const char *phase,
                  unsigned long n) {
    printf("truth pid=%d gen=%d tid=%u addr=%p op=%s phase=%s count=%lu\n", (int)getpid(),
           truth_gen, tid, addr, op, phase, n);
}

__attribute__((unused)) static void truth_site(unsigned tid, const void *addr, const char *op, const char *fn_name,
                       void (*fn)(void *), unsigned long n) {
    printf("truth pid=%d gen=%d tid=%u addr=%p op=%s site=%s fn=%p count=%lu\n", (int)getpid(),
           truth_gen, tid, addr, op, fn_name, (void *)fn, n);
}

__attribute__((unused)) static void die(const char *what, int e) {
    fprintf(stderr, "%s failed: %s\n", what, strerror(e));
    exit(99);
}
#define CHECK(call)                                                                        \
    do {                                                                                   \
        int e_ = (call);                                                                   \
        if (e_) die(#call, e_);                                                            \
    } while (0)
#endif
