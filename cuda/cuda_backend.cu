// The CUDA Backend (cuda_backend.h): construction (the memory plan, the settings of EngineConfig.cuda), the pass's
// begin, finish (flags, totals, changed resident labels, farthest rows, statistics) and abort, makeCudaBackend.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_backend.h"
#include "cuda_bridge.h"
#include "kernels/label_changes.cuh"

namespace kmfleet {
namespace cuda_backend {

// On cfg.device, made current by the caller (makeCudaBackend).
CudaBackend::CudaBackend(const EngineConfig& cfg, ThreadPool* pool)
    : shape_(BackendShape::onCurrentDevice(cfg)), pool_(pool), stages_(cfg.stats), centroids_(shape_), resident_(shape_), steps_(shape_), overlap_(shape_), farthest_(shape_) {
  screenPolicy_ = ExactScreenPolicy(shape_.dp);
  try {
    allocate();
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() {
  DeviceScope on(shape_.device, std::nothrow);
  cudaDeviceSynchronize();
  release();
}

void CudaBackend::beginPass(const PassSpec& spec) {
  DeviceScope on(shape_.device);
  spec_ = spec;
  fit_ = spec.mode == PassMode::Fit;
  rowsSeen_ = 0;
  resident_.beginPass();
  overlap_.beginPass();
  steps_.clear();
  farthest_.begin(spec.farthest, spec.labels);
  // the engine's centroids are the `next` of our last updateOnDevice, still current, with their operands queued there:
  // nothing to take or prepare
  if (!(spec.centroidsFromUpdate && centroids_.holdsLastUpdate())) centroids_.upload(spec.centroids, fit_, streams_.compute);
  sumsKeptForUpdate_ = false;
  totals_.zero(shape_, streams_.compute);
  // Exact sums (exact_sums.cuh): a fit pass moves the resident rows' statistics by their changed labels when the last
  // pass left them for the resident rows' previous labels, else adds them afresh; distances asked for (an assign pass's job) take
  // accumulate(), which computes them anyway.
  exact_.beginPass(shape_.memory.exactSums && fit_ && !spec.distances, resident_.previousLabelsHeld() && resident_.held() > 0, streams_.compute);
  screenThisPass_ = shape_.memory.op == OpKind::F16x3 && shape_.settings.exactScreen && screenPolicy_.screen();
  const RelativeKeys keys = shape_.settings.relativeKeys;
  screenRelativeThisPass_ = screenThisPass_ && screenRefsWritten_ && keys != RelativeKeys::Off &&
                            (keys == RelativeKeys::Always || screenPolicy_.relative());
  if (centroids_.muReady() && !centroids_.operandsQueued()) centroids_.prepareOperands(streams_.compute);
}

PassTotals CudaBackend::finishPass() {
  DeviceScope on(shape_.device);
  if (overlap_.active()) pumpResident(true);  // the rest of the resident rows, then the streamed chunks' folds
  // Resident rows whose label changed since the previous pass that computed them (their labels are still on the
  // device): counted here instead of by the engine over the host arrays.
  const bool countChanges = resident_.countsChanges();
  if (countChanges) resident_.queueChangeCount(streams_.compute);
  if (exact_.summingThisPass()) exact_.finishTotals(streams_.chunk, streams_.compute, centroids_.current(), shape_.cosine, totals_.sums, totals_.counts, totals_.inertia);
  if (resident_.outputsPending()) resident_.copyOutputs(spec_.labels, spec_.distances, pool_);
  // The flags, counts and inertia come down behind the pass's last kernels, covered by one wait on the compute stream
  // (a wait each left the GPU idle for a round trip each). The chunk stream's work — streamed chunks' flags and bad
  // rows — is done once the host has seen it finish; everything else, the streamed chunks' folds included, is on the
  // compute stream.
  check(cudaStreamSynchronize(streams_.chunk), "compute");
  check(cudaMemcpyAsync(totals_.hostFlags, totals_.rowFlags, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, streams_.compute), "D2H");
  check(cudaMemcpyAsync(totals_.hostFlags + 3, totals_.flaggedTotal, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, streams_.compute),
        "D2H");
  if (countChanges)
    check(cudaMemcpyAsync(totals_.hostFlags + 5, resident_.changedCount(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, streams_.compute),
          "D2H");
  const bool totalsQueued = ring_.queue({totals_.counts, totals_.inertia}, shape_.k, streams_.compute);
  check(cudaStreamSynchronize(streams_.compute), "compute");
  check(cudaStreamSynchronize(streams_.d2h), "D2H");
  for (ChunkSlot& s : slots_) drain(s);
  resident_.outputsTaken();
  const unsigned long long bad[3] = {totals_.hostFlags[0], totals_.hostFlags[1], totals_.hostFlags[2]};
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
  PassTotals t;
  ring_.take(totalsQueued, 0, totals_.counts, shape_.k, t.counts, streams_.compute);
  ring_.take(totalsQueued, 1, totals_.inertia, shape_.k, t.inertia, streams_.compute);
  const bool anyEmpty = std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end();
  // the sums stay here for updateOnDevice unless the host must re-seed an empty cluster
  sumsKeptForUpdate_ = fit_ && spec_.keepSums && !anyEmpty;
  t.sumsKept = sumsKeptForUpdate_;
  if (fit_ && !sumsKeptForUpdate_) ring_.download(totals_.sums, std::size_t(shape_.k) * shape_.d, t.sums, streams_.compute);
  const unsigned long long flagged = totals_.hostFlags[3];
  if (shape_.memory.op == OpKind::F16x3)
    screenPolicy_.record(rowsSeen_, static_cast<std::int64_t>(totals_.hostFlags[4]), screenRelativeThisPass_);
  screenRefsWritten_ = screenRefsWritten_ || (screenThisPass_ && resident_.all().screenRef);
  // backend.h: the farthest rows only when a cluster came out empty (the engine reads them only then). Streamed
  // chunks offered theirs as they drained (their rows are gone now); the resident rows' come from the fp64
  // distances kept on the device, chunk by chunk as they were fed: the same candidates as computed eagerly.
  if (fit_ && spec_.farthest > 0 && anyEmpty) {
    if (resident_.ranThisPass())
      farthest_.offerResident(rowValues(resident_.all()), resident_.labels(), resident_.distances64(), resident_.held(),
                              !shape_.keepsResidentDistances() || exact_.summingThisPass(), centroids_.current(),
                              scratch_.farScratch, stages_, streams_.compute, streams_.d2h);
    t.farthest = farthest_.take(rowValues(resident_.all()), streams_.compute);
  }
  farthest_.clear();
  t.rowsSeen = rowsSeen_;
  if (countChanges) {
    t.changedRows = resident_.held();
    t.changed = static_cast<std::int64_t>(totals_.hostFlags[5]);
  }
  exact_.recordChangedShare(countChanges && resident_.held() > 0 ? double(t.changed) / double(resident_.held()) : 0);
  if (stages_.enabled()) {
    const std::array<float, 3> ms = stages_.stageMilliseconds();
    std::fprintf(stderr,
                 "[kmfleet cuda] pass rows=%lld resident=%lld chunks=%zu recheck=%llu (%.4f%%) screen=%s%s passed on=%.2f%% "
                 "device ms: assign+recheck=%.3f sums+distances=%.3f farthest=%.3f\n",
                 static_cast<long long>(rowsSeen_), static_cast<long long>(resident_.held()), stages_.chunks(), flagged,
                 rowsSeen_ ? 100.0 * double(flagged) / double(rowsSeen_) : 0.0, screenThisPass_ ? "on" : "off",
                 screenRelativeThisPass_ ? " (relative)" : "",
                 rowsSeen_ ? 100.0 * double(totals_.hostFlags[4]) / double(rowsSeen_) : 0.0, ms[0], ms[1], ms[2]);
  }
  stages_.reset();
  // This pass's resident labels become the previous ones; the resident statistics then hold the rows under them.
  const bool residentRan = resident_.ranThisPass();
  resident_.finishPass();
  exact_.finishPass(residentRan);
  return t;
}

DeviceUpdate CudaBackend::updateOnDevice(bool dataVariance) {
  DeviceScope on(shape_.device);
  if (!sumsKeptForUpdate_)
    throw EngineError(ErrorCode::InvalidArgument, "updateOnDevice needs a finished fit pass that kept its sums");
  sumsKeptForUpdate_ = false;
  return centroids_.update(totals_, static_cast<double>(rowsSeen_), dataVariance, streams_, ring_);
}

void CudaBackend::copyUpdatedCentroids(float* dst) {
  DeviceScope on(shape_.device);  // the caller's thread may be another than the pass's
  centroids_.copyUpdated(dst, pool_);
}

void CudaBackend::abortPass() noexcept {
  DeviceScope on(shape_.device, std::nothrow);
  streams_.synchronizeQuietly();
  overlap_.abortPass();
  sumsKeptForUpdate_ = false;
  steps_.clear();
  for (ChunkSlot& s : slots_) s.pending = false;
  resident_.abortPass();  // resident rows are only held once a whole pass retained them all
  farthest_.clear();
  stages_.reset();
  exact_.abortPass();  // the next fit pass adds afresh
}

}  // namespace cuda_backend

std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config, ThreadPool* pool) {
  try {
    cuda_backend::requireDevice(config.device);
    cuda_backend::DeviceScope on(config.device);
    return std::make_unique<cuda_backend::CudaBackend>(config, pool);
  } catch (const EngineError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw EngineError(ErrorCode::OutOfMemory, "CUDA: out of memory while allocating the backend's buffers");
  }
}

}  // namespace kmfleet
