// The CUDA Backend's resident rows in a pass (cuda_backend.h; their state: resident_rows.h): processed chunk by chunk
// or in one go (pieces of whole chunks, then one accumulate), and, in a partly resident pass, their work queued a few
// chunks ahead of the device so streamed chunks overlap it.
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
  resident_.markRan();  // finishPass finds the farthest resident rows from their kept distances, if asked
  // Streamed chunks of this pass go on streams_.chunk into per-chunk partials, folded on streams_.compute after the resident
  // rows: their copies and kernels no longer wait for the resident compute (see processChunk).
  overlap_ = shape_.memory.overlapPartials > 0 && resident_.held() < shape_.n;
  if (overlap_) {
    centroids_.readyForCompute(streams_.compute);
    check(cudaEventRecord(passReady_, streams_.compute), "cudaEventRecord");  // centroid operands, zeroed totals and flags
    // The resident work is queued a few chunks ahead of the device, not all at once: ~20 launches a chunk would
    // fill the launch queue and block this thread (and the streamed chunks' copies) until most of it has run.
    resWhole_ = resident_.inOneGo();
    resChunks_ = (resident_.held() + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows;
    resSteps_ = resChunks_ + (resWhole_ ? 1 : 0);  // whole: a piece a chunk, then the one accumulate
    resStep_ = 0;
    pendingFolds_.clear();
    if (resWhole_) { centroids_.readyForCompute(streams_.compute); stageMark(0); }
    return pumpResident(false);
  }
  if (resident_.inOneGo()) return processResidentWhole();
  for (std::int64_t first = 0; first < resident_.held(); first += shape_.memory.chunkRows) {
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    const std::int64_t rows = std::min(shape_.memory.chunkRows, resident_.held() - first);
    // Outputs of resident rows go to their own arrays (no host wait): the copies of streamed chunks
    // can start while these are computed.
    computeChunk(resident_.from(first, screenRelativeThisPass_), first, rows, nullptr);
    resident_.markOutputsPending();  // finishPass copies the resident arrays' labels
  }
}

// All resident rows at once: the assignment over pieces of whole chunks (no per-chunk launches outside exact
// mode), then one accumulate (accumulate.cuh accumulateResident: the per-chunk path's sums, bit for bit).
void CudaBackend::processResidentWhole() {
  const std::int64_t R = resident_.held(), C = shape_.memory.chunkRows;
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
    assignPiece(resident_.from(first, screenRelativeThisPass_), rows, resident_.labels() + first,
                shape_.memory.op == OpKind::F16x3 ? resident_.pieceFlags() : scratch_.flags);
    // labels are final here: their copies overlap the rest (with distances, they go down after the sums)
    if (!wantDist) resident_.download(first / C, (first + rows + C - 1) / C, false, streams_.compute, streams_.d2h);
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  resident_.markOutputsPending();
}

// All resident rows' sums in one go once their labels are final (same additions as chunk by chunk), then their
// distances down when the pass wants them.
void CudaBackend::accumulateResidentRows(bool wantDist) {
  stageMark(1);
  if (exact_.summingThisPass()) {  // the statistics moved by the changed rows (or added afresh): exact_sums.cuh
    exactRows(resident_.all(), 0, resident_.held(), resident_.labels(), true, nullptr, streams_.compute);
  } else {  // D ≤ 256: the rows' fp64 distances are not kept (FarthestRows::offerResident computes them if a cluster comes out empty)
    accumulateResident(rowValues(resident_.all()), shape_.d, shape_.k, resident_.labels(), centroids_.current(), shape_.cosine,
                       shape_.keepsResidentDistances() ? resident_.distances64() : nullptr, wantDist ? resident_.distances32() : nullptr, fit_, resident_.oneGoScratch(), totals_.sums,
                       totals_.counts, totals_.inertia, streams_.compute);
    check(cudaGetLastError(), "accumulateResident");
  }
  stageMark(2);
  stageMark(3);
  if (wantDist) resident_.download(0, (resident_.held() + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows, true, streams_.compute, streams_.d2h);
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
  const std::int64_t R = resident_.held(), C = shape_.memory.chunkRows, first = i * C;
  if (!resWhole_) {
    computeChunk(resident_.from(first, screenRelativeThisPass_), first, std::min(C, R - first), nullptr);
    resident_.markOutputsPending();
    return;
  }
  const bool wantDist = spec_.distances != nullptr;
  if (i < resChunks_) {  // processResidentWhole's pieces, one chunk each
    const std::int64_t rows = std::min(C, R - first);
    assignPiece(resident_.from(first, screenRelativeThisPass_), rows, resident_.labels() + first, shape_.memory.op == OpKind::F16x3 ? resident_.pieceFlags() : scratch_.flags);
    if (!wantDist) resident_.download(i, i + 1, false, streams_.compute, streams_.d2h);
    return;
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  resident_.markOutputsPending();
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
