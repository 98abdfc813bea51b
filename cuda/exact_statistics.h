// Owns the exact integer statistics of the passes (kernels/exact_sums.cuh): the resident rows' (kept across passes),
// the pass's streamed chunks', each stream's scratch, and whether a pass moves the resident rows or adds them afresh.
//
// A pass of an exact-sums plan (MemoryPlan.exactSums, a function of the shape) adds its rows into exact integer
// statistics instead of accumulate()'s fp64 sums, so the pass's sums, counts and inertia are the same bits for any
// chunking and residency. The resident rows' statistics persist: a pass that follows one which left them for the
// resident rows' previous labels moves only the rows whose label changed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/exact_sums.cuh"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

class ExactStatistics {
 public:
  // The statistics and the compute stream's scratch when `enabled` (the plan's exactSums), the chunk stream's scratch
  // too when streamed chunks overlap resident rows; always the event totalOnDevice records. Throws std::bad_alloc.
  void allocate(bool enabled, int k, int d, std::int64_t chunkRows, std::int64_t residentRows, bool chunkStream);
  void release() noexcept;

  // A pass begins: whether it sums exactly (`exactPass`), and whether it moves the resident rows' changed labels
  // (the device still holds their previous labels: `previousLabelsHeld`); zeroes on `s` what the pass adds into.
  void beginPass(bool exactPass, bool previousLabelsHeld, cudaStream_t s);
  // Rows [firstRow, firstRow + rows) with their labels: resident rows into the resident statistics (moved from
  // prevLabels, indexed by resident row, or added afresh), streamed ones into the pass's. `chunkStream`: s is the
  // chunk stream (its own scratch). sq: Σ‖x‖² too (cosine's inertia needs none).
  void addRows(cuda::RowValues values, std::int64_t firstRow, std::int64_t rows, int d, const std::int32_t* prevLabels,
               const std::int32_t* labels, bool resident, bool sq, bool chunkStream, cudaStream_t s);
  // The engine's host-tier rows in a pass that keeps their statistics across passes (tier_rows.h): added afresh into
  // zeroed ones, or moved by the rows whose label changed (`moving`: they hold the rows under their previous labels).
  // The pass's total then includes them. Allocates them on first use (throws std::bad_alloc).
  void beginTier(bool moving, cudaStream_t s);
  // Tier rows with their labels (and previous labels, when moving), rows in the order of `values`.
  void addTierRows(cuda::RowValues values, std::int64_t rows, int d, const std::int32_t* prevLabels,
                   const std::int32_t* labels, bool sq, bool chunkStream, cudaStream_t s);
  // The pass's statistics totalled on `compute` after everything the pass queued (the chunk stream's work included):
  // the resident rows' (and host-tier rows') added into the streamed chunks'.
  void totalOnDevice(cudaStream_t chunkStream, cudaStream_t compute);
  // Another device's statistics of the same pass (a lane of multi_device_backend.h), total on that device.
  struct Peer {
    cuda::ExactStats stats;
    int device = 0;
  };
  // The peers' statistics added into this pass's total on `compute` (copied over from their devices): integers, so the
  // total is the same bits as one device's.
  void addPeers(const std::vector<Peer>& peers, cudaStream_t compute);
  // The pass's statistics after totalOnDevice, until the next pass begins: a peer of another device's lane.
  const cuda::ExactStats& passStatistics() const { return pass_; }
  // Device time of the last addPeers (copies and additions), once its stream was waited for; 0 without peers.
  float mergeMs() const;
  // Then the fp64 sums, counts and inertia from that total (exactFinish: the same bits for any chunking, residency and
  // split between devices).
  void toFp64(cudaStream_t compute, const float* cf, bool cosine, double* sums, long long* counts, double* inertia);
  // The share of resident rows whose label changed in the pass that just counted them (0 when none did).
  void recordChangedShare(double share) { lastChangedShare_ = share; }
  // The pass ended: the resident statistics hold the resident rows under their labels of this pass when it summed
  // exactly and ran the resident rows.
  void finishPass(bool residentRan) { residentUnderPreviousLabels_ = summingThisPass_ && residentRan; }
  // A pass was abandoned: the next fit pass adds afresh.
  void abortPass() { summingThisPass_ = movingThisPass_ = tierThisPass_ = false; }

  bool summingThisPass() const { return summingThisPass_; }  // this pass adds its rows into the statistics

 private:
  bool summingThisPass_ = false;  // a pass of an exact-sums plan
  bool movingThisPass_ = false;   // it moves the resident rows' changed labels (else adds them afresh)
  bool residentUnderPreviousLabels_ = false;  // resident_ = the resident rows under their previous pass's labels
  // The share of resident rows whose label changed in the last pass that counted them. A move costs about twice a
  // fresh add's work per changed row (an entry at each end) plus a counting sort: past ~1/3 of the rows adding all
  // of them afresh is cheaper (exact_sums_check bench, cuda/NOTES.md "Exact statistics"). Either way the same bits.
  double lastChangedShare_ = 0;
  bool tierThisPass_ = false;             // the pass keeps the host tier's rows in tier_
  bool tierMoving_ = false;
  cuda::ExactStats tier_;                 // the host tier's rows, across passes (allocated on first use)
  cuda::ExactStats resident_;             // the resident rows
  cuda::ExactStats pass_;                 // this pass's streamed chunks, then (totalOnDevice) the pass's total
  cuda::ExactStats peer_;                 // a peer's statistics copied here (addPeers), allocated on first use
  cudaEvent_t mergeBegin_ = nullptr, mergeEnd_ = nullptr;  // around addPeers' copies and additions
  bool merged_ = false;
  cuda::ExactScratch computeScratch_;     // the compute stream's: resident rows (all at once) and its streamed chunks
  cuda::ExactScratch chunkStreamScratch_; // the chunk stream's streamed chunks (overlap)
  cudaEvent_t chunksDone_ = nullptr;      // the chunk stream's work of the pass, before totalOnDevice
};

}  // namespace cuda_backend
}  // namespace kmfleet
