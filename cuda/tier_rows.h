// The engine's host-tier rows (host_tier.h) on the device, so that their bounds work out of core as the resident
// rows' do (resident_bounds.h): per row its label of this pass and of the last, Hamerly's bounds, an entry of the open
// rows' list (~20 bytes, against the hundreds of its data), where the tier's page-locked blocks are, and scratch for
// a chunk of gathered rows. The rows' statistics are kept across passes beside them (exact_statistics.h beginTier).
//
// A pass over the held tier (cuda_backend.h processHostTier, tier_pass.cu) either streams every chunk, renewing
// every row's label, bounds and statistics (a full pass), or — once the bounds hold and the last settle left few rows
// open — settles the rows the centroids' drift cannot have moved, gathers only the open ones from host memory (the
// device reads them over the link, kernels/tier_rows.cuh), assigns them exactly and moves the statistics by those
// whose label changed. Either way the labels are the exact ones: the bits of a pass that streams every row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend_shape.h"
#include "host_tier.h"
#include "kernels/tier_rows.cuh"
#include "resident_bounds.h"

namespace kmfleet {
namespace cuda_backend {

class TierRows {
 public:
  explicit TierRows(const BackendShape& shape) : shape_(shape), bounds_(shape) {}
  TierRows(const TierRows&) = delete;
  TierRows& operator=(const TierRows&) = delete;

  // Whether the tier's held rows can keep their state on the device: a tier held whole after the resident rows, in
  // page-locked blocks, within the plan's room (MemoryPlan.tierBytes). Allocates on the first such tier; false for
  // good when it cannot.
  bool take(const HostTier& tier);
  void release() noexcept;

  std::int64_t rows() const { return rows_; }
  std::int64_t firstRow() const { return first_; }
  const cuda::TierBlocks& blocks() const { return blocks_; }
  ResidentBounds& bounds() { return bounds_; }
  std::int32_t* labels() const { return labels_; }
  // the labels of the last pass that kept them (null when none did)
  const std::int32_t* previousLabels() const { return previousHeld_ ? previous_ : nullptr; }
  // Whether this pass may gather only the open rows: the last pass kept every row's label, bounds and statistics,
  // and its bounds would list (ResidentBounds::wouldList).
  bool canSkip() const { return previousHeld_ && bounds_.wouldList(); }

  // A gathered piece's scratch (chunkRows rows): previous labels, labels, raw bounds.
  std::int32_t* piecePrevious() const { return piecePrevious_; }
  std::int32_t* pieceLabels() const { return pieceLabels_; }
  float* pieceUpper() const { return pieceUpper_; }
  float* pieceLower() const { return pieceLower_; }
  // 0, 1, … (chunkRows of them) and a device count: a piece's rows as a list (ResidentBounds::assignNearGathered)
  const std::int32_t* pieceIndex() const { return pieceIndex_; }
  unsigned* pieceCount() const { return pieceCount_; }
  // The rows whose label this pass changed, listed on the device (kernels/label_changes.cuh), up to changeCapacity():
  // (tier row, label) pairs, their count, and pinned host copies of both.
  std::int64_t changeCapacity() const { return shape_.memory.chunkRows; }
  int2* changes() const { return changes_; }
  unsigned long long* changeCount() const { return changeCount_; }
  int2* hostChanges() const { return hostChanges_; }
  unsigned long long* hostChangeCount() const { return hostChangeCount_; }

  void startPass() { kept_ = skipped_ = false; }
  // This pass keeps every tier row's label, bounds and statistics (full or skipping); skipped: it gathered the open
  // rows only (their labels then come down whole, and the farthest rows need the tier read again).
  void beginPass(bool skipping) {
    kept_ = true;
    skipped_ = skipping;
  }
  bool keptThisPass() const { return kept_; }
  bool skippedThisPass() const { return skipped_; }
  // The pass completed: its labels become the previous ones, and the statistics hold the rows under them; returns
  // the rows its bounds settled (ResidentBounds::finishPass). A pass that kept nothing forgets.
  std::int64_t finishPass();
  // A pass that did not keep them (aborted, or the tier streamed as plain chunks): the next one starts afresh.
  void forget();

 private:
  const BackendShape& shape_;
  ResidentBounds bounds_;
  bool failed_ = false;             // could not be allocated: never again for this backend
  std::int64_t first_ = 0, rows_ = 0;
  std::int32_t* labels_ = nullptr;  // this pass's
  std::int32_t* previous_ = nullptr;
  const void** blockTable_ = nullptr;  // device
  cuda::TierBlocks blocks_;
  std::int32_t* piecePrevious_ = nullptr;
  std::int32_t* pieceLabels_ = nullptr;
  float* pieceUpper_ = nullptr;
  float* pieceLower_ = nullptr;
  std::int32_t* pieceIndex_ = nullptr;
  unsigned* pieceCount_ = nullptr;
  int2* changes_ = nullptr;
  unsigned long long* changeCount_ = nullptr;
  int2* hostChanges_ = nullptr;                  // pinned
  unsigned long long* hostChangeCount_ = nullptr; // pinned
  // previous_ holds every row's label of the last completed pass, and the tier's statistics hold the rows under them
  bool previousHeld_ = false;
  bool kept_ = false, skipped_ = false;  // this pass
};

}  // namespace cuda_backend
}  // namespace kmfleet
