// Engine-owned memory: 64-byte aligned, uninitialised, and an allocation failure is an OutOfMemory EngineError
// that names the numbers (never std::bad_alloc escaping, never an abort).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>

#include "backend.h"

namespace kmfleet {

template <typename T>
class Array {
 public:
  Array() = default;
  Array(std::size_t n, const char* what) { allocate(n, what); }
  ~Array() { std::free(p_); }
  Array(Array&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Array& operator=(Array&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  void allocate(std::size_t n, const char* what) {
    if (n == n_ && p_) return;
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
    if (n == 0) return;
    const std::size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    if (n > (static_cast<std::size_t>(-1) / 2) / sizeof(T) || posix_memalign(reinterpret_cast<void**>(&p_), 64, bytes) != 0) {
      p_ = nullptr;
      throw EngineError(ErrorCode::OutOfMemory, std::string("cannot allocate ") + std::to_string(bytes) +
                                                    " bytes of host memory for " + what + " (" + std::to_string(n) +
                                                    " elements)");
    }
    n_ = n;
  }
  void reset() {
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) { return p_[i]; }
  const T& operator[](std::size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace kmfleet
