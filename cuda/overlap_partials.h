// Owns what lets a partly resident pass run its streamed chunks beside the resident rows (planner.h overlapPartials):
// the chunk stream's own scratch, a ring of per-chunk partial sums, counts and inertia, and the events that order them.
// A streamed chunk accumulates into partial b on the chunk stream; the partial is folded into the totals on the compute
// stream after everything queued there (the resident rows, the earlier chunks' folds), so the totals get the same
// additions in the same order as from accumulate() into them directly. Without the partials (they did not fit),
// streamed chunks run behind the resident rows on the compute stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend_shape.h"
#include "device_totals.h"
#include "flag_scratch.h"
#include "kernels/accumulate.cuh"

namespace kmfleet {
namespace cuda_backend {

class OverlapPartials {
 public:
  explicit OverlapPartials(const BackendShape& shape) : shape_(shape) {}

  // Always the event passReady(); the scratch and partials when the plan has them. Throws EngineError or bad_alloc.
  void allocate();
  void release() noexcept;

  // Whether this pass's streamed chunks run beside its resident rows (set by processResident).
  bool active() const { return active_; }
  // The pass overlaps: the chunk stream's work waits for passReady(), recorded on compute after what the pass queued
  // there first (centroid operands, zeroed totals and flags).
  void start(cudaStream_t compute);
  void beginPass() {
    active_ = false;
    next_ = 0;
    deferred_.clear();
  }
  void abortPass() {
    active_ = false;
    deferred_.clear();
  }
  cudaEvent_t passReady() const { return passReady_; }

  // The chunk stream's scratch.
  cuda::AccumulateScratch& scratch() { return scratch_; }
  const FlagScratch& flags() const { return flags_; }
  unsigned* flaggedCount() const { return flaggedCount_; }

  // The next chunk's partial (a ring), and whether the ring has come round (a partial is used a second time).
  std::size_t claim() { return std::size_t(next_++ % shape_.memory.overlapPartials); }
  bool ringCameRound() const { return next_ > shape_.memory.overlapPartials; }
  // Partial b zeroed on s once compute folded the chunk that used it before.
  void zero(std::size_t b, bool fit, cudaStream_t s);
  double* sums(std::size_t b) const { return sums_ + b * shape_.k * shape_.d; }
  long long* counts(std::size_t b) const { return counts_ + b * shape_.k; }
  double* inertia(std::size_t b) const { return inertia_ + b * shape_.k; }
  // Partial b is accumulated (on s).
  void markReady(std::size_t b, cudaStream_t s);
  // Partial b folded into the totals on compute now, or after the last resident step is queued (foldDeferred).
  void fold(std::size_t b, DeviceTotals& totals, bool fit, cudaStream_t compute);
  void defer(std::size_t b) { deferred_.push_back(b); }
  void foldDeferred(DeviceTotals& totals, bool fit, cudaStream_t compute);

 private:
  const BackendShape& shape_;
  bool active_ = false;
  cudaEvent_t passReady_ = nullptr;
  cuda::AccumulateScratch scratch_;
  FlagScratch flags_;
  unsigned* flaggedCount_ = nullptr;  // the chunk stream's per-assignment flagged and screened counts
  double* sums_ = nullptr;            // P × K×D
  long long* counts_ = nullptr;       // P × K
  double* inertia_ = nullptr;         // P × K
  std::vector<cudaEvent_t> ready_, folded_;  // per partial: accumulated (chunk stream), folded (compute)
  std::int64_t next_ = 0;                    // chunks of this pass that took a partial
  std::vector<std::size_t> deferred_;        // partials waiting for the last resident step to be queued
};

}  // namespace cuda_backend
}  // namespace kmfleet
