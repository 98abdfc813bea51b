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
#include "kernels/accumulate.cuh"
#include "kernels/assign.cuh"
#include "kernels/exact_sums.cuh"
#include "kernels/operands.cuh"
#include "kernels/types.h"
#include "overlap_partials.h"
#include "planner.h"
#include "resident_rows.h"
#include "resident_steps.h"
#include "stage_timer.h"

namespace kmfleet {

class ThreadPool;

namespace cuda_backend {

using namespace cuda;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const EngineConfig& cfg, ThreadPool* pool);
  ~CudaBackend() override;

  const Plan& plan() const override { return shape_.plan; }
  void* hostBuffer(int index) override { return host_.at(static_cast<std::size_t>(index)); }
  std::int64_t residentHeld() const override { return resident_.held(); }

  void beginPass(const PassSpec& spec) override;        // cuda_backend.cu
  void processResident() override;                      // resident_pass.cu
  void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) override;  // chunk_stream.cu
  HostBlock allocateHostRows(std::size_t bytes, std::string& warning) override;       // backend_buffers.cu
  PassTotals finishPass() override;                     // cuda_backend.cu
  bool updatesOnDevice() const override { return true; }
  DeviceUpdate updateOnDevice(bool dataVariance) override;  // cuda_backend.cu
  void copyUpdatedCentroids(float* dst) override;           // cuda_backend.cu
  void abortPass() noexcept override;                   // cuda_backend.cu

 private:
  // backend_buffers.cu
  void allocate();
  void release() noexcept;

  // chunk_stream.cu
  void retire(ChunkSlot& s);
  void drain(ChunkSlot& s);
  void computeChunk(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, ChunkSlot* slotp,
                    cudaStream_t s = nullptr);
  void ensureFarBuffers(ChunkSlot& s, int f);
  void assignPiece(const RowOps& ops, std::int64_t rows, std::int32_t* labels, const FlagScratch& f,
                   cudaStream_t s = nullptr, unsigned* count = nullptr);

  // resident_pass.cu
  void processResidentWhole();
  void accumulateResidentRows(bool wantDist);
  void pumpResident(bool all);
  void residentStep(std::int64_t i);
  void waitPumping(cudaEvent_t e, const char* what);


  // cuda_backend.cu: boundary i of a chunk's stages on s (the compute stream when null), when stats are on
  void stageMark(int i, cudaStream_t s = nullptr) { stages_.mark(i, s ? s : streams_.compute); }

  const BackendShape shape_;
  ThreadPool* pool_ = nullptr;  // the engine's (may be null): copyResidentOutputs
  BackendStreams streams_;
  StageTimer stages_;
  std::vector<void*> host_;     // the engine's host buffers (pinned)
  DownloadRing ring_;           // sums and totals down; its piece size is the centroids' upload's
  DeviceTotals totals_;         // the pass's sums, counts, inertia and row flags
  ChunkScratch scratch_;        // the compute stream's chunk scratch
  CentroidSide centroids_;      // the pass's centroids, μ, operands, the fit update
  ChunkSlots slots_;  // the streamed chunks' device slots (planner.h MemoryPlan::slots)

  bool sumsKept_ = false;      // the last finishPass kept its sums for updateOnDevice
  RowFlags rowFlags() const { return totals_.rowFlagsOf(shape_); }

  ExactStatistics exact_;  // fit passes' exact integer statistics (exact_statistics.h)
  // chunk_stream.cu: rows [firstRow, firstRow + rows) with their labels into exact_ — resident rows moved from
  // resPrevLabels_ or added — and, when dist is not null, their fp64 distances (sumsDistances: the bits accumulate()
  // gives them) for the farthest rows
  void exactRows(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, const std::int32_t* labels, bool resident,
                 double* dist, cudaStream_t s);

  ResidentRows resident_;  // the rows kept on the device across passes
  ResidentSteps steps_;      // an overlapped pass's resident work, queued a few steps ahead
  OverlapPartials overlap_;  // an overlapped pass's streamed chunks: the chunk stream's scratch, partials, folds

  PassSpec spec_;
  bool fit_ = true;
  std::int64_t rowsSeen_ = 0;
  FarthestRows farthest_;  // the pass's farthest rows, when a cluster came out empty
  ExactScreenPolicy screenPolicy_;  // exact mode: screen by one product first? (decided per pass from the last ones)
  bool screenThisPass_ = false;
  bool screenRefsWritten_ = false;      // a screened pass left the resident rows' best in resident_.screenRef
  bool screenRelativeThisPass_ = false; // this pass's screen keys on them (kScreenRef; the policy decides)
};

}  // namespace cuda_backend
}  // namespace kmfleet
