// Synchronisation inside one ThreadPool::run that covers a whole chunk of a pass (cpu_backend.cpp compute): the
// phases of its pieces (assignment, statistics) meet at a barrier instead of a pool.run each. Work inside a phase is
// taken in small tasks from a counter, so a thread that is descheduled holds up at most the task it has.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KMFLEET_CPU_PAUSE() _mm_pause()
#else
#define KMFLEET_CPU_PAUSE() ((void)0)
#endif

namespace kmfleet {
namespace cpu {

class PassSync {
 public:
  explicit PassSync(int threads) : threads_(threads) {}

  // All threads wait here; false when a thread failed (its exception is rethrown by the pool: stop working). A waiter
  // spins a little, then sleeps: spinning or yielding longer lost more than it saved on the shared machine.
  bool barrier() {
    const std::uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        generation_.store(gen + 1, std::memory_order_release);
      }
      cv_.notify_all();
    } else {
      for (int spins = 0; spins < 1000 && generation_.load(std::memory_order_acquire) == gen; ++spins) KMFLEET_CPU_PAUSE();
      if (generation_.load(std::memory_order_acquire) == gen) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != gen || failed_.load(); });
      }
    }
    return !failed_.load(std::memory_order_relaxed);
  }

  // A thread that throws calls this first, so that the others leave their barriers.
  void fail() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_.store(true);
    }
    cv_.notify_all();
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  // Task counters, one per phase of a piece: the next task index.
  std::int64_t take(int slot) { return next_[slot].fetch_add(1, std::memory_order_relaxed); }
  // Resets a counter; only between two barriers that every thread passes after its last take.
  void reset(int slot) { next_[slot].store(0, std::memory_order_relaxed); }

 private:
  const int threads_;
  std::atomic<int> arrived_{0};
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<std::int64_t> next_[4] = {};
};

}  // namespace cpu
}  // namespace kmfleet
