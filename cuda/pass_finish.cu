// The end of a CUDA pass (cuda_backend.h finishPass), as named steps in the order they run. The device's part comes
// first and leaves the pass's totals on the device: the resident work still to queue, the changed-label count, the
// streamed chunks' exact statistics joined with the resident rows' and — the first lane of a job on several devices —
// the other lanes' (multi_device_backend.h), rounded once to fp64; then the host's part: the resident outputs into
// the engine's arrays, the one wait on the flags and totals, the bad-row checks, the totals, the farthest rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <utility>

#include "cuda_backend.h"

namespace kmfleet {
namespace cuda_backend {

PassTotals CudaBackend::finishPass(const LaneStatistics& lanes) {
  DeviceScope on(shape_.device);
  queueResidentRest();
  const bool countChanges = queueChangedLabelCount();
  if (lanes) {  // the first lane of several devices: its outputs while the others finish, then their statistics
    if (!exact_.summingThisPass())
      throw EngineError(ErrorCode::InvalidArgument, "lanes on several devices need exact statistics");
    totalExactStatistics();
    takeResidentOutputs();
    exact_.addPeers(lanes(), streams_.compute);
    exactTotalsToFp64();
  } else {
    if (exact_.summingThisPass()) {
      totalExactStatistics();
      exactTotalsToFp64();
    }
    takeResidentOutputs();
  }
  const bool totalsQueued = waitForFlagsAndTotals(countChanges);
  throwOnBadRows();
  PassTotals t = takeTotals(totalsQueued);
  const bool anyEmpty = std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end();
  takeLabelChanges(t, anyEmpty);
  recordScreen();
  farthestDeferred_ = deferFarthest_ && fit_ && spec_.farthest > 0 && anyEmpty;
  deferredResidentRan_ = resident_.ranThisPass();
  if (fit_ && spec_.farthest > 0 && anyEmpty && !deferFarthest_) t.farthest = farthestRows();
  if (!farthestDeferred_) farthest_.clear();
  closePass(t, countChanges);
  return t;
}

// The farthest rows of the last pass, which deferred them: the streamed chunks' candidates kept since, the resident
// rows' from their labels of that pass (the previous ones since closePass) and its centroids (still current).
std::vector<FarRow> CudaBackend::farthestOfLastPass() {
  DeviceScope on(shape_.device);
  if (!farthestDeferred_) return {};
  farthestDeferred_ = false;
  if (deferredResidentRan_)
    farthest_.offerResident(rowValues(resident_.all()), resident_.previousLabels(), resident_.distances64(),
                            resident_.held(), true, centroids_.current(), scratch_.farScratch, stages_,
                            streams_.compute, streams_.d2h);
  std::vector<FarRow> rows = farthest_.take(rowValues(resident_.all()), streams_.compute);
  farthest_.clear();
  for (FarRow& f : rows) f.row += rowOffset_;
  return rows;
}

// An overlapped pass: the rest of the resident rows, then the streamed chunks' folds behind them.
void CudaBackend::queueResidentRest() {
  if (overlap_.active()) pumpResident(true);
}

// Resident rows whose label changed since the previous pass that computed them (their labels are still on the
// device): counted here instead of by the engine over the host arrays. Whether this pass counts them.
bool CudaBackend::queueChangedLabelCount() {
  const bool countChanges = resident_.countsChanges();
  if (countChanges) resident_.queueChangeCount(streams_.compute);
  return countChanges;
}

// The chunk stream's streamed chunks joined on the compute stream, and the pass's exact statistics — theirs and the
// resident rows' — totalled on the device (integers: any order of additions gives the same bits).
void CudaBackend::totalExactStatistics() { exact_.totalOnDevice(streams_.chunk, streams_.compute); }

// The exact totals rounded once to the fp64 sums, counts and inertia (exactFinish).
void CudaBackend::exactTotalsToFp64() {
  exact_.toFp64(streams_.compute, centroids_.current(), shape_.cosine, totals_.sums, totals_.counts, totals_.inertia);
}

// The resident rows' labels (and distances) into the engine's arrays as their chunks come down.
void CudaBackend::takeResidentOutputs() {
  if (resident_.outputsPending()) resident_.copyOutputs(spec_.labels, spec_.distances, pool_);
}

// The flags, counts and inertia come down behind the pass's last kernels, covered by one wait on the compute stream
// (a wait each left the GPU idle for a round trip each). The chunk stream's work — streamed chunks' flags and bad
// rows — is done once the host has seen it finish; everything else, the streamed chunks' folds included, is on the
// compute stream. Then every slot's outputs are in the engine's arrays. Whether the counts and inertia came down
// with the flags (else takeTotals downloads them).
bool CudaBackend::waitForFlagsAndTotals(bool countChanges) {
  const cudaStream_t s = streams_.compute;
  const std::size_t word = sizeof(unsigned long long);
  check(cudaStreamSynchronize(streams_.chunk), "compute");
  check(cudaMemcpyAsync(totals_.hostFlags, totals_.rowFlags, 3 * word, cudaMemcpyDeviceToHost, s), "D2H");
  check(cudaMemcpyAsync(totals_.hostFlags + 3, totals_.flaggedTotal, 2 * word, cudaMemcpyDeviceToHost, s), "D2H");
  if (countChanges)
    check(cudaMemcpyAsync(totals_.hostFlags + 5, resident_.changedCount(), word, cudaMemcpyDeviceToHost, s), "D2H");
  bounds_.queueOpenCount(s);
  const bool totalsQueued = ring_.queue({totals_.counts, totals_.inertia}, shape_.k, s);
  check(cudaStreamSynchronize(s), "compute");
  check(cudaStreamSynchronize(streams_.d2h), "D2H");
  for (ChunkSlot& slot : slots_) drain(slot);
  resident_.outputsTaken();
  return totalsQueued;
}

// The first bad row of each kind prepareRows found, if any: the pass fails naming it.
void CudaBackend::throwOnBadRows() const {
  // the job's rows: a lane's own row + its offset
  const unsigned long long none = ~0ULL, offset = static_cast<unsigned long long>(rowOffset_);
  const auto job = [&](unsigned long long r) { return r == none ? none : r + offset; };
  const unsigned long long bad[3] = {job(totals_.hostFlags[0]), job(totals_.hostFlags[1]), job(totals_.hostFlags[2])};
  if (bad[0] != ~0ULL)
    throw EngineError(ErrorCode::NonFiniteInput, "non-finite value in row " + std::to_string(bad[0]),
                      static_cast<std::int64_t>(bad[0]));
  if (bad[1] != ~0ULL)
    throw EngineError(ErrorCode::InvalidArgument,
                      "row " + std::to_string(bad[1]) + " has zero norm (cosine needs non-zero rows)");
  if (bad[2] != ~0ULL)
    throw EngineError(ErrorCode::InvalidArgument,
                      "row " + std::to_string(bad[2]) +
                          " has a value of magnitude 2^64 or more: beyond the CUDA backend's exact sums (backend cpu "
                          "takes it)");
}

// A pass that reports its resident labels as changes: their list down, or the labels whole into the engine's array
// after all when more rows changed than it holds or a cluster came out empty (the farthest rows take their labels
// from that array).
void CudaBackend::takeLabelChanges(PassTotals& t, bool anyEmpty) {
  if (!resident_.reportsChanges()) return;
  if (!anyEmpty && resident_.takeChanges(totals_.hostFlags[5], t.labelChanges, streams_.compute)) {
    t.labelsAsChanges = true;
    return;
  }
  const std::int64_t C = shape_.memory.chunkRows;
  resident_.download(0, (resident_.held() + C - 1) / C, false, streams_.compute, streams_.d2h);
  resident_.copyOutputs(spec_.labels, nullptr, pool_);
}

// Counts and inertia; the sums too unless they stay on the device for updateOnDevice (not when the host must re-seed
// an empty cluster).
PassTotals CudaBackend::takeTotals(bool totalsQueued) {
  PassTotals t;
  ring_.take(totalsQueued, 0, totals_.counts, shape_.k, t.counts, streams_.compute);
  ring_.take(totalsQueued, 1, totals_.inertia, shape_.k, t.inertia, streams_.compute);
  const bool anyEmpty = std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end();
  sumsKeptForUpdate_ = fit_ && spec_.keepSums && !anyEmpty;
  t.sumsKept = sumsKeptForUpdate_;
  if (fit_ && !sumsKeptForUpdate_)
    ring_.download(totals_.sums, std::size_t(shape_.k) * shape_.d, t.sums, streams_.compute);
  return t;
}

// The exact screen's record of this pass (the policy decides the next passes from it); a pass that assigned only the
// rows its bounds left open ran no screen.
void CudaBackend::recordScreen() {
  if (shape_.memory.op == OpKind::F16x3 && !bounds_.listedThisPass())
    screenPolicy_.record(rowsSeen_, static_cast<std::int64_t>(totals_.hostFlags[4]), screenRelativeThisPass_);
  screenRefsWritten_ = screenRefsWritten_ || (screenThisPass_ && resident_.all().screenRef);
}

// backend.h: the farthest rows only when a cluster came out empty (the engine reads them only then). Streamed chunks
// offered theirs as they drained (their rows are gone now); the resident rows' come from the fp64 distances kept on
// the device, chunk by chunk as they were fed: the same candidates as computed eagerly.
std::vector<FarRow> CudaBackend::farthestRows() {
  if (tier_.skippedThisPass()) offerTierFarthest();
  if (resident_.ranThisPass())
    farthest_.offerResident(rowValues(resident_.all()), resident_.labels(), resident_.distances64(), resident_.held(),
                            !shape_.keepsResidentDistances() || exact_.summingThisPass(), centroids_.current(),
                            scratch_.farScratch, stages_, streams_.compute, streams_.d2h);
  std::vector<FarRow> rows = farthest_.take(rowValues(resident_.all()), streams_.compute);
  for (FarRow& f : rows) f.row += rowOffset_;
  return rows;
}

// Rows seen and changed labels into t, the per-pass statistics (EngineConfig.stats); this pass's resident labels
// become the previous ones, and the resident statistics then hold the rows under them.
void CudaBackend::closePass(PassTotals& t, bool countChanges) {
  t.rowsSeen = rowsSeen_;
  if (countChanges) {
    t.changedRows = resident_.held();
    t.changed = static_cast<std::int64_t>(totals_.hostFlags[5]);
  }
  // the streamed chunks, compared as they were drained: they follow the rows compared so far (feeds are in row order)
  if (streamed_.rows > 0 && streamed_.compared == streamed_.rows && streamed_.first == t.changedRows) {
    t.changedRows += streamed_.rows;
    t.changed += streamed_.changed;
  }
  const bool counted = countChanges && resident_.held() > 0;
  const double changedShare = counted ? double(t.changed) / double(resident_.held()) : 0;
  exact_.recordChangedShare(changedShare);
  resident_.recordChangedShare(counted ? changedShare : 1);  // not counted: no reason to expect few changes
  const bool listed = bounds_.listedThisPass();
  t.rowsSettled = bounds_.finishPass() + tier_.finishPass();
  tierSource_ = nullptr;
  if (stages_.enabled()) {
    const unsigned long long flagged = totals_.hostFlags[3];
    const std::array<float, 3> ms = stages_.stageMilliseconds();
    std::fprintf(stderr,
                 "[kmfleet cuda] pass rows=%lld resident=%lld chunks=%zu recheck=%llu (%.4f%%) settled=%.2f%% near=%.2f%% "
                 "screen=%s%s passed on=%.2f%% device ms: assign+recheck=%.3f sums+distances=%.3f farthest=%.3f\n",
                 static_cast<long long>(rowsSeen_), static_cast<long long>(resident_.held()), stages_.chunks(), flagged,
                 rowsSeen_ ? 100.0 * double(flagged) / double(rowsSeen_) : 0.0,
                 rowsSeen_ ? 100.0 * double(t.rowsSettled) / double(rowsSeen_) : 0.0,
                 rowsSeen_ && listed ? 100.0 * double(bounds_.lastNearRows()) / double(rowsSeen_) : 0.0,
                 listed ? "bounds" : screenThisPass_ ? "on" : "off",
                 screenRelativeThisPass_ ? " (relative)" : "",
                 rowsSeen_ ? 100.0 * double(totals_.hostFlags[4]) / double(rowsSeen_) : 0.0, ms[0], ms[1], ms[2]);
  }
  stages_.reset();
  const bool residentRan = resident_.ranThisPass();
  resident_.finishPass();
  exact_.finishPass(residentRan);
}

}  // namespace cuda_backend
}  // namespace kmfleet
