// A small persistent thread pool: run(fn) calls fn(tid, nthreads) once on each of nthreads threads (the caller is
// tid 0) and returns when all are done. Work splitting is the caller's, and every algorithm built on it gives the
// same result for any thread count (DESIGN.md "Numerics": determinism).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kmfleet {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // Runs fn on every thread; the first exception thrown by any of them is rethrown here after all finished. Callers
  // on different threads (the engine's and the JS thread reading centroids) take turns. fn must not call run.
  void run(const std::function<void(int tid, int nthreads)>& fn);

  // fn(tid, i) for every i of [0, n), the threads taking the next i as they come free (for work whose items take
  // uneven time, like reads). After a throw no new item starts, and the exception of the lowest i is rethrown: every
  // item before it had started, so it is the first failure in item order whatever the timing.
  void forEachInOrder(std::int64_t n, const std::function<void(int tid, std::int64_t i)>& fn);

  // Splits [0, n) into nthreads contiguous ranges, aligned to `align` where possible.
  static void range(std::int64_t n, int tid, int nthreads, std::int64_t align, std::int64_t& begin, std::int64_t& end);

  // dst[0, n) = src[0, n), split over the threads when it is large (a K×D centroid copy of 4 MB took ~0.5 ms on
  // one thread of the GPU machine's host).
  void copy(float* dst, const float* src, std::size_t n);

 private:
  void loop(int tid);

  int size_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex callers_;  // one run at a time
  std::condition_variable wake_, done_;
  const std::function<void(int, int)>* job_ = nullptr;  // published by the generation bump
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;  // written under mu_ before the final generation bump
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace kmfleet
