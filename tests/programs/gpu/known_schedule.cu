// A CUDA program with a known CPU/GPU schedule, for validating lockscope's
// GPU capture on a machine with an NVIDIA GPU (CI has none: this file is
// not built by the tests). Build and check:
//
//   nvcc -O2 -g -o known_schedule tests/programs/gpu/known_schedule.cu
//   lockscope record -o gpu.lstrace -- ./known_schedule
//   lockscope gpu gpu.lstrace
//
// Each iteration: spin_kernel runs ~SPIN_MS on the GPU while the host
// overlaps OVERLAP_MS of work, then cudaDeviceSynchronize waits for the
// rest; then HOST_MS of host work during which the GPU idles. Expected:
// kernel time ~ITERS*SPIN_MS, CPU waiting ~ITERS*(SPIN_MS-OVERLAP_MS)
// charged to spin_kernel, GPU idle ~ITERS*HOST_MS charged to
// launch_spin() (the launch that ends each gap), plus one 64 MiB copy
// each way.
#include <chrono>
#include <cstdio>
#include <thread>
#include <cuda_runtime.h>

constexpr int ITERS = 10;
constexpr int SPIN_MS = 20, OVERLAP_MS = 5, HOST_MS = 10;

__global__ void spin_kernel(long long cycles, int *out) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    if (threadIdx.x == 0) *out = 1;
}

__attribute__((noinline)) void launch_spin(long long cycles, int *d) {
    spin_kernel<<<1, 32>>>(cycles, d);
}

__attribute__((noinline)) void host_work(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int main() {
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    long long cycles = (long long)clock_khz * SPIN_MS;
    int *d = nullptr;
    cudaMalloc(&d, 64 << 20);
    static char h[64 << 20];
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    for (int i = 0; i < ITERS; i++) {
        launch_spin(cycles, d);
        host_work(OVERLAP_MS);
        cudaDeviceSynchronize();
        host_work(HOST_MS);
    }
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    printf("iterations %d spin_ms %d overlap_ms %d host_ms %d\n", ITERS, SPIN_MS, OVERLAP_MS,
           HOST_MS);
    return 0;
}
