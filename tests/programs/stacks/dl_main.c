/* dl_main LIB: dlopens LIB (dl_lib.c built as a shared object) and runs
 * its contending threads: 4 threads x 500 acquisitions of one mutex.
 * Prints `truth-lib count=N` (acquisitions the library made). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    long (*run)(int, int) = (long (*)(int, int))dlsym(h, "lib_run");
    if (!run) return 2;
    printf("truth-lib count=%ld\n", run(4, 500));
    return 0;
}
