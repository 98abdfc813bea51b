// Owns the centroid side of the CUDA backend: the pass's centroids on the device and the next ones of a device update,
// their pinned staging, μ (the point every operand is shifted by), the centroids' tensor-core operands and statistics,
// and the fit update's shift, scatter and fp64 data mean.
//
// Per pass the centroids go up through the pinned staging in pieces (the memcpy of piece i+1 overlaps the DMA of piece
// i); their statistics and operands are computed on the device (operands.cu prepareCentroidOps) and only scale and
// maxNorm come back (8 bytes) before the first assignment. The fit update runs where the totals are (update()): its
// next centroids stay on the device for the next pass, their operands queued at once, and come down to the staging
// behind it without a wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend.h"
#include "backend_shape.h"
#include "backend_streams.h"
#include "device_totals.h"
#include "download_ring.h"
#include "kernels/operands.cuh"
#include "kernels/types.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

class CentroidSide {
 public:
  explicit CentroidSide(const BackendShape& shape) : shape_(shape) {}

  void allocate();  // throws EngineError (OutOfMemory)
  void release() noexcept;

  // The pass's centroids c (K×D, host) up to the device on s; their operands are then to be prepared again. fit: a
  // fit pass of an exact-sums plan rejects values beyond the exact statistics' range.
  void upload(const float* c, bool fit, cudaStream_t s);
  // The pass's centroids copied on s from another device's side once its update there is done (a job's first lane,
  // multi_device_backend.h): device to device, over NVLink where the devices have it, without the host's round trip.
  void copyFromPeer(const CentroidSide& peer, int peerDevice, cudaStream_t s);
  // μ: the mean of the first rows of the first chunk ever fed (deterministic: the engine feeds in row order), from
  // raw prepared into ops (bad rows reported to flags); then the centroids' operands on it. Waits for it on s.
  void establishMu(void* raw, std::int64_t rows, cuda::RowOps ops, cuda::RowFlags flags, cudaStream_t s);
  bool muReady() const { return muReady_; }
  const float* mu() const { return mu_; }
  const std::vector<float>& hostMu() const { return hostMu_; }
  // μ given (another device's lane of the same job: multi_device_backend.h), then the operands as establishMu does.
  void adoptMu(const std::vector<float>& mu, cudaStream_t s);
  // The centroids' statistics and operands queued on s; scale and maxNorm follow to the host (readyForCompute).
  void prepareOperands(cudaStream_t s);
  // Whether the current centroids' operands are queued since they last changed.
  bool operandsQueued() const { return operandsQueued_; }
  // The operands and their launch arguments (scale, maxNorm: waited for once per preparation) for an assignment.
  void readyForCompute(cudaStream_t s);
  const cuda::CentroidOps& ops() const { return ops_; }
  const float* current() const { return current_; }  // K×D fp32 centroids of the pass

  // Whether current() holds the last update()'s next centroids (nothing uploaded since).
  bool holdsLastUpdate() const { return holdsLastUpdate_; }
  // The fit update from the pass's totals of `rows` rows (centroid_update.cu: the engine's arithmetic, bit for bit),
  // on the compute stream; the next centroids become current(), their copy down is queued on the D2H stream.
  DeviceUpdate update(const DeviceTotals& totals, double rows, bool dataVariance, const BackendStreams& streams,
                      DownloadRing& ring);
  // The last update's next centroids into dst (waits for their copy down; the caller's thread may be any).
  void copyUpdated(float* dst, ThreadPool* pool);

 private:
  const BackendShape& shape_;
  float* current_ = nullptr;  // K×D, the pass's
  float* next_ = nullptr;     // K×D, update()'s result (swapped with current_)
  bool holdsLastUpdate_ = false;
  float* hostCentroids_ = nullptr;  // pinned: the upload's staging and the update's copy down
  // update()'s next centroids come down into hostCentroids_ on the D2H stream behind the update (updated_) without a
  // wait; downloaded_ marks them there (copyUpdated waits for it, and so does anything that reuses the buffer)
  cudaEvent_t updated_ = nullptr, downloaded_ = nullptr;
  double* dataMean64_ = nullptr;  // D, update(): the fp64 data mean of the data variance
  double* scatter_ = nullptr;     // K, update(): each cluster's scatter term
  double* shift_ = nullptr;       // K, update(): ‖next − current‖² per cluster
  unsigned short* hiOperands_ = nullptr;  // Kp×Dp
  unsigned short* loOperands_ = nullptr;  // Kp×Dp, exact mode
  float* norms_ = nullptr;                // Kp: ‖c̃‖²
  cuda::CentroidOps ops_;
  bool operandsQueued_ = false;
  cuda::CentroidStatsDevice* deviceStats_ = nullptr;
  cuda::CentroidStats* hostStats_ = nullptr;  // pinned: scale and maxNorm of the pass's centroids
  cudaEvent_t statsReady_ = nullptr;
  bool statsPending_ = false;  // hostStats_ not yet read into ops_
  float* mu_ = nullptr;        // D: μ
  std::vector<float> hostMu_;
  bool muReady_ = false;
};

}  // namespace cuda_backend
}  // namespace kmfleet
