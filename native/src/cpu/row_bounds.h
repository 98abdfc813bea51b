// Hamerly's bounds, kept per row across passes, so that a pass skips the distance work of the rows whose label the
// centroids' movement cannot have changed (DESIGN.md "Numerics": bounds). For row i with label a: an upper bound u on
// ‖x − c_a‖ and a lower bound l on ‖x − c_k‖ for every other k. Each pass moves them by how far each centroid moved
// since the centroids they refer to (u += δ_a, l −= the largest δ of the others: the triangle inequality), whatever
// moved the centroids — an update, a re-seed, a caller's setCentroids — lazily: a pass adds the drifts to per-centroid
// running sums (O(K)), and a row keeps its bounds relative to its label's sums when they were recorded, so no pass
// walks every row's bounds before it starts. A row is settled when u < l by more than fp64
// can blur (a relative 1e-9): its label's centroid is then the nearest by a margin the exact assignment also sees, so
// the labels — and every sum, count and distance, which follow from them — are the bits of a pass without bounds.
// A row they do not settle goes through the full assignment, whose error bounds give its new u and l (assign.cpp).
// Hamerly's second chance — u tightened to the row's exact distance to c_a before giving up — is left out: it settled
// no more rows on clustered data and cost every unsettled row a pass over its data. So a row is settled from its
// bounds alone, without its data.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
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
  // false once the host could not give their 20 bytes a row: the passes run without them
  bool usable() const { return !unusable_; }

  // Rows [firstRow + b, firstRow + e): the label of each row its bounds settle goes to labels[i] (i in [b, e)), the
  // others' i to `open`. Returns the rows settled.
  std::int64_t settle(std::int64_t firstRow, std::int64_t b, std::int64_t e, std::int32_t* labels,
                      std::vector<std::int32_t>& open) const;

  // After the row's assignment: its label and, with g_k = ‖c_k‖² − 2x·c_k (the squared distance less ‖x‖²),
  // gUpper ≥ g_label and gLower ≤ g_k for every other k; norm2 = ‖x‖² in fp64. gUpper = +inf: no bounds for it.
  void record(std::int64_t row, std::int32_t label, double norm2, double gUpper, double gLower) {
    const std::size_t r = static_cast<std::size_t>(row);
    if (!(gUpper < kInf) || gLower != gLower) {
      label_[r] = -1;
      return;
    }
    // ‖x − c‖² = ‖x‖² + g: the fp64 sum and ‖x‖²'s own rounding, rel_ of the magnitudes at most
    const double hi = norm2 + gUpper + rel_ * (norm2 + (gUpper < 0 ? -gUpper : gUpper));
    const double lo = norm2 + gLower - rel_ * (norm2 + (gLower < 0 ? -gLower : gLower));
    label_[r] = label;
    const std::size_t a = static_cast<std::size_t>(label);
    upper_[r] = std::sqrt(hi > 0 ? hi : 0.0) * (1 + rel_) - cumDrift_[a];
    // no other centroid (K = 1): nothing can take the row
    lower_[r] = gLower == kInf ? kInf : std::sqrt(lo > 0 ? lo : 0.0) * (1 - rel_) + cumOther_[a];
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  // a bound now, from the stored one and its label's running sums: the two fp64 roundings between (the record's and
  // this one) are below 2^-52 of the magnitudes, taken four times over
  static constexpr double kSumsError = 0x1p-50;
  double upper(std::size_t r, std::int32_t a) const {
    const double u = upper_[r], c = cumDrift_[static_cast<std::size_t>(a)];
    return (u + c) + kSumsError * (std::fabs(u) + c);
  }
  double lower(std::size_t r, std::int32_t a) const {
    const double l = lower_[r], c = cumOther_[static_cast<std::size_t>(a)];
    return l == kInf ? kInf : (l - c) - kSumsError * (std::fabs(l) + c);
  }
  std::int64_t K_ = 0, D_ = 0;
  double rel_ = 0;  // (D + 8)·2^-52: fp64 sums of D fp32 products, relative
  bool unusable_ = false;
  std::vector<float> last_;      // the centroids of the last pass (empty before the first)
  std::vector<double> cumDrift_; // per centroid, the sum of its drifts so far (rounded up)
  std::vector<double> cumOther_; // per centroid, the sum of the largest drift of the others so far (rounded up)
  Array<std::int32_t> label_;    // -1: no bounds
  Array<double> upper_, lower_;  // on distances, not squared, less / plus their label's running sums at the record
};

}  // namespace cpu
}  // namespace kmfleet
