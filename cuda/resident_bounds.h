// Hamerly's bounds of the resident rows in exact mode (kernels/row_bounds.cuh; DESIGN.md "Numerics": bounds), so that a
// pass skips the products of the rows whose label the centroids' movement cannot have changed. (The host tier's rows
// keep theirs in an instance of their own, tier_rows.h, whose passes gather the open rows instead of listing them.) Per row an upper bound
// on its distance to its label's centroid and a lower bound on its distance to every other (8 bytes; 16 with the row's
// ‖x − μ‖² and its place in the open rows' list), written by the assignment for every row it decides and valid for
// the centroids of that pass.
//
// A pass whose resident rows all run in one go (resident_pass.cu) first moves every row's bounds to its centroids and
// lists the rows they do not settle: by Hamerly's test, and where it fails by the label's centroid's neighbours (only
// the centroids within twice the row's distance of its label's can take it: theirs is the drift that counts). When the
// last such list was short (kListedShare), only the listed rows are assigned; the others keep their previous label.
// A listed row with few centroids that close (row_bounds.cuh kNearMax) takes the fp64 argmin over just those
// (assignNear); the rest take the assignment (assign.cuh assignListedRows: three products, no screen, then the
// recheck). Otherwise every row is assigned as without bounds — the list is a probe then — and every row's bounds are
// renewed. Either way the labels, and so the statistics and centroids, are the bits of a pass without bounds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend_shape.h"
#include "kernels/row_bounds.cuh"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

class ResidentBounds {
 public:
  // A pass assigns only the rows the bounds did not settle while the last probe or such pass left at most this share
  // of rows open: a listed row costs about what a row of an unscreened full assignment does (gathered: ~1.1–1.2×)
  static constexpr double kListedShare = 0.5;
  // A settle that leaves more than this share open (random rows: nearly all) is not tried again for 4 passes, then 8,
  // … 256 after each further such one; one that settles more resets the wait. Its bounds are still renewed by every
  // pass's assignment, at no cost: the settle (~0.1 µs a row, its neighbour searches most of it) is what is spared.
  static constexpr double kProbeOpenShare = 0.75;
  static constexpr int kFirstWait = 4, kLastWait = 256;

  explicit ResidentBounds(const BackendShape& shape) : shape_(shape) {}

  // Bounds for `rows` rows (the resident rows, or the host tier's: tier_rows.h). Throws EngineError (OutOfMemory).
  void allocate(std::int64_t rows);
  void release() noexcept;
  bool kept() const { return upper_ != nullptr; }
  // Whether the next beginPass, given previous labels, would list its open rows: the bounds hold, a settle is due,
  // and the last one left few enough open.
  bool wouldList() const { return valid_ && settleOff_ == 0 && openShare_ <= kListedShare; }
  float* upper() const { return upper_; }
  float* lower() const { return lower_; }
  std::int64_t lastNearRows() const { return lastNear_; }  // the near rows of the last listing pass (stats)

  // Rows [0, rows) of a pass with the centroids `now` (device, K×D), their previous labels those of the last
  // completed pass: moves the bounds to `now` and lists the rows they do not settle, whose labels it leaves alone
  // (the settled ones take their previous label). On s. Then lists() says whether only the listed rows are assigned.
  void beginPass(const float* now, const std::int32_t* previousLabels, std::int32_t* labels, std::int64_t rows,
                 cudaStream_t s);
  bool lists() const { return listed_; }
  bool listedThisPass() const { return ran_ && listed_; }  // until finishPass: no screen ran in this pass
  const std::int32_t* open() const { return open_; }
  const unsigned* openCount() const { return openCount_; }
  // The assignment's outputs of rows firstRow on (RowOps.boundUpper, boundLower).
  void attach(cuda::RowOps& ops, std::int64_t firstRow) const {
    ops.boundUpper = upper_ + firstRow;
    ops.boundLower = lower_ + firstRow;
  }
  // A listing pass: the near rows' labels and bounds (row_bounds.cuh assignNearRows), from the pass's fp32 centroids.
  void assignNear(cuda::RowValues values, const float* centroids, const std::int32_t* previousLabels,
                  std::int32_t* labels, cudaStream_t s);
  // The near rows of a gathered piece (tier_rows.h): rows [0, m) of `values`, their previous labels and outputs in the
  // piece's arrays, `identity` = 0, 1, … and *count = m on the device; labels and bounds as assignNear gives them.
  void assignNearGathered(cuda::RowValues values, const float* centroids, const std::int32_t* previousLabels,
                          std::int32_t* labels, float* upper, float* lower, const std::int32_t* identity,
                          const unsigned* count, std::int64_t m, cudaStream_t s);
  // After the assignment (the listed rows, or every row): its bounds into distances, with each row's ‖x − μ‖².
  void assigned(const float* sqNorm, std::int64_t rows, cudaStream_t s);
  // The same for rows [first, first + rows) assigned as a chunk, sqNorm theirs from its first.
  void assignedRange(const float* sqNorm, std::int64_t first, std::int64_t rows, cudaStream_t s);
  // The open rows' count down to the host behind the pass's work on s (before its final wait).
  void queueOpenCount(cudaStream_t s);
  // Once that copy is done: the open rows listed from the list's start, and the near rows listed from its end.
  std::int64_t openListed() const { return hostOpenCount_[0]; }
  std::int64_t nearListed() const { return hostOpenCount_[1]; }
  // The pass completed: every row's bounds hold for its centroids. Returns the rows settled without products.
  std::int64_t finishPass();
  // A pass that did not renew the bounds (aborted, or its rows not in one go): the next one starts without them.
  void forget() {
    valid_ = false;
    ran_ = false;
  }

 private:
  const BackendShape& shape_;
  float* upper_ = nullptr;        // R: distances, not squared (+inf: none)
  float* lower_ = nullptr;
  std::int32_t* open_ = nullptr;  // R: the rows the bounds did not settle, in any order; near rows from the end
  unsigned* openCount_ = nullptr; // 2: open rows, near rows
  unsigned* hostOpenCount_ = nullptr;  // pinned
  float* last_ = nullptr;         // K×D: the centroids the bounds hold for
  float* drift_ = nullptr;        // K, then the two largest and the index of the first
  float* top_ = nullptr;
  int* topIndex_ = nullptr;
  cuda::CentroidNeighbours neighbours_;  // K ≤ kNeighbourK: each centroid's neighbours by distance (row_bounds.cuh)
  bool valid_ = false;            // every row's bounds hold for last_
  bool ran_ = false;              // this pass began with beginPass
  bool settled_ = false;          // this pass settled rows (valid bounds at its start)
  bool listed_ = false;           // this pass assigns only the open rows
  std::int64_t rows_ = 0;
  double openShare_ = 1;          // the last settle's open rows (near ones included) over its rows
  std::int64_t lastNear_ = 0;
  int settleOff_ = 0;             // passes left without a settle
  int wait_ = kFirstWait;         // passes without one after the next settle that leaves too many open
};

}  // namespace cuda_backend
}  // namespace kmfleet
