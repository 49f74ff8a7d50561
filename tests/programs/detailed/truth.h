/* Ground-truth logging shared by the detailed-mode fixtures.
 *
 * The log is written inside critical sections, so its order is the lock's
 * acquisition order. The functions that touch it are not instrumented
 * (no_sanitize("thread")): the log must not appear in the recorded
 * read/write sets it is the ground truth for. */
#ifndef LOCKSCOPE_TRUTH_H
#define LOCKSCOPE_TRUTH_H

#if defined(__clang__)
#define NOTSAN __attribute__((no_sanitize("thread"), noinline))
#else
#define NOTSAN __attribute__((no_sanitize_thread, noinline))
#endif

#include <stdlib.h>

/* FIXTURE_SCALE=N in the environment (benchmark runs): N, else 1. Read
 * outside the recorded accesses, like the truth. */
NOTSAN __attribute__((unused)) static int fixture_scale(void) {
    const char *s = getenv("FIXTURE_SCALE");
    return s && atoi(s) > 0 ? atoi(s) : 1;
}

#endif
