/* A stand-in for another OpenMP runtime that exports libgomp's lock
 * names (LLVM's libomp does) but keeps another word in its locks: here
 * an omp_lock_t holds a non-zero handle even when free, which libgomp's
 * "0 = free" reading would take for a lock always held by someone.
 * Built twice from this file:
 *   - with -DRUNTIME -shared -fPIC: libfakeomp.so, the runtime;
 *   - without, linked with it: the program, which takes its lock ITERS
 *     times. lockscope must forward these calls unrecorded (they are not
 *     libgomp's) rather than record waits that never happened.
 * stdout: `taken N` (N = ITERS). */
#include <stdio.h>

#define ITERS 1000
#define HANDLE 0x5a5a

#ifdef RUNTIME
static int taken;
void omp_init_lock(int *l) { *l = HANDLE; }
void omp_set_lock(int *l) {
    if (*l == HANDLE)
        taken++;
}
void omp_unset_lock(int *l) { (void)l; }
int runtime_taken(void) { return taken; }
#else
void omp_init_lock(int *l);
void omp_set_lock(int *l);
void omp_unset_lock(int *l);
int runtime_taken(void);

int lock;

int main(void) {
    omp_init_lock(&lock);
    for (int i = 0; i < ITERS; i++) {
        omp_set_lock(&lock);
        omp_unset_lock(&lock);
    }
    printf("taken %d lock %p\n", runtime_taken(), (void *)&lock);
    return 0;
}
#endif
