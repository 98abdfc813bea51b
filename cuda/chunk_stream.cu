// The CUDA Backend's chunks (cuda_backend.h): a streamed chunk through its slot (H2D on the copy stream, kernels,
// D2H into the slot's pinned staging, drained into the engine's arrays when the slot comes round again), the kernels
// and outputs of one chunk (computeChunk: also resident chunks one by one), the labels of a piece of rows
// (assignPiece), and the folds of the overlap partials.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "cuda_backend.h"
#include "kernels/far_rows.cuh"
#include "kernels/recheck.cuh"

namespace kmfleet {
namespace cuda_backend {

void CudaBackend::processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) {
  DeviceScope on(shape_.device);
  if (!data || rows <= 0 || rows > shape_.memory.chunkRows)
    throw EngineError(ErrorCode::InvalidArgument, "processChunk: no rows or a bad row count");
  ChunkSlot& slot = slots_.next();
  check(cudaStreamWaitEvent(streams_.copy, slot.rawFree, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(slot.raw, data, rows * shape_.rowBytes, cudaMemcpyHostToDevice, streams_.copy), "H2D");
  check(cudaEventRecord(slot.copied, streams_.copy), "cudaEventRecord");
  computeCopied(slot, firstRow, rows);
}

void CudaBackend::processChunkInPieces(const ChunkPieces& pieces, std::int64_t firstRow, std::int64_t rows) {
  DeviceScope on(shape_.device);
  if (rows <= 0 || rows > shape_.memory.chunkRows)
    throw EngineError(ErrorCode::InvalidArgument, "processChunkInPieces: no rows or a bad row count");
  ChunkSlot& slot = slots_.next();
  check(cudaEventSynchronize(slot.rawFree), "cudaEventSynchronize");  // the lanes' copies land in it unordered
  uploads_.upload(*pool_, shape_.device, pieces, rows, shape_.rowBytes, slot.raw, streams_.copy, slot.copied);
  computeCopied(slot, firstRow, rows);
}

// A streamed chunk whose rows are on their way to slot.raw (slot.copied recorded once they are there).
void CudaBackend::computeCopied(ChunkSlot& slot, std::int64_t firstRow, std::int64_t rows) {
  // The slot's previous outputs go to the engine's arrays once the copy is queued: the copy engine is not kept
  // waiting for the host (a chunk's labels are ~0.5 MB to memcpy; streamed passes are bound by the copies).
  retire(slot);
  const cudaStream_t cs = overlap_.active() ? streams_.chunk : streams_.compute;
  if (overlap_.active()) check(cudaStreamWaitEvent(cs, overlap_.passReady(), 0), "cudaStreamWaitEvent");
  check(cudaStreamWaitEvent(cs, slot.copied, 0), "cudaStreamWaitEvent");

  // Rows of [0, residentRows) not yet held are retained: prepared straight into the resident arrays.
  const bool retain = resident_.retains(firstRow, rows);
  RowOps ops = retain ? resident_.from(firstRow, screenRelativeThisPass_) : scratch_.ops;
  const bool valuesInSlot = shape_.rows16 && !retain;  // the 16-bit rows are read where they landed
  if (valuesInSlot) ops.x16 = slot.raw;
  if (!centroids_.muReady()) centroids_.establishMu(slot.raw, rows, scratch_.ops, rowFlags(), streams_.compute);
  prepareRows(slot.raw, shape_.input, rows, shape_.d, shape_.memory.op, shape_.cosine, firstRow, centroids_.mu(), ops,
              rowFlags(), cs);
  check(cudaGetLastError(), "prepareRows");
  if (!valuesInSlot) check(cudaEventRecord(slot.rawFree, cs), "cudaEventRecord");
  computeChunk(ops, firstRow, rows, &slot, cs);
  if (valuesInSlot) check(cudaEventRecord(slot.rawFree, cs), "cudaEventRecord");
  if (retain) resident_.retained(rows);
  // The engine may refill the host memory once its copy is done.
  waitPumping(slot.copied, "H2D");
}

// Before a slot's outputs are overwritten: wait for their D2H (keeping resident work queued) and copy them out.
void CudaBackend::retire(ChunkSlot& s) {
  if (s.pending && overlap_.active()) waitPumping(s.outDone, "D2H");
  drain(s);
}

// Copy a slot's finished outputs into the engine's arrays.
void CudaBackend::drain(ChunkSlot& s) {
  if (!s.pending) return;
  check(cudaEventSynchronize(s.outDone), "D2H");
  if (spec_.previousLabels) {
    // copied and compared with the previous labels in one walk, while the device works: the engine need not compare
    // these rows again after the pass (PassTotals.changedRows)
    const std::int32_t* from = s.hLabels;
    const std::int32_t* before = spec_.previousLabels + s.firstRow;
    std::int32_t* to = spec_.labels + s.firstRow;
    std::int64_t changed = 0;
    for (std::int64_t i = 0; i < s.rows; ++i) {
      to[i] = from[i];
      changed += from[i] != before[i];
    }
    streamed_.compared += s.rows;
    streamed_.changed += changed;
  } else {
    std::memcpy(spec_.labels + s.firstRow, s.hLabels, sizeof(int) * std::size_t(s.rows));
  }
  if (s.dist && spec_.distances)
    std::memcpy(spec_.distances + s.firstRow, s.hDist, sizeof(float) * std::size_t(s.rows));
  for (int i = 0; i < s.far; ++i)
    farthest_.offer(s.hTopDist[i], s.hTopRow[i], s.hTopValues + std::size_t(i) * shape_.d);
  s.pending = false;
}

// slot == nullptr: a resident chunk whose outputs go to the resident arrays.
// s: the stream of a streamed chunk (streams_.chunk when it overlaps the resident rows: its sums go to a partial).
void CudaBackend::computeChunk(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, ChunkSlot* slotp,
                               cudaStream_t s) {
  if (!s) s = streams_.compute;
  const bool part = slotp && s == streams_.chunk;
  centroids_.readyForCompute(streams_.compute);
  const RowValues values = rowValues(ops);
  // farthest candidates of streamed chunks now (their rows leave the device); resident rows' in finishPass
  const int far = slotp && fit_ && spec_.farthest > 0 ? farCandidates(spec_.farthest, rows) : 0;
  ChunkSlot dummy;
  ChunkSlot& slot = slotp ? *slotp : dummy;
  if (!slotp) {
    resident_.chunkOutputs(firstRow, slot);
  }
  if (far > 0) ensureFarBuffers(slot, far);
  // a chunk of the host tier whose rows keep their state (tier_pass.cu): the assignment writes their bounds
  const bool tierRows = slotp && tierChunks_;
  const std::int64_t tierRow = firstRow - tier_.firstRow();
  RowOps assigned = ops;
  if (tierRows) tier_.bounds().attach(assigned, tierRow);
  stageMark(0, s);
  // compute must not overwrite this slot's outputs before the previous D2H from them is done (drained).
  if (part) assignPiece(assigned, rows, slot.labels, overlap_.flags(), s, overlap_.flaggedCount());
  else assignPiece(assigned, rows, slot.labels, scratch_.flags);
  if (tierRows) {
    check(cudaMemcpyAsync(tier_.labels() + tierRow, slot.labels, sizeof(std::int32_t) * std::size_t(rows),
                          cudaMemcpyDeviceToDevice, s),
          "D2D");
    tier_.bounds().assignedRange(ops.rowSqNorm, tierRow, rows, s);
  }
  const bool wantDist = spec_.distances != nullptr;
  stageMark(1, s);
  // the rows' fp64 distances: a streamed chunk's for its farthest rows now; resident rows' are computed again by
  // finishPass in the rare pass that needs them (accumulate.cuh sumsDistances) when accumulate need not write them
  double* dist = slotp ? (far > 0 || !distancesFromSums(shape_.d) ? scratch_.dist64 : nullptr)
                       : (shape_.keepsResidentDistances() ? resident_.distances64() + firstRow : nullptr);
  if (exact_.summingThisPass()) {
    // no partials: integer statistics take the streams' additions in any order (exact_sums.cuh); finishPass waits for
    // the chunk stream before the totals. The sums read no distances: a streamed chunk's only for its
    // farthest candidates or the pass's distances, resident rows' on demand (farthest_rows.h offerResident).
    double* rowDist = slotp ? (far > 0 || wantDist ? scratch_.dist64 : nullptr)
                            : (wantDist ? resident_.distances64() + firstRow : nullptr);
    const RowsOf of = !slotp ? RowsOf::Resident : tierRows ? RowsOf::KeptTier : RowsOf::Streamed;
    exactRows(ops, firstRow, rows, slot.labels, of, rowDist, wantDist ? slot.dist32 : nullptr, s);
  } else if (part) {
    // Into partial b (a ring: wait until the compute stream folded the chunk that used it before), then folded on the
    // compute stream after everything queued there — the resident rows, the earlier chunks' folds: the totals get the
    // same additions in the same order as from accumulate() into them directly.
    const std::size_t b = overlap_.claim();
    // the ring came round before the resident rows were all queued: queue them (and the folds) now
    if (overlap_.ringCameRound() && steps_.pending()) pumpResident(true);
    overlap_.zero(b, fit_, s);
    accumulate(values, rows, shape_.d, shape_.k, slot.labels, centroids_.current(), shape_.cosine, dist,
               wantDist ? slot.dist32 : nullptr, fit_, overlap_.scratch(), overlap_.sums(b), overlap_.counts(b),
               overlap_.inertia(b), s);
    overlap_.markReady(b, s);
    if (steps_.pending()) overlap_.defer(b);  // after the resident rows, once they are queued
    else overlap_.fold(b, totals_, fit_, streams_.compute);
  } else {
    accumulate(values, rows, shape_.d, shape_.k, slot.labels, centroids_.current(), shape_.cosine, dist,
               wantDist ? slot.dist32 : nullptr, fit_, scratch_.accumulate, totals_.sums, totals_.counts,
               totals_.inertia, streams_.compute);
  }
  stageMark(2, s);
  if (far > 0)
    farRows(scratch_.dist64, values, rows, shape_.d, firstRow, spec_.farthest, scratch_.farScratch, slot.topDist,
            slot.topRow, slot.topValues, s);
  check(cudaGetLastError(), "chunk kernels");
  stageMark(3, s);
  check(cudaEventRecord(slot.computed, s), "cudaEventRecord");
  check(cudaStreamWaitEvent(streams_.d2h, slot.computed, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(slot.hLabels, slot.labels, sizeof(int) * rows, cudaMemcpyDeviceToHost, streams_.d2h), "D2H");
  if (wantDist)
    check(cudaMemcpyAsync(slot.hDist, slot.dist32, sizeof(float) * rows, cudaMemcpyDeviceToHost, streams_.d2h), "D2H");
  if (far > 0) {
    check(cudaMemcpyAsync(slot.hTopDist, slot.topDist, sizeof(double) * far, cudaMemcpyDeviceToHost, streams_.d2h),
          "D2H");
    check(cudaMemcpyAsync(slot.hTopRow, slot.topRow, sizeof(long long) * far, cudaMemcpyDeviceToHost, streams_.d2h),
          "D2H");
    check(cudaMemcpyAsync(slot.hTopValues, slot.topValues, sizeof(float) * std::size_t(far) * shape_.d,
                          cudaMemcpyDeviceToHost, streams_.d2h),
          "D2H");
  }
  check(cudaEventRecord(slot.outDone, streams_.d2h), "cudaEventRecord");
  rowsSeen_ += rows;
  if (!slotp) return;  // finishPass copies the resident outputs after the final sync
  if (streamed_.rows == 0) streamed_.first = firstRow;
  streamed_.rows += rows;
  // The next compute into this slot's labels must wait for this D2H: drain() on the host waits for it
  // before the slot is reused.
  slot.pending = true;
  slot.firstRow = firstRow;
  slot.rows = rows;
  slot.far = far;
  slot.dist = wantDist;
}

// A slot's farthest-row buffers for f candidates: every slot's grown (drained first, their staging is replaced).
void CudaBackend::ensureFarBuffers(ChunkSlot& s, int f) {
  if (slots_.holdsFar(s, f)) return;
  for (ChunkSlot& t : slots_) drain(t);
  slots_.growFar(f, shape_.d);
}

void CudaBackend::exactRows(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, const std::int32_t* labels,
                            RowsOf of, double* dist, float* dist32, cudaStream_t s) {
  const RowValues values = rowValues(ops);
  const bool sq = !shape_.cosine;  // cosine's inertia needs no Σ‖x‖² (exact_sums.cuh)
  if (of == RowsOf::KeptTier)  // added afresh in a pass that streams the tier (exact_statistics.h beginTier)
    exact_.addTierRows(values, rows, shape_.d, nullptr, labels, sq, s == streams_.chunk, s);
  else
    exact_.addRows(values, firstRow, rows, shape_.d, resident_.previousLabels(), labels, of == RowsOf::Resident, sq,
                   s == streams_.chunk, s);
  if (dist) sumsDistances(values, rows, shape_.d, centroids_.current(), labels, shape_.cosine, dist, dist32, s);
  check(cudaGetLastError(), "exact sums");
}

// Labels of `rows` rows (exact mode: margin test, candidates, fp64 recheck, with flagged-row scratch for at
// least `rows` rows: a chunk's, or ResidentRows::pieceFlags for a piece of resident rows), or exact mode over only the
// rows `listed` lists (their count *listedCount on the device: the rows the bounds left open, resident_bounds.h).
// On stream s with its own flagged-row counter (streams_.compute: totals_.flaggedCount; streams_.chunk: the overlap's).
void CudaBackend::assignPiece(const RowOps& ops, std::int64_t rows, std::int32_t* labels, const FlagScratch& f,
                              cudaStream_t s, unsigned* count, const std::int32_t* listed, const unsigned* listedCount) {
  if (!s) s = streams_.compute;
  if (!count) count = totals_.flaggedCount;
  check(cudaMemsetAsync(count, 0, 2 * sizeof(unsigned), s), "memset");
  if (listed) {
    assignListedRows(shape_.kernel, ops, rows, shape_.d, centroids_.ops(), shape_.k, listed, listedCount, labels,
                     f.flagged, count, f.thr, s);
  } else {
    // exact mode: candCount (candidateRows fills it later on this stream) holds the screened rows until then
    assignRows(shape_.kernel, ops, rows, shape_.d, centroids_.ops(), shape_.k, shape_.memory.op, labels, f.flagged,
               count, f.thr, screenThisPass_ ? f.candCount : nullptr, count + 1, s);
  }
  check(cudaGetLastError(), "assignRows");
  if (shape_.memory.op == OpKind::F16x3) {
    candidateRows(shape_.kernel, ops, rows, shape_.d, centroids_.ops(), shape_.k, f.flagged, count, f.thr, f.candCount,
                  f.cand, s);
    recheckRows(rowValues(ops), shape_.d, centroids_.current(), shape_.k, f.flagged, count, rows, f.candCount, f.cand,
                labels, s);
    totals_.addFlagged(s, count);
  }
}

}  // namespace cuda_backend
}  // namespace kmfleet
