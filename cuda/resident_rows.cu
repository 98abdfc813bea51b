// The CUDA Backend's resident rows (cuda_backend.h): processed chunk by chunk or in one go (pieces of whole chunks,
// then one accumulate), their labels/distances down to pinned staging, and, in a partly resident pass, their work
// queued a few chunks ahead of the device so streamed chunks overlap it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "cuda_backend.h"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

void CudaBackend::processResident() {
  check(cudaSetDevice(shape_.device), "cudaSetDevice");
  residentRan_ = true;  // finishPass finds the farthest resident rows from their kept distances, if asked
  // Streamed chunks of this pass go on streams_.chunk into per-chunk partials, folded on streams_.compute after the resident
  // rows: their copies and kernels no longer wait for the resident compute (see processChunk).
  overlap_ = shape_.memory.overlapPartials > 0 && residentHeld_ < shape_.n;
  if (overlap_) {
    centroids_.readyForCompute(streams_.compute);
    check(cudaEventRecord(passReady_, streams_.compute), "cudaEventRecord");  // centroid operands, zeroed totals and flags
    // The resident work is queued a few chunks ahead of the device, not all at once: ~20 launches a chunk would
    // fill the launch queue and block this thread (and the streamed chunks' copies) until most of it has run.
    resWhole_ = racc_.rows > 0 && racc_.rows == residentHeld_;
    resChunks_ = (residentHeld_ + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows;
    resSteps_ = resChunks_ + (resWhole_ ? 1 : 0);  // whole: a piece a chunk, then the one accumulate
    resStep_ = 0;
    pendingFolds_.clear();
    if (resWhole_) { centroids_.readyForCompute(streams_.compute); stageMark(0); }
    return pumpResident(false);
  }
  if (racc_.rows > 0 && racc_.rows == residentHeld_) return processResidentWhole();
  for (std::int64_t first = 0; first < residentHeld_; first += shape_.memory.chunkRows) {
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    const std::int64_t rows = std::min(shape_.memory.chunkRows, residentHeld_ - first);
    // Outputs of resident rows go to their own arrays (no host wait): the copies of streamed chunks
    // can start while these are computed.
    computeChunk(residentOps(first), first, rows, nullptr);
    residentPending_ = true;  // finishPass copies the resident arrays' labels
  }
}

RowOps CudaBackend::residentOps(std::int64_t firstRow) const {
  RowOps o = resident_;
  const std::size_t r = std::size_t(firstRow);
  if (o.xf) o.xf += r * shape_.d;
  if (o.x16) o.x16 = static_cast<unsigned short*>(o.x16) + r * shape_.d;
  o.ahi = static_cast<unsigned short*>(o.ahi) + r * shape_.dp;
  if (o.alo) o.alo = static_cast<unsigned short*>(o.alo) + r * shape_.dp;
  o.rowScale += r;
  o.rowNorm += r;
  if (o.rowNormLo) o.rowNormLo += r;
  if (o.screenRef) o.screenRef += r;
  o.screenRelative = screenRelativeThisPass_;
  return o;
}

// All resident rows at once: the assignment over pieces of whole chunks (no per-chunk launches outside exact
// mode), then one accumulate (accumulate.cuh accumulateResident: the per-chunk path's sums, bit for bit).
void CudaBackend::processResidentWhole() {
  const std::int64_t R = residentHeld_, C = shape_.memory.chunkRows;
  const bool wantDist = spec_.distances != nullptr;
  centroids_.readyForCompute(streams_.compute);
  stageMark(0);
  // the planner's piece (all rows, or ~2M: planner.h); one chunk a piece while streamed chunks overlap: the resident
  // assignment (a persistent kernel) then yields the SMs to a landed chunk within ~one chunk's compute, so the two
  // slots keep cycling
  const std::int64_t piece = overlap_ ? std::min(R, C) : std::min(R, shape_.memory.residentPiece);
  for (std::int64_t first = 0; first < R; first += piece) {
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    const std::int64_t rows = std::min(piece, R - first);
    assignPiece(residentOps(first), rows, resLabels_ + first,
                shape_.memory.op == OpKind::F16x3 ? resFlag_ : scratch_.flags);
    // labels are final here: their copies overlap the rest (with distances, they go down after the sums)
    if (!wantDist) downloadResident(first / C, (first + rows + C - 1) / C, false);
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  residentPending_ = true;
}

// All resident rows' sums in one go once their labels are final (same additions as chunk by chunk), then their
// distances down when the pass wants them.
void CudaBackend::accumulateResidentRows(bool wantDist) {
  stageMark(1);
  if (exact_.summingThisPass()) {  // the statistics moved by the changed rows (or added afresh): exact_sums.cuh
    exactRows(resident_, 0, residentHeld_, resLabels_, true, nullptr, streams_.compute);
  } else {  // D ≤ 256: the rows' fp64 distances are not kept (FarthestRows::offerResident computes them if a cluster comes out empty)
    accumulateResident(rowValues(resident_), shape_.d, shape_.k, resLabels_, centroids_.current(), shape_.cosine,
                       shape_.keepsResidentDistances() ? resDist64_ : nullptr, wantDist ? resDist_ : nullptr, fit_, racc_, totals_.sums,
                       totals_.counts, totals_.inertia, streams_.compute);
    check(cudaGetLastError(), "accumulateResident");
  }
  stageMark(2);
  stageMark(3);
  if (wantDist) downloadResident(0, (residentHeld_ + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows, true);
}

// Resident chunks [c0, c1) — labels (+ distances) — down to the pinned staging after what compute has queued.
void CudaBackend::downloadResident(std::int64_t c0, std::int64_t c1, bool dist) {
  check(cudaEventRecord(resComputed_, streams_.compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(streams_.d2h, resComputed_, 0), "cudaStreamWaitEvent");
  for (std::int64_t ci = c0; ci < c1; ++ci) {
    const std::int64_t first = ci * shape_.memory.chunkRows;
    const std::size_t rows = std::size_t(std::min(shape_.memory.chunkRows, residentHeld_ - first));
    check(cudaMemcpyAsync(hResLabels_ + first, resLabels_ + first, sizeof(int) * rows, cudaMemcpyDeviceToHost, streams_.d2h),
          "D2H");
    if (dist)
      check(cudaMemcpyAsync(hResDist_ + first, resDist_ + first, sizeof(float) * rows, cudaMemcpyDeviceToHost, streams_.d2h),
            "D2H");
    check(cudaEventRecord(resChunkDone_[std::size_t(ci)], streams_.d2h), "cudaEventRecord");
  }
}

// The resident rows' labels (and distances) from the pinned staging into the engine's arrays, chunk by chunk as
// each chunk's D2H completes, so the copies overlap the device's work on later chunks. Split over up to
// kCopyThreads of the engine's threads: one thread copies ~6 GB/s on the H200's host, and 40 MB of labels at 10M
// rows then took longer than the device's whole pass (10M×128×1024 fp16: ~7 ms against ~6.3).
void CudaBackend::copyResidentOutputs() {
  constexpr int kCopyThreads = 8;
  const std::int64_t C = shape_.memory.chunkRows, chunks = (residentHeld_ + C - 1) / C;
  auto copyChunks = [&](std::int64_t c0, std::int64_t step) {
    for (std::int64_t ci = c0; ci < chunks; ci += step) {
      const std::int64_t first = ci * C;
      const std::size_t rows = std::size_t(std::min(C, residentHeld_ - first));
      check(cudaEventSynchronize(resChunkDone_[std::size_t(ci)]), "D2H");
      std::memcpy(spec_.labels + first, hResLabels_ + first, sizeof(int) * rows);
      if (spec_.distances) std::memcpy(spec_.distances + first, hResDist_ + first, sizeof(float) * rows);
    }
  };
  const int threads = pool_ ? static_cast<int>(std::min<std::int64_t>({pool_->size(), kCopyThreads, chunks})) : 1;
  if (threads <= 1) return copyChunks(0, 1);
  pool_->run([&](int tid, int) {
    if (tid >= threads) return;
    if (tid > 0) check(cudaSetDevice(shape_.device), "cudaSetDevice");  // the pool's own threads
    copyChunks(tid, threads);
  });
}

// ---- overlap: resident work queued a few chunks ahead (processResident, processChunk, finishPass) ----
bool CudaBackend::eventDone(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) { cudaGetLastError(); return false; }
  check(r, "compute");
  return true;
}

// Queue resident steps while fewer than residentAhead_ are outstanding (all: every one left). Once the last is
// queued, the streamed chunks' folds waiting for it are queued after it, in chunk order.
void CudaBackend::pumpResident(bool all) {
  while (resStep_ < resSteps_) {
    if (!all && resStep_ >= residentAhead_ && !eventDone(resStepDone_[std::size_t(resStep_ - residentAhead_)])) break;
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    residentStep(resStep_);
    check(cudaEventRecord(resStepDone_[std::size_t(resStep_)], streams_.compute), "cudaEventRecord");
    ++resStep_;
  }
  if (resStep_ == resSteps_) {
    for (std::size_t b : pendingFolds_) enqueueFold(b);
    pendingFolds_.clear();
  }
}

void CudaBackend::residentStep(std::int64_t i) {
  const std::int64_t R = residentHeld_, C = shape_.memory.chunkRows, first = i * C;
  if (!resWhole_) {
    computeChunk(residentOps(first), first, std::min(C, R - first), nullptr);
    residentPending_ = true;
    return;
  }
  const bool wantDist = spec_.distances != nullptr;
  if (i < resChunks_) {  // processResidentWhole's pieces, one chunk each
    const std::int64_t rows = std::min(C, R - first);
    assignPiece(residentOps(first), rows, resLabels_ + first, shape_.memory.op == OpKind::F16x3 ? resFlag_ : scratch_.flags);
    if (!wantDist) downloadResident(i, i + 1, false);
    return;
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  residentPending_ = true;
}

// Host waits of a partly resident pass keep the resident work queued meanwhile.
void CudaBackend::waitPumping(cudaEvent_t e, const char* what) {
  if (!overlap_) return check(cudaEventSynchronize(e), what);
  while (!eventDone(e)) {
    const std::int64_t before = resStep_;
    pumpResident(false);
    // yield, not sleep: a sleep lasts ≥ ~60 µs (timer slack), and every copy noticed late delays the next one
    if (resStep_ == before) std::this_thread::yield();
  }
}

}  // namespace cuda_backend
}  // namespace kmfleet
