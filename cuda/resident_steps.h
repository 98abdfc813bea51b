// The resident rows' work of an overlapped pass, queued a few steps ahead of the device rather than all at once: ~20
// launches a chunk would fill the launch queue and block the host thread (and the streamed chunks' copies) until most
// of it has run. A step is one resident chunk (chunk by chunk), or in one go one chunk's assignment piece and finally
// the one accumulate. Each queued step records an event on the compute stream; a step is queued while fewer than
// `ahead` (CudaSettings.residentAhead) are outstanding.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend_shape.h"
#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

class ResidentSteps {
 public:
  explicit ResidentSteps(const BackendShape& shape) : shape_(shape), ahead_(std::max(1, shape.settings.residentAhead)) {}

  // One event per step of all resident rows, when the plan overlaps (overlapPartials).
  void allocate() {
    if (shape_.memory.overlapPartials <= 0) return;
    done_.resize(std::size_t(shape_.residentChunks()) + 1, nullptr);
    for (cudaEvent_t& e : done_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  void release() noexcept {
    for (cudaEvent_t e : done_)
      if (e) cudaEventDestroy(e);
    done_.clear();
  }

  // The steps of `held` resident rows: in one go (a piece a chunk, then the one accumulate) or chunk by chunk.
  void plan(bool oneGo, std::int64_t held) {
    oneGo_ = oneGo;
    chunks_ = (held + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows;
    steps_ = chunks_ + (oneGo_ ? 1 : 0);
    next_ = 0;
  }
  // None to queue (a pass begins or was dropped).
  void clear() { next_ = steps_ = 0; }

  bool oneGo() const { return oneGo_; }
  std::int64_t chunks() const { return chunks_; }
  // Whether steps are left to queue; the next one.
  bool pending() const { return next_ < steps_; }
  bool allQueued() const { return next_ == steps_; }
  std::int64_t next() const { return next_; }
  // Whether fewer than `ahead` steps are outstanding (the device finished the one `ahead` before the next).
  bool roomAhead() const { return next_ < ahead_ || eventDone(done_[std::size_t(next_ - ahead_)]); }
  // The next step is queued on compute.
  void queued(cudaStream_t compute) {
    check(cudaEventRecord(done_[std::size_t(next_)], compute), "cudaEventRecord");
    ++next_;
  }

 private:
  const BackendShape& shape_;
  const std::int64_t ahead_;
  std::vector<cudaEvent_t> done_;  // per step, on the compute stream
  bool oneGo_ = false;
  std::int64_t chunks_ = 0, steps_ = 0, next_ = 0;
};

}  // namespace cuda_backend
}  // namespace kmfleet
