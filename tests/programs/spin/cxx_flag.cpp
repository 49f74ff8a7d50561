// A C++ spinlock on std::atomic_flag (test-and-set) guarding a counter,
// with a std::lock_guard-style RAII wrapper: `lockscope spin` must find
// `g_flag` as a tas lock with exactly THREADS * ITERS + 1 acquisitions
// (main reads the result under it), protecting `counter`, and nothing
// else.
// stdout: g_flag acquisitions N / counter N.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

constexpr int THREADS = 3;
constexpr int ITERS = 1000;

std::atomic_flag g_flag = ATOMIC_FLAG_INIT;
long counter;
// The threads run at once (see volatile_release.c for why).
pthread_barrier_t start;

struct SpinGuard {
    explicit SpinGuard(std::atomic_flag &f) : f_(f) {
        while (f_.test_and_set(std::memory_order_acquire))
            std::this_thread::yield();
    }
    ~SpinGuard() { f_.clear(std::memory_order_release); }
    std::atomic_flag &f_;
};

int main() {
    std::vector<std::thread> ts;
    pthread_barrier_init(&start, nullptr, THREADS);
    for (int t = 0; t < THREADS; t++)
        ts.emplace_back([] {
            pthread_barrier_wait(&start);
            for (int i = 0; i < ITERS; i++) {
                SpinGuard g(g_flag);
                counter++;
            }
        });
    for (auto &t : ts)
        t.join();
    long total;
    {
        // Read under the lock too, so that the lock protects `counter`
        // for Eraser (which knows nothing of join).
        SpinGuard g(g_flag);
        total = counter;
    }
    std::printf("g_flag acquisitions %d\n", THREADS * ITERS + 1);
    std::printf("counter %ld\n", total);
    return 0;
}
