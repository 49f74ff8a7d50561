/* A test-test-and-set lock held while the other thread spins on it with
 * atomic loads: long runs of identical busy loads, which detailed mode
 * coalesces by default (one load plus one `AccessRepeat`). `lockscope
 * spin` must count every one of them: the program counts its own busy
 * loads and failed exchanges.
 * Each round, after a barrier, the holder takes `hlock` and keeps it until
 * the spinner has seen it busy at least SPINS times (a handshake through
 * uninstrumented functions, so that it is not recorded and does not end
 * the spinner's run of loads), then releases it; the spinner then takes
 * and releases it. The count is cumulative (round r ends once the spinner
 * has seen it busy (r + 1) * SPINS times in all), so at least
 * ROUNDS * SPINS busy loads happen however the threads are scheduled.
 *   held_spin       test-test-and-set, as above
 *   held_spin tas   test-and-set: both threads spin on the exchange
 *                   itself, so the spinner's busy attempts are exchanges
 *                   that write the 1 they find (coalesced the same way)
 * stdout: hlock acquisitions N / hlock failed_attempts N. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "../detailed/truth.h"

#define ROUNDS 20
#define SPINS 100

int hlock;
long hdata;
static pthread_barrier_t round_start;
/* Handshake state: only touched by NOTSAN functions (x86: volatile
 * accesses are enough for these flags). */
static volatile long held_round = -1;
static volatile long seen_busy;
static long failed_total;
static int tas_mode;

NOTSAN static void set_held(long r) { held_round = r; }
NOTSAN static void wait_held(long r) {
    while (held_round != r)
        sched_yield();
}
NOTSAN static void publish(long f) { seen_busy = f; }
NOTSAN static void wait_seen(long at_least) {
    while (seen_busy < at_least)
        sched_yield();
}
NOTSAN static void keep(long f) { failed_total = f; }

static void release(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

static void *holder(void *arg) {
    (void)arg;
    const int tas = tas_mode;
    for (long r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&round_start);
        /* Test, then test-and-set, like the spinner (never busy here:
         * the spinner waits for set_held). */
        while ((!tas && __atomic_load_n(&hlock, __ATOMIC_RELAXED)) ||
               __atomic_exchange_n(&hlock, 1, __ATOMIC_ACQUIRE))
            sched_yield();
        hdata++;
        set_held(r);
        wait_seen((r + 1) * SPINS);
        release(&hlock);
        pthread_barrier_wait(&round_start);
    }
    return NULL;
}

static void *spinner(void *arg) {
    (void)arg;
    long f = 0;
    /* Read once: no access of the loop but the lock word's. */
    const int tas = tas_mode;
    for (long r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&round_start);
        wait_held(r);
        while (tas && __atomic_exchange_n(&hlock, 1, __ATOMIC_ACQUIRE)) {
            f++;
            publish(f);
            sched_yield();
        }
        for (; !tas;) {
            while (__atomic_load_n(&hlock, __ATOMIC_RELAXED)) {
                f++;
                publish(f);
                sched_yield();
            }
            if (!__atomic_exchange_n(&hlock, 1, __ATOMIC_ACQUIRE))
                break;
            f++;
        }
        hdata++;
        release(&hlock);
        pthread_barrier_wait(&round_start);
    }
    keep(f);
    return NULL;
}

int main(int argc, char **argv) {
    tas_mode = argc > 1 && strcmp(argv[1], "tas") == 0;
    pthread_t a, b;
    pthread_barrier_init(&round_start, NULL, 2);
    pthread_create(&a, NULL, holder, NULL);
    pthread_create(&b, NULL, spinner, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("hlock acquisitions %d\n", 2 * ROUNDS);
    printf("hlock failed_attempts %ld\n", failed_total);
    return 0;
}
