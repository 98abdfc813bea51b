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
  DeviceScope on(shape_.device);
  resident_.markRan();  // finishPass finds the farthest resident rows from their kept distances, if asked
  // Streamed chunks of this pass go on streams_.chunk into per-chunk partials, folded on streams_.compute after the resident
  // rows: their copies and kernels no longer wait for the resident compute (see processChunk).
  // (a pass that gathers only the host tier's open rows streams nothing for the resident rows to overlap)
  if (shape_.memory.overlapPartials > 0 && resident_.held() < shape_.n && !tierSkipsThisPass()) {
    centroids_.readyForCompute(streams_.compute);
    overlap_.start(streams_.compute);  // after the centroid operands, zeroed totals and flags
    // The resident work is queued a few chunks ahead of the device (resident_steps.h).
    steps_.plan(resident_.inOneGo(), resident_.held());
    if (steps_.oneGo()) {
      centroids_.readyForCompute(streams_.compute);
      stageMark(0);
    }
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
  const std::int64_t piece = overlap_.active() ? std::min(R, C) : std::min(R, shape_.memory.residentPiece);
  // the bounds: every resident row in this one go, after a pass that renewed them all (resident_bounds.h)
  const bool bounded = bounds_.kept() && !overlap_.active() && R == shape_.memory.residentRows;
  // labels reported as the rows that changed (finishPass lists them): none come down here
  const bool whole = !resident_.beginChanges(spec_.labelsAsChanges && !wantDist && !overlap_.active());
  if (bounded)
    bounds_.beginPass(centroids_.current(), resident_.previousLabelsHeld() ? resident_.previousLabels() : nullptr,
                      resident_.labels(), R, streams_.compute);
  else
    bounds_.forget();
  if (bounded && bounds_.lists()) {
    // the rows the bounds settle keep their previous label (the settle wrote it); near rows the fp64 argmin over their
    // few close centroids; the others take the three products
    RowOps ops = resident_.from(0, false);
    bounds_.assignNear(rowValues(resident_.all()), centroids_.current(), resident_.previousLabels(), resident_.labels(),
                       streams_.compute);
    bounds_.attach(ops, 0);
    assignPiece(ops, R, resident_.labels(), resident_.pieceFlags(), nullptr, nullptr, bounds_.open(),
                bounds_.openCount());
    bounds_.assigned(ops.rowSqNorm, R, streams_.compute);
    if (!wantDist && whole) resident_.download(0, (R + C - 1) / C, false, streams_.compute, streams_.d2h);
  } else {
    for (std::int64_t first = 0; first < R; first += piece) {
      if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t rows = std::min(piece, R - first);
      RowOps ops = resident_.from(first, screenRelativeThisPass_);
      if (bounded) bounds_.attach(ops, first);
      assignPiece(ops, rows, resident_.labels() + first,
                  shape_.memory.op == OpKind::F16x3 ? resident_.pieceFlags() : scratch_.flags);
      // labels are final here: their copies overlap the rest (with distances, they go down after the sums)
      if (!wantDist && whole)
        resident_.download(first / C, (first + rows + C - 1) / C, false, streams_.compute, streams_.d2h);
    }
    if (bounded) bounds_.assigned(resident_.all().rowSqNorm, R, streams_.compute);
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  if (whole) resident_.markOutputsPending();
}

// All resident rows' sums in one go once their labels are final (same additions as chunk by chunk), then their
// distances down when the pass wants them.
void CudaBackend::accumulateResidentRows(bool wantDist) {
  stageMark(1);
  if (exact_.summingThisPass()) {  // the statistics moved by the changed rows (or added afresh): exact_sums.cuh
    exactRows(resident_.all(), 0, resident_.held(), resident_.labels(), RowsOf::Resident,
              wantDist ? resident_.distances64() : nullptr, wantDist ? resident_.distances32() : nullptr,
              streams_.compute);
  } else {  // D ≤ 256: the rows' fp64 distances are not kept (FarthestRows::offerResident computes them if needed)
    accumulateResident(rowValues(resident_.all()), shape_.d, shape_.k, resident_.labels(), centroids_.current(),
                       shape_.cosine, shape_.keepsResidentDistances() ? resident_.distances64() : nullptr,
                       wantDist ? resident_.distances32() : nullptr, fit_, resident_.oneGoScratch(), totals_.sums,
                       totals_.counts, totals_.inertia, streams_.compute);
    check(cudaGetLastError(), "accumulateResident");
  }
  stageMark(2);
  stageMark(3);
  if (wantDist)
    resident_.download(0, (resident_.held() + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows, true,
                       streams_.compute, streams_.d2h);
}

// ---- overlap: resident work queued a few chunks ahead (processResident, processChunk, finishPass) ----
// Queue resident steps while fewer than CudaSettings.residentAhead are outstanding (all: every one left). Once the last is
// queued, the streamed chunks' folds waiting for it are queued after it, in chunk order.
void CudaBackend::pumpResident(bool all) {
  while (steps_.pending()) {
    if (!all && !steps_.roomAhead()) break;
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    residentStep(steps_.next());
    steps_.queued(streams_.compute);
  }
  if (steps_.allQueued()) overlap_.foldDeferred(totals_, fit_, streams_.compute);
}

void CudaBackend::residentStep(std::int64_t i) {
  const std::int64_t R = resident_.held(), C = shape_.memory.chunkRows, first = i * C;
  if (!steps_.oneGo()) {
    computeChunk(resident_.from(first, screenRelativeThisPass_), first, std::min(C, R - first), nullptr);
    resident_.markOutputsPending();
    return;
  }
  const bool wantDist = spec_.distances != nullptr;
  if (i < steps_.chunks()) {  // processResidentWhole's pieces, one chunk each
    const std::int64_t rows = std::min(C, R - first);
    assignPiece(resident_.from(first, screenRelativeThisPass_), rows, resident_.labels() + first,
                shape_.memory.op == OpKind::F16x3 ? resident_.pieceFlags() : scratch_.flags);
    if (!wantDist) resident_.download(i, i + 1, false, streams_.compute, streams_.d2h);
    return;
  }
  accumulateResidentRows(wantDist);
  rowsSeen_ += R;
  resident_.markOutputsPending();
}

// Host waits of a partly resident pass keep the resident work queued meanwhile.
void CudaBackend::waitPumping(cudaEvent_t e, const char* what) {
  if (!overlap_.active()) return check(cudaEventSynchronize(e), what);
  while (!eventDone(e)) {
    const std::int64_t before = steps_.next();
    pumpResident(false);
    // yield, not sleep: a sleep lasts ≥ ~60 µs (timer slack), and every copy noticed late delays the next one
    if (steps_.next() == before) std::this_thread::yield();
  }
}

}  // namespace cuda_backend
}  // namespace kmfleet
