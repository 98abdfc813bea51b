// The CUDA Backend (cuda_backend.h): construction, the pass's begin and abort (its finish: pass_finish.cu), the device
// update, makeCudaBackend.
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
#include "multi_device_backend.h"

namespace kmfleet {
namespace cuda_backend {

// On cfg.device, made current by the caller (makeCudaBackend).
CudaBackend::CudaBackend(const EngineConfig& cfg, ThreadPool* pool, std::int64_t rowOffset)
    : shape_(BackendShape::onCurrentDevice(cfg)),
      rowOffset_(rowOffset),
      pool_(pool),
      stages_(cfg.stats),
      centroids_(shape_),
      resident_(shape_),
      bounds_(shape_),
      tier_(shape_),
      steps_(shape_),
      overlap_(shape_),
      farthest_(shape_) {
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
  streamed_ = StreamedLabels();
  resident_.beginPass();
  tier_.startPass();
  tierSource_ = nullptr;
  tierChunks_ = false;
  overlap_.beginPass();
  steps_.clear();
  farthest_.begin(spec.farthest, spec.labels);
  farthestDeferred_ = false;
  // the engine's centroids are the `next` of our last updateOnDevice, still current, with their operands queued there:
  // nothing to take or prepare
  if (centroidsFrom_) {
    centroids_.copyFromPeer(centroidsFrom_->centroids_, centroidsFrom_->device(), streams_.compute);
    centroidsFrom_ = nullptr;
  } else if (!(spec.centroidsFromUpdate && centroids_.holdsLastUpdate())) {
    centroids_.upload(spec.centroids, fit_, streams_.compute);
  }
  sumsKeptForUpdate_ = false;
  totals_.zero(shape_, streams_.compute);
  // Exact sums (exact_sums.cuh) for every pass of such a plan, assign passes too, so that each pass's totals are the
  // same bits however its rows were split (chunks, residency, devices): the resident rows' statistics are moved by
  // their changed labels when the last pass left them for their previous labels, else added afresh.
  exact_.beginPass(shape_.memory.exactSums, resident_.previousLabelsHeld() && resident_.held() > 0, streams_.compute);
  screenThisPass_ = shape_.memory.op == OpKind::F16x3 && shape_.settings.exactScreen && screenPolicy_.screen();
  const RelativeKeys keys = shape_.settings.relativeKeys;
  screenRelativeThisPass_ = screenThisPass_ && screenRefsWritten_ && keys != RelativeKeys::Off &&
                            (keys == RelativeKeys::Always || screenPolicy_.relative());
  if (centroids_.muReady() && !centroids_.operandsQueued()) centroids_.prepareOperands(streams_.compute);
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

void CudaBackend::adoptMu(const std::vector<float>& mu) {
  DeviceScope on(shape_.device);
  centroids_.adoptMu(mu, streams_.compute);
}

void CudaBackend::abortPass() noexcept {
  DeviceScope on(shape_.device, std::nothrow);
  streams_.synchronizeQuietly();
  overlap_.abortPass();
  sumsKeptForUpdate_ = false;
  steps_.clear();
  for (ChunkSlot& s : slots_) s.pending = false;
  resident_.abortPass();  // resident rows are only held once a whole pass retained them all
  bounds_.forget();
  tier_.forget();
  tierSource_ = nullptr;
  tierChunks_ = false;
  farthest_.clear();
  farthestDeferred_ = false;
  stages_.reset();
  exact_.abortPass();  // the next fit pass adds afresh
}

}  // namespace cuda_backend

std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config, ThreadPool* pool) {
  try {
    if (config.devices.size() > 1) return std::make_unique<cuda_backend::MultiDeviceBackend>(config, pool);
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
