#include "thread_pool.h"

namespace kmfleet {

ThreadPool::ThreadPool(int threads) : size_(threads < 1 ? 1 : threads) {
  for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (size_ == 1) {
    fn(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_ = size_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0, size_);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::loop(int tid) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(tid, size_);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (err && !error_) error_ = err;
    if (--pending_ == 0) done_.notify_one();
  }
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

}  // namespace kmfleet
