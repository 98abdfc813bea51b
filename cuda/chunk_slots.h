// Owns the device slots that streamed chunks go through: each slot's raw rows, labels and distances on the device,
// their pinned staging, the farthest-row candidate buffers, and the events that order its copy, compute and download.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kmfleet {
namespace cuda_backend {

// One streamed chunk's place on the device and in pinned staging (planner.h MemoryPlan::slots of them).
struct ChunkSlot {
  void* raw = nullptr;
  int* labels = nullptr;
  float* dist32 = nullptr;
  double* topDist = nullptr;
  long long* topRow = nullptr;
  float* topValues = nullptr;
  int* hLabels = nullptr;
  float* hDist = nullptr;
  double* hTopDist = nullptr;
  long long* hTopRow = nullptr;
  float* hTopValues = nullptr;
  cudaEvent_t copied = nullptr, rawFree = nullptr, outDone = nullptr, computed = nullptr;
  bool pending = false;  // outputs in flight to the staging, not yet drained into the engine's arrays
  std::int64_t firstRow = 0, rows = 0;
  int far = 0;
  bool dist = false;
};

class ChunkSlots {
 public:
  // `count` slots for chunks of chunkRows rows of rowBytes each. Throws EngineError (OutOfMemory).
  void allocate(int count, std::size_t chunkRows, std::size_t rowBytes);
  void release() noexcept;

  // The slot the next streamed chunk goes through (round robin).
  ChunkSlot& next() {
    ChunkSlot& s = slots_[std::size_t(next_)];
    next_ = (next_ + 1) % int(slots_.size());
    return s;
  }
  std::vector<ChunkSlot>::iterator begin() { return slots_.begin(); }
  std::vector<ChunkSlot>::iterator end() { return slots_.end(); }

  // Whether slot s has farthest-row buffers for f candidates.
  bool holdsFar(const ChunkSlot& s, int f) const { return f <= farCapacity_ && s.topDist; }
  // Every slot's farthest-row buffers for at least f candidates of d values; the caller drained the slots first.
  void growFar(int f, int d);

 private:
  std::vector<ChunkSlot> slots_;
  int next_ = 0;
  int farCapacity_ = 0;  // candidates each slot's farthest-row buffers hold
};

}  // namespace cuda_backend
}  // namespace kmfleet
