// The Hopper (sm_90a) path of the fused assignment: wgmma products, TMA loads, a persistent grid.
// Compiled only into builds whose architecture list holds 90 (cuda/CMakeLists.txt defines KMFLEET_HOPPER then);
// assignRows (assign.cu) tries it first and falls back to the portable mma.sync kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// The exact mode's error bound per row (assign.cu derives it): ε_r = epsX·‖x̂_r‖ + epsL·‖xl_r‖ + epsC +
// g_r·(epsG + epsM·m²), m = ‖x̂_r‖/s_r + cmax, g_r = s_r·s_c/2. epsL: the one-product screen only (‖xl_r‖ from
// RowOps.rowNormLo).
struct ExactBound {
  float epsX = 0, epsC = 0, epsG = 0, epsM = 0, cmax = 0, epsL = 0;
};

// Exact mode's one-product screen: `rows` (n ints) and `count` receive the rows whose margin the one-product bound
// (hi·hi, assign.cu withScreenBound) can't decide; only those then take the three products. rows = null: no
// screen (all rows take the three products).
struct ExactScreen {
  std::int32_t* rows = nullptr;
  unsigned* count = nullptr;
  ExactBound bound;
  bool alone = false;  // the screen only, no three products after it (assign.cuh screenRows: its labels are not exact)
  bool listed = false;  // rows and count already list the rows to take (assign.cuh assignListedRows): no screen runs
};

// Labels for n rows, as assignRows: F16x1 and, with the margin test against `bound` that appends the rows
// to re-check to flagged/flaggedCount/flaggedThr, F16x3 (screened first when `screen` has its scratch). Returns false
// without launching anything when this path can't take the call: not a compute capability 9.0 device, or Dp > 256.
bool assignRowsHopper(const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k, OpKind op,
                      std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                      const ExactBound& bound, const ExactScreen& screen, cudaStream_t s);

// Whether assignRowsHopper takes rows of d dims on the current device (its checks before any launch-size one).
bool hopperAssignTakes(int d);

}  // namespace cuda
}  // namespace kmfleet
