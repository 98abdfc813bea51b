// The engine's host tier in a CUDA pass (cuda_backend.h processHostTier; the rows' state: tier_rows.h). In exact mode
// a fit pass that sees the whole held tier keeps its rows' labels, bounds and statistics on the device: by streaming
// every chunk as the engine would, or — once the bounds hold and the last settle left at most half the rows open — by
// settling the rows the centroids' drift cannot have moved and gathering only the open ones from host memory. Any
// other pass streams the chunks as plain ones, and the next keeping pass starts afresh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "cuda_backend.h"
#include "kernels/accumulate.cuh"
#include "kernels/far_rows.cuh"
#include "kernels/label_changes.cuh"
#include "kernels/operands.cuh"
#include "kernels/row_bounds.cuh"
#include "kernels/tier_rows.cuh"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

// A fit pass without distances, with exact statistics, whose tier's rows have their state from the last pass.
bool CudaBackend::tierSkipsThisPass() const {
  return fit_ && !spec_.distances && exact_.summingThisPass() && tier_.canSkip();
}

std::int64_t CudaBackend::processHostTier(const HostTier& tier, std::int64_t from, std::int64_t upTo,
                                          const std::atomic<bool>& cancel) {
  DeviceScope on(shape_.device);
  const std::int64_t end = tier.firstRow() + tier.plannedRows();
  const bool keeps = from == tier.firstRow() && upTo >= end && fit_ && !spec_.distances &&
                     exact_.summingThisPass() && tier_.take(tier);
  if (!keeps) return Backend::processHostTier(tier, from, upTo, cancel);
  tierSource_ = &tier;
  const bool skip = tierSkipsThisPass() && !overlap_.active();
  try {
    exact_.beginTier(skip, overlap_.active() ? streams_.chunk : streams_.compute);
  } catch (const std::bad_alloc&) {
    tierSource_ = nullptr;
    tier_.forget();
    return Backend::processHostTier(tier, from, upTo, cancel);
  }
  tier_.beginPass(skip);
  if (skip) gatherTierOpen(cancel);
  else streamTierKept(tier, cancel);
  return end;
}

// Every chunk through processChunk, its rows' labels, bounds and statistics kept (computeChunk). The settle runs
// first as a probe (ResidentBounds: how many rows it would leave open decides whether the next pass gathers).
void CudaBackend::streamTierKept(const HostTier& tier, const std::atomic<bool>& cancel) {
  // beside the resident rows, on the chunk stream (behind the pass's centroids: passReady), as the chunks will be
  const cudaStream_t s = overlap_.active() ? streams_.chunk : streams_.compute;
  if (overlap_.active()) check(cudaStreamWaitEvent(s, overlap_.passReady(), 0), "cudaStreamWaitEvent");
  else centroids_.readyForCompute(s);
  ResidentBounds& b = tier_.bounds();
  b.beginPass(centroids_.current(), tier_.previousLabels(), tier_.labels(), tier_.rows(), s);
  b.queueOpenCount(s);
  tierChunks_ = true;
  std::int64_t n = 0;
  for (std::int64_t r = tier.firstRow(); r < tier.firstRow() + tier_.rows(); r += n) {
    const void* rows = tier.chunkAt(r, n);
    if (cancel.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    processChunk(rows, r, n);
  }
  tierChunks_ = false;
}

// The rows the bounds leave open, in pieces of a chunk: gathered from the tier's page-locked blocks into a slot,
// prepared and assigned exactly as a streamed chunk's rows, their labels and bounds scattered back, and the tier's
// statistics moved by those whose label changed. The rows settled keep their previous label (the settle wrote it).
void CudaBackend::gatherTierOpen(const std::atomic<bool>& cancel) {
  const cudaStream_t s = streams_.compute;
  const std::int64_t rows = tier_.rows(), C = shape_.memory.chunkRows;
  centroids_.readyForCompute(s);
  ResidentBounds& b = tier_.bounds();
  b.beginPass(centroids_.current(), tier_.previousLabels(), tier_.labels(), rows, s);
  b.queueOpenCount(s);
  check(cudaStreamSynchronize(s), "compute");
  // the open rows from the list's start, the near ones from its end (row_bounds.cuh settleRows)
  const std::int64_t open = b.openListed(), near = b.nearListed();
  const struct { const std::int32_t* list; std::int64_t count; bool near; } ranges[2] = {
      {b.open(), open, false}, {b.open() + (rows - near), near, true}};
  for (const auto& range : ranges) {
    for (std::int64_t i = 0; i < range.count; i += C) {
      if (cancel.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t m = std::min(C, range.count - i);
      const std::int32_t* list = range.list + i;
      ChunkSlot& slot = slots_.next();
      retire(slot);
      check(cudaStreamWaitEvent(s, slot.rawFree, 0), "cudaStreamWaitEvent");
      cuda::gatherTierRows(tier_.blocks(), list, m, slot.raw, tier_.previousLabels(), tier_.piecePrevious(),
                           range.near ? b.upper() : nullptr, tier_.pieceUpper(), s);
      check(cudaGetLastError(), "gatherTierRows");
      RowOps ops = preparedSlotRows(slot, tier_.firstRow(), m, s);
      if (range.near) {
        // few centroids close by: the fp64 argmin over those, and bounds from its distances (row_bounds.cuh)
        cuda::storeCount(tier_.pieceCount(), unsigned(m), s);
        b.assignNearGathered(rowValues(ops), centroids_.current(), tier_.piecePrevious(), tier_.pieceLabels(),
                             tier_.pieceUpper(), tier_.pieceLower(), tier_.pieceIndex(), tier_.pieceCount(), m, s);
      } else {
        ops.boundUpper = tier_.pieceUpper();
        ops.boundLower = tier_.pieceLower();
        assignPiece(ops, m, tier_.pieceLabels(), scratch_.flags, s);
        finishRowBounds(tier_.pieceUpper(), tier_.pieceLower(), ops.rowSqNorm, nullptr, nullptr, m, s);
      }
      cuda::scatterTierResults(list, m, tier_.pieceLabels(), tier_.pieceUpper(), tier_.pieceLower(), tier_.labels(),
                               b.upper(), b.lower(), s);
      exact_.addTierRows(rowValues(ops), m, shape_.d, tier_.piecePrevious(), tier_.pieceLabels(), !shape_.cosine,
                         false, s);
      check(cudaGetLastError(), "host tier rows");
      check(cudaEventRecord(slot.rawFree, s), "cudaEventRecord");
    }
  }
  takeTierLabels();
  rowsSeen_ += rows;
}

// The tier rows' labels of a pass that gathered into the engine's array: the rows whose label changed, listed on the
// device, over the previous labels copied across (a few thousand pairs late in a run, not every row's label), and
// counted, so the engine need not compare them again; every label when more changed than the list holds.
void CudaBackend::takeTierLabels() {
  const cudaStream_t s = streams_.compute;
  const std::int64_t first = tier_.firstRow(), rows = tier_.rows();
  check(cudaMemsetAsync(tier_.changeCount(), 0, sizeof(unsigned long long), s), "memset");
  listLabelChanges(tier_.labels(), tier_.previousLabels(), rows, tier_.changes(), tier_.changeCapacity(),
                   tier_.changeCount(), s);
  check(cudaGetLastError(), "listLabelChanges");
  check(cudaMemcpyAsync(tier_.hostChangeCount(), tier_.changeCount(), sizeof(unsigned long long),
                        cudaMemcpyDeviceToHost, s),
        "D2H");
  check(cudaStreamSynchronize(s), "compute");
  const std::int64_t changed = std::int64_t(*tier_.hostChangeCount());
  std::int32_t* to = spec_.labels + first;
  if (changed > tier_.changeCapacity() || !spec_.previousLabels) {
    check(cudaMemcpyAsync(to, tier_.labels(), sizeof(std::int32_t) * std::size_t(rows), cudaMemcpyDeviceToHost, s),
          "D2H");
    return;  // finishPass's wait covers the copy
  }
  check(cudaMemcpyAsync(tier_.hostChanges(), tier_.changes(), sizeof(int2) * std::size_t(changed),
                        cudaMemcpyDeviceToHost, s),
        "D2H");
  const std::int32_t* from = spec_.previousLabels + first;
  const auto copy = [&](int tid, int nt) {
    std::int64_t b = 0, e = 0;
    ThreadPool::range(rows, tid, nt, 1024, b, e);
    if (e > b) std::memcpy(to + b, from + b, sizeof(std::int32_t) * std::size_t(e - b));
  };
  if (pool_) pool_->run(copy);
  else copy(0, 1);
  check(cudaStreamSynchronize(s), "D2H");
  const int2* list = tier_.hostChanges();
  for (std::int64_t i = 0; i < changed; ++i) to[list[i].x] = list[i].y;
  // compared on the device, right after the rows compared before them (PassTotals.changedRows, closePass)
  streamed_.first = first;
  streamed_.rows = streamed_.compared = rows;
  streamed_.changed = changed;
}

// Rows in a slot (gathered, or copied up) prepared into the chunk scratch on s, 16-bit rows read where they landed.
RowOps CudaBackend::preparedSlotRows(const ChunkSlot& slot, std::int64_t firstRow, std::int64_t rows, cudaStream_t s) {
  RowOps ops = scratch_.ops;
  if (shape_.rows16) ops.x16 = slot.raw;
  prepareRows(slot.raw, shape_.input, rows, shape_.d, shape_.memory.op, shape_.cosine, firstRow, centroids_.mu(), ops,
              rowFlags(), s);
  check(cudaGetLastError(), "prepareRows");
  return ops;
}

// A pass that gathered left a cluster empty: the farthest rows are among every row's, so each tier chunk is read
// again for its rows' fp64 distances under this pass's labels and its candidates offered — what streaming it would
// have offered (computeChunk: sumsDistances, farRows).
void CudaBackend::offerTierFarthest() {
  const cudaStream_t s = streams_.compute;
  const HostTier& tier = *tierSource_;
  std::int64_t n = 0;
  for (std::int64_t r = tier_.firstRow(); r < tier_.firstRow() + tier_.rows(); r += n) {
    const void* data = tier.chunkAt(r, n);
    const int far = farCandidates(spec_.farthest, n);
    ChunkSlot& slot = slots_.next();
    retire(slot);
    ensureFarBuffers(slot, far);
    check(cudaMemcpyAsync(slot.raw, data, std::size_t(n) * shape_.rowBytes, cudaMemcpyHostToDevice, s), "H2D");
    const RowValues values = rowValues(preparedSlotRows(slot, r, n, s));
    sumsDistances(values, n, shape_.d, centroids_.current(), tier_.labels() + (r - tier_.firstRow()), shape_.cosine,
                  scratch_.dist64, nullptr, s);
    farRows(scratch_.dist64, values, n, shape_.d, r, spec_.farthest, scratch_.farScratch, slot.topDist, slot.topRow,
            slot.topValues, s);
    check(cudaGetLastError(), "host tier farthest rows");
    check(cudaMemcpyAsync(slot.hTopDist, slot.topDist, sizeof(double) * far, cudaMemcpyDeviceToHost, s), "D2H");
    check(cudaMemcpyAsync(slot.hTopRow, slot.topRow, sizeof(long long) * far, cudaMemcpyDeviceToHost, s), "D2H");
    check(cudaMemcpyAsync(slot.hTopValues, slot.topValues, sizeof(float) * std::size_t(far) * shape_.d,
                          cudaMemcpyDeviceToHost, s),
          "D2H");
    check(cudaStreamSynchronize(s), "compute");
    for (int i = 0; i < far; ++i)
      farthest_.offer(slot.hTopDist[i], slot.hTopRow[i], slot.hTopValues + std::size_t(i) * shape_.d);
  }
}

}  // namespace cuda_backend
}  // namespace kmfleet
