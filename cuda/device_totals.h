// The pass's totals on the device — fp64 sums, counts and inertia per cluster — and its row flags: the first bad row
// of each kind that prepareRows found, the rows flagged for the recheck and passed on by the screen, with the pinned
// words they come down into.
#pragma once

#include <cuda_runtime.h>

#include "backend_shape.h"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

struct DeviceTotals {
  double* sums = nullptr;       // K×D
  long long* counts = nullptr;  // K
  double* inertia = nullptr;    // K
  unsigned long long* rowFlags = nullptr;      // prepareRows' RowFlags: non-finite, zero-norm, beyond the exact range
  unsigned long long* flaggedTotal = nullptr;  // rows flagged for the recheck, rows the screen passed on
  unsigned* flaggedCount = nullptr;            // the compute stream's per-assignment counts of those two (assignPiece)
  // pinned: rowFlags' three, flagged total, changed resident rows, screened total
  unsigned long long* hostFlags = nullptr;

  void allocate(const BackendShape& shape);
  void release() noexcept;
  // A pass begins: totals zeroed, no bad row yet, nothing flagged (on s).
  void zero(const BackendShape& shape, cudaStream_t s);
  // Where prepareRows reports bad rows: the range of the exact statistics only on the path that sums exactly.
  cuda::RowFlags rowFlagsOf(const BackendShape& shape) const {
    return cuda::RowFlags{rowFlags, rowFlags + 1, shape.memory.exactSums ? rowFlags + 2 : nullptr};
  }
  // An assignment's flagged and screened counts (count[0], count[1]) added to the pass's, on s.
  void addFlagged(cudaStream_t s, const unsigned* count);
};

}  // namespace cuda_backend
}  // namespace kmfleet
