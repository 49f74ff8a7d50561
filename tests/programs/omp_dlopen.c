/* An OpenMP library loaded with dlopen(RTLD_LOCAL) by a program that
 * does not link libgomp itself (as Python loads an extension module built
 * with -fopenmp). Built twice from this file:
 *   - with -DPLUGIN -fopenmp -shared -fPIC: the library, whose
 *     plugin_run() has THREADS threads each enter
 *     `#pragma omp critical (plugin)` and take an omp_lock_t ITERS times;
 *   - without: the program, which dlopens argv[1] and calls it.
 * libgomp is then only in the library's local scope: a hook that looked
 * for the real functions only where RTLD_NEXT looks would not find them
 * (the program used to abort under `lockscope record`).
 * stdout: `plugin sections N locks N` (N = THREADS * ITERS). */
#define _GNU_SOURCE
#include <stdio.h>

#define THREADS 2
#define ITERS 5000

#ifdef PLUGIN
#include <omp.h>

static omp_lock_t lk;

void plugin_run(long *sections, long *locks) {
    long s = 0, l = 0;
    omp_init_lock(&lk);
#pragma omp parallel num_threads(THREADS) reduction(+ : s, l)
    for (int i = 0; i < ITERS; i++) {
#pragma omp critical(plugin)
        s++;
        omp_set_lock(&lk);
        l++;
        omp_unset_lock(&lk);
    }
    omp_destroy_lock(&lk);
    *sections = s;
    *locks = l;
}
#else
#include <dlfcn.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    void (*run)(long *, long *) = (void (*)(long *, long *))dlsym(h, "plugin_run");
    if (!run)
        return 4;
    long sections = 0, locks = 0;
    run(&sections, &locks);
    printf("plugin sections %ld locks %ld\n", sections, locks);
    return 0;
}
#endif
