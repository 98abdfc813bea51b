// The farthest-row search of a pass (farthest_rows.h): the heap, the resident rows' candidates from their kept fp64
// distances, the resident winners' values gathered from the device.
#include "farthest_rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "device_memory.h"
#include "kernels/accumulate.cuh"
#include "kernels/far_rows.cuh"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

namespace {
// (distance desc, row asc): a total order, so the set of the farthest rows is unique
bool fartherThan(double da, long long ra, double db, long long rb) { return da > db || (da == db && ra < rb); }
}  // namespace

void FarthestRows::release() noexcept {
  for (void* p : {static_cast<void*>(candDist_), static_cast<void*>(candRow_), static_cast<void*>(gatherRows_),
                  static_cast<void*>(gatherValues_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hostCandDist_), static_cast<void*>(hostCandRow_),
                  static_cast<void*>(hostGatherRows_), static_cast<void*>(hostGatherValues_)})
    if (p) cudaFreeHost(p);
  candDist_ = nullptr; candRow_ = nullptr; hostCandDist_ = nullptr; hostCandRow_ = nullptr; candidateCap_ = 0;
  gatherRows_ = nullptr; gatherValues_ = nullptr; hostGatherRows_ = nullptr; hostGatherValues_ = nullptr; gatherCap_ = 0;
}

void FarthestRows::offer(double dist, long long row, const float* values) {
  const auto worse = [](const FarRow& a, const FarRow& b) { return fartherThan(a.distance, a.row, b.distance, b.row); };
  const std::size_t cap = std::size_t(wanted_);
  if (heap_.size() >= cap) {
    if (!fartherThan(dist, row, heap_.front().distance, heap_.front().row)) return;
    std::pop_heap(heap_.begin(), heap_.end(), worse);
    heap_.pop_back();
  }
  FarRow f;
  f.row = row;
  f.distance = dist;
  f.label = labels_[row];
  if (values) f.values.assign(values, values + shape_.d);  // resident rows: gathered by take() if they stay
  heap_.push_back(std::move(f));
  std::push_heap(heap_.begin(), heap_.end(), worse);
}

void FarthestRows::offerResident(RowValues values, const std::int32_t* labels, double* dist64, std::int64_t rows,
                                 bool computeDistances, const float* centroids, char* farScratch, StageTimer& stages,
                                 cudaStream_t compute, cudaStream_t d2h) {
  const int f = wanted_;
  const std::int64_t R = rows, C = shape_.memory.chunkRows, chunks = (R + C - 1) / C;
  ensureResidentCandidates(farCandidates(f, C), d2h);  // candidates per chunk
  stages.mark(0, compute);
  // the pass did not keep them (chunk_stream.cu, resident_pass.cu; an exact-sums pass never does): the same bits
  // again, from this pass's labels and centroids
  if (computeDistances) sumsDistances(values, R, shape_.d, centroids, labels, shape_.cosine, dist64, nullptr, compute);
  stages.mark(1, compute);
  stages.mark(2, compute);
  for (std::int64_t ci = 0; ci < chunks; ++ci)
    farTop(dist64 + ci * C, std::min(C, R - ci * C), ci * C, f, farScratch, candDist_ + ci * candidateCap_,
           candRow_ + ci * candidateCap_, compute);
  check(cudaGetLastError(), "farthest rows");
  stages.mark(3, compute);
  check(cudaMemcpyAsync(hostCandDist_, candDist_, sizeof(double) * std::size_t(chunks * candidateCap_),
                        cudaMemcpyDeviceToHost, compute), "D2H");
  check(cudaMemcpyAsync(hostCandRow_, candRow_, sizeof(long long) * std::size_t(chunks * candidateCap_),
                        cudaMemcpyDeviceToHost, compute), "D2H");
  check(cudaStreamSynchronize(compute), "farthest rows");
  for (std::int64_t ci = 0; ci < chunks; ++ci) {
    const int m = farCandidates(f, std::min(C, R - ci * C));
    for (int i = 0; i < m; ++i)
      offer(hostCandDist_[ci * candidateCap_ + i], hostCandRow_[ci * candidateCap_ + i], nullptr);
  }
}

std::vector<FarRow> FarthestRows::take(RowValues residentValues, cudaStream_t compute) {
  std::stable_sort(heap_.begin(), heap_.end(), [](const FarRow& a, const FarRow& b) {
    return a.distance > b.distance || (a.distance == b.distance && a.row < b.row);
  });
  if (heap_.size() > std::size_t(wanted_)) heap_.resize(wanted_);
  gatherResidentValues(residentValues, compute);
  return std::move(heap_);
}

// Candidates of resident chunks: (distance, row) per chunk, device + pinned host.
void FarthestRows::ensureResidentCandidates(int f, cudaStream_t d2h) {
  if (f <= candidateCap_) return;
  check(cudaStreamSynchronize(d2h), "D2H");
  for (void* p : {static_cast<void*>(candDist_), static_cast<void*>(candRow_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hostCandDist_), static_cast<void*>(hostCandRow_)})
    if (p) cudaFreeHost(p);
  // forgotten before allocating again (as ChunkSlots::growFar): a throw leaves null pointers and capacity 0
  candDist_ = nullptr; candRow_ = nullptr; hostCandDist_ = nullptr; hostCandRow_ = nullptr;
  candidateCap_ = 0;
  const std::size_t chunks = std::size_t(shape_.residentChunks());
  candDist_ = devAlloc<double>(chunks * f, "farthest rows");
  candRow_ = devAlloc<long long>(chunks * f, "farthest rows");
  hostCandDist_ = hostAlloc<double>(chunks * f, "farthest rows");
  hostCandRow_ = hostAlloc<long long>(chunks * f, "farthest rows");
  candidateCap_ = f;
}

// The winners that came from resident chunks have no values yet: gather them from the resident rows.
void FarthestRows::gatherResidentValues(RowValues residentValues, cudaStream_t compute) {
  const int d = shape_.d;
  std::vector<long long> rows;
  for (const FarRow& f : heap_)
    if (f.values.empty()) rows.push_back(f.row);
  if (rows.empty()) return;
  const int m = static_cast<int>(rows.size());
  if (m > gatherCap_) {  // kept across passes: no allocation (and no implicit sync of cudaFree) per pass
    for (void* p : {static_cast<void*>(gatherRows_), static_cast<void*>(gatherValues_)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(hostGatherRows_), static_cast<void*>(hostGatherValues_)})
      if (p) cudaFreeHost(p);
    gatherRows_ = nullptr; gatherValues_ = nullptr; hostGatherRows_ = nullptr; hostGatherValues_ = nullptr;
    gatherCap_ = 0;
    gatherRows_ = devAlloc<long long>(m, "farthest rows");
    gatherValues_ = devAlloc<float>(std::size_t(m) * d, "farthest rows");
    hostGatherRows_ = hostAlloc<long long>(m, "farthest rows");
    hostGatherValues_ = hostAlloc<float>(std::size_t(m) * d, "farthest rows");
    gatherCap_ = m;
  }
  std::memcpy(hostGatherRows_, rows.data(), sizeof(long long) * m);
  check(cudaMemcpyAsync(gatherRows_, hostGatherRows_, sizeof(long long) * m, cudaMemcpyHostToDevice, compute), "H2D");
  cuda::gatherRows(residentValues, d, gatherRows_, 0, m, gatherValues_, compute);
  check(cudaMemcpyAsync(hostGatherValues_, gatherValues_, sizeof(float) * std::size_t(m) * d, cudaMemcpyDeviceToHost,
                        compute), "D2H");
  check(cudaStreamSynchronize(compute), "farthest rows");
  int i = 0;
  for (FarRow& f : heap_)
    if (f.values.empty()) {
      f.values.assign(hostGatherValues_ + std::size_t(i) * d, hostGatherValues_ + std::size_t(i + 1) * d);
      ++i;
    }
}

}  // namespace cuda_backend
}  // namespace kmfleet
