// Hamerly's bounds, kept per row across passes, so that a pass skips the distance work of the rows whose label the
// centroids' movement cannot have changed (DESIGN.md "Numerics": bounds). For row i with label a: an upper bound u on
// ‖x − c_a‖ and a lower bound l on ‖x − c_k‖ for every other k. A pass first moves them by how far each centroid moved
// since the centroids they refer to (u += δ_a, l −= the largest δ of the others: the triangle inequality), whatever
// moved the centroids — an update, a re-seed, a caller's setCentroids. A row is settled when u < l by more than fp64
// can blur (a relative 1e-9): its label's centroid is then the nearest by a margin the exact assignment also sees, so
// the labels — and every sum, count and distance, which follow from them — are the bits of a pass without bounds.
// A row that is not settled by its bounds gets its exact distance to c_a (one fp64 row) and a second chance, then the
// full assignment, whose error bounds give the new u and l (assign.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "../memory.h"
#include "../thread_pool.h"

namespace kmfleet {
namespace cpu {

class RowBounds {
 public:
  // The pass's centroids (K×D, fixed during the pass): every row's bounds are moved from the centroids of the last
  // pass to these.
  void beginPass(ThreadPool& pool, const float* centroids, std::int64_t K, std::int64_t D, std::int64_t rows);

  // The row's label when its bounds settle it (x: the row as the kernels see it), else -1. Tightens its upper bound.
  std::int32_t settle(std::int64_t row, const float* x);

  // After the row's assignment: its label and, with g_k = ‖c_k‖² − 2x·c_k (the squared distance less ‖x‖²),
  // gUpper ≥ g_label and gLower ≤ g_k for every other k; norm2 = ‖x‖² in fp64. gUpper = +inf: no bounds for it.
  void record(std::int64_t row, std::int32_t label, double norm2, double gUpper, double gLower);

 private:
  const float* c_ = nullptr;
  std::int64_t K_ = 0, D_ = 0;
  std::vector<float> last_;      // the centroids the bounds refer to (empty before the first pass)
  Array<std::int32_t> label_;    // -1: no bounds
  Array<double> upper_, lower_;  // on distances, not squared
};

}  // namespace cpu
}  // namespace kmfleet
