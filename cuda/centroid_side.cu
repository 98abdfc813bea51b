// The CUDA backend's centroid side (centroid_side.h): the pass's centroids up through pinned staging, μ, their operands
// and statistics on the device, and the fit update where the totals are.
#include "centroid_side.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "device_memory.h"
#include "kernels/centroid_update.cuh"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

void CentroidSide::allocate() {
  const std::size_t kd = std::size_t(shape_.k) * shape_.d;
  hostCentroids_ = hostAlloc<float>(kd, "centroids");
  hostStats_ = hostAlloc<CentroidStats>(1, "centroid statistics");
  check(cudaEventCreateWithFlags(&statsReady_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&updated_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&downloaded_, cudaEventDisableTiming), "cudaEventCreate");
  deviceStats_ = devAlloc<CentroidStatsDevice>(1, "centroid statistics");
  current_ = devAlloc<float>(kd, "centroids");
  next_ = devAlloc<float>(kd, "centroids");
  dataMean64_ = devAlloc<double>(shape_.d, "centroid update");
  scatter_ = devAlloc<double>(shape_.k, "centroid update");
  shift_ = devAlloc<double>(shape_.k, "centroid update");
  const std::size_t operands = std::size_t(shape_.kp) * shape_.dp;
  hiOperands_ = devAlloc<unsigned short>(operands, "centroid operands");
  loOperands_ = opTerms(shape_.memory.op) > 1 ? devAlloc<unsigned short>(operands, "centroid operands") : nullptr;
  norms_ = devAlloc<float>(shape_.kp, "centroid norms");
  mu_ = devAlloc<float>(shape_.d, "shift");
}

void CentroidSide::release() noexcept {
  for (void* p : {static_cast<void*>(current_), static_cast<void*>(next_), static_cast<void*>(dataMean64_),
                  static_cast<void*>(scatter_), static_cast<void*>(shift_), static_cast<void*>(hiOperands_),
                  static_cast<void*>(loOperands_), static_cast<void*>(norms_), static_cast<void*>(mu_),
                  static_cast<void*>(deviceStats_)})
    if (p) cudaFree(p);
  current_ = next_ = nullptr;
  dataMean64_ = scatter_ = shift_ = nullptr;
  hiOperands_ = loOperands_ = nullptr;
  norms_ = mu_ = nullptr;
  deviceStats_ = nullptr;
  for (void* p : {static_cast<void*>(hostCentroids_), static_cast<void*>(hostStats_)})
    if (p) cudaFreeHost(p);
  hostCentroids_ = nullptr;
  hostStats_ = nullptr;
  for (cudaEvent_t e : {statsReady_, updated_, downloaded_})
    if (e) cudaEventDestroy(e);
  statsReady_ = updated_ = downloaded_ = nullptr;
}

// In pieces of the download ring's size: the DMA of a piece overlaps the memcpy of the next.
void CentroidSide::upload(const float* c, bool fit, cudaStream_t s) {
  if (c == nullptr)  // PassSpec.centroidsFromUpdate without them on the host, but this backend no longer holds them
    throw EngineError(ErrorCode::Device, "the pass's centroids are neither on the device nor on the host");
  // A fit pass's exact inertia holds centroids of magnitude < 2^64, the rows' own range (exact_sums.cuh), so the
  // centroids the engine computes always fit; a given one beyond it is named here rather than left to a NaN inertia.
  if (shape_.memory.exactSums && fit) {
    const std::size_t values = std::size_t(shape_.k) * shape_.d;
    for (std::size_t i = 0; i < values; ++i)
      if (std::fabs(c[i]) >= 0x1p64f)
        throw EngineError(ErrorCode::InvalidArgument,
                          "centroid " + std::to_string(i / shape_.d) +
                              " has a value of magnitude 2^64 or more: beyond the CUDA backend's exact sums (backend "
                              "cpu takes it)");
  }
  // the staging and current_ may still be in the last update's copy down
  check(cudaEventSynchronize(downloaded_), "centroids down");
  holdsLastUpdate_ = false;
  const std::size_t total = sizeof(float) * std::size_t(shape_.k) * shape_.d;
  char* h = reinterpret_cast<char*>(hostCentroids_);
  for (std::size_t off = 0; off < total; off += DownloadRing::kPieceBytes) {
    const std::size_t n = std::min(DownloadRing::kPieceBytes, total - off);
    std::memcpy(h + off, reinterpret_cast<const char*>(c) + off, n);
    check(cudaMemcpyAsync(reinterpret_cast<char*>(current_) + off, h + off, n, cudaMemcpyHostToDevice, s),
          "centroid upload");
  }
  operandsQueued_ = false;
}

void CentroidSide::copyFromPeer(const CentroidSide& peer, int peerDevice, cudaStream_t s) {
  check(cudaEventSynchronize(downloaded_), "centroids down");  // as upload(): current_ may be in a copy down
  holdsLastUpdate_ = false;
  check(cudaStreamWaitEvent(s, peer.updated_, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyPeerAsync(current_, shape_.device, peer.current_, peerDevice,
                            sizeof(float) * std::size_t(shape_.k) * shape_.d, s),
        "centroid copy from another device");
  operandsQueued_ = false;
}

void CentroidSide::establishMu(void* raw, std::int64_t rows, RowOps ops, RowFlags flags, cudaStream_t s) {
  const int d = shape_.d;
  if (shape_.rows16) ops.x16 = raw;
  prepareRows(raw, shape_.input, rows, d, shape_.memory.op, shape_.cosine, 0, nullptr, ops, flags, s);
  rowMean(rowValues(ops), rows, d, mu_, s);
  hostMu_.resize(d);
  check(cudaMemcpyAsync(hostMu_.data(), mu_, sizeof(float) * d, cudaMemcpyDeviceToHost, s), "D2H");
  check(cudaStreamSynchronize(s), "mean");
  // a non-finite first chunk leaves μ non-finite: fall back to μ = 0 (the pass fails with NonFiniteInput anyway)
  for (float& v : hostMu_)
    if (!std::isfinite(v)) v = 0.f;
  check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * d, cudaMemcpyHostToDevice, s), "H2D");
  check(cudaStreamSynchronize(s), "mean");
  muReady_ = true;
  prepareOperands(s);
}

void CentroidSide::adoptMu(const std::vector<float>& mu, cudaStream_t s) {
  hostMu_ = mu;
  check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * shape_.d, cudaMemcpyHostToDevice, s), "H2D");
  check(cudaStreamSynchronize(s), "mean");
  muReady_ = true;
  prepareOperands(s);
}

void CentroidSide::prepareOperands(cudaStream_t s) {
  prepareCentroidOps(current_, mu_, shape_.k, shape_.d, shape_.memory.op, deviceStats_, hiOperands_, loOperands_,
                     norms_, s);
  check(cudaGetLastError(), "prepareCentroidOps");
  check(cudaMemcpyAsync(hostStats_, &deviceStats_->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, s), "D2H");
  check(cudaEventRecord(statsReady_, s), "cudaEventRecord");
  ops_.bhi = hiOperands_;
  ops_.blo = loOperands_;
  ops_.cnorm = norms_;
  ops_.cf = current_;
  ops_.shifted = true;
  statsPending_ = true;
  operandsQueued_ = true;
}

void CentroidSide::readyForCompute(cudaStream_t s) {
  if (!operandsQueued_) prepareOperands(s);
  if (statsPending_) {
    check(cudaEventSynchronize(statsReady_), "centroid statistics");
    ops_.scale = hostStats_->scale;
    ops_.maxNorm = hostStats_->maxNorm;
    ops_.hiNorm = hostStats_->hiNorm;
    ops_.loNorm = hostStats_->loNorm;
    statsPending_ = false;
  }
}

// The next centroids stay on the device for the next pass; their copy to the host is queued on the D2H stream behind
// the update, without a wait (copyUpdated takes it when the engine's caller reads them), so it overlaps what follows.
DeviceUpdate CentroidSide::update(const DeviceTotals& totals, double rows, bool dataVariance,
                                  const BackendStreams& streams, DownloadRing& ring) {
  ClusterUpdateArgs a;
  a.sums = totals.sums;
  a.counts = totals.counts;
  a.inertia = totals.inertia;
  a.centroids = current_;
  a.k = shape_.k;
  a.d = shape_.d;
  a.cosine = shape_.cosine;
  a.rows = rows;
  a.mu = dataMean64_;
  a.scatter = dataVariance ? scatter_ : nullptr;
  a.next = next_;
  a.shift = shift_;
  // next_ was current_ two updates ago: the copy down of those must be done before the update overwrites them
  check(cudaStreamWaitEvent(streams.compute, downloaded_, 0), "cudaStreamWaitEvent");
  clusterUpdate(a, streams.compute);
  check(cudaGetLastError(), "clusterUpdate");
  check(cudaEventRecord(updated_, streams.compute), "cudaEventRecord");
  DeviceUpdate u;
  // shift and scatter behind the update, under one wait where they fit together
  const bool queued = dataVariance ? ring.queue({shift_, scatter_}, shape_.k, streams.compute)
                                   : ring.queue({shift_}, shape_.k, streams.compute);
  check(cudaStreamWaitEvent(streams.d2h, updated_, 0), "cudaStreamWaitEvent");
  check(cudaMemcpyAsync(hostCentroids_, next_, sizeof(float) * std::size_t(shape_.k) * shape_.d,
                        cudaMemcpyDeviceToHost, streams.d2h),
        "D2H");
  check(cudaEventRecord(downloaded_, streams.d2h), "cudaEventRecord");
  check(cudaStreamSynchronize(streams.compute), "clusterUpdate");
  ring.take(queued, 0, shift_, shape_.k, u.shift, streams.compute);
  if (dataVariance) ring.take(queued, 1, scatter_, shape_.k, u.scatter, streams.compute);
  std::swap(current_, next_);
  holdsLastUpdate_ = true;
  // The next pass's operands and statistics, queued now: they run while the engine and its caller take these results
  // and begin that pass (the GPU is idle then), so its first assignment need not wait for them. A pass that brings
  // other centroids prepares again (upload).
  prepareOperands(streams.compute);
  return u;
}

void CentroidSide::copyUpdated(float* dst, ThreadPool* pool) {
  if (!holdsLastUpdate_)
    throw EngineError(ErrorCode::Device, "copyUpdatedCentroids: no device update holds the centroids");
  check(cudaEventSynchronize(downloaded_), "centroids down");
  const std::size_t n = std::size_t(shape_.k) * shape_.d;
  if (pool) pool->copy(dst, hostCentroids_, n);
  else std::memcpy(dst, hostCentroids_, n * sizeof(float));
}

}  // namespace cuda_backend
}  // namespace kmfleet
