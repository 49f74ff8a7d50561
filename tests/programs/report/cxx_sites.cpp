// Three user functions take one std::mutex, each an exact number of times,
// through three different wrappers (lock(), lock_guard, unique_lock); a
// fourth thread holds the mutex 50 ms so that each function waits at
// least once (contended acquisitions carry a call path).
//
// Truth lines: `truth-site fn=NAME line=L count=N` per function, with L
// the line of the acquisition in this file. The report must name each of
// them as its own site, never the libstdc++ wrapper.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

static std::mutex m;
static long counter;

__attribute__((noinline)) static void by_lock(int n) {
    for (int i = 0; i < n; i++) {
        m.lock();  // LINE_LOCK
        counter++;
        m.unlock();
    }
}

__attribute__((noinline)) static void by_guard(int n) {
    for (int i = 0; i < n; i++) {
        std::lock_guard<std::mutex> g(m);  // LINE_GUARD
        counter++;
    }
}

__attribute__((noinline)) static void by_unique(int n) {
    for (int i = 0; i < n; i++) {
        std::unique_lock<std::mutex> g(m);  // LINE_UNIQUE
        counter += 2;
    }
}

int main() {
    m.lock();  // LINE_MAIN
    std::thread a(by_lock, 1000), b(by_guard, 2000), c(by_unique, 3000);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m.unlock();
    a.join();
    b.join();
    c.join();
    std::printf("truth-site fn=by_lock line=%d count=1000\n", 19);
    std::printf("truth-site fn=by_guard line=%d count=2000\n", 27);
    std::printf("truth-site fn=by_unique line=%d count=3000\n", 34);
    std::printf("truth-site fn=main line=%d count=1\n", 40);
    std::printf("counter %ld\n", counter);
    return 0;
}
