// The CUDA Backend's buffers (cuda_backend.h): streams, events, device scratch and pinned staging, allocated once
// as the memory plan (planner.cpp) counted them, and released (also after a failed allocation).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "cuda_backend.h"
#include "kernels/far_rows.cuh"

namespace kmfleet {
namespace cuda_backend {

void CudaBackend::allocate() {
  const std::size_t chunk = std::size_t(mp_.chunkRows);
  const int terms = opTerms(mp_.op);
  check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking), "cudaStreamCreate");
  {  // streamed chunks of a partly resident pass: ahead of the resident rows' pending blocks (their slots free sooner)
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&chunkStream_, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
  }
  check(cudaEventCreateWithFlags(&passReady_, cudaEventDisableTiming), "cudaEventCreate");
  for (int b = 0; b < mp_.buffers; ++b) host_.push_back(hostAlloc<char>(chunk * rowBytes_, "host buffers"));
  hostCentroids_ = hostAlloc<float>(std::size_t(k_) * d_, "centroids");
  hostStats_ = hostAlloc<CentroidStats>(1, "centroid statistics");
  hostFlags_ = hostAlloc<unsigned long long>(6, "flags");
  for (int i = 0; i < 2; ++i) {
    ring_[i] = hostAlloc<char>(kRingBytes, "download staging");
    check(cudaEventCreateWithFlags(&ringDone_[i], cudaEventDisableTiming), "cudaEventCreate");
  }
  check(cudaEventCreateWithFlags(&statsReady_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&updated_, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&centroidsDown_, cudaEventDisableTiming), "cudaEventCreate");
  cstats_ = devAlloc<CentroidStatsDevice>(1, "centroid statistics");
  // centroids and totals
  cf_ = devAlloc<float>(std::size_t(k_) * d_, "centroids");
  cfNext_ = devAlloc<float>(std::size_t(k_) * d_, "centroids");
  mu64_ = devAlloc<double>(d_, "centroid update");
  scatter_ = devAlloc<double>(k_, "centroid update");
  shift_ = devAlloc<double>(k_, "centroid update");
  bhi_ = devAlloc<unsigned short>(std::size_t(kp_) * dp_, "centroid operands");
  blo_ = terms > 1 ? devAlloc<unsigned short>(std::size_t(kp_) * dp_, "centroid operands") : nullptr;
  cnorm_ = devAlloc<float>(kp_, "centroid norms");
  mu_ = devAlloc<float>(d_, "shift");
  sums_ = devAlloc<double>(std::size_t(k_) * d_, "sums");
  counts_ = devAlloc<long long>(k_, "counts");
  inertia_ = devAlloc<double>(k_, "inertia");
  rowFlags_ = devAlloc<unsigned long long>(3, "flags");
  flaggedTotal_ = devAlloc<unsigned long long>(2, "flags");  // rows flagged, rows the screen passed on
  flaggedCount_ = devAlloc<unsigned>(2, "flags");  // flagged rows, screened rows (assignPiece)
  // streamed rows' scratch (one: only the compute stream uses it)
  streamOps_ = allocOps(chunk, "chunk scratch", true);
  flagged_ = devAlloc<int>(chunk, "chunk scratch");
  flaggedThr_ = devAlloc<float>(chunk, "chunk scratch");
  candCount_ = devAlloc<int>(chunk, "chunk scratch");
  cand_ = devAlloc<int>(chunk * kCandidates, "chunk scratch");
  dist_ = devAlloc<double>(chunk, "chunk scratch");
  farScratch_ = devAlloc<char>(farRowsScratchBytes(mp_.chunkRows), "chunk scratch");
  allocAccumulateScratch(acc_, mp_.chunkRows, d_, k_);  // throws std::bad_alloc
  exact_.allocate(mp_.exactSums, k_, d_, mp_.chunkRows, mp_.residentRows, mp_.overlapPartials > 0);
  if (mp_.overlapPartials > 0) {  // planned beside the budget (planner.cpp): the chunk stream's own scratch + partials
    allocAccumulateScratch(accS_, mp_.chunkRows, d_, k_);
    flagsS_.flagged = devAlloc<int>(chunk, "overlap scratch");
    flagsS_.thr = devAlloc<float>(chunk, "overlap scratch");
    flagsS_.candCount = devAlloc<int>(chunk, "overlap scratch");
    flagsS_.cand = devAlloc<int>(chunk * kCandidates, "overlap scratch");
    flaggedCountS_ = devAlloc<unsigned>(2, "overlap scratch");
    const std::size_t P = std::size_t(mp_.overlapPartials);
    partSums_ = devAlloc<double>(P * k_ * d_, "overlap partials");
    partCounts_ = devAlloc<long long>(P * k_, "overlap partials");
    partInertia_ = devAlloc<double>(P * k_, "overlap partials");
    resStepDone_.resize(std::size_t((mp_.residentRows + mp_.chunkRows - 1) / mp_.chunkRows) + 1, nullptr);
    for (cudaEvent_t& e : resStepDone_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    partReady_.resize(P, nullptr);
    partFolded_.resize(P, nullptr);
    for (auto* v : {&partReady_, &partFolded_})
      for (cudaEvent_t& e : *v) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  // resident rows
  if (mp_.residentRows > 0) {
    const std::size_t r = std::size_t(mp_.residentRows);
    resident_ = allocOps(r, "resident rows", false);
    resLabels_ = devAlloc<int>(r, "resident rows");
    resPrevLabels_ = devAlloc<int>(r, "resident rows");
    changedCount_ = devAlloc<unsigned long long>(1, "flags");
    resDist_ = devAlloc<float>(r, "resident rows");
    hResLabels_ = hostAlloc<int>(r, "resident label staging");
    hResDist_ = hostAlloc<float>(r, "resident distance staging");
    resDist64_ = devAlloc<double>(r, "resident rows");
    if (mp_.residentAccBytes > 0) {  // planned within the budget: one accumulate over all resident rows
      allocResidentAccumulate(racc_, mp_.residentRows, mp_.chunkRows, d_, k_);  // throws std::bad_alloc
      const std::size_t piece = std::size_t(mp_.residentPiece);
      if (mp_.op == OpKind::F16x3) {  // exact mode: flagged-row scratch for a piece of resident rows
        resFlag_.flagged = devAlloc<int>(piece, "resident rows");
        resFlag_.thr = devAlloc<float>(piece, "resident rows");
        resFlag_.candCount = devAlloc<int>(piece, "resident rows");
        resFlag_.cand = devAlloc<int>(piece * kCandidates, "resident rows");
      }
    }
  }
  check(cudaEventCreateWithFlags(&resComputed_, cudaEventDisableTiming), "cudaEventCreate");
  resChunkDone_.resize(std::size_t((mp_.residentRows + mp_.chunkRows - 1) / mp_.chunkRows), nullptr);
  for (cudaEvent_t& e : resChunkDone_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  slots_.allocate(mp_.slots, chunk, rowBytes_);
}

// streamed: the scratch of streamed chunks (no values when the 16-bit rows are read in their slot).
// Where prepareRows reports bad rows: the range of the exact statistics only on the path that sums exactly.
RowFlags CudaBackend::rowFlags() const {
  return RowFlags{rowFlags_, rowFlags_ + 1, mp_.exactSums ? rowFlags_ + 2 : nullptr};
}

RowOps CudaBackend::allocOps(std::size_t rows, const char* what, bool streamed) {
  RowOps o;
  o.x16Type = inType(cfg_.dtype);
  if (!rows16_) o.xf = devAlloc<float>(rows * d_, what);
  else if (!streamed) o.x16 = devAlloc<unsigned short>(rows * d_, what);
  o.ahi = devAlloc<unsigned short>(rows * dp_, what);
  o.alo = opTerms(mp_.op) > 1 ? devAlloc<unsigned short>(rows * dp_, what) : nullptr;
  o.rowScale = devAlloc<float>(rows, what);
  o.rowNorm = devAlloc<float>(rows, what);
  // exact mode: the lo operand's norm, for the one-product screen's bound (planner: operandRowBytes)
  o.rowNormLo = mp_.op == OpKind::F16x3 ? devAlloc<float>(rows, what) : nullptr;
  // exact mode, resident rows: each row's best from the last screened pass, the next one's guess (types.h
  // RowOps.screenRef; planner: residentRowBytes). Zeros until a screen writes them: finite, so always safe.
  if (mp_.op == OpKind::F16x3 && !streamed) {
    o.screenRef = devAlloc<float>(rows, what);
    check(cudaMemset(o.screenRef, 0, rows * sizeof(float)), "memset");
  }
  return o;
}

void CudaBackend::freeOps(RowOps& o) {
  for (void* p : {static_cast<void*>(o.xf), o.ahi, o.alo, static_cast<void*>(o.rowScale),
                  static_cast<void*>(o.rowNorm), static_cast<void*>(o.rowNormLo), static_cast<void*>(o.screenRef), o.x16})
    if (p) cudaFree(p);
  o = RowOps{};
}

void CudaBackend::release() noexcept {
  slots_.release();
  freeOps(streamOps_);
  freeOps(resident_);
  for (void* p : {static_cast<void*>(resFarDist_), static_cast<void*>(resFarRow_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hResFarDist_), static_cast<void*>(hResFarRow_)})
    if (p) cudaFreeHost(p);
  resFarDist_ = nullptr; resFarRow_ = nullptr; hResFarDist_ = nullptr; hResFarRow_ = nullptr; resFarCap_ = 0;
  for (void* p : {static_cast<void*>(gatherRows_), static_cast<void*>(gatherVals_)})
    if (p) cudaFree(p);
  for (void* p : {static_cast<void*>(hGatherRows_), static_cast<void*>(hGatherVals_)})
    if (p) cudaFreeHost(p);
  gatherRows_ = nullptr; gatherVals_ = nullptr; hGatherRows_ = nullptr; hGatherVals_ = nullptr; gatherCap_ = 0;
  for (auto& ev : stageEv_)
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
  stageEv_.clear();
  if (resLabels_) cudaFree(resLabels_);
  if (resPrevLabels_) cudaFree(resPrevLabels_);
  if (changedCount_) cudaFree(changedCount_);
  resPrevLabels_ = nullptr;
  changedCount_ = nullptr;
  prevLabelsValid_ = false;
  if (resDist_) cudaFree(resDist_);
  if (resDist64_) cudaFree(resDist64_);
  resDist64_ = nullptr;
  freeResidentAccumulate(racc_);
  for (void* p : {static_cast<void*>(resFlag_.flagged), static_cast<void*>(resFlag_.thr),
                  static_cast<void*>(resFlag_.candCount), static_cast<void*>(resFlag_.cand)})
    if (p) cudaFree(p);
  resFlag_ = FlagScratch{};
  if (hResLabels_) cudaFreeHost(hResLabels_);
  if (hResDist_) cudaFreeHost(hResDist_);
  resLabels_ = nullptr; resDist_ = nullptr; hResLabels_ = nullptr; hResDist_ = nullptr;
  if (resComputed_) cudaEventDestroy(resComputed_);
  resComputed_ = nullptr;
  for (cudaEvent_t e : resChunkDone_)
    if (e) cudaEventDestroy(e);
  resChunkDone_.clear();
  freeAccumulateScratch(acc_);
  freeAccumulateScratch(accS_);
  exact_.release();
  for (void* p : {static_cast<void*>(flagsS_.flagged), static_cast<void*>(flagsS_.thr),
                  static_cast<void*>(flagsS_.candCount), static_cast<void*>(flagsS_.cand),
                  static_cast<void*>(flaggedCountS_), static_cast<void*>(partSums_), static_cast<void*>(partCounts_),
                  static_cast<void*>(partInertia_)})
    if (p) cudaFree(p);
  flagsS_ = FlagScratch{};
  flaggedCountS_ = nullptr; partSums_ = nullptr; partCounts_ = nullptr; partInertia_ = nullptr;
  for (auto* v : {&partReady_, &partFolded_, &resStepDone_}) {
    for (cudaEvent_t e : *v)
      if (e) cudaEventDestroy(e);
    v->clear();
  }
  if (passReady_) cudaEventDestroy(passReady_);
  passReady_ = nullptr;
  for (void* p : {static_cast<void*>(cf_), static_cast<void*>(cfNext_), static_cast<void*>(mu64_),
                  static_cast<void*>(scatter_), static_cast<void*>(shift_), static_cast<void*>(bhi_), static_cast<void*>(blo_),
                  static_cast<void*>(cnorm_), static_cast<void*>(mu_), static_cast<void*>(sums_),
                  static_cast<void*>(counts_), static_cast<void*>(inertia_), static_cast<void*>(rowFlags_),
                  static_cast<void*>(flaggedTotal_), static_cast<void*>(flaggedCount_), static_cast<void*>(flagged_), static_cast<void*>(flaggedThr_), static_cast<void*>(candCount_),
                  static_cast<void*>(cand_),
                  static_cast<void*>(dist_), static_cast<void*>(farScratch_)})
    if (p) cudaFree(p);
  for (void* p : host_) cudaFreeHost(p);
  host_.clear();
  if (hostCentroids_) cudaFreeHost(hostCentroids_);
  hostCentroids_ = nullptr;
  for (void* p : {static_cast<void*>(hostStats_), static_cast<void*>(hostFlags_), static_cast<void*>(ring_[0]),
                  static_cast<void*>(ring_[1])})
    if (p) cudaFreeHost(p);
  hostStats_ = nullptr; hostFlags_ = nullptr; ring_[0] = ring_[1] = nullptr;
  for (cudaEvent_t e : {ringDone_[0], ringDone_[1], statsReady_, updated_, centroidsDown_})
    if (e) cudaEventDestroy(e);
  ringDone_[0] = ringDone_[1] = statsReady_ = updated_ = centroidsDown_ = nullptr;
  if (cstats_) cudaFree(cstats_);
  cstats_ = nullptr;
  for (cudaStream_t s : {copy_, compute_, d2h_, chunkStream_})
    if (s) cudaStreamDestroy(s);
  copy_ = compute_ = d2h_ = chunkStream_ = nullptr;
  cudaGetLastError();
}

bool CudaBackend::queueDown(std::initializer_list<const void*> arrays) {
  const std::size_t bytes = sizeof(double) * std::size_t(k_);
  if (arrays.size() * bytes > kRingBytes) return false;
  char* to = ring_[0];
  for (const void* from : arrays) {
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, compute_), "D2H");
    to += bytes;
  }
  return true;
}

}  // namespace cuda_backend
}  // namespace kmfleet

namespace kmfleet {
namespace cuda_backend {

// Page-locked, so that a held chunk goes to the device by DMA at the link's speed. A host that refuses to lock more
// (RLIMIT_MEMLOCK, a container's limit) gets pageable memory, whose copies the driver stages: slower, still correct.
HostBlock CudaBackend::allocateHostRows(std::size_t bytes, std::string& warning) {
  check(cudaSetDevice(cfg_.device), "cudaSetDevice");
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess)
    return HostBlock(p, [](void* q) { cudaFreeHost(q); });
  cudaGetLastError();
  if (warning.empty())
    warning = "cannot page-lock " + std::to_string(bytes >> 20) +
              " MiB more of host memory (ulimit -l, or the container's limit): the host tier continues in pageable "
              "memory, whose copies to the GPU are slower";
  return Backend::allocateHostRows(bytes, warning);
}

}  // namespace cuda_backend
}  // namespace kmfleet
