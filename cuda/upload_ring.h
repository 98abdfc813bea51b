// The small page-locked pieces that a chunk's rows go up through when the engine's pool threads read them from a file
// (Backend::processChunkInPieces): each thread has two pieces of about 1 MiB and a copy stream of its own, reads
// into one piece while the other's copy runs, and the pieces stay in the CPU's cache — the rows cross host memory
// once, from the page cache, where a chunk-sized buffer costs a write and a read of host memory more per byte.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

class UploadRing {
 public:
  UploadRing() = default;
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;
  ~UploadRing() { release(); }
  void release() noexcept;

  // Rows [0, rows) of `pieces` (rowBytes each) to dst on `device`, read on the pool's threads in its pieces; once
  // every piece's copy is queued, `join` waits for them all and `done` is recorded on it. The first failure in row
  // order is rethrown after the others stopped (ThreadPool::forEachInOrder).
  void upload(ThreadPool& pool, int device, const ChunkPieces& pieces, std::int64_t rows, std::size_t rowBytes,
              void* dst, cudaStream_t join, cudaEvent_t done);

 private:
  struct Lane {
    cudaStream_t stream = nullptr;
    char* piece[2] = {nullptr, nullptr};
    cudaEvent_t copied[2] = {nullptr, nullptr};
    int turn = 0;       // the piece the next read goes into
    bool used = false;  // this upload queued a copy on the lane's stream
  };
  // lanes for `threads` threads, pieces of `pieceBytes` (made on first use, again when the size grows)
  void ensure(int threads, std::size_t pieceBytes);

  std::vector<Lane> lanes_;
  std::size_t pieceBytes_ = 0;
};

}  // namespace cuda_backend
}  // namespace kmfleet
