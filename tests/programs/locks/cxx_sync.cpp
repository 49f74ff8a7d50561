// C++ std::mutex, std::condition_variable (wait_for uses
// pthread_cond_clockwait on glibc >= 2.30) and std::timed_mutex.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <queue>
#include <thread>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
    const long per = argc > 1 ? std::atol(argv[1]) : 10000;  // items per producer
    std::mutex m;
    std::condition_variable cv;
    std::queue<int> q;
    bool done = false;
    long sum = 0;
    std::vector<std::thread> consumers;
    for (int c = 0; c < 3; c++)
        consumers.emplace_back([&] {
            for (;;) {
                std::unique_lock<std::mutex> l(m);
                cv.wait_for(l, std::chrono::milliseconds(3), [&] { return !q.empty() || done; });
                if (q.empty()) {
                    if (done) return;
                    continue;
                }
                sum += q.front();
                q.pop();
            }
        });
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; p++)
        producers.emplace_back([&, p] {
            for (long i = 0; i < per; i++) {
                std::lock_guard<std::mutex> l(m);
                q.push(int(p * per + i));
                cv.notify_one();
            }
        });
    for (auto &t : producers) t.join();
    {
        std::lock_guard<std::mutex> l(m);
        done = true;
    }
    cv.notify_all();
    for (auto &t : consumers) t.join();
    std::timed_mutex tm;
    tm.lock();
    bool got = true;
    std::thread([&] { got = tm.try_lock_for(std::chrono::milliseconds(20)); }).join();
    tm.unlock();
    std::printf("sum %ld (expected %ld), timed_mutex try_lock_for while held: %s\n", sum,
                (3 * per - 1) * (3 * per) / 2, got ? "acquired" : "timed out");
    return 0;
}
