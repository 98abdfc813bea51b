// The CUDA Backend (cuda_backend.h): construction (the memory plan, the settings of EngineConfig.cuda), the pass's
// begin, finish (flags, totals, changed resident labels, farthest rows, statistics) and abort, makeCudaBackend.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_backend.h"
#include "cuda_bridge.h"
#include "kernels/label_changes.cuh"
#include "multi_device_backend.h"

namespace kmfleet {
namespace cuda_backend {

CudaBackend::CudaBackend(const EngineConfig& cfg, ThreadPool* pool, std::int64_t rowOffset)
    : cfg_(cfg), rowOffset_(rowOffset), pool_(pool) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (cfg.device < 0 || cfg.device >= count)
    throw EngineError(ErrorCode::InvalidArgument,
                      "CUDA device " + std::to_string(cfg.device) + " does not exist (" + std::to_string(count) +
                          " device(s))");
  check(cudaSetDevice(cfg.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, cfg.device), "cudaGetDeviceProperties");
  std::size_t freeB = 0, totalB = 0;
  check(cudaMemGetInfo(&freeB, &totalB), "cudaMemGetInfo");
  mp_ = planMemory(cfg, freeB);
  n_ = cfg.rows;
  d_ = static_cast<int>(cfg.dims);
  k_ = static_cast<int>(cfg.k);
  dp_ = padDims(d_);
  screenPolicy_ = ExactScreenPolicy(dp_);
  kp_ = padCentroids(k_);
  rowBytes_ = static_cast<std::size_t>(d_) * dtypeBytes(cfg.dtype);
  cosine_ = cfg.metric == Metric::Cosine;
  rows16_ = keepsRows16(inType(cfg.dtype), cosine_);
  stats_ = cfg.stats;
  kernel_ = AssignKernel{cfg.cuda.portableKernel, cfg.cuda.sharedMemoryLimit};
  residentAhead_ = std::max(1, cfg.cuda.residentAhead);
  plan_.backend = BackendKind::Cuda;
  // the device and the assignment kernel its rows run on (a portable build, or CudaSettings.portableKernel, says so)
  plan_.device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                 assignKernelName(kernel_, d_) + ")";
  plan_.precision = mp_.precision;
  plan_.chunkRows = mp_.chunkRows;
  plan_.buffers = mp_.buffers;
  plan_.residentRows = mp_.residentRows;
  plan_.rowBytes = rowBytes_;
  try {
    allocate();
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(cfg_.device);
  cudaDeviceSynchronize();
  release();
}

void CudaBackend::beginPass(const PassSpec& spec) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");
  spec_ = spec;
  fit_ = spec.mode == PassMode::Fit;
  rowsSeen_ = 0;
  retainedThisPass_ = 0;
  overlap_ = false;
  partNext_ = 0;
  resStep_ = resSteps_ = 0;
  pendingFolds_.clear();
  far_.clear();
  // the engine's centroids are the `next` of our last updateOnDevice, still in cf_, with their operands queued there:
  // nothing to take or prepare
  if (!(spec.centroidsFromUpdate && cfFromUpdate_)) {
    uploadCentroids(spec.centroids);
    centroidsReady_ = false;
  }
  sumsKept_ = false;
  check(cudaMemsetAsync(sums_, 0, sizeof(double) * std::size_t(k_) * d_, compute_), "memset");
  check(cudaMemsetAsync(counts_, 0, sizeof(long long) * k_, compute_), "memset");
  check(cudaMemsetAsync(inertia_, 0, sizeof(double) * k_, compute_), "memset");
  check(cudaMemsetAsync(rowFlags_, 0xff, 3 * sizeof(unsigned long long), compute_), "memset");
  check(cudaMemsetAsync(flaggedTotal_, 0, 2 * sizeof(unsigned long long), compute_), "memset");
  // Exact sums (exact_sums.cuh) for every pass of such a plan, assign passes too, so that each pass's totals are the
  // same bits however its rows were split (chunks, residency, devices): the resident rows' statistics are moved by
  // their changed labels when the last pass left them for resPrevLabels_, else added afresh.
  exact_.beginPass(mp_.exactSums, prevLabelsValid_ && residentHeld_ > 0, compute_);
  screenThisPass_ = mp_.op == OpKind::F16x3 && cfg_.cuda.exactScreen && screenPolicy_.screen();
  const RelativeKeys keys = cfg_.cuda.relativeKeys;
  screenRelativeThisPass_ = screenThisPass_ && screenRefsWritten_ && keys != RelativeKeys::Off &&
                            (keys == RelativeKeys::Always || screenPolicy_.relative());
  if (muReady_ && !centroidsReady_) prepareCentroidOps();
}

PassTotals CudaBackend::finishPass(const std::vector<CudaBackend*>& lanes) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");
  if (!lanes.empty() && !exact_.summingThisPass())
    throw EngineError(ErrorCode::InvalidArgument, "lanes on several devices need exact statistics");
  std::vector<ExactStatistics::Peer> peers;
  for (const CudaBackend* lane : lanes) peers.push_back({lane->exact_.passStatistics(), lane->cfg_.device});
  if (overlap_) pumpResident(true);  // the rest of the resident rows, then the streamed chunks' folds
  // Resident rows whose label changed since the previous pass that computed them (their labels are still on the
  // device): counted here instead of by the engine over the host arrays.
  const bool countChanges = residentRan_ && prevLabelsValid_;
  if (countChanges) {
    check(cudaMemsetAsync(changedCount_, 0, sizeof(unsigned long long), compute_), "memset");
    countLabelChanges(resLabels_, resPrevLabels_, residentHeld_, changedCount_, compute_);
    check(cudaGetLastError(), "countLabelChanges");
  }
  if (exact_.summingThisPass())
    exact_.finishTotals(chunkStream_, compute_, cf_, cosine_, sums_, counts_, inertia_, peers);
  if (residentPending_) copyResidentOutputs();
  // The flags, counts and inertia come down behind the pass's last kernels, covered by one wait on the compute stream
  // (a wait each left the GPU idle for a round trip each). The chunk stream's work — streamed chunks' flags and bad
  // rows — is done once the host has seen it finish; everything else, the streamed chunks' folds included, is on the
  // compute stream.
  check(cudaStreamSynchronize(chunkStream_), "compute");
  check(cudaMemcpyAsync(hostFlags_, rowFlags_, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_), "D2H");
  check(cudaMemcpyAsync(hostFlags_ + 3, flaggedTotal_, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_),
        "D2H");
  if (countChanges)
    check(cudaMemcpyAsync(hostFlags_ + 5, changedCount_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_),
          "D2H");
  const bool totalsQueued = queueDown({counts_, inertia_});
  check(cudaStreamSynchronize(compute_), "compute");
  check(cudaStreamSynchronize(d2h_), "D2H");
  for (ChunkSlot& s : slots_) drain(s);
  residentPending_ = false;
  // the job's rows: a lane's local row + its offset
  const unsigned long long none = ~0ULL, offset = static_cast<unsigned long long>(rowOffset_);
  const unsigned long long bad[3] = {hostFlags_[0] == none ? none : hostFlags_[0] + offset,
                                     hostFlags_[1] == none ? none : hostFlags_[1] + offset,
                                     hostFlags_[2] == none ? none : hostFlags_[2] + offset};
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
  takeDown(totalsQueued, 0, counts_, t.counts);
  takeDown(totalsQueued, 1, inertia_, t.inertia);
  const bool anyEmpty = std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end();
  // the sums stay here for updateOnDevice unless the host must re-seed an empty cluster
  sumsKept_ = fit_ && spec_.keepSums && !anyEmpty;
  t.sumsKept = sumsKept_;
  if (fit_ && !sumsKept_) download(sums_, std::size_t(k_) * d_, t.sums);
  const unsigned long long flagged = hostFlags_[3];
  if (mp_.op == OpKind::F16x3)
    screenPolicy_.record(rowsSeen_, static_cast<std::int64_t>(hostFlags_[4]), screenRelativeThisPass_);
  screenRefsWritten_ = screenRefsWritten_ || (screenThisPass_ && resident_.screenRef);
  // backend.h: the farthest rows only when a cluster came out empty (the engine reads them only then). Streamed
  // chunks offered theirs as they drained (their rows are gone now); the resident rows' come from the fp64
  // distances kept on the device, chunk by chunk as they were fed: the same candidates as computed eagerly.
  if (fit_ && spec_.farthest > 0 && anyEmpty) {
    if (residentRan_) residentFarthest();
    std::stable_sort(far_.begin(), far_.end(), [](const FarRow& a, const FarRow& b) {
      return a.distance > b.distance || (a.distance == b.distance && a.row < b.row);
    });
    if (far_.size() > std::size_t(spec_.farthest)) far_.resize(spec_.farthest);
    fillResidentValues();
    for (FarRow& f : far_) f.row += rowOffset_;
    t.farthest = std::move(far_);
  }
  far_.clear();
  t.rowsSeen = rowsSeen_;
  if (countChanges) {
    t.changedRows = residentHeld_;
    t.changed = static_cast<std::int64_t>(hostFlags_[5]);
  }
  exact_.recordChangedShare(countChanges && residentHeld_ > 0 ? double(t.changed) / double(residentHeld_) : 0);
  if (stats_) {
    float ms[3] = {0, 0, 0};
    for (std::size_t i = 0; i < stagesUsed_; ++i)
      for (int j = 0; j < 3; ++j) {
        float t = 0;
        check(cudaEventElapsedTime(&t, stageEv_[i][j], stageEv_[i][j + 1]), "cudaEventElapsedTime");
        ms[j] += t;
      }
    std::fprintf(stderr,
                 "[kmfleet cuda] pass rows=%lld resident=%lld chunks=%zu recheck=%llu (%.4f%%) screen=%s%s passed on=%.2f%% "
                 "device ms: assign+recheck=%.3f sums+distances=%.3f farthest=%.3f\n",
                 static_cast<long long>(rowsSeen_), static_cast<long long>(residentHeld_), stagesUsed_, flagged,
                 rowsSeen_ ? 100.0 * double(flagged) / double(rowsSeen_) : 0.0, screenThisPass_ ? "on" : "off",
                 screenRelativeThisPass_ ? " (relative)" : "",
                 rowsSeen_ ? 100.0 * double(hostFlags_[4]) / double(rowsSeen_) : 0.0, ms[0], ms[1], ms[2]);
  }
  stagesUsed_ = 0;
  // This pass's resident labels become the previous ones. A pass that fed the resident rows as streamed chunks
  // (or retained them) gave the engine labels the device does not hold: nothing to compare with next time.
  if (residentRan_) std::swap(resLabels_, resPrevLabels_);
  prevLabelsValid_ = residentRan_;
  exact_.finishPass(residentRan_);  // its resident statistics now hold the resident rows under resPrevLabels_
  residentRan_ = false;
  if (residentHeld_ == 0 && retainedThisPass_ == mp_.residentRows) residentHeld_ = mp_.residentRows;
  return t;
}

void CudaBackend::abortPass() noexcept {
  cudaSetDevice(cfg_.device);
  cudaStreamSynchronize(copy_);
  cudaStreamSynchronize(chunkStream_);
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(d2h_);
  cudaGetLastError();
  overlap_ = false;
  sumsKept_ = false;
  resStep_ = resSteps_ = 0;
  pendingFolds_.clear();
  for (ChunkSlot& s : slots_) s.pending = false;
  residentPending_ = false;
  residentRan_ = false;
  far_.clear();
  stagesUsed_ = 0;
  retainedThisPass_ = 0;  // resident rows are only held once a whole pass retained them all
  exact_.abortPass();  // the next fit pass adds afresh
}

// EngineConfig.stats (KMFLEET_ENGINE_STATS): CUDA events around each chunk's stages (assign + recheck, sums + distances, farthest),
// summed and printed by finishPass. Nothing recorded otherwise.
void CudaBackend::stageMark(int i, cudaStream_t s) {
  if (!stats_) return;
  if (!s) s = compute_;
  if (i == 0 && stagesUsed_ == stageEv_.size()) {
    stageEv_.emplace_back();
    for (cudaEvent_t& e : stageEv_.back()) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  check(cudaEventRecord(stageEv_[stagesUsed_][i], s), "cudaEventRecord");
  if (i == 3) ++stagesUsed_;
}

}  // namespace cuda_backend

std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config, ThreadPool* pool) {
  try {
    if (config.devices.size() > 1) return std::make_unique<cuda_backend::MultiDeviceBackend>(config, pool);
    return std::make_unique<cuda_backend::CudaBackend>(config, pool);
  } catch (const EngineError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw EngineError(ErrorCode::OutOfMemory, "CUDA: out of memory while allocating the backend's buffers");
  }
}

}  // namespace kmfleet
