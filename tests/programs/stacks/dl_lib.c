/* Loaded with dlopen by dl_main.c after the recorder has started, built
 * with gcc -O2 -g -shared -fPIC (no frame pointers): its threads contend
 * for one mutex, so their contended acquisitions have call paths whose
 * frames are in this object, which the recorder did not know at start.
 * Every contended path is lib_contend <- lib_worker (innermost first). */
#include <pthread.h>
#include <unistd.h>

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long lib_counter;
static int arrived; /* workers that started (atomic) */

__attribute__((noinline)) void lib_contend(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&lib_lock);
        for (volatile int k = 0; k < 20000; k = k + 1) {
        }
        lib_counter = lib_counter + 1;
        pthread_mutex_unlock(&lib_lock);
    }
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

__attribute__((noinline)) static void *lib_worker(void *arg) {
    __atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST);
    lib_contend((int)(long)arg);
    lib_counter = lib_counter + 0;
    return 0;
}

long lib_run(int threads, int n) {
    pthread_t t[16];
    if (threads > 16) threads = 16;
    /* Held while the workers start, so that each waits at least once
     * whatever the machine's load: a contended wait carries a path. */
    pthread_mutex_lock(&lib_lock);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, lib_worker, (void *)(long)n);
    while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < threads) usleep(1000);
    usleep(20000);
    pthread_mutex_unlock(&lib_lock);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    return lib_counter;
}
