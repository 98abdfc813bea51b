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
  if (shape_.memory.exactSums && fit_) {
    const std::size_t values = std::size_t(shape_.k) * shape_.d;
    for (std::size_t i = 0; i < values; ++i)
      if (std::fabs(c[i]) >= 0x1p64f)
        throw EngineError(ErrorCode::InvalidArgument,
                          "centroid " + std::to_string(i / shape_.d) +
                              " has a value of magnitude 2^64 or more: beyond the CUDA backend's exact sums (backend "
                              "cpu takes it)");
  }
  // the staging and cf_ may still be in the last update's copy down (updateOnDevice)
  check(cudaEventSynchronize(centroidsDown_), "centroids down");
  cfFromUpdate_ = false;
  const std::size_t total = sizeof(float) * std::size_t(shape_.k) * shape_.d;
  char* h = reinterpret_cast<char*>(hostCentroids_);
  for (std::size_t off = 0; off < total; off += DownloadRing::kPieceBytes) {
    const std::size_t n = std::min(DownloadRing::kPieceBytes, total - off);
    std::memcpy(h + off, reinterpret_cast<const char*>(c) + off, n);
    check(cudaMemcpyAsync(reinterpret_cast<char*>(cf_) + off, h + off, n, cudaMemcpyHostToDevice, streams_.compute),
          "centroid upload");
  }
}

// μ: the mean of the first rows of the first chunk ever fed (deterministic: the engine feeds in row order).
void CudaBackend::establishMu(void* raw, std::int64_t rows) {
  RowOps ops = scratch_.ops;
  if (shape_.rows16) ops.x16 = raw;
  prepareRows(raw, shape_.input, rows, shape_.d, shape_.memory.op, shape_.cosine, 0, nullptr, ops, rowFlags(), streams_.compute);
  rowMean(rowValues(ops), rows, shape_.d, mu_, streams_.compute);
  hostMu_.resize(shape_.d);
  check(cudaMemcpyAsync(hostMu_.data(), mu_, sizeof(float) * shape_.d, cudaMemcpyDeviceToHost, streams_.compute), "D2H");
  check(cudaStreamSynchronize(streams_.compute), "mean");
  // a non-finite first chunk leaves μ non-finite: fall back to μ = 0 (the pass fails with NonFiniteInput anyway)
  for (float& v : hostMu_)
    if (!std::isfinite(v)) v = 0.f;
  check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * shape_.d, cudaMemcpyHostToDevice, streams_.compute), "H2D");
  check(cudaStreamSynchronize(streams_.compute), "mean");
  muReady_ = true;
  prepareCentroidOps();
}

// Statistics and operands on the device; scale and maxNorm come back for the launch arguments (awaited by the
// first computeChunk of the pass).
void CudaBackend::prepareCentroidOps() {
  cuda::prepareCentroidOps(cf_, mu_, shape_.k, shape_.d, shape_.memory.op, cstats_, bhi_, blo_, cnorm_, streams_.compute);
  check(cudaGetLastError(), "prepareCentroidOps");
  check(cudaMemcpyAsync(hostStats_, &cstats_->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, streams_.compute), "D2H");
  check(cudaEventRecord(statsReady_, streams_.compute), "cudaEventRecord");
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
// centroids stay in cf_ for the next pass; their copy to the host is queued on streams_.d2h behind the update, without a wait
// (copyUpdatedCentroids takes it when the engine's caller reads them), so it overlaps what follows.
DeviceUpdate CudaBackend::updateOnDevice(bool dataVariance) {
  check(cudaSetDevice(shape_.device), "cudaSetDevice");
  if (!sumsKept_)
    throw EngineError(ErrorCode::InvalidArgument, "updateOnDevice needs a finished fit pass that kept its sums");
  sumsKept_ = false;
  ClusterUpdateArgs a;
  a.sums = totals_.sums;
  a.counts = totals_.counts;
  a.inertia = totals_.inertia;
  a.centroids = cf_;
  a.k = shape_.k;
  a.d = shape_.d;
  a.cosine = shape_.cosine;
  a.rows = static_cast<double>(rowsSeen_);
  a.mu = mu64_;
  a.scatter = dataVariance ? scatter_ : nullptr;
  a.next = cfNext_;
  a.shift = shift_;
  // cfNext_ was cf_ two updates ago: the copy down of those must be done before the update overwrites them
  check(cudaStreamWaitEvent(streams_.compute, centroidsDown_, 0), "cudaStreamWaitEvent");
  clusterUpdate(a, streams_.compute);
  check(cudaGetLastError(), "clusterUpdate");
  check(cudaEventRecord(updated_, streams_.compute), "cudaEventRecord");
  DeviceUpdate u;
  // shift and scatter behind the update, under one wait where they fit together
  const bool queued = dataVariance ? ring_.queue({shift_, scatter_}, shape_.k, streams_.compute)
                                   : ring_.queue({shift_}, shape_.k, streams_.compute);
  check(cudaStreamWaitEvent(streams_.d2h, updated_, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(hostCentroids_, cfNext_, sizeof(float) * std::size_t(shape_.k) * shape_.d, cudaMemcpyDeviceToHost, streams_.d2h),
        "D2H");
  check(cudaEventRecord(centroidsDown_, streams_.d2h), "cudaEventRecord");
  check(cudaStreamSynchronize(streams_.compute), "clusterUpdate");
  ring_.take(queued, 0, shift_, shape_.k, u.shift, streams_.compute);
  if (dataVariance) ring_.take(queued, 1, scatter_, shape_.k, u.scatter, streams_.compute);
  std::swap(cf_, cfNext_);
  cfFromUpdate_ = true;
  // The next pass's operands and statistics, queued now: they run while the engine and its caller take these results
  // and begin that pass (the GPU is idle then), so its first assignment need not wait for them. A pass that brings
  // other centroids prepares again (beginPass).
  prepareCentroidOps();
  return u;
}

void CudaBackend::copyUpdatedCentroids(float* dst) {
  check(cudaSetDevice(shape_.device), "cudaSetDevice");  // the caller's thread may be another than the pass's
  if (!cfFromUpdate_)
    throw EngineError(ErrorCode::Device, "copyUpdatedCentroids: no device update holds the centroids");
  check(cudaEventSynchronize(centroidsDown_), "centroids down");
  const std::size_t n = std::size_t(shape_.k) * shape_.d;
  if (pool_) pool_->copy(dst, hostCentroids_, n);
  else std::memcpy(dst, hostCentroids_, n * sizeof(float));
}

}  // namespace cuda_backend
}  // namespace kmfleet
