// A C++ thread pool built the ordinary way (g++ -O2 -g, with or without
// -fno-omit-frame-pointer): four workers take jobs from a queue (a mutex
// and a condition variable); each job computes a value and logs it under
// one shared mutex, `log_m`, which the workers contend for.
//
// The call path of every contended acquisition of `log_m` is, innermost
// first, log_result <- run_job <- ThreadPool::worker_loop (std::function's
// invoker tail-calls run_job): the same user functions whether or not the
// binary keeps frame pointers. Truth lines after the run:
//   truth-jobs count=N          jobs run (each logged once)
//   truth-total value=V         sum of the logged values
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

class ThreadPool {
  public:
    explicit ThreadPool(int n) {
        for (int i = 0; i < n; i++) workers_.emplace_back([this] { worker_loop(); });
    }
    __attribute__((noinline)) void submit(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> g(m_);
            q_.push_back(std::move(f));
        }
        cv_.notify_one();
    }
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> g(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto &t : workers_) t.join();
    }

  private:
    __attribute__((noinline)) void worker_loop() {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock<std::mutex> g(m_);
                cv_.wait(g, [this] { return stop_ || !q_.empty(); });
                if (q_.empty()) return;
                job = std::move(q_.front());
                q_.pop_front();
            }
            job();
        }
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
    std::vector<std::thread> workers_;
    bool stop_ = false;
};

static std::mutex log_m;
static long total, logged;
static volatile long runs;

// Held for a few microseconds, so that the workers wait for each other.
__attribute__((noinline)) static void log_result(long r) {
    std::lock_guard<std::mutex> g(log_m);
    for (volatile int i = 0; i < 20000; i = i + 1) {
    }
    total += r;
    logged++;
}

__attribute__((noinline)) static long compute(int i) {
    long r = 0;
    for (volatile int k = 0; k < 100; k = k + 1) r += (i * 31 + k) % 7;
    return r;
}

__attribute__((noinline)) static void run_job(int i) {
    long r = compute(i);
    log_result(r);
    runs = runs + 1;  // keeps log_result from being a tail call
}

int main() {
    const int jobs = 4000;
    long expect = 0;
    for (int i = 0; i < jobs; i++)
        for (int k = 0; k < 100; k++) expect += (i * 31 + k) % 7;
    {
        ThreadPool pool(4);
        for (int i = 0; i < jobs; i++) pool.submit([i] { run_job(i); });
    }
    std::printf("truth-jobs count=%ld\n", logged);
    std::printf("truth-total value=%ld\n", total);
    return logged == jobs && total == expect ? 0 : 1;
}
