// EngineConfig.stats (KMFLEET_ENGINE_STATS): CUDA events around each chunk's stages — assign + recheck, sums +
// distances, farthest rows — summed per pass for the diagnostics line finishPass prints. Records nothing when off.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <vector>

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

class StageTimer {
 public:
  explicit StageTimer(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // Boundary i (0..3) of the current chunk's stages, on stream s; boundary 3 closes the chunk.
  void mark(int i, cudaStream_t s) {
    if (!enabled_) return;
    if (i == 0 && used_ == events_.size()) {
      events_.emplace_back();
      for (cudaEvent_t& e : events_.back()) check(cudaEventCreate(&e), "cudaEventCreate");
    }
    check(cudaEventRecord(events_[used_][i], s), "cudaEventRecord");
    if (i == 3) ++used_;
  }
  // Chunks timed in this pass.
  std::size_t chunks() const { return used_; }
  // Milliseconds of each of the three stages over the pass's chunks (their events are done).
  std::array<float, 3> stageMilliseconds() const {
    std::array<float, 3> ms{0, 0, 0};
    for (std::size_t i = 0; i < used_; ++i)
      for (int j = 0; j < 3; ++j) {
        float t = 0;
        check(cudaEventElapsedTime(&t, events_[i][j], events_[i][j + 1]), "cudaEventElapsedTime");
        ms[j] += t;
      }
    return ms;
  }
  // The next pass starts counting afresh (its events reused).
  void reset() { used_ = 0; }
  void release() noexcept {
    for (auto& ev : events_)
      for (cudaEvent_t e : ev)
        if (e) cudaEventDestroy(e);
    events_.clear();
    used_ = 0;
  }

 private:
  bool enabled_;
  std::vector<std::array<cudaEvent_t, 4>> events_;
  std::size_t used_ = 0;
};

}  // namespace cuda_backend
}  // namespace kmfleet
