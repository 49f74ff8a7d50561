// C++ ground truth for ULCP: a std::mutex guarding a std::vector and a
// per-thread array, used through std::lock_guard; std::atomic counters
// outside the lock.
//
//   cs_add    push_back: writes the vector's end pointer (and the heap
//             buffer), so two adds conflict, and an add conflicts with a
//             count (which reads begin and end);
//   cs_count  size(): reads only, so two counts are read_read;
//   cs_own    writes the thread's own element of `own`: disjoint from
//             everything else.
//
// stdout: deterministic results. argv[1] (optional): truth file.
// FIXTURE_SCALE=N runs N times as many rounds (benchmark only).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

#include "truth.h"

namespace {

constexpr int kThreads = 3;
constexpr int kRounds = 200;
constexpr int kMaxLog = kThreads * kRounds;

enum Kind { ADD, COUNT, OWN, NKINDS };
const char *const fn_name[NKINDS] = {"cs_add", "cs_count", "cs_own"};
const char *const kind_name[5] = {"null_lock", "read_read", "disjoint_write", "benign",
                                  "conflict"};

int log_thread[kMaxLog], log_kind[kMaxLog], nlog;

NOTSAN void note(int thread, int kind) {
    if (nlog < kMaxLog) {
        log_thread[nlog] = thread;
        log_kind[nlog] = kind;
        nlog++;
    }
}

}  // namespace

struct Inventory {
    std::mutex mu;
    std::vector<long> items;
    long own[kThreads] = {};
};

Inventory inv;
std::atomic<long> ops{0};

__attribute__((noinline)) void cs_add(int id, long v) {
    std::lock_guard<std::mutex> g(inv.mu);
    note(id, ADD);
    inv.items.push_back(v);
}

__attribute__((noinline)) long cs_count(int id) {
    std::lock_guard<std::mutex> g(inv.mu);
    note(id, COUNT);
    return static_cast<long>(inv.items.size());
}

__attribute__((noinline)) void cs_own(int id) {
    std::lock_guard<std::mutex> g(inv.mu);
    note(id, OWN);
    inv.own[id] += 1;
}

static int pair_kind(int a, int b) {
    if (a == OWN || b == OWN) return 2;
    if (a == COUNT && b == COUNT) return 1;
    return 4;
}

NOTSAN static void write_truth(const char *path) {
    FILE *f = std::fopen(path, "w");
    if (!f) {
        std::perror(path);
        std::exit(1);
    }
    long pairs[5] = {0};
    long site[NKINDS][NKINDS] = {{0}};
    for (int i = 1; i < nlog; i++) {
        if (log_thread[i - 1] == log_thread[i]) continue;
        int a = log_kind[i - 1], b = log_kind[i];
        pairs[pair_kind(a, b)]++;
        site[a][b]++;
    }
    std::fprintf(f, "sections %d\n", nlog);
    for (int k = 0; k < 5; k++) std::fprintf(f, "pairs %s %ld\n", kind_name[k], pairs[k]);
    for (int a = 0; a < NKINDS; a++)
        for (int b = 0; b < NKINDS; b++)
            if (site[a][b])
                std::fprintf(f, "site %s %s %s %ld\n", fn_name[a], fn_name[b],
                             kind_name[pair_kind(a, b)], site[a][b]);
    std::fclose(f);
}

int main(int argc, char **argv) {
    const int rounds = kRounds * (std::getenv("FIXTURE_SCALE") ? std::atoi(std::getenv("FIXTURE_SCALE")) : 1);
    std::vector<std::thread> threads;
    long seen[kThreads] = {};
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([t, rounds, &seen] {
            unsigned x = 99u + 13u * static_cast<unsigned>(t);
            for (int r = 0; r < rounds; r++) {
                x = x * 1103515245u + 12345u;
                switch ((x >> 16) % NKINDS) {
                    case ADD: cs_add(t, r); break;
                    case COUNT: seen[t] += cs_count(t) > 0; break;
                    default: cs_own(t); break;
                }
                ops.fetch_add(1, std::memory_order_relaxed);
                sched_yield();
            }
        });
    }
    for (auto &th : threads) th.join();
    long sum = 0;
    for (long v : inv.items) sum += v;
    std::printf("items=%zu sum=%ld own=%ld,%ld,%ld ops=%ld\n", inv.items.size(), sum, inv.own[0],
                inv.own[1], inv.own[2], ops.load());
    if (argc > 1) write_truth(argv[1]);
    return 0;
}
