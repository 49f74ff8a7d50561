/* The other entry points of an OpenMP parallel region (gcc -fopenmp):
 *   - `#pragma omp parallel sections` (GOMP_parallel_sections);
 *   - GOMP_parallel_loop_dynamic, which GCC emits for a combined
 *     `parallel for` in some versions (GCC 12 does not): called here
 *     directly, with a body written as GCC writes one (iterations taken
 *     with GOMP_loop_dynamic_next, then GOMP_loop_end_nowait).
 * Both with 2 threads. stdout: `sections S loop L body 0x...` where S
 * counts the sections run (2) and L the loop's iterations (ITERS), and
 * body is the address of the loop's body (the region's barrier object). */
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>

#define ITERS 1000

/* libgomp's ABI (libgomp_g.h, not installed). */
void GOMP_parallel_loop_dynamic(void (*fn)(void *), void *data, unsigned num_threads,
                                long start, long end, long incr, long chunk, unsigned flags);
bool GOMP_loop_dynamic_next(long *istart, long *iend);
void GOMP_loop_end_nowait(void);

static long iterations;

static void body(void *data) {
    long s, e, mine = 0;
    (void)data;
    while (GOMP_loop_dynamic_next(&s, &e))
        for (long i = s; i < e; i++)
            mine++;
    GOMP_loop_end_nowait();
    __atomic_fetch_add(&iterations, mine, __ATOMIC_RELAXED);
}

int main(void) {
    int sections = 0;
#pragma omp parallel sections num_threads(2) reduction(+ : sections)
    {
#pragma omp section
        sections++;
#pragma omp section
        sections++;
    }
    GOMP_parallel_loop_dynamic(body, NULL, 2, 0, ITERS, 1, 4, 0);
    printf("sections %d loop %ld body %p\n", sections, iterations, (void *)body);
    return 0;
}
