/* An OpenMP loop with a cheap critical section and imbalanced work: a
 * what-if validation fixture. The critical section is not what makes
 * the program slow; the imbalance is.
 *
 * Iteration i of a static-scheduled loop does work proportional to i
 * (the last thread's share is the largest) and adds its result to a
 * shared sum inside `#pragma omp critical (sum_lock)`. argv[2] picks the
 * variant:
 *   critical   as described;
 *   reduction  the sum as an OpenMP reduction, no critical section
 *              (the fix that removes the lock: about as fast);
 *   balanced   the critical section kept, iterations dealt cyclically
 *              (schedule(static, 1)): the fix that helps.
 * Prints `sum S` (the same for all three).
 *
 * usage: omp_imbalance ROUNDS critical|reduction|balanced [N [WORK]]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned work(unsigned x, long n)
{
    for (long i = 0; i < n; i++)
        x = x * 1103515245u + 12345u;
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s ROUNDS critical|reduction|balanced [N [WORK]]\n", argv[0]);
        return 2;
    }
    long rounds = atol(argv[1]);
    const char *v = argv[2];
    long n = argc > 3 ? atol(argv[3]) : 400;
    long w = argc > 4 ? atol(argv[4]) : 20;
    int crit = strcmp(v, "critical") == 0, red = strcmp(v, "reduction") == 0,
        bal = strcmp(v, "balanced") == 0;
    if (rounds < 1 || n < 1 || w < 0 || !(crit || red || bal)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    unsigned long sum = 0;
    for (long r = 0; r < rounds; r++) {
        if (red) {
#pragma omp parallel for schedule(static) reduction(+ : sum)
            for (long i = 0; i < n; i++)
                sum += work((unsigned)(i + r), w * i) & 0xffu;
        } else if (crit) {
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++) {
                unsigned x = work((unsigned)(i + r), w * i) & 0xffu;
#pragma omp critical(sum_lock)
                sum += x;
            }
        } else {
#pragma omp parallel for schedule(static, 1)
            for (long i = 0; i < n; i++) {
                unsigned x = work((unsigned)(i + r), w * i) & 0xffu;
#pragma omp critical(sum_lock)
                sum += x;
            }
        }
    }
    printf("sum %lu\n", sum);
    return 0;
}
