/* An OpenMP region whose thread 0 creates a task and then busy-waits for
 * it without a task scheduling point, leaving it to the team's other
 * thread, which libgomp lets run pending tasks while it waits in the
 * barrier at the region's end. Not a conforming wait, but it works
 * without lockscope; lockscope's own barrier at the region's end runs no
 * task, so a thread waiting there must give up at its limit
 * (LOCKSCOPE_OMP_WAIT_MS) rather than hang the program.
 * stdout: `done N` (N = ROUNDS). */
#include <omp.h>
#include <stdio.h>

#define ROUNDS 2

static int flag;

int main(void) {
    int done = 0;
    for (int r = 0; r < ROUNDS; r++) {
        __atomic_store_n(&flag, 0, __ATOMIC_RELAXED);
#pragma omp parallel num_threads(2) reduction(+ : done)
        {
            if (omp_get_thread_num() == 0) {
#pragma omp task
                __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
                while (!__atomic_load_n(&flag, __ATOMIC_ACQUIRE))
                    ;
                done++;
            }
        }
    }
    printf("done %d\n", done);
    return 0;
}
