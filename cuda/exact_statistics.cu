// The exact statistics of the passes (exact_statistics.h): allocation, the per-pass decision to move or add the
// resident rows, the rows' additions, the pass's totals.
#include "exact_statistics.h"

#include <algorithm>
#include <new>
#include <string>

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
  freeExactStats(tier_);
  tierThisPass_ = false;
  freeExactStats(pass_);
  freeExactStats(peer_);
  if (mergeBegin_) cudaEventDestroy(mergeBegin_);
  if (mergeEnd_) cudaEventDestroy(mergeEnd_);
  mergeBegin_ = mergeEnd_ = nullptr;
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
  tierThisPass_ = false;
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

void ExactStatistics::beginTier(bool moving, cudaStream_t s) {
  if (!tier_.sum) allocExactStats(tier_, pass_.k, pass_.d);
  tierThisPass_ = true;
  tierMoving_ = moving;
  if (!moving) zeroExactStats(tier_, s);
}

void ExactStatistics::addTierRows(RowValues values, std::int64_t rows, int d, const std::int32_t* prevLabels,
                                  const std::int32_t* labels, bool sq, bool chunkStream, cudaStream_t s) {
  ExactScratch& scratch = chunkStream ? chunkStreamScratch_ : computeScratch_;
  if (tierMoving_) exactMoveRows(values, rows, d, prevLabels, labels, sq, scratch, tier_, s);
  else exactAddRows(values, rows, d, labels, sq, scratch, tier_, s);
}

void ExactStatistics::totalOnDevice(cudaStream_t chunkStream, cudaStream_t compute) {
  check(cudaEventRecord(chunksDone_, chunkStream), "cudaEventRecord");
  check(cudaStreamWaitEvent(compute, chunksDone_, 0), "cudaStreamWaitEvent");
  addExactStats(pass_, resident_, compute);
  if (tierThisPass_) addExactStats(pass_, tier_, compute);
}

void ExactStatistics::addPeers(const std::vector<Peer>& peers, cudaStream_t compute) {
  merged_ = !peers.empty();
  if (!merged_) return;
  if (!peer_.sum) {
    try {
      allocExactStats(peer_, pass_.k, pass_.d);
    } catch (const std::bad_alloc&) {
      throw EngineError(ErrorCode::OutOfMemory, "CUDA: no device memory for another device's statistics (" +
                                                    std::to_string(exactStatsBytes(pass_.k, pass_.d) >> 20) + " MiB)");
    }
    check(cudaEventCreate(&mergeBegin_), "cudaEventCreate");
    check(cudaEventCreate(&mergeEnd_), "cudaEventCreate");
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaEventRecord(mergeBegin_, compute), "cudaEventRecord");
  for (const Peer& p : peers) {
    check(cudaMemcpyPeerAsync(peer_.sum, device, p.stats.sum, p.device, exactStatsBytes(pass_.k, pass_.d), compute),
          "statistics from another device");
    addExactStats(pass_, peer_, compute);
  }
  check(cudaEventRecord(mergeEnd_, compute), "cudaEventRecord");
}

float ExactStatistics::mergeMs() const {
  float ms = 0;
  if (merged_) check(cudaEventElapsedTime(&ms, mergeBegin_, mergeEnd_), "cudaEventElapsedTime");
  return ms;
}

void ExactStatistics::toFp64(cudaStream_t compute, const float* cf, bool cosine, double* sums, long long* counts,
                             double* inertia) {
  exactFinish(pass_, cf, cosine, sums, counts, inertia, compute);
  check(cudaGetLastError(), "exact sums");
}

}  // namespace cuda_backend
}  // namespace kmfleet
