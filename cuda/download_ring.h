// Two pinned pieces that device arrays come down through: the DMA of piece i+1 overlaps the host's copy of piece i
// (sums, and counts or inertia too large to queue), and a place for small K-long arrays queued behind a stream's work
// so that one host wait covers them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

class DownloadRing {
 public:
  static constexpr std::size_t kPieceBytes = std::size_t(1) << 20;  // also the pieces of the centroids' upload

  void allocate() {
    for (int i = 0; i < 2; ++i) {
      piece_[i] = hostAlloc<char>(kPieceBytes, "download staging");
      check(cudaEventCreateWithFlags(&pieceDone_[i], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  void release() noexcept {
    for (int i = 0; i < 2; ++i) {
      if (piece_[i]) cudaFreeHost(piece_[i]);
      if (pieceDone_[i]) cudaEventDestroy(pieceDone_[i]);
      piece_[i] = nullptr;
      pieceDone_[i] = nullptr;
    }
  }

  // count values of src (device) appended to out through the two pieces, behind stream s's work.
  template <typename T, typename U>
  void download(const T* src, std::size_t count, std::vector<U>& out, cudaStream_t s) {
    static_assert(sizeof(T) == sizeof(U), "same representation");
    out.clear();
    out.reserve(count);
    const std::size_t per = kPieceBytes / sizeof(T), pieces = (count + per - 1) / per;
    auto enqueue = [&](std::size_t i) {
      const std::size_t n = std::min(per, count - i * per);
      check(cudaMemcpyAsync(piece_[i % 2], src + i * per, n * sizeof(T), cudaMemcpyDeviceToHost, s), "D2H");
      check(cudaEventRecord(pieceDone_[i % 2], s), "cudaEventRecord");
    };
    if (pieces > 0) enqueue(0);
    for (std::size_t i = 0; i < pieces; ++i) {
      if (i + 1 < pieces) enqueue(i + 1);  // into the other piece, whose data the host took in step i − 1
      check(cudaEventSynchronize(pieceDone_[i % 2]), "D2H");
      const U* p = reinterpret_cast<const U*>(piece_[i % 2]);
      out.insert(out.end(), p, p + std::min(per, count - i * per));
    }
  }

  // K-long arrays of 8-byte values (counts, inertia, shift, scatter) queued down into piece 0 behind stream s's work,
  // when they all fit there (K ≤ 65,536 for two): the caller's one wait on the stream then covers them and take()
  // reads them, instead of a download() round trip each — every host wait at the end of a pass leaves the GPU idle.
  // False (nothing queued) when they don't fit.
  bool queue(std::initializer_list<const void*> arrays, int k, cudaStream_t s) {
    const std::size_t bytes = sizeof(double) * std::size_t(k);
    if (arrays.size() * bytes > kPieceBytes) return false;
    char* to = piece_[0];
    for (const void* from : arrays) {
      check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, s), "D2H");
      to += bytes;
    }
    return true;
  }
  // After that wait: array `index` of a queue() that returned `queued`, else src through download() on s.
  template <typename T, typename U>
  void take(bool queued, std::size_t index, const T* src, int k, std::vector<U>& out, cudaStream_t s) {
    static_assert(sizeof(T) == 8 && sizeof(U) == 8, "8-byte values, as queue() copies them");
    if (!queued) return download(src, std::size_t(k), out, s);
    const U* p = reinterpret_cast<const U*>(piece_[0]) + index * std::size_t(k);
    out.assign(p, p + k);
  }

 private:
  char* piece_[2] = {nullptr, nullptr};
  cudaEvent_t pieceDone_[2] = {nullptr, nullptr};
};

}  // namespace cuda_backend
}  // namespace kmfleet
