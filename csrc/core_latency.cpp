#include "core_latency.h"

#include <atomic>
#include <chrono>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace ggspec {
namespace {

bool pin_to(int cpu) {
#if defined(__linux__)
    if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
#else
    (void) cpu;
    return false;
#endif
}

}  // namespace

double core_round_trip_ns(int cpu_a, int cpu_b, int trips) {
    alignas(64) std::atomic<int> turn{0};  // odd: b's move, even: a's
    std::atomic<bool> pinned_b{false}, ready{false};
    std::thread b([&] {
        pinned_b = pin_to(cpu_b);
        ready = true;
        if (!pinned_b) return;
        for (int i = 0; i < trips; ++i) {
            while (turn.load(std::memory_order_acquire) != 2 * i + 1) {
            }
            turn.store(2 * i + 2, std::memory_order_release);
        }
    });
    // The caller's affinity is restored after: this thread is the caller's.
#if defined(__linux__)
    cpu_set_t before;
    const bool saved = pthread_getaffinity_np(pthread_self(), sizeof(before), &before) == 0;
#endif
    const bool pinned_a = pin_to(cpu_a);
    while (!ready.load()) {
    }
    double ns = -1.0;
    if (pinned_b) {  // b bounces `trips` times once pinned: run them, and time them only where a is pinned too
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < trips; ++i) {
            turn.store(2 * i + 1, std::memory_order_release);
            while (turn.load(std::memory_order_acquire) != 2 * i + 2) {
            }
        }
        const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - t0;
        if (pinned_a) ns = elapsed.count() / trips;
    }
    b.join();
#if defined(__linux__)
    if (saved) pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
#endif
    return ns;
}

}  // namespace ggspec
