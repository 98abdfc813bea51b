// The CUDA Backend (native/src/backend.h): the pass orchestration over classes that each own their part of the state.
//
// Streams and events per chunk i (slot = i % S; S = planner's slots: 2, or 4 when chunks stream on every pass):
//   copy     H2D host buffer → slot.raw            (waits slot.rawFree: chunk i−S finished reading it)
//   compute  prepare → assign (+ recheck) → distances → sums      (waits the copy)
//   d2h      labels (+ distances, farthest rows) → slot's pinned staging (waits compute)
// processChunk returns once its H2D is done (the engine may refill the host memory) while compute of chunk i
// and the D2H of chunk i−1 are still in flight. The host copies a slot's staging into the engine's label
// array when the slot comes round again (or in finishPass).
// Resident rows (resident_rows.h) are processed by processResident with the same chunk boundaries as when they were
// fed, so sums are added in the same order as a fully streamed run: bitwise-identical centroids. With two resident
// chunks or more (and the planner's scratch) they are assigned in one launch, or in pieces of ~2M rows where the exact
// mode's flagged-row scratch for all of them does not fit (planner.h MemoryPlan.residentPiece), and accumulated in one
// go (accumulateResident: the same additions). Their fp64 distances stay on the device, so the farthest rows — asked
// for only when a cluster came out empty (backend.h) — are found in finishPass, per chunk as they were fed.
// A partly resident pass runs its streamed chunks on the chunk stream beside the resident rows (overlap_partials.h),
// the resident work queued a few steps ahead (resident_steps.h); without the partials, behind them on compute.
// Rows of f16/bf16 data (l2) are kept as they are (no fp32 copy, types.h RowValues): a streamed chunk's values
// are its slot's raw rows, so the slot is released (rawFree) only after the chunk's kernels.
// Counts and inertia (and the update's shift and scatter) come down behind the last kernels under the pass's one final
// wait where they fit in a piece of the download ring, else, like the sums, through its two pieces (download_ring.h).
//
// The owners of the state (one class a file, named after it):
//   BackendShape     (backend_shape.h)     device, memory plan, plan, assignment kernel, sizes: fixed at construction
//   BackendStreams   (backend_streams.h)   the copy, compute, D2H and chunk streams
//   StageTimer       (stage_timer.h)       EngineConfig.stats: per-chunk stage events, summed per pass
//   DownloadRing     (download_ring.h)     two pinned pieces that sums and K-long totals come down through
//   DeviceTotals     (device_totals.h)     the pass's sums, counts, inertia and row flags on the device
//   ChunkScratch     (chunk_scratch.h)     the compute stream's scratch for a streamed chunk
//   ChunkSlots       (chunk_slots.h)       the streamed chunks' device slots, their pinned staging and events
//   CentroidSide     (centroid_side.h)     the centroids up, μ, their operands and statistics, the fit update
//   ExactStatistics  (exact_statistics.h)  the passes' exact integer statistics and the move-or-add decision
//   ResidentRows     (resident_rows.h)     the resident rows, their labels, distances, staging, changed-label count
//   ResidentBounds   (resident_bounds.h)   exact mode: the resident rows' bounds, the rows they settle in a pass
//   TierRows         (tier_rows.h)         exact mode out of core: the engine's host-tier rows' labels and bounds
//   ResidentSteps    (resident_steps.h)    an overlapped pass's resident work queued a few steps ahead
//   OverlapPartials  (overlap_partials.h)  an overlapped pass's chunk-stream scratch and per-chunk partials
//   FarthestRows     (farthest_rows.h)     the pass's farthest rows: heap, resident candidates, gathered values
// FlagScratch (flag_scratch.h) is the flagged-row scratch of an exact assignment; device_memory.h has the allocation
// helpers, the CUDA error mapping and DeviceScope. The kernels are in kernels/.
//
// This header (internal to cuda/) declares the orchestration; its member functions live one concept a file:
//   cuda_backend.cu     construction, begin/abort of a pass, the device update, makeCudaBackend (cuda_bridge.h)
//   pass_finish.cu      finishPass as named steps: the device's totals first, then the host's waits and outputs
//   backend_buffers.cu  the owners' allocation and release, the engine's host buffers and host-tier blocks
//   chunk_stream.cu     a chunk: through a slot (processChunk, or processChunkInPieces through the upload ring),
//                       retire, drain; its kernels and outputs (computeChunk,
//                       also resident chunks one by one), assignPiece, exactRows
//   resident_pass.cu    the resident rows in a pass: chunk by chunk, in one go (pieces + one accumulate), or queued a
//                       few steps ahead of the streamed chunks (overlap)
//   tier_pass.cu        the engine's host tier in a pass: every chunk streamed, keeping its rows' labels, bounds and
//                       statistics, or only the rows the bounds leave open gathered from host memory
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.h"
#include "backend_shape.h"
#include "backend_streams.h"
#include "centroid_side.h"
#include "chunk_scratch.h"
#include "chunk_slots.h"
#include "device_memory.h"
#include "device_totals.h"
#include "download_ring.h"
#include "exact_screen_policy.h"
#include "exact_statistics.h"
#include "farthest_rows.h"
#include "flag_scratch.h"
#include "kernels/types.h"
#include "overlap_partials.h"
#include "planner.h"
#include "resident_bounds.h"
#include "resident_rows.h"
#include "resident_steps.h"
#include "stage_timer.h"
#include "tier_rows.h"
#include "upload_ring.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

using namespace cuda;

class CudaBackend final : public Backend {
 public:
  // rowOffset: the backend is a lane of a job on several devices (multi_device_backend.h) whose rows are the job's
  // [rowOffset, rowOffset + cfg.rows): the rows its errors and farthest rows name
  CudaBackend(const EngineConfig& cfg, ThreadPool* pool, std::int64_t rowOffset = 0);
  ~CudaBackend() override;

  const Plan& plan() const override { return shape_.plan; }
  void* hostBuffer(int index) override { return host_.at(static_cast<std::size_t>(index)); }
  std::int64_t residentHeld() const override { return resident_.held(); }

  void beginPass(const PassSpec& spec) override;        // cuda_backend.cu
  void processResident() override;                      // resident_pass.cu
  void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) override;  // chunk_stream.cu
  bool takesPieces() const override { return pool_ != nullptr; }
  void processChunkInPieces(const ChunkPieces& pieces, std::int64_t firstRow, std::int64_t rows) override;
  HostBlock allocateHostRows(std::size_t bytes, std::string& warning) override;       // backend_buffers.cu
  std::int64_t processHostTier(const HostTier& tier, std::int64_t from, std::int64_t upTo,
                               const std::atomic<bool>& cancel) override;              // tier_pass.cu
  PassTotals finishPass() override { return finishPass(nullptr); }

  // A lane of a job on several devices (multi_device_backend.h), pass_finish.cu / cuda_backend.cu:
  // The statistics of the other lanes of the pass, once total on their devices.
  using LaneStatistics = std::function<std::vector<ExactStatistics::Peer>()>;
  // finishPass with the other lanes' statistics added into this one's before its totals (the first lane's): its own
  // resident outputs are taken first, while the other lanes finish.
  PassTotals finishPass(const LaneStatistics& lanes);
  const cuda::ExactStats& passStatistics() const { return exact_.passStatistics(); }
  int device() const { return shape_.device; }
  float mergeMs() const { return exact_.mergeMs(); }  // the last merge's device time
  // A lane other than the first: a finishPass that left a cluster empty in this lane does not search its farthest
  // rows (a cluster empty in the lane is seldom empty in the job); farthestOfLastPass does, when the job needs them.
  void deferFarthestRows() { deferFarthest_ = true; }
  std::vector<FarRow> farthestOfLastPass();
  // The operands' shift μ: every lane takes the first lane's, computed from the job's first rows, so that each row's
  // products are the same bits on every device.
  bool muReady() const { return centroids_.muReady(); }
  const std::vector<float>& mu() const { return centroids_.hostMu(); }
  void adoptMu(const std::vector<float>& mu);
  // The next beginPass takes its centroids from `first`'s last update, device to device (a job's other lanes).
  void takeCentroidsFrom(const CudaBackend& first) { centroidsFrom_ = &first; }
  bool updatesOnDevice() const override { return true; }
  DeviceUpdate updateOnDevice(bool dataVariance) override;  // cuda_backend.cu
  void copyUpdatedCentroids(float* dst) override;           // cuda_backend.cu
  void abortPass() noexcept override;                   // cuda_backend.cu

 private:
  // backend_buffers.cu
  void allocate();
  void release() noexcept;

  // chunk_stream.cu
  void computeCopied(ChunkSlot& slot, std::int64_t firstRow, std::int64_t rows);
  void retire(ChunkSlot& s);
  void drain(ChunkSlot& s);
  void computeChunk(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, ChunkSlot* slotp,
                    cudaStream_t s = nullptr);
  void ensureFarBuffers(ChunkSlot& s, int f);
  void assignPiece(const RowOps& ops, std::int64_t rows, std::int32_t* labels, const FlagScratch& f,
                   cudaStream_t s = nullptr, unsigned* count = nullptr, const std::int32_t* listed = nullptr,
                   const unsigned* listedCount = nullptr);
  // Rows [firstRow, firstRow + rows) with their labels into exact_ — resident rows moved from their previous labels or
  // added, host-tier rows whose state is kept into the tier's statistics (tier_rows.h), others into the pass's — and,
  // when dist is not null, their fp64 distances (sumsDistances: the bits accumulate() gives them) for the farthest
  // rows or the pass's distances, rounded to fp32 into dist32 too when it is not null.
  enum class RowsOf { Resident, Streamed, KeptTier };
  void exactRows(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, const std::int32_t* labels, RowsOf of,
                 double* dist, float* dist32, cudaStream_t s);

  // tier_pass.cu
  bool tierSkipsThisPass() const;      // this pass gathers only the host tier's open rows (tier_rows.h)
  void streamTierKept(const HostTier& tier, const std::atomic<bool>& cancel);  // every chunk, keeping the rows' state
  void gatherTierOpen(const std::atomic<bool>& cancel);                           // only the rows the bounds leave open
  void takeTierLabels();               // a pass that gathered: its tier labels into the engine's array
  void offerTierFarthest();            // a pass that gathered: the tier read again for its farthest rows
  RowOps preparedSlotRows(const ChunkSlot& slot, std::int64_t firstRow, std::int64_t rows, cudaStream_t s);

  // resident_pass.cu
  void processResidentWhole();
  void accumulateResidentRows(bool wantDist);
  void pumpResident(bool all);
  void residentStep(std::int64_t i);
  void waitPumping(cudaEvent_t e, const char* what);

  // pass_finish.cu: finishPass's steps, in the order it runs them
  void queueResidentRest();
  bool queueChangedLabelCount();
  void totalExactStatistics();
  void exactTotalsToFp64();
  void takeResidentOutputs();
  bool waitForFlagsAndTotals(bool countChanges);
  void throwOnBadRows() const;
  PassTotals takeTotals(bool totalsQueued);
  void takeLabelChanges(PassTotals& t, bool anyEmpty);
  void recordScreen();
  std::vector<FarRow> farthestRows();
  void closePass(PassTotals& t, bool countChanges);

  // Boundary i of a chunk's stages on s (the compute stream when null), when stats are on.
  void stageMark(int i, cudaStream_t s = nullptr) { stages_.mark(i, s ? s : streams_.compute); }
  // Where prepareRows reports bad rows.
  RowFlags rowFlags() const { return totals_.rowFlagsOf(shape_); }

  const BackendShape shape_;
  const std::int64_t rowOffset_;  // the job's row of this backend's row 0 (a lane of several devices; else 0)
  bool deferFarthest_ = false;    // a lane: the farthest rows only when farthestOfLastPass asks
  bool farthestDeferred_ = false; // the last pass left a cluster empty here and did not search them
  bool deferredResidentRan_ = false;
  ThreadPool* pool_ = nullptr;  // the engine's (may be null): the resident outputs' copies, copyUpdatedCentroids
  BackendStreams streams_;
  StageTimer stages_;
  std::vector<void*> host_;     // the engine's host buffers (pinned)
  DownloadRing ring_;
  UploadRing uploads_;  // a file's rows in pieces (processChunkInPieces), made on first use
  DeviceTotals totals_;
  ChunkScratch scratch_;
  ChunkSlots slots_;
  CentroidSide centroids_;
  ExactStatistics exact_;
  ResidentRows resident_;
  ResidentBounds bounds_;
  TierRows tier_;
  ResidentSteps steps_;
  OverlapPartials overlap_;
  FarthestRows farthest_;
  ExactScreenPolicy screenPolicy_;  // exact mode: screen by one product first? (decided per pass from the last ones)
  bool screenRefsWritten_ = false;  // a screened pass left the resident rows' best in their RowOps.screenRef

  // the pass
  PassSpec spec_;
  bool fit_ = true;
  std::int64_t rowsSeen_ = 0;
  // the pass's streamed chunks: from row `first` on, `rows` of them, `compared` with their previous labels as they were
  // drained, `changed` of those differing
  struct StreamedLabels {
    std::int64_t first = -1, rows = 0, compared = 0, changed = 0;
  } streamed_;
  const HostTier* tierSource_ = nullptr;  // the engine's host tier, while this pass keeps its rows' state
  bool tierChunks_ = false;               // the chunks processChunk takes now are the tier's, kept (streamTierKept)
  bool screenThisPass_ = false;
  bool screenRelativeThisPass_ = false;  // this pass's screen keys on the resident rows' last best (the policy decides)
  bool sumsKeptForUpdate_ = false;       // the last finishPass kept its sums on the device for updateOnDevice
  const CudaBackend* centroidsFrom_ = nullptr;  // takeCentroidsFrom, for the next beginPass only
};

}  // namespace cuda_backend
}  // namespace kmfleet
