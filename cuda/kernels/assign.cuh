// The fused distance + argmin (assign.cu: the portable mma.sync kernel, its error bounds and the candidate pass;
// the Hopper kernel of assign_wgmma.cu is tried first where it runs).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// Which assignment kernel runs and how the portable one lays out its shared memory (EngineConfig.cuda, backend.h
// CudaSettings). Both kernels give the same labels in exact mode; the settings let tests and tools compare them.
struct AssignKernel {
  bool portable = false;      // the portable mma.sync kernel even where the Hopper one could run
  int sharedMemoryLimit = 0;  // bytes per block the portable kernel plans for, when below the device's opt-in limit
};

// assignRows: labels for n rows. With F16x3, rows whose margin is within the bound are appended to
// flagged[] (count in *flaggedCount, window b1 + 2ε in flaggedThr[]) and must go through candidateRows +
// recheckRows. screened (n ints) and *screenedCount (F16x3, may be null = no screen): scratch of the one-product
// screen that spares most rows two of the three products (both kernels; assign_wgmma.cuh ExactScreen); free again once
// the assignment's launches on s are done, so a caller may lend candidateRows' candCount (later on the same stream).
void assignRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                OpKind op, std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s);

// Exact mode over the rows listed in rowIds (their count *rowCount on the device, at most maxRows): the three products
// and the margin test, as assignRows's second launch after a screen — the rows whose bounds could not settle them
// (resident_bounds.h). Flagged rows as assignRows: candidateRows and recheckRows follow.
void assignListedRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c,
                      int k, const std::int32_t* rowIds, const unsigned int* rowCount, std::int32_t* labels,
                      std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr, cudaStream_t s);

// Exact mode's one-product screen alone — the first launch of a screened F16x3 assignRows: labels from the hi·hi
// product and the rows its bound can't decide (screened, *screenedCount). Its labels are NOT exact: the tools' checks
// (that the screen decides rows) and timing splits only; no pass runs it alone.
void screenRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                std::int32_t* labels, std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s);

// Which assignment kernel assignRows runs for rows of d dims on the current device, as the engine's plan names it:
// "wgmma" (the Hopper kernel: this build has it, the device is compute capability 9.0, Dp ≤ 256 and the settings
// don't ask for the portable one) or "mma.sync" (the portable one).
const char* assignKernelName(const AssignKernel& kernel, int d);

// candidateRows: the same tensor-core products again for the flagged rows only, appending every centroid
// inside the row's window to cand[slot·kCandidates ..] (count candCount[slot], may exceed kCandidates).
// maxRows bounds the flagged count (the grid size); the count itself is read on the device.
void candidateRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c, int k,
                   const std::int32_t* flagged, const unsigned int* flaggedCount, const float* flaggedThr,
                   int* candCount, int* cand, cudaStream_t s);

// Shared-memory bytes the portable assignment kernel needs for (op, Dp) under the device's opt-in limit, or
// sharedMemoryLimit when that is lower (0: none); aResident: whether the block's rows stay in shared memory.
std::size_t assignSharedBytes(OpKind op, int dp, int sharedMemoryLimit = 0, bool* aResident = nullptr);

}  // namespace cuda
}  // namespace kmfleet
