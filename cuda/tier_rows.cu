// The host tier's rows on the device (tier_rows.h): allocation, the blocks' table, the pass's end.
#include "tier_rows.h"

#include <cuda_runtime.h>

#include <vector>

#include "device_memory.h"
#include "planner.h"

namespace kmfleet {
namespace cuda_backend {

bool TierRows::take(const HostTier& tier) {
  if (failed_) return false;
  const std::int64_t rows = tier.plannedRows();
  if (rows <= 0 || tier.heldRows() != rows || tier.firstRow() != shape_.memory.residentRows) return false;
  if (labels_) return rows == rows_ && tier.firstRow() == first_;
  const std::int64_t chunk = shape_.memory.chunkRows;
  failed_ = true;  // until everything below is in place
  if (shape_.memory.tierBytes == 0 || rows >= (std::int64_t{1} << 31) ||
      cuda::tierBoundsBytes(rows, chunk, shape_.d, shape_.k) > shape_.memory.tierBytes)
    return false;
  // the device reads the blocks where they are: each must be page-locked (a host that refused to lock more gave the
  // tier pageable memory, host_tier.h)
  std::vector<const void*> table;
  for (std::int64_t r = tier.firstRow(), n = 0; r < tier.firstRow() + rows; r += n) {
    const void* p = tier.chunkAt(r, n);
    cudaPointerAttributes a{};
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeHost || !a.devicePointer) {
      cudaGetLastError();
      return false;
    }
    table.push_back(a.devicePointer);
  }
  try {
    const std::size_t r = std::size_t(rows), c = std::size_t(chunk);
    labels_ = devAlloc<std::int32_t>(r, "host tier rows' labels");
    previous_ = devAlloc<std::int32_t>(r, "host tier rows' labels");
    blockTable_ = devAlloc<const void*>(table.size(), "host tier blocks");
    piecePrevious_ = devAlloc<std::int32_t>(c, "host tier gathered rows");
    pieceLabels_ = devAlloc<std::int32_t>(c, "host tier gathered rows");
    pieceUpper_ = devAlloc<float>(c, "host tier gathered rows");
    pieceLower_ = devAlloc<float>(c, "host tier gathered rows");
    pieceIndex_ = devAlloc<std::int32_t>(c, "host tier gathered rows");
    pieceCount_ = devAlloc<unsigned>(1, "host tier gathered rows");
    changes_ = devAlloc<int2>(c, "host tier label changes");
    changeCount_ = devAlloc<unsigned long long>(1, "host tier label changes");
    hostChanges_ = hostAlloc<int2>(c, "host tier label changes");
    hostChangeCount_ = hostAlloc<unsigned long long>(1, "host tier label changes");
    bounds_.allocate(rows);
    cuda::fillIdentity(pieceIndex_, std::int64_t(c), nullptr);
    check(cudaDeviceSynchronize(), "host tier rows");
    check(cudaMemcpy(blockTable_, table.data(), table.size() * sizeof(const void*), cudaMemcpyHostToDevice),
          "host tier blocks");
  } catch (const EngineError&) {
    release();
    failed_ = true;
    return false;
  }
  first_ = tier.firstRow();
  rows_ = rows;
  blocks_ = cuda::TierBlocks{blockTable_, first_, chunk, shape_.rowBytes};
  failed_ = false;
  return true;
}

void TierRows::release() noexcept {
  for (void* p : {static_cast<void*>(labels_), static_cast<void*>(previous_), static_cast<void*>(blockTable_),
                  static_cast<void*>(piecePrevious_), static_cast<void*>(pieceLabels_), static_cast<void*>(pieceUpper_),
                  static_cast<void*>(pieceLower_), static_cast<void*>(pieceIndex_), static_cast<void*>(pieceCount_),
                  static_cast<void*>(changes_), static_cast<void*>(changeCount_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hostChanges_), static_cast<void*>(hostChangeCount_)})
    if (p) cudaFreeHost(p);
  pieceIndex_ = nullptr;
  pieceCount_ = nullptr;
  changes_ = hostChanges_ = nullptr;
  changeCount_ = hostChangeCount_ = nullptr;
  labels_ = previous_ = piecePrevious_ = pieceLabels_ = nullptr;
  blockTable_ = nullptr;
  pieceUpper_ = pieceLower_ = nullptr;
  bounds_.release();
  previousHeld_ = kept_ = skipped_ = false;
}

std::int64_t TierRows::finishPass() {
  if (!kept_) {
    forget();
    return 0;
  }
  std::swap(labels_, previous_);
  previousHeld_ = true;
  kept_ = skipped_ = false;
  return bounds_.finishPass();
}

void TierRows::forget() {
  previousHeld_ = kept_ = skipped_ = false;
  bounds_.forget();
}

}  // namespace cuda_backend
}  // namespace kmfleet
