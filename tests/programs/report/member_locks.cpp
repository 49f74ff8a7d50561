// Heap and member locks with known contention, for the names the report
// gives locks that have no symbol of their own:
//
// - a ThreadPool allocated with `new`, whose one lock is its std::mutex
//   member `m_`: named `ThreadPool::m_` from DWARF, `mutex@ThreadPool::submit`
//   (its first use) without debug info;
// - a global struct `g_stats` with a pthread_mutex_t member `lock`:
//   `g_stats.lock` from DWARF;
// - a heap Pair with two std::mutex members: which one a lock is cannot be
//   told from the class, so it is named by its first use, `mutex@Pair::bump`;
// - with the argument `spare`, a second ThreadPool allocated after the
//   first (at a higher address): `ThreadPool::m_#2`.
//
// A holder thread takes g_stats.lock, then the pool's m_ (in submit(-1))
// for 50 ms, then keeps g_stats.lock 50 ms more, while WORKERS threads
// start: each worker's first submit() waits for m_, and its first
// record_stat() for g_stats.lock. Prints the locks' addresses and counts:
//   truth pool_m=0x.. stats_lock=0x.. pair_a=0x.. spare_m=0x..|(nil) pool_acq=N stats_acq=N pair_acq=N
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

enum { WORKERS = 4, ROUNDS = 1000 };

static std::atomic<int> holding{0};

class ThreadPool {
  public:
    // Out of line: its return addresses name it, with or without DWARF.
    __attribute__((noinline)) void submit(int v) {
        std::lock_guard<std::mutex> g(m_);
        tasks_.push_back(v);
        if (v < 0) {
            holding.store(1);
            usleep(50000);
        }
    }
    const void *lock_addr() const { return &m_; }
    size_t size() const { return tasks_.size(); }

  private:
    std::mutex m_;
    std::vector<int> tasks_;
};

struct Stats {
    long count;
    pthread_mutex_t lock;
};
Stats g_stats = {0, PTHREAD_MUTEX_INITIALIZER};

__attribute__((noinline)) static void record_stat() {
    pthread_mutex_lock(&g_stats.lock);
    g_stats.count++;
    pthread_mutex_unlock(&g_stats.lock);
}

struct Pair {
    std::mutex a_;
    std::mutex b_;
    long x = 0;
    long y = 0;
    __attribute__((noinline)) void bump() {
        std::lock_guard<std::mutex> g(a_);
        x++;
    }
};

int main(int argc, char **argv) {
    ThreadPool *pool = new ThreadPool();
    Pair *pair = new Pair();
    ThreadPool *spare = argc > 1 && std::string(argv[1]) == "spare" ? new ThreadPool() : nullptr;
    std::thread holder([pool] {
        pthread_mutex_lock(&g_stats.lock);
        g_stats.count++;
        pool->submit(-1);
        usleep(50000);
        pthread_mutex_unlock(&g_stats.lock);
    });
    while (holding.load() == 0)
        usleep(100);
    if (spare)
        spare->submit(1);
    std::vector<std::thread> workers;
    for (int w = 0; w < WORKERS; w++)
        workers.emplace_back([pool, pair, w] {
            for (int i = 0; i < ROUNDS; i++) {
                pool->submit(w * ROUNDS + i);
                record_stat();
                pair->bump();
            }
        });
    holder.join();
    for (auto &t : workers)
        t.join();
    std::printf("truth pool_m=%p stats_lock=%p pair_a=%p spare_m=%p pool_acq=%zu stats_acq=%ld "
                "pair_acq=%ld\n",
                pool->lock_addr(), (void *)&g_stats.lock, (void *)&pair->a_, spare ? spare->lock_addr() : nullptr,
                pool->size(), g_stats.count, pair->x);
    delete spare;
    delete pair;
    delete pool;
    return 0;
}
