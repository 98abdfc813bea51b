// Owns the resident rows: the first plan.residentRows rows (whole chunks), prepared once into device arrays as a pass
// streams them the first time (retained) and processed in later passes with the same chunk boundaries as when they
// were fed, so sums are added in the same order as a fully streamed run. With them: their labels and the previous
// pass's (changed rows counted on the device), their fp32 and fp64 distances, the scratch of the one-go path (one
// accumulate over all of them, flagged rows of a piece), and the pinned staging their outputs come down to chunk by
// chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend.h"
#include "backend_shape.h"
#include "chunk_slots.h"
#include "flag_scratch.h"
#include "kernels/accumulate.cuh"
#include "kernels/types.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

class ResidentRows {
 public:
  explicit ResidentRows(const BackendShape& shape) : shape_(shape) {}

  void allocate();  // throws EngineError (OutOfMemory) or std::bad_alloc
  void release() noexcept;

  // Rows [0, held()) are held: 0 until a whole pass retained them all.
  std::int64_t held() const { return held_; }
  // Whether a streamed chunk's rows are retained (prepared straight into the resident arrays): rows of
  // [0, residentRows) not yet held, fed in order since the pass began.
  bool retains(std::int64_t firstRow, std::int64_t rows) const {
    return held_ == 0 && firstRow < shape_.memory.residentRows && firstRow == retainedThisPass_ &&
           firstRow + rows <= shape_.memory.residentRows;
  }
  void retained(std::int64_t rows) { retainedThisPass_ += rows; }
  void beginPass() { retainedThisPass_ = 0; }

  const cuda::RowOps& all() const { return rows_; }
  // The prepared rows from firstRow on (screenRelative: this pass's screen keys on their last best).
  cuda::RowOps from(std::int64_t firstRow, bool screenRelative) const;
  std::int32_t* labels() const { return labels_; }
  const std::int32_t* previousLabels() const { return previousLabels_; }
  double* distances64() const { return dist64_; }  // this pass's fp64 distance of each row (the farthest rows)
  // Whether the one-go path runs: its accumulate scratch is planned (residentAccBytes) for all the held rows.
  bool inOneGo() const { return accumulate_.rows > 0 && accumulate_.rows == held_; }
  cuda::ResidentAccumulateScratch& oneGoScratch() { return accumulate_; }
  float* distances32() const { return dist32_; }
  const FlagScratch& pieceFlags() const { return pieceFlags_; }  // exact mode, one go: a piece's flagged rows
  // Where computeChunk writes a resident chunk's outputs and copies them down (a slot's view of them).
  void chunkOutputs(std::int64_t firstRow, ChunkSlot& view) const;

  // The pass: processResident ran (its rows' labels are this pass's), its outputs wait in the staging or on the device.
  void markRan() { ranThisPass_ = true; }
  bool ranThisPass() const { return ranThisPass_; }
  void markOutputsPending() { outputsPending_ = true; }
  bool outputsPending() const { return outputsPending_; }
  void outputsTaken() { outputsPending_ = false; }
  // Chunks [c0, c1) — labels (+ distances) — down to the pinned staging on d2h after what compute has queued.
  void download(std::int64_t c0, std::int64_t c1, bool distances, cudaStream_t compute, cudaStream_t d2h);
  // The labels (and distances) from the staging into the engine's arrays as each chunk lands (over the pool's threads).
  void copyOutputs(std::int32_t* labels, float* distances, ThreadPool* pool);

  // The labels of the previous pass that computed them are on the device, and that pass was the last completed one.
  bool previousLabelsHeld() const { return previousLabelsHeld_; }
  // Whether this pass counts the rows whose label changed (it ran them and the previous labels are held).
  bool countsChanges() const { return ranThisPass_ && previousLabelsHeld_; }
  void queueChangeCount(cudaStream_t s);
  const unsigned long long* changedCount() const { return changedCount_; }
  // Whether this pass reports its labels as changes (backend.h PassTotals.labelsAsChanges), decided before its rows
  // run: the engine takes them (`accepted`), every row is held and compared, no distances come down, and the last
  // counted pass changed under a 64th of the rows: above that, the list's D2H and the host's scatter of it cost more
  // than every label's D2H. Else, or when more changed than the list holds (takeChanges), the labels come down whole.
  bool beginChanges(bool accepted);
  bool reportsChanges() const { return asChanges_; }
  // The changed rows' list (queueChangeCount wrote it) down into out, `count` of them; false when they overflowed it.
  bool takeChanges(std::uint64_t count, std::vector<LabelChange>& out, cudaStream_t s);
  void recordChangedShare(double share) { lastChangedShare_ = share; }
  // The pass is done: its labels become the previous ones (when it ran the rows), and the rows are held once a whole
  // pass retained them.
  void finishPass();
  // The pass was dropped: nothing of it pending; rows retained so far are forgotten unless complete.
  void abortPass() {
    outputsPending_ = false;
    asChanges_ = false;
    ranThisPass_ = false;
    retainedThisPass_ = 0;
  }

 private:
  const BackendShape& shape_;
  std::int64_t held_ = 0;
  std::int64_t retainedThisPass_ = 0;
  cuda::RowOps rows_;
  std::int32_t* labels_ = nullptr;
  // The labels of the previous pass that computed them (swapped with labels_ after each such pass).
  std::int32_t* previousLabels_ = nullptr;
  bool previousLabelsHeld_ = false;
  unsigned long long* changedCount_ = nullptr;
  bool asChanges_ = false;
  double lastChangedShare_ = 1;
  // the changed rows' list is dist32_'s memory (a pass without distances leaves it unused), so it holds half the rows
  std::int64_t changeCapacity() const { return held_ / 2; }
  float* dist32_ = nullptr;
  double* dist64_ = nullptr;
  cuda::ResidentAccumulateScratch accumulate_;  // rows > 0: the one-go path planned
  FlagScratch pieceFlags_;
  bool ranThisPass_ = false;
  bool outputsPending_ = false;
  std::int32_t* hostLabels_ = nullptr;  // pinned staging
  float* hostDist_ = nullptr;
  cudaEvent_t computed_ = nullptr;             // what compute queued before a download
  std::vector<cudaEvent_t> chunkDownloaded_;  // per chunk: its labels/distances are in the staging
};

}  // namespace cuda_backend
}  // namespace kmfleet
