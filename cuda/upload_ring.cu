#include "upload_ring.h"

#include <algorithm>

#include "device_memory.h"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

void UploadRing::release() noexcept {
  for (Lane& l : lanes_) {
    if (l.stream) cudaStreamSynchronize(l.stream);
    for (int i = 0; i < 2; ++i) {
      if (l.piece[i]) cudaFreeHost(l.piece[i]);
      if (l.copied[i]) cudaEventDestroy(l.copied[i]);
    }
    if (l.stream) cudaStreamDestroy(l.stream);
  }
  lanes_.clear();
  pieceBytes_ = 0;
}

void UploadRing::ensure(int threads, std::size_t pieceBytes) {
  if (static_cast<int>(lanes_.size()) >= threads && pieceBytes_ >= pieceBytes) return;
  release();
  lanes_.resize(static_cast<std::size_t>(threads));
  pieceBytes_ = pieceBytes;
  for (Lane& l : lanes_) {
    check(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int i = 0; i < 2; ++i) {
      l.piece[i] = hostAlloc<char>(pieceBytes, "file upload pieces");
      check(cudaEventCreateWithFlags(&l.copied[i], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
}

void UploadRing::upload(ThreadPool& pool, int device, const ChunkPieces& pieces, std::int64_t rows,
                        std::size_t rowBytes, void* dst, cudaStream_t join, cudaEvent_t done) {
  const std::int64_t pieceRows = pieces.pieceRows();
  ensure(pool.size(), static_cast<std::size_t>(pieceRows) * rowBytes);
  for (Lane& l : lanes_) l.used = false;
  const std::int64_t count = (rows + pieceRows - 1) / pieceRows;
  try {
    pool.forEachInOrder(count, [&](int tid, std::int64_t i) {
      DeviceScope on(device);
      Lane& l = lanes_[static_cast<std::size_t>(tid)];
      const std::int64_t first = i * pieceRows, n = std::min(pieceRows, rows - first);
      const std::size_t bytes = static_cast<std::size_t>(n) * rowBytes;
      char* piece = l.piece[l.turn];
      check(cudaEventSynchronize(l.copied[l.turn]), "H2D");  // the piece's last copy has landed
      pieces.read(piece, first, n);
      check(cudaMemcpyAsync(static_cast<char*>(dst) + static_cast<std::size_t>(first) * rowBytes, piece, bytes,
                            cudaMemcpyHostToDevice, l.stream),
            "H2D");
      check(cudaEventRecord(l.copied[l.turn], l.stream), "cudaEventRecord");
      l.turn ^= 1;
      l.used = true;
    });
  } catch (...) {
    for (Lane& l : lanes_) cudaStreamSynchronize(l.stream);  // no copy may land in dst after the caller moved on
    throw;
  }
  // each lane's last event covers the copies queued before it on the lane's stream
  for (Lane& l : lanes_)
    if (l.used) check(cudaStreamWaitEvent(join, l.copied[l.turn ^ 1], 0), "cudaStreamWaitEvent");
  check(cudaEventRecord(done, join), "cudaEventRecord");
}

}  // namespace cuda_backend
}  // namespace kmfleet
