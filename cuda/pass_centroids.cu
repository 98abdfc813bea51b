// The CUDA Backend's centroid side (cuda_backend.h): the pass's centroids up through pinned staging, μ, their
// operands and statistics on the device, and the fit update where the totals are (updateOnDevice).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "cuda_backend.h"
#include "kernels/centroid_update.cuh"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

// The pass's centroids up through the pinned staging, in pieces: the DMA of a piece overlaps the copy of the next.
void CudaBackend::uploadCentroids(const float* c) {
  if (c == nullptr)  // PassSpec.centroidsFromUpdate without them on the host, but this backend no longer holds them
    throw EngineError(ErrorCode::Device, "the pass's centroids are neither on the device nor on the host");
  // A fit pass's exact inertia holds centroids of magnitude < 2^64, the rows' own range (exact_sums.cuh), so the
  // centroids the engine computes always fit; a given one beyond it is named here rather than left to a NaN inertia.
  if (mp_.exactSums && fit_) {
    const std::size_t values = std::size_t(k_) * d_;
    for (std::size_t i = 0; i < values; ++i)
      if (std::fabs(c[i]) >= 0x1p64f)
        throw EngineError(ErrorCode::InvalidArgument,
                          "centroid " + std::to_string(i / d_) +
                              " has a value of magnitude 2^64 or more: beyond the CUDA backend's exact sums (backend "
                              "cpu takes it)");
  }
  // the staging and cf_ may still be in the last update's copy down (updateOnDevice)
  check(cudaEventSynchronize(centroidsDown_), "centroids down");
  cfFromUpdate_ = false;
  const std::size_t total = sizeof(float) * std::size_t(k_) * d_;
  char* h = reinterpret_cast<char*>(hostCentroids_);
  for (std::size_t off = 0; off < total; off += kRingBytes) {
    const std::size_t n = std::min(kRingBytes, total - off);
    std::memcpy(h + off, reinterpret_cast<const char*>(c) + off, n);
    check(cudaMemcpyAsync(reinterpret_cast<char*>(cf_) + off, h + off, n, cudaMemcpyHostToDevice, compute_),
          "centroid upload");
  }
}

// μ: the mean of the first rows of the first chunk ever fed (deterministic: the engine feeds in row order).
void CudaBackend::establishMu(void* raw, std::int64_t rows) {
  RowOps ops = streamOps_;
  if (rows16_) ops.x16 = raw;
  prepareRows(raw, inType(cfg_.dtype), rows, d_, mp_.op, cosine_, 0, nullptr, ops, rowFlags(), compute_);
  rowMean(rowValues(ops), rows, d_, mu_, compute_);
  hostMu_.resize(d_);
  check(cudaMemcpyAsync(hostMu_.data(), mu_, sizeof(float) * d_, cudaMemcpyDeviceToHost, compute_), "D2H");
  check(cudaStreamSynchronize(compute_), "mean");
  // a non-finite first chunk leaves μ non-finite: fall back to μ = 0 (the pass fails with NonFiniteInput anyway)
  for (float& v : hostMu_)
    if (!std::isfinite(v)) v = 0.f;
  check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * d_, cudaMemcpyHostToDevice, compute_), "H2D");
  check(cudaStreamSynchronize(compute_), "mean");
  muReady_ = true;
  prepareCentroidOps();
}

void CudaBackend::adoptMu(const std::vector<float>& mu) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");
  hostMu_ = mu;
  check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * d_, cudaMemcpyHostToDevice, compute_), "H2D");
  check(cudaStreamSynchronize(compute_), "mean");
  muReady_ = true;
  prepareCentroidOps();
}

// Statistics and operands on the device; scale and maxNorm come back for the launch arguments (awaited by the
// first computeChunk of the pass).
void CudaBackend::prepareCentroidOps() {
  cuda::prepareCentroidOps(cf_, mu_, k_, d_, mp_.op, cstats_, bhi_, blo_, cnorm_, compute_);
  check(cudaGetLastError(), "prepareCentroidOps");
  check(cudaMemcpyAsync(hostStats_, &cstats_->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, compute_), "D2H");
  check(cudaEventRecord(statsReady_, compute_), "cudaEventRecord");
  cops_.bhi = bhi_;
  cops_.blo = blo_;
  cops_.cnorm = cnorm_;
  cops_.cf = cf_;
  cops_.shifted = true;
  statsPending_ = true;
  centroidsReady_ = true;
}

// The pass's centroid operands, and their scale and maxNorm for the launch arguments.
void CudaBackend::centroidsForCompute() {
  if (!centroidsReady_) prepareCentroidOps();
  if (statsPending_) {
    check(cudaEventSynchronize(statsReady_), "centroid statistics");
    cops_.scale = hostStats_->scale;
    cops_.maxNorm = hostStats_->maxNorm;
    cops_.hiNorm = hostStats_->hiNorm;
    cops_.loNorm = hostStats_->loNorm;
    statsPending_ = false;
  }
}

// The fit update where the totals are (centroid_update.cu: the engine's arithmetic, bit for bit). The next
// centroids stay in cf_ for the next pass; their copy to the host is queued on d2h_ behind the update, without a wait
// (copyUpdatedCentroids takes it when the engine's caller reads them), so it overlaps what follows.
DeviceUpdate CudaBackend::updateOnDevice(bool dataVariance) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");
  if (!sumsKept_)
    throw EngineError(ErrorCode::InvalidArgument, "updateOnDevice needs a finished fit pass that kept its sums");
  sumsKept_ = false;
  ClusterUpdateArgs a;
  a.sums = sums_;
  a.counts = counts_;
  a.inertia = inertia_;
  a.centroids = cf_;
  a.k = k_;
  a.d = d_;
  a.cosine = cosine_;
  a.rows = static_cast<double>(rowsSeen_);
  a.mu = mu64_;
  a.scatter = dataVariance ? scatter_ : nullptr;
  a.next = cfNext_;
  a.shift = shift_;
  // cfNext_ was cf_ two updates ago: the copy down of those must be done before the update overwrites them
  check(cudaStreamWaitEvent(compute_, centroidsDown_, 0), "cudaStreamWaitEvent");
  clusterUpdate(a, compute_);
  check(cudaGetLastError(), "clusterUpdate");
  check(cudaEventRecord(updated_, compute_), "cudaEventRecord");
  DeviceUpdate u;
  // shift and scatter behind the update, under one wait where they fit together
  const bool queued = dataVariance ? queueDown({shift_, scatter_}) : queueDown({shift_});
  check(cudaStreamWaitEvent(d2h_, updated_, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(hostCentroids_, cfNext_, sizeof(float) * std::size_t(k_) * d_, cudaMemcpyDeviceToHost, d2h_),
        "D2H");
  check(cudaEventRecord(centroidsDown_, d2h_), "cudaEventRecord");
  check(cudaStreamSynchronize(compute_), "clusterUpdate");
  takeDown(queued, 0, shift_, u.shift);
  if (dataVariance) takeDown(queued, 1, scatter_, u.scatter);
  std::swap(cf_, cfNext_);
  cfFromUpdate_ = true;
  // The next pass's operands and statistics, queued now: they run while the engine and its caller take these results
  // and begin that pass (the GPU is idle then), so its first assignment need not wait for them. A pass that brings
  // other centroids prepares again (beginPass).
  prepareCentroidOps();
  return u;
}

void CudaBackend::copyUpdatedCentroids(float* dst) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");  // the caller's thread may be another than the pass's
  if (!cfFromUpdate_)
    throw EngineError(ErrorCode::Device, "copyUpdatedCentroids: no device update holds the centroids");
  check(cudaEventSynchronize(centroidsDown_), "centroids down");
  const std::size_t n = std::size_t(k_) * d_;
  if (pool_) pool_->copy(dst, hostCentroids_, n);
  else std::memcpy(dst, hostCentroids_, n * sizeof(float));
}

}  // namespace cuda_backend
}  // namespace kmfleet
