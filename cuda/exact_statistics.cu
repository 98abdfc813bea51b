// The exact statistics of fit passes (exact_statistics.h): allocation, the per-pass decision to move or add the
// resident rows, the rows' additions, the pass's totals.
#include "exact_statistics.h"

#include <algorithm>

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

void ExactStatistics::allocate(bool enabled, int k, int d, std::int64_t chunkRows, std::int64_t residentRows,
                               bool chunkStream) {
  if (enabled) {  // planner.cpp: the statistics in fixedBytes, the scratch per chunk and per resident row
    allocExactStats(resident_, k, d);  // throws std::bad_alloc
    allocExactStats(pass_, k, d);
    allocExactScratch(computeScratch_, std::max(chunkRows, residentRows), k);
    if (chunkStream) allocExactScratch(chunkStreamScratch_, chunkRows, k);
  }
  check(cudaEventCreateWithFlags(&chunksDone_, cudaEventDisableTiming), "cudaEventCreate");
}

void ExactStatistics::release() noexcept {
  freeExactStats(resident_);
  freeExactStats(pass_);
  freeExactScratch(computeScratch_);
  freeExactScratch(chunkStreamScratch_);
  residentUnderPreviousLabels_ = false;
  if (chunksDone_) cudaEventDestroy(chunksDone_);
  chunksDone_ = nullptr;
}

void ExactStatistics::beginPass(bool exactPass, bool previousLabelsHeld, cudaStream_t s) {
  summingThisPass_ = exactPass;
  constexpr double kMoveShare = 0.3;  // above it, the resident rows are added afresh (lastChangedShare_)
  movingThisPass_ = summingThisPass_ && residentUnderPreviousLabels_ && previousLabelsHeld &&
                    lastChangedShare_ <= kMoveShare;
  residentUnderPreviousLabels_ = false;  // until finishPass says again what resident_ holds
  if (summingThisPass_) {
    zeroExactStats(pass_, s);
    if (!movingThisPass_) zeroExactStats(resident_, s);
  }
}

void ExactStatistics::addRows(RowValues values, std::int64_t firstRow, std::int64_t rows, int d,
                              const std::int32_t* prevLabels, const std::int32_t* labels, bool resident, bool sq,
                              bool chunkStream, cudaStream_t s) {
  ExactScratch& scratch = chunkStream ? chunkStreamScratch_ : computeScratch_;
  if (resident && movingThisPass_)
    exactMoveRows(values, rows, d, prevLabels + firstRow, labels, sq, scratch, resident_, s);
  else
    exactAddRows(values, rows, d, labels, sq, scratch, resident ? resident_ : pass_, s);
}

void ExactStatistics::totalOnDevice(cudaStream_t chunkStream, cudaStream_t compute) {
  check(cudaEventRecord(chunksDone_, chunkStream), "cudaEventRecord");
  check(cudaStreamWaitEvent(compute, chunksDone_, 0), "cudaStreamWaitEvent");
  addExactStats(pass_, resident_, compute);
}

void ExactStatistics::toFp64(cudaStream_t compute, const float* cf, bool cosine, double* sums, long long* counts,
                             double* inertia) {
  exactFinish(pass_, cf, cosine, sums, counts, inertia, compute);
  check(cudaGetLastError(), "exact sums");
}

}  // namespace cuda_backend
}  // namespace kmfleet
