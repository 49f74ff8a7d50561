/* A "CUDA program" with a known CPU/GPU schedule, for lockscope's GPU
 * capture test on machines without a GPU: it plays the CUDA driver
 * (loads CUDA_INJECTION64_PATH and calls InitializeInjection, as the
 * driver does) and uses fake_cupti.c to report launches, waits and
 * kernel executions. Schedule (ms):
 *   launch_one at 0:  kernel_one runs [1, 21)
 *   overlap 5 ms of host work, then cudaDeviceSynchronize until 23
 *   host_work 10 ms (the GPU idles), launch_two: kernel_two 0.5 ms later
 *   for 10 ms, plus a 4096-byte device-to-host copy after it; then a
 *   stream synchronize until both are done.
 * Prints the truth it knows: kernel counts and correlation ids. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void (*fake_api)(uint32_t, const char *, const void *, uint32_t, uint32_t);
static void (*fake_api_sym)(uint32_t, const char *, const void *, uint32_t, uint32_t, const char *);
/* fake_static_runtime.c, built without debug information: CUDA's static
 * runtime inside the program. sync_device and launch_two's kernel go
 * through it; launch_one and the copy call the API directly. */
void static_runtime_call(void (*)(uint32_t, const char *, const void *, uint32_t, uint32_t,
                                  const char *),
                         uint32_t, const char *, const void *, uint32_t, uint32_t, const char *);
static void (*fake_kernel)(uint64_t, uint64_t, uint32_t, uint32_t);
static void (*fake_copy)(uint64_t, uint64_t, uint32_t, uint8_t, uint64_t);
static uint64_t (*fake_now)(void);
static int (*flush)(uint32_t);

#define MS 1000000ull

static void sleep_until(uint64_t t) {
    while (fake_now() < t) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, 0);
    }
}

/* Host functions standing for the kernels (what cudaLaunchKernel's
 * `func` points at: they symbolize to the kernel's name). */
static volatile int sink;
__attribute__((noinline)) void kernel_one(void) { sink = 1; }

struct launch_params { const void *func; uint32_t grid[3], block[3]; void **args; size_t shmem; void *stream; };

__attribute__((noinline)) void launch_one(uint64_t t0) {
    struct launch_params p = { (const void *)kernel_one, {1,1,1}, {1,1,1}, 0, 0, (void *)0x51 };
    fake_api(1, "cudaLaunchKernel_v7000", &p, 1, 0);
    fake_api(2, "cuLaunchKernel", 0, 1, 0);   /* nested driver call: not recorded */
    fake_api(2, "cuLaunchKernel", 0, 1, 1);
    fake_api(1, "cudaLaunchKernel_v7000", &p, 1, 1);
    fake_kernel(t0 + 1 * MS, t0 + 21 * MS, 1, 7);
}

__attribute__((noinline)) void sync_device(uint64_t until) {
    static_runtime_call(fake_api_sym, 1, "cudaDeviceSynchronize_v3020", 0, 2, 0, 0);
    sleep_until(until);
    static_runtime_call(fake_api_sym, 1, "cudaDeviceSynchronize_v3020", 0, 2, 1, 0);
}

__attribute__((noinline)) void host_work(uint64_t until) { sleep_until(until); }

/* launch_two launches as CUDA 13's stubs do: `func` is a runtime handle
 * in the heap (no file names it), and CUPTI's symbolName names the
 * kernel (mangled: kernel_two()). launch_one passes the host function,
 * as CUDA 11 and 12 do, and no symbolName. */
__attribute__((noinline)) void launch_two(void) {
    static void *handle;
    if (!handle) handle = malloc(64);
    struct launch_params p = { handle, {1,1,1}, {1,1,1}, 0, 0, (void *)0x51 };
    uint64_t t = fake_now();
    static_runtime_call(fake_api_sym, 1, "cudaLaunchKernel_v7000", &p, 3, 0, "_Z10kernel_twov");
    static_runtime_call(fake_api_sym, 1, "cudaLaunchKernel_v7000", &p, 3, 1, "_Z10kernel_twov");
    fake_kernel(t + MS / 2, t + MS / 2 + 10 * MS, 3, 7);
    void *cp[5] = {0, 0, (void *)4096, (void *)2, (void *)0x51};
    fake_api(1, "cudaMemcpyAsync_v3020", cp, 4, 0);
    fake_api(1, "cudaMemcpyAsync_v3020", cp, 4, 1);
    fake_copy(t + MS / 2 + 10 * MS, t + 11 * MS, 4, 2, 4096);
}

__attribute__((noinline)) void sync_stream(uint64_t until) {
    void *sp[1] = {(void *)0x51};
    fake_api(1, "cudaStreamSynchronize_v3020", sp, 5, 0);
    sleep_until(until);
    fake_api(1, "cudaStreamSynchronize_v3020", sp, 5, 1);
}

int main(int argc, char **argv) {
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    const char *cupti = getenv("LOCKSCOPE_CUPTI");
    if (!inj) { printf("no-injection\n"); return 0; }
    if (argc > 1) {
        /* init-only: what the driver does, nothing else (CUPTI absent). */
        void *h = dlopen(inj, RTLD_NOW);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : 0;
        printf("attached %d\n", init ? init() : -1);
        return 0;
    }
    if (!cupti) { printf("no-cupti-env\n"); return 0; }
    void *c = dlopen(cupti, RTLD_NOW);
    if (!c) { printf("no-cupti %s\n", dlerror()); return 1; }
    fake_api = dlsym(c, "fake_api");
    fake_api_sym = dlsym(c, "fake_api_sym");
    fake_kernel = dlsym(c, "fake_kernel");
    fake_copy = dlsym(c, "fake_copy");
    fake_now = dlsym(c, "fake_now");
    flush = dlsym(c, "cuptiActivityFlushAll");
    /* The driver's part: load the injection library, call its entry. */
    void *h = dlopen(inj, RTLD_NOW);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : 0;
    int attached = init ? init() : -1;
    printf("attached %d\n", attached);
    uint64_t t0 = fake_now();
    launch_one(t0);
    host_work(t0 + 5 * MS);
    sync_device(t0 + 23 * MS);
    /* 10 ms from the sync's return, not to an absolute time: a sync that
     * returns late on a loaded machine must not shorten the GPU's idle
     * gap below the 10 ms the test expects (it once measured 8.6 ms). */
    host_work(fake_now() + 10 * MS);
    launch_two();
    sync_stream(fake_now() + 12 * MS);
    flush(1);
    printf("kernels 2 copies 1\n");
    return 0;
}
