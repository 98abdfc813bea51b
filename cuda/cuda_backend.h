// The CUDA Backend (native/src/backend.h): pinned host buffers, four streams (copy, compute, D2H, and the chunk stream of
// an overlapped pass), resident rows, the kernels.
//
// Streams and events per chunk i (slot = i % S; S = planner's slots: 2, or 4 when chunks stream on every pass):
//   copy     H2D host buffer → slot.raw            (waits slot.rawFree: chunk i−S finished reading it)
//   compute  prepare → assign (+ recheck) → distances → sums      (waits the copy)
//   d2h      labels (+ distances, farthest rows) → slot's pinned staging (waits compute)
// processChunk returns once its H2D is done (the engine may refill the host memory) while compute of chunk i
// and the D2H of chunk i−1 are still in flight. The host copies a slot's staging into the engine's label
// array when the slot comes round again (or in finishPass).
// Resident rows: the first plan.residentRows rows (whole chunks), prepared once into device arrays and
// processed in later passes by processResident with the same chunk boundaries as when they were fed, so
// sums are added in the same order as a fully streamed run: bitwise-identical centroids. With two resident chunks
// or more (and the planner's scratch) they are assigned in one launch, or in pieces of ~2M rows where the exact
// mode's flagged-row scratch for all of them does not fit (planner.h MemoryPlan.residentPiece), and accumulated in one go
// (accumulateResident: the same additions). Their fp64 distances stay on the device, so the farthest rows — asked
// for only when a cluster came out empty (backend.h) — are found in finishPass, per chunk as they were fed.
// Rows of f16/bf16 data (l2) are kept as they are (no fp32 copy, types.h RowValues): a streamed chunk's values
// are its slot's raw rows, so the slot is released (rawFree) only after the chunk's kernels.
// Per pass on the host: the centroids go up through pinned staging in pieces (memcpy of piece i+1 overlaps the
// DMA of piece i); their statistics and operands are computed on the device (operands.cu prepareCentroidOps), and
// only scale and maxNorm come back (8 bytes) before the first assignment; for the centroids of a device update,
// updateOnDevice has queued them already. Counts and inertia (and the update's shift and scatter) come down behind
// the last kernels under the pass's one final wait where they fit in a ring piece (queueDown), else, like the sums,
// through a ring of two pinned pieces (the DMA of piece i+1 overlaps the host's copy of piece i).
//
// CudaBackend is the pass orchestration; classes of their own own part of its state:
//   ChunkSlots       (chunk_slots.h)       the streamed chunks' device slots, their pinned staging and events
//   ExactStatistics  (exact_statistics.h)  the fit passes' exact integer statistics and the move-or-add decision
// and device_memory.h has the allocation helpers and the CUDA error mapping they share. The kernels are in kernels/.
//
// This header (internal to cuda/) declares the class; its member functions live one concept a file:
//   cuda_backend.cu     construction (plan, EngineConfig.cuda settings), begin/finish/abort of a pass, per-pass statistics,
//                       makeCudaBackend (cuda_bridge.h)
//   backend_buffers.cu  device and pinned buffers, streams and events: allocate() and release()
//   pass_centroids.cu   the centroid side: upload through pinned staging, μ, operands + statistics, the fit update
//   chunk_stream.cu     a chunk: through a slot (processChunk, retire, drain), its kernels and outputs (computeChunk,
//                       also resident chunks one by one), assignPiece, the overlap partials' folds
//   resident_rows.cu    resident rows: views, one go (pieces + one accumulate), their downloads, the resident work
//                       queued a few chunks ahead of streamed chunks (overlap)
//   pass_farthest.cu    the pass's farthest rows: the heap, streamed chunks' and resident rows' candidates, values
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend.h"
#include "chunk_slots.h"
#include "device_memory.h"
#include "exact_screen_policy.h"
#include "exact_statistics.h"
#include "kernels/accumulate.cuh"
#include "kernels/assign.cuh"
#include "kernels/exact_sums.cuh"
#include "kernels/operands.cuh"
#include "kernels/types.h"
#include "planner.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

using namespace cuda;

inline InType inType(DType t) { return t == DType::F32 ? InType::F32 : t == DType::F16 ? InType::F16 : InType::BF16; }

class CudaBackend final : public Backend {
 public:
  // rowOffset: the backend is a lane of a job on several devices (multi_device_backend.h) whose rows are the job's
  // [rowOffset, rowOffset + cfg.rows): the rows its errors and farthest rows name
  CudaBackend(const EngineConfig& cfg, ThreadPool* pool, std::int64_t rowOffset = 0);
  ~CudaBackend() override;

  const Plan& plan() const override { return plan_; }
  void* hostBuffer(int index) override { return host_.at(static_cast<std::size_t>(index)); }
  std::int64_t residentHeld() const override { return residentHeld_; }

  void beginPass(const PassSpec& spec) override;        // cuda_backend.cu
  void processResident() override;                      // resident_rows.cu
  void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) override;  // chunk_stream.cu
  HostBlock allocateHostRows(std::size_t bytes, std::string& warning) override;       // backend_buffers.cu
  PassTotals finishPass() override { return finishPass({}); }
  // ... with the pass's statistics of other devices' lanes added into this one's before its totals (their finishPass
  // returned): the totals of all of them                                                  cuda_backend.cu
  PassTotals finishPass(const std::vector<CudaBackend*>& lanes);
  float mergeMs() const { return exact_.mergeMs(); }  // the last such merge's device time
  // The operands' shift μ (pass_centroids.cu): every lane of a job takes its first lane's, computed from the job's
  // first rows, so that each row's products are the same bits on every device
  bool muReady() const { return muReady_; }
  const std::vector<float>& mu() const { return hostMu_; }
  void adoptMu(const std::vector<float>& mu);
  bool updatesOnDevice() const override { return true; }
  DeviceUpdate updateOnDevice(bool dataVariance) override;  // pass_centroids.cu
  void copyUpdatedCentroids(float* dst) override;           // pass_centroids.cu
  void abortPass() noexcept override;                   // cuda_backend.cu

 private:
  // flagged-row scratch of assignPiece (exact mode): a chunk's (chunkFlags), flagsS_ (the chunk stream's) or resFlag_
  // (a piece of resident rows)
  struct FlagScratch {
    int* flagged = nullptr;
    float* thr = nullptr;
    int* candCount = nullptr;
    int* cand = nullptr;
  };
  FlagScratch chunkFlags() const { return {flagged_, flaggedThr_, candCount_, cand_}; }

  // backend_buffers.cu
  void allocate();
  RowOps allocOps(std::size_t rows, const char* what, bool streamed);
  static void freeOps(RowOps& o);
  void release() noexcept;

  // pass_centroids.cu
  void uploadCentroids(const float* c);
  void establishMu(void* raw, std::int64_t rows);
  void prepareCentroidOps();
  void centroidsForCompute();
  template <typename T, typename U>
  void download(const T* src, std::size_t count, std::vector<U>& out);  // below
  // K-long arrays of 8-byte values (counts, inertia, shift, scatter) queued down into ring piece 0 behind the compute
  // stream's work, when they all fit there (K ≤ 65,536 for two): the caller's one wait on the stream then covers them
  // and takeQueued reads them, instead of a download() round trip each — every host wait at the end of a pass leaves
  // the GPU idle. False (nothing queued) when they don't fit.
  bool queueDown(std::initializer_list<const void*> arrays);
  // After that wait: array `index` of a queueDown that returned `queued`, else src through download().
  template <typename T, typename U>
  void takeDown(bool queued, std::size_t index, const T* src, std::vector<U>& out);  // below

  // chunk_stream.cu
  void retire(ChunkSlot& s);
  void drain(ChunkSlot& s);
  void computeChunk(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, ChunkSlot* slotp,
                    cudaStream_t s = nullptr);
  void enqueueFold(std::size_t b);
  void assignPiece(const RowOps& ops, std::int64_t rows, std::int32_t* labels, const FlagScratch& f,
                   cudaStream_t s = nullptr, unsigned* count = nullptr);
  void addFlagged(cudaStream_t s, const unsigned* count);

  // resident_rows.cu
  RowOps residentOps(std::int64_t firstRow) const;
  void processResidentWhole();
  void accumulateResidentRows(bool wantDist);
  void downloadResident(std::int64_t c0, std::int64_t c1, bool dist);
  void copyResidentOutputs();
  bool eventDone(cudaEvent_t e);
  void pumpResident(bool all);
  void residentStep(std::int64_t i);
  void waitPumping(cudaEvent_t e, const char* what);

  // pass_farthest.cu
  static bool fartherThan(double da, long long ra, double db, long long rb);
  void offerFar(double dist, long long row, const float* values);
  void ensureFarBuffers(ChunkSlot& s, int f);
  void residentFarthest();
  void ensureResidentFar(int f);
  void fillResidentValues();

  // cuda_backend.cu
  void stageMark(int i, cudaStream_t s = nullptr);

  EngineConfig cfg_;
  std::int64_t rowOffset_ = 0;
  ThreadPool* pool_ = nullptr;  // the engine's (may be null): copyResidentOutputs
  AssignKernel kernel_;         // which assignment kernel, the portable one's shared-memory plan (cfg_.cuda)
  MemoryPlan mp_;
  Plan plan_;
  std::int64_t n_ = 0;
  int d_ = 0, k_ = 0;
  std::int64_t dp_ = 0, kp_ = 0;
  std::size_t rowBytes_ = 0;
  bool cosine_ = false;
  bool rows16_ = false;  // 16-bit rows kept as they are (types.h keepsRows16)

  cudaStream_t copy_ = nullptr, compute_ = nullptr, d2h_ = nullptr;
  std::vector<void*> host_;
  float* hostCentroids_ = nullptr;
  static constexpr std::size_t kRingBytes = std::size_t(1) << 20;  // pieces of the centroid upload and downloads
  char* ring_[2] = {nullptr, nullptr};
  cudaEvent_t ringDone_[2] = {nullptr, nullptr};
  unsigned long long* hostFlags_ = nullptr;  // pinned: rowFlags_'s three, flagged total, changed resident rows,
                                             // screened total
  CentroidStats* hostStats_ = nullptr;       // pinned: scale and maxNorm of the pass's centroids
  CentroidStatsDevice* cstats_ = nullptr;
  cudaEvent_t statsReady_ = nullptr;
  bool statsPending_ = false;
  ChunkSlots slots_;  // the streamed chunks' device slots (planner.h MemoryPlan::slots)

  float* cf_ = nullptr;
  // updateOnDevice: the next centroids (swapped with cf_), fp64 data mean, per-cluster shift and scatter
  float* cfNext_ = nullptr;
  double* mu64_ = nullptr;
  double* scatter_ = nullptr;
  double* shift_ = nullptr;
  bool cfFromUpdate_ = false;  // cf_ holds the last updateOnDevice's `next` (nothing uploaded since)
  // updateOnDevice's `next` comes down into hostCentroids_ on d2h_ behind the update (updated_) without a wait;
  // centroidsDown_ marks it there (copyUpdatedCentroids waits for it, and so does anything that reuses the buffer)
  cudaEvent_t updated_ = nullptr, centroidsDown_ = nullptr;
  bool sumsKept_ = false;      // the last finishPass kept its sums for updateOnDevice
  unsigned short* bhi_ = nullptr;
  unsigned short* blo_ = nullptr;
  float* cnorm_ = nullptr;
  float* mu_ = nullptr;
  std::vector<float> hostMu_;
  bool muReady_ = false;
  bool centroidsReady_ = false;  // cf_'s operands and statistics are queued (prepareCentroidOps) since cf_ last changed
  CentroidOps cops_;
  double* sums_ = nullptr;
  long long* counts_ = nullptr;
  double* inertia_ = nullptr;
  unsigned long long* rowFlags_ = nullptr;  // prepareRows' RowFlags: non-finite, zero-norm, beyond the exact range
  RowFlags rowFlags() const;
  unsigned long long* flaggedTotal_ = nullptr;
  unsigned* flaggedCount_ = nullptr;

  ExactStatistics exact_;  // fit passes' exact integer statistics (exact_statistics.h)
  // chunk_stream.cu: rows [firstRow, firstRow + rows) with their labels into exact_ — resident rows moved from
  // resPrevLabels_ or added — and, when dist is not null, their fp64 distances (sumsDistances: the bits accumulate()
  // gives them) for the farthest rows
  void exactRows(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, const std::int32_t* labels, bool resident,
                 double* dist, float* dist32, cudaStream_t s);

  RowOps streamOps_;
  int* flagged_ = nullptr;
  float* flaggedThr_ = nullptr;
  int* candCount_ = nullptr;
  int* cand_ = nullptr;
  double* dist_ = nullptr;
  char* farScratch_ = nullptr;
  AccumulateScratch acc_;

  RowOps resident_;
  int* resLabels_ = nullptr;
  // The resident rows' labels of the previous pass that computed them (swapped with resLabels_ after each such
  // pass), valid when that pass was the engine's last completed one: finishPass counts the changed rows.
  int* resPrevLabels_ = nullptr;
  bool prevLabelsValid_ = false;
  unsigned long long* changedCount_ = nullptr;
  float* resDist_ = nullptr;
  double* resDist64_ = nullptr;  // this pass's fp64 distance of each resident row (farthest rows, finishPass)
  // Whether a pass writes resDist64_ as it goes: D > 256 (rowDistances feeds the sums). Otherwise residentFarthest
  // computes them when a cluster came out empty.
  bool keepsResidentDistances() const { return !distancesFromSums(d_); }
  ResidentAccumulateScratch racc_;  // rows > 0: processResidentWhole
  FlagScratch resFlag_;             // exact mode, processResidentWhole: flagged rows of a piece
  bool residentRan_ = false;        // processResident ran in this pass
  int* hResLabels_ = nullptr;
  float* hResDist_ = nullptr;
  cudaEvent_t resComputed_ = nullptr;
  std::vector<cudaEvent_t> resChunkDone_;  // per resident chunk: its labels/distances are in the pinned staging
  bool residentPending_ = false;
  double* resFarDist_ = nullptr;
  long long* resFarRow_ = nullptr;
  double* hResFarDist_ = nullptr;
  long long* hResFarRow_ = nullptr;
  int resFarCap_ = 0;
  long long* gatherRows_ = nullptr;   // fillResidentValues: rows to gather, their values (device, pinned)
  float* gatherVals_ = nullptr;
  long long* hGatherRows_ = nullptr;
  float* hGatherVals_ = nullptr;
  int gatherCap_ = 0;
  bool stats_ = false;  // EngineConfig.stats: per-pass device times on stderr (stageMark)
  // Overlap of a partly resident pass (planner.h overlapPartials): streamed chunks on chunkStream_ (high priority)
  // with their own scratch, sums into a ring of per-chunk partials folded on compute_ in chunk order. Without the
  // partials (they did not fit) streamed chunks run behind the resident rows on compute_.
  bool overlap_ = false;
  cudaStream_t chunkStream_ = nullptr;
  cudaEvent_t passReady_ = nullptr;
  AccumulateScratch accS_;
  FlagScratch flagsS_;
  unsigned* flaggedCountS_ = nullptr;
  double* partSums_ = nullptr;
  long long* partCounts_ = nullptr;
  double* partInertia_ = nullptr;
  std::vector<cudaEvent_t> partReady_, partFolded_;
  std::int64_t partNext_ = 0;
  bool resWhole_ = false;                      // resident steps: pieces + accumulateResident (else chunk by chunk)
  std::int64_t resChunks_ = 0, resSteps_ = 0, resStep_ = 0;
  std::vector<cudaEvent_t> resStepDone_;      // per resident step, on compute_
  std::vector<std::size_t> pendingFolds_;     // partials waiting for the last resident step to be queued
  // resident steps queued beyond the last one seen done (CudaSettings.residentAhead), each ~one chunk's compute
  std::int64_t residentAhead_ = 2;
  std::vector<std::array<cudaEvent_t, 4>> stageEv_;
  std::size_t stagesUsed_ = 0;
  std::int64_t residentHeld_ = 0;
  std::int64_t retainedThisPass_ = 0;

  PassSpec spec_;
  bool fit_ = true;
  std::int64_t rowsSeen_ = 0;
  std::vector<FarRow> far_;
  ExactScreenPolicy screenPolicy_;  // exact mode: screen by one product first? (decided per pass from the last ones)
  bool screenThisPass_ = false;
  bool screenRefsWritten_ = false;      // a screened pass left the resident rows' best in resident_.screenRef
  bool screenRelativeThisPass_ = false; // this pass's screen keys on them (kScreenRef; the policy decides)
};

// count values of src (device) appended to out through the two pinned ring pieces (compute stream).
template <typename T, typename U>
void CudaBackend::download(const T* src, std::size_t count, std::vector<U>& out) {
  static_assert(sizeof(T) == sizeof(U), "same representation");
  out.clear();
  out.reserve(count);
  const std::size_t per = kRingBytes / sizeof(T), pieces = (count + per - 1) / per;
  auto enqueue = [&](std::size_t i) {
    const std::size_t n = std::min(per, count - i * per);
    check(cudaMemcpyAsync(ring_[i % 2], src + i * per, n * sizeof(T), cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaEventRecord(ringDone_[i % 2], compute_), "cudaEventRecord");
  };
  if (pieces > 0) enqueue(0);
  for (std::size_t i = 0; i < pieces; ++i) {
    if (i + 1 < pieces) enqueue(i + 1);  // into the other piece, whose data the host took in step i − 1
    check(cudaEventSynchronize(ringDone_[i % 2]), "D2H");
    const U* p = reinterpret_cast<const U*>(ring_[i % 2]);
    out.insert(out.end(), p, p + std::min(per, count - i * per));
  }
}

template <typename T, typename U>
void CudaBackend::takeDown(bool queued, std::size_t index, const T* src, std::vector<U>& out) {
  static_assert(sizeof(T) == 8 && sizeof(U) == 8, "8-byte values, as queueDown copies them");
  if (!queued) return download(src, std::size_t(k_), out);
  const U* p = reinterpret_cast<const U*>(ring_[0]) + index * std::size_t(k_);
  out.assign(p, p + k_);
}

}  // namespace cuda_backend
}  // namespace kmfleet
