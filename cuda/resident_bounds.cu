// The resident rows' bounds (resident_bounds.h): allocation, a pass's settle, the assignment's bounds made distances.
#include "resident_bounds.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "device_memory.h"
#include "kernels/row_bounds.cuh"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

void ResidentBounds::allocate(std::int64_t rows) {
  const std::size_t r = std::size_t(rows), k = std::size_t(shape_.k);
  upper_ = devAlloc<float>(r, "resident row bounds");
  lower_ = devAlloc<float>(r, "resident row bounds");
  open_ = devAlloc<std::int32_t>(r, "resident row bounds");
  openCount_ = devAlloc<unsigned>(2, "resident row bounds");  // open rows, near rows
  hostOpenCount_ = hostAlloc<unsigned>(2, "resident row bounds");
  last_ = devAlloc<float>(k * shape_.d, "resident row bounds");
  drift_ = devAlloc<float>(k + 2, "resident row bounds");
  top_ = drift_ + k;
  topIndex_ = devAlloc<int>(1, "resident row bounds");
  if (shape_.k >= 2 && shape_.k <= kNeighbourK) {
    CentroidNeighbours& nb = neighbours_;
    const std::size_t kk = k * k;
    nb.dist = devAlloc<float>(kk, "centroid neighbours");
    nb.drift = devAlloc<float>(kk, "centroid neighbours");
    nb.keys = devAlloc<float>(kk, "centroid neighbours");
    nb.index = devAlloc<int>(kk, "centroid neighbours");
    nb.sortedIndex = devAlloc<int>(kk, "centroid neighbours");
    nb.offsets = devAlloc<int>(k + 1, "centroid neighbours");
    nb.tempBytes = neighbourSortBytes(shape_.k);
    nb.temp = devAlloc<char>(nb.tempBytes, "centroid neighbours");
  }
}

void ResidentBounds::release() noexcept {
  for (void* p : {static_cast<void*>(upper_), static_cast<void*>(lower_), static_cast<void*>(open_),
                  static_cast<void*>(openCount_), static_cast<void*>(last_), static_cast<void*>(drift_),
                  static_cast<void*>(topIndex_), static_cast<void*>(neighbours_.dist),
                  static_cast<void*>(neighbours_.drift), static_cast<void*>(neighbours_.keys),
                  static_cast<void*>(neighbours_.index), static_cast<void*>(neighbours_.sortedIndex),
                  static_cast<void*>(neighbours_.offsets), neighbours_.temp})
    if (p) cudaFree(p);
  neighbours_ = CentroidNeighbours{};
  if (hostOpenCount_) cudaFreeHost(hostOpenCount_);
  upper_ = lower_ = nullptr;
  open_ = nullptr;
  openCount_ = hostOpenCount_ = nullptr;
  last_ = drift_ = top_ = nullptr;
  topIndex_ = nullptr;
  valid_ = ran_ = false;
}

void ResidentBounds::beginPass(const float* now, const std::int32_t* previousLabels, std::int32_t* labels,
                               std::int64_t rows, cudaStream_t s) {
  ran_ = true;
  rows_ = rows;
  settled_ = valid_ && previousLabels && settleOff_ == 0;
  if (valid_ && settleOff_ > 0) --settleOff_;
  listed_ = settled_ && openShare_ <= kListedShare;
  if (settled_) {
    centroidDrift(now, last_, shape_.k, shape_.d, drift_, top_, topIndex_, s);
    if (neighbours_.dist) centroidNeighbours(now, shape_.k, shape_.d, drift_, neighbours_, s);
    settleRows(upper_, lower_, previousLabels, labels, rows, drift_, top_, topIndex_, neighbours_, shape_.k, open_,
               openCount_, openCount_ + 1, s);
    check(cudaGetLastError(), "settleRows");
  }
  check(cudaMemcpyAsync(last_, now, sizeof(float) * std::size_t(shape_.k) * shape_.d, cudaMemcpyDeviceToDevice, s),
        "D2D");
  valid_ = false;  // until the pass completes
}

void ResidentBounds::assignNear(RowValues values, const float* centroids, const std::int32_t* previousLabels,
                                std::int32_t* labels, cudaStream_t s) {
  assignNearRows(values, shape_.d, centroids, shape_.k, neighbours_, previousLabels, labels, upper_, lower_, open_,
                 openCount_ + 1, rows_, s);
  check(cudaGetLastError(), "assignNearRows");
}

void ResidentBounds::assignNearGathered(RowValues values, const float* centroids, const std::int32_t* previousLabels,
                                        std::int32_t* labels, float* upper, float* lower, const std::int32_t* identity,
                                        const unsigned* count, std::int64_t m, cudaStream_t s) {
  assignNearRows(values, shape_.d, centroids, shape_.k, neighbours_, previousLabels, labels, upper, lower, identity,
                 count, m, s);
  check(cudaGetLastError(), "assignNearRows");
}

void ResidentBounds::assigned(const float* sqNorm, std::int64_t rows, cudaStream_t s) {
  finishRowBounds(upper_, lower_, sqNorm, listed_ ? open_ : nullptr, openCount_, rows, s);
  check(cudaGetLastError(), "finishRowBounds");
}

void ResidentBounds::assignedRange(const float* sqNorm, std::int64_t first, std::int64_t rows, cudaStream_t s) {
  finishRowBounds(upper_ + first, lower_ + first, sqNorm, nullptr, nullptr, rows, s);
  check(cudaGetLastError(), "finishRowBounds");
}

void ResidentBounds::queueOpenCount(cudaStream_t s) {
  if (ran_ && settled_)
    check(cudaMemcpyAsync(hostOpenCount_, openCount_, 2 * sizeof(unsigned), cudaMemcpyDeviceToHost, s), "D2H");
}

std::int64_t ResidentBounds::finishPass() {
  valid_ = ran_;
  std::int64_t settledRows = 0;
  if (ran_ && settled_) {
    // near rows count as open here: their few distances are still distances
    const std::int64_t open = std::int64_t(hostOpenCount_[0]) + std::int64_t(hostOpenCount_[1]);
    lastNear_ = listed_ ? std::int64_t(hostOpenCount_[1]) : 0;
    openShare_ = rows_ > 0 ? double(open) / double(rows_) : 1.0;
    if (listed_) settledRows = rows_ - open;
    if (openShare_ > kProbeOpenShare) {
      settleOff_ = wait_;
      wait_ = std::min(2 * wait_, kLastWait);
    } else {
      wait_ = kFirstWait;
    }
  }
  ran_ = false;
  return settledRows;
}

}  // namespace cuda_backend
}  // namespace kmfleet
