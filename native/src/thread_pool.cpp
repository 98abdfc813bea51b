#include "thread_pool.h"

#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KMFLEET_PAUSE() _mm_pause()
#else
#define KMFLEET_PAUSE() ((void)0)
#endif

namespace kmfleet {

// A pass issues a few hundred parallel sections (pieces of ~1 MiB): waiting threads spin briefly (~10 µs) before
// they sleep, so a section costs about a microsecond instead of a futex round trip.
namespace {
constexpr int kSpin = 256;
}

ThreadPool::ThreadPool(int threads) : size_(threads < 1 ? 1 : threads) {
  for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (size_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> turn(callers_);
  job_ = &fn;
  error_ = nullptr;
  pending_.store(size_ - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0, size_);
  } catch (...) {
    mine = std::current_exception();
  }
  for (int i = 0; i < kSpin && pending_.load() != 0; ++i) KMFLEET_PAUSE();
  if (pending_.load() != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_.load() == 0; });
  }
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::loop(int tid) {
  std::uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpin && generation_.load() == seen; ++i) KMFLEET_PAUSE();
    if (generation_.load() == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load();
    if (stop_) return;
    std::exception_ptr err;
    try {
      (*job_)(tid, size_);
    } catch (...) {
      err = std::current_exception();
    }
    if (err) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = err;
    }
    if (pending_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the caller's wait: no lost wake-up
      done_.notify_one();
    }
  }
}

void ThreadPool::forEachInOrder(std::int64_t n, const std::function<void(int, std::int64_t)>& fn) {
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::pair<std::int64_t, std::exception_ptr>> errors(static_cast<std::size_t>(size_));
  run([&](int tid, int) {
    for (std::int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) {
      try {
        fn(tid, i);
      } catch (...) {
        errors[static_cast<std::size_t>(tid)] = {i, std::current_exception()};
        failed.store(true);
        return;
      }
    }
  });
  if (!failed.load()) return;
  const std::pair<std::int64_t, std::exception_ptr>* first = nullptr;
  for (const auto& e : errors)
    if (e.second && (!first || e.first < first->first)) first = &e;
  std::rethrow_exception(first->second);
}

void ThreadPool::range(std::int64_t n, int tid, int nthreads, std::int64_t align, std::int64_t& begin,
                       std::int64_t& end) {
  if (align < 1) align = 1;
  const std::int64_t units = (n + align - 1) / align;
  const std::int64_t per = units / nthreads, extra = units % nthreads;
  const std::int64_t u0 = tid * per + (tid < extra ? tid : extra);
  const std::int64_t u1 = u0 + per + (tid < extra ? 1 : 0);
  begin = u0 * align < n ? u0 * align : n;
  end = u1 * align < n ? u1 * align : n;
}

void ThreadPool::copy(float* dst, const float* src, std::size_t n) {
  constexpr std::size_t kSerial = std::size_t(1) << 18;  // below 1 MiB a wake-up of the pool costs more than it saves
  if (n < kSerial || size_ == 1) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  run([&](int tid, int nt) {
    std::int64_t b = 0, e = 0;
    range(static_cast<std::int64_t>(n), tid, nt, 1024, b, e);
    if (e > b) std::memcpy(dst + b, src + b, static_cast<std::size_t>(e - b) * sizeof(float));
  });
}

}  // namespace kmfleet
