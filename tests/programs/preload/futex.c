// Fixture: raw futex calls through the libc `syscall` function. Wakes
// with nobody waiting return 0; waits with a stale expected value fail at
// once with EAGAIN. Prints how many calls behaved so and whether errno
// was right after each.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint32_t word = 1;

int main(void) {
    int wakes = 0, waits = 0, bitset_waits = 0, errno_ok = 0;
    for (int i = 0; i < 25; i++) {
        errno = 4321;
        if (syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) == 0) wakes++;
        if (errno == 4321) errno_ok++;
    }
    for (int i = 0; i < 25; i++) {
        if (syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0) == -1 && errno == EAGAIN) waits++;
    }
    for (int i = 0; i < 5; i++) {
        if (syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL, NULL, 0xffffffff) == -1 &&
            errno == EAGAIN)
            bitset_waits++;
    }
    long pid = syscall(SYS_getpid);
    printf("wakes=%d waits=%d bitset_waits=%d errno_ok=%d pid_ok=%d\n", wakes, waits, bitset_waits,
           errno_ok, pid == getpid());
    return 0;
}
