// The CUDA Backend's farthest rows (cuda_backend.h; backend.h PassTotals.farthest): a heap over the candidates of
// streamed chunks (as they drain) and of resident rows (from their kept fp64 distances, in finishPass), the
// resident winners' values gathered from the device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "kernels/far_rows.cuh"

namespace kmfleet {
namespace cuda_backend {

// The pass's farthest rows so far: a heap of at most `farthest` rows whose front is the worst kept
// ((distance desc, row asc) order); a candidate that can't enter costs one comparison, no copy.
bool CudaBackend::fartherThan(double da, long long ra, double db, long long rb) {
  return da > db || (da == db && ra < rb);
}

void CudaBackend::offerFar(double dist, long long row, const float* values) {
  const auto worse = [](const FarRow& a, const FarRow& b) { return fartherThan(a.distance, a.row, b.distance, b.row); };
  const std::size_t cap = std::size_t(spec_.farthest);
  if (far_.size() >= cap) {
    if (!fartherThan(dist, row, far_.front().distance, far_.front().row)) return;
    std::pop_heap(far_.begin(), far_.end(), worse);
    far_.pop_back();
  }
  FarRow f;
  f.row = row;
  f.distance = dist;
  f.label = spec_.labels[row];
  if (values) f.values.assign(values, values + shape_.d);  // resident rows: gathered in finishPass if they stay
  far_.push_back(std::move(f));
  std::push_heap(far_.begin(), far_.end(), worse);
}

void CudaBackend::ensureFarBuffers(ChunkSlot& s, int f) {
  if (slots_.holdsFar(s, f)) return;
  for (ChunkSlot& t : slots_) drain(t);  // their staging is about to be replaced
  slots_.growFar(f, shape_.d);
}

// The farthest-row candidates of the resident rows, from the fp64 distances of this pass, chunk by chunk with
// the chunk boundaries they were fed with (far_rows.cu), offered to the pass's heap (values gathered later).
void CudaBackend::residentFarthest() {
  const int f = spec_.farthest;
  const std::int64_t R = residentHeld_, C = shape_.memory.chunkRows, chunks = (R + C - 1) / C;
  ensureResidentFar(farCandidates(f, C));  // candidates per chunk
  stageMark(0);
  // the pass did not keep them (chunk_stream.cu, resident_rows.cu; an exact-sums pass never does): the same bits
  // again, from this pass's labels and centroids
  if (!shape_.keepsResidentDistances() || exact_.summingThisPass()) sumsDistances(rowValues(resident_), R, shape_.d, centroids_.current(), resLabels_, shape_.cosine, resDist64_, streams_.compute);
  stageMark(1);
  stageMark(2);
  for (std::int64_t ci = 0; ci < chunks; ++ci)
    farTop(resDist64_ + ci * C, std::min(C, R - ci * C), ci * C, f, scratch_.farScratch, resFarDist_ + ci * resFarCap_,
           resFarRow_ + ci * resFarCap_, streams_.compute);
  check(cudaGetLastError(), "farthest rows");
  stageMark(3);
  check(cudaMemcpyAsync(hResFarDist_, resFarDist_, sizeof(double) * std::size_t(chunks * resFarCap_),
                        cudaMemcpyDeviceToHost, streams_.compute), "D2H");
  check(cudaMemcpyAsync(hResFarRow_, resFarRow_, sizeof(long long) * std::size_t(chunks * resFarCap_),
                        cudaMemcpyDeviceToHost, streams_.compute), "D2H");
  check(cudaStreamSynchronize(streams_.compute), "farthest rows");
  for (std::int64_t ci = 0; ci < chunks; ++ci) {
    const int m = farCandidates(f, std::min(C, R - ci * C));
    for (int i = 0; i < m; ++i) offerFar(hResFarDist_[ci * resFarCap_ + i], hResFarRow_[ci * resFarCap_ + i], nullptr);
  }
}

// Farthest candidates of resident chunks: (distance, row) per chunk, device + pinned host.
void CudaBackend::ensureResidentFar(int f) {
  if (f <= resFarCap_) return;
  check(cudaStreamSynchronize(streams_.d2h), "D2H");
  for (void* p : {static_cast<void*>(resFarDist_), static_cast<void*>(resFarRow_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hResFarDist_), static_cast<void*>(hResFarRow_)})
    if (p) cudaFreeHost(p);
  // forgotten before allocating again (as ensureFarBuffers): a throw leaves null pointers and capacity 0
  resFarDist_ = nullptr; resFarRow_ = nullptr; hResFarDist_ = nullptr; hResFarRow_ = nullptr;
  resFarCap_ = 0;
  const std::size_t chunks = std::size_t((shape_.memory.residentRows + shape_.memory.chunkRows - 1) / shape_.memory.chunkRows);
  resFarDist_ = devAlloc<double>(chunks * f, "farthest rows");
  resFarRow_ = devAlloc<long long>(chunks * f, "farthest rows");
  hResFarDist_ = hostAlloc<double>(chunks * f, "farthest rows");
  hResFarRow_ = hostAlloc<long long>(chunks * f, "farthest rows");
  resFarCap_ = f;
}

// The winners that came from resident chunks have no values yet: gather them from the resident rows.
void CudaBackend::fillResidentValues() {
  std::vector<long long> rows;
  for (const FarRow& f : far_)
    if (f.values.empty()) rows.push_back(f.row);
  if (rows.empty()) return;
  const int m = static_cast<int>(rows.size());
  if (m > gatherCap_) {  // kept across passes: no allocation (and no implicit sync of cudaFree) per pass
    for (void* p : {static_cast<void*>(gatherRows_), static_cast<void*>(gatherVals_)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(hGatherRows_), static_cast<void*>(hGatherVals_)})
      if (p) cudaFreeHost(p);
    gatherRows_ = nullptr; gatherVals_ = nullptr; hGatherRows_ = nullptr; hGatherVals_ = nullptr; gatherCap_ = 0;
    gatherRows_ = devAlloc<long long>(m, "farthest rows");
    gatherVals_ = devAlloc<float>(std::size_t(m) * shape_.d, "farthest rows");
    hGatherRows_ = hostAlloc<long long>(m, "farthest rows");
    hGatherVals_ = hostAlloc<float>(std::size_t(m) * shape_.d, "farthest rows");
    gatherCap_ = m;
  }
  std::memcpy(hGatherRows_, rows.data(), sizeof(long long) * m);
  check(cudaMemcpyAsync(gatherRows_, hGatherRows_, sizeof(long long) * m, cudaMemcpyHostToDevice, streams_.compute), "H2D");
  gatherRows(rowValues(resident_), shape_.d, gatherRows_, 0, m, gatherVals_, streams_.compute);
  check(cudaMemcpyAsync(hGatherVals_, gatherVals_, sizeof(float) * std::size_t(m) * shape_.d, cudaMemcpyDeviceToHost,
                        streams_.compute), "D2H");
  check(cudaStreamSynchronize(streams_.compute), "farthest rows");
  int i = 0;
  for (FarRow& f : far_)
    if (f.values.empty()) {
      f.values.assign(hGatherVals_ + std::size_t(i) * shape_.d, hGatherVals_ + std::size_t(i + 1) * shape_.d);
      ++i;
    }
}

}  // namespace cuda_backend
}  // namespace kmfleet
