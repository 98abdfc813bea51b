// The resident rows (resident_rows.h): allocation, views, their outputs down to the staging and into the engine's
// arrays, the count of changed labels.
#include "resident_rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "device_memory.h"
#include "kernels/label_changes.cuh"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

void ResidentRows::allocate() {
  if (shape_.memory.residentRows > 0) {
    const std::size_t r = std::size_t(shape_.memory.residentRows);
    rows_ = allocRowOps(shape_, r, "resident rows", false);
    labels_ = devAlloc<int>(r, "resident rows");
    previousLabels_ = devAlloc<int>(r, "resident rows");
    changedCount_ = devAlloc<unsigned long long>(1, "flags");
    dist32_ = devAlloc<float>(r, "resident rows");
    hostLabels_ = hostAlloc<int>(r, "resident label staging");
    hostDist_ = hostAlloc<float>(r, "resident distance staging");
    dist64_ = devAlloc<double>(r, "resident rows");
    if (shape_.memory.residentAccBytes > 0) {  // planned within the budget: one accumulate over all resident rows
      allocResidentAccumulate(accumulate_, shape_.memory.residentRows, shape_.memory.chunkRows, shape_.d,
                              shape_.k);  // throws std::bad_alloc
      if (shape_.memory.op == OpKind::F16x3)  // exact mode: flagged-row scratch for a piece of resident rows
        allocFlagScratch(pieceFlags_, std::size_t(shape_.memory.residentPiece), "resident rows");
    }
  }
  check(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming), "cudaEventCreate");
  chunkDownloaded_.resize(std::size_t(shape_.residentChunks()), nullptr);
  for (cudaEvent_t& e : chunkDownloaded_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
}

void ResidentRows::release() noexcept {
  freeRowOps(rows_);
  for (void* p : {static_cast<void*>(labels_), static_cast<void*>(previousLabels_), static_cast<void*>(changedCount_),
                  static_cast<void*>(dist32_), static_cast<void*>(dist64_)})
    if (p) cudaFree(p);
  labels_ = previousLabels_ = nullptr;
  changedCount_ = nullptr;
  dist32_ = nullptr;
  dist64_ = nullptr;
  previousLabelsHeld_ = false;
  freeResidentAccumulate(accumulate_);
  freeFlagScratch(pieceFlags_);
  if (hostLabels_) cudaFreeHost(hostLabels_);
  if (hostDist_) cudaFreeHost(hostDist_);
  hostLabels_ = nullptr;
  hostDist_ = nullptr;
  if (computed_) cudaEventDestroy(computed_);
  computed_ = nullptr;
  for (cudaEvent_t e : chunkDownloaded_)
    if (e) cudaEventDestroy(e);
  chunkDownloaded_.clear();
}

RowOps ResidentRows::from(std::int64_t firstRow, bool screenRelative) const {
  RowOps o = rows_;
  const std::size_t r = std::size_t(firstRow);
  if (o.xf) o.xf += r * shape_.d;
  if (o.x16) o.x16 = static_cast<unsigned short*>(o.x16) + r * shape_.d;
  o.ahi = static_cast<unsigned short*>(o.ahi) + r * shape_.dp;
  if (o.alo) o.alo = static_cast<unsigned short*>(o.alo) + r * shape_.dp;
  o.rowScale += r;
  o.rowNorm += r;
  if (o.rowNormLo) o.rowNormLo += r;
  if (o.screenRef) o.screenRef += r;
  if (o.rowSqNorm) o.rowSqNorm += r;
  o.screenRelative = screenRelative;
  return o;
}

void ResidentRows::chunkOutputs(std::int64_t firstRow, ChunkSlot& view) const {
  view.labels = labels_ + firstRow;
  view.dist32 = dist32_ + firstRow;
  view.hLabels = hostLabels_ + firstRow;
  view.hDist = hostDist_ + firstRow;
  view.computed = computed_;
  view.outDone = chunkDownloaded_[std::size_t(firstRow / shape_.memory.chunkRows)];  // finishPass copies after it
}

void ResidentRows::download(std::int64_t c0, std::int64_t c1, bool distances, cudaStream_t compute, cudaStream_t d2h) {
  check(cudaEventRecord(computed_, compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(d2h, computed_, 0), "cudaStreamWaitEvent");
  for (std::int64_t ci = c0; ci < c1; ++ci) {
    const std::int64_t first = ci * shape_.memory.chunkRows;
    const std::size_t rows = std::size_t(std::min(shape_.memory.chunkRows, held_ - first));
    check(cudaMemcpyAsync(hostLabels_ + first, labels_ + first, sizeof(int) * rows, cudaMemcpyDeviceToHost, d2h),
          "D2H");
    if (distances)
      check(cudaMemcpyAsync(hostDist_ + first, dist32_ + first, sizeof(float) * rows, cudaMemcpyDeviceToHost, d2h),
            "D2H");
    check(cudaEventRecord(chunkDownloaded_[std::size_t(ci)], d2h), "cudaEventRecord");
  }
}

// Piece by piece (at most kCopyRows rows of one chunk) as each chunk's D2H completes, so the copies overlap the
// device's work on later chunks, split over up to kCopyThreads of the engine's threads: one thread copies ~6 GB/s on
// the H200's host, and 40 MB of labels at 10M rows — one chunk — then took longer than the device's whole pass.
void ResidentRows::copyOutputs(std::int32_t* labels, float* distances, ThreadPool* pool) {
  constexpr int kCopyThreads = 8;
  constexpr std::int64_t kCopyRows = std::int64_t{1} << 20;
  const std::int64_t C = shape_.memory.chunkRows, chunks = (held_ + C - 1) / C;
  const std::int64_t perChunk = (C + kCopyRows - 1) / kCopyRows, pieces = chunks * perChunk;
  auto copyPieces = [&](std::int64_t p0, std::int64_t step) {
    for (std::int64_t p = p0; p < pieces; p += step) {
      const std::int64_t ci = p / perChunk, first = ci * C + (p % perChunk) * kCopyRows;
      const std::int64_t end = std::min({first + kCopyRows, (ci + 1) * C, held_});
      if (first >= end) continue;
      const std::size_t rows = std::size_t(end - first);
      check(cudaEventSynchronize(chunkDownloaded_[std::size_t(ci)]), "D2H");
      std::memcpy(labels + first, hostLabels_ + first, sizeof(int) * rows);
      if (distances) std::memcpy(distances + first, hostDist_ + first, sizeof(float) * rows);
    }
  };
  const int threads = pool ? static_cast<int>(std::min<std::int64_t>({pool->size(), kCopyThreads, pieces})) : 1;
  if (threads <= 1) return copyPieces(0, 1);
  pool->run([&](int tid, int) {
    if (tid >= threads) return;
    if (tid == 0) return copyPieces(tid, threads);  // the calling thread, on the device already
    DeviceScope on(shape_.device);                  // the pool's own threads
    copyPieces(tid, threads);
  });
}

void ResidentRows::queueChangeCount(cudaStream_t s) {
  check(cudaMemsetAsync(changedCount_, 0, sizeof(unsigned long long), s), "memset");
  if (asChanges_)
    listLabelChanges(labels_, previousLabels_, held_, reinterpret_cast<int2*>(dist32_), changeCapacity(), changedCount_, s);
  else
    countLabelChanges(labels_, previousLabels_, held_, changedCount_, s);
  check(cudaGetLastError(), "countLabelChanges");
}

bool ResidentRows::beginChanges(bool accepted) {
  asChanges_ = accepted && held_ == shape_.n && held_ < (std::int64_t{1} << 31) && previousLabelsHeld_ &&
               lastChangedShare_ < 1.0 / 64;
  return asChanges_;
}

bool ResidentRows::takeChanges(std::uint64_t count, std::vector<LabelChange>& out, cudaStream_t s) {
  static_assert(sizeof(LabelChange) == sizeof(int2), "a LabelChange is the list's (row, label) pair");
  if (count > std::uint64_t(changeCapacity())) return false;
  out.resize(std::size_t(count));
  if (count == 0) return true;
  // through the pinned distance staging (unused without distances, and as large as the list)
  check(cudaMemcpyAsync(hostDist_, dist32_, sizeof(int2) * count, cudaMemcpyDeviceToHost, s), "D2H");
  check(cudaStreamSynchronize(s), "D2H");
  std::memcpy(out.data(), hostDist_, sizeof(int2) * count);
  return true;
}

// A pass that fed the resident rows as streamed chunks (or retained them) gave the engine labels the device does not
// hold: nothing to compare with next time.
void ResidentRows::finishPass() {
  asChanges_ = false;
  if (ranThisPass_) std::swap(labels_, previousLabels_);
  previousLabelsHeld_ = ranThisPass_;
  ranThisPass_ = false;
  if (held_ == 0 && retainedThisPass_ == shape_.memory.residentRows) held_ = shape_.memory.residentRows;
}

}  // namespace cuda_backend
}  // namespace kmfleet
