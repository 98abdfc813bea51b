// Exact per-cluster statistics of the rows, as integers (DESIGN.md "Numerics": sums and determinism): the CPU side of
// what cuda/kernels/exact_sums.cuh keeps on the device, with the same grid, so both backends round the same exact
// values into the same fp64 sums and inertia.
//
// Every fp32 value x is truncated once, toward zero, onto the 2^-96 grid: x̃ = M·2^-96 with the integer M = m·2^s
// (m the ≤ 24-bit significand, s = biased exponent − 54; for s < 0, M = m >> −s). Per cluster c:
//   sum[c][j]  Σ x̃_j over its rows     on the 2^-96 grid, in kWindows signed 128-bit windows: a value with
//                                      M = m·2^s goes whole into window s/64 as m·2^(s mod 64) < 2^88, so a window
//                                      takes 2^39 rows before it could overflow, with no carry beyond it; the
//                                      integer is Σ_w window[w]·2^(64w)
//   sq[c]      Σ ‖x̃‖² over its rows    kSqWords-word two's complement on the 2^-192 grid (l2 only); each row's
//                                      own first (its values' squares in 32-bit limbs), then added once
//   count[c]   its rows
// Integer additions are exact and commute, so the statistics are the same bits whatever the order, the threads, the
// chunking or the history of the additions: a row leaving one cluster for another is subtracted there and added here.
// The words cover every finite fp32 value (|x̃| < 2^224) for fewer than 2^39 rows and any D the engine takes (< 2^24);
// the CUDA backend's fewer words cover |x| < 2^64 and fewer rows (the same integers wherever both apply).
#pragma once

#include <cstdint>
#include <vector>

#include "../backend.h"
#include "../memory.h"
#include "../thread_pool.h"

namespace kmfleet {
namespace cpu {

class ExactStatistics {
 public:
  static constexpr int kWindows = 4;        // s ≤ 200 for a finite value: windows 0…3
  static constexpr int kSumWords = 5;       // the canonical Σx: |Σ| < 2^39 · 2^224
  static constexpr int kSqWords = 9;        // Σ‖x̃‖² and the inertia's terms on the 2^-192 grid
  static constexpr int kSqRowWindows = 7;   // 2s ≤ 400

  // K clusters of D values; Σ‖x̃‖² only when `squares` (l2: the inertia needs it, cosine does not). Zeroed.
  void allocate(std::int64_t K, std::int64_t D, bool squares);
  bool allocated() const { return K_ > 0; }

  // Row x (D fp32 values) into cluster k, or out of it. Callers own whole clusters per thread: no two threads touch
  // one cluster at once.
  void add(std::int64_t k, const float* x) { update(k, x, false); }
  void subtract(std::int64_t k, const float* x) { update(k, x, true); }

  // From the statistics and the pass's centroids c (K×D fp32, truncated onto the same grid: c̃), each rounded once to
  // the nearest fp64 (ties to even):
  //   sums[k][j] = Σ x̃_j,  counts[k],
  //   inertia[k] = l2: Σ‖x̃ − c̃‖² = sq − 2·Σ_j c̃_j·sum_j + count·‖c̃‖²; cosine (unit rows and centroids): Σ(1 − x̃·c̃)
  //                = count − Σ_j c̃_j·sum_j — computed exactly, so 0 where every row sits on its centroid.
  // A non-empty cluster whose centroid has a non-finite value gets a NaN inertia.
  void finish(const float* centroids, Metric metric, ThreadPool& pool, std::vector<double>& sums,
              std::vector<std::int64_t>& counts, std::vector<double>& inertia) const;

 private:
  void update(std::int64_t k, const float* x, bool subtract);
  static void canonical(const std::uint64_t* lo, const std::uint64_t* hi, std::int64_t stride, std::uint64_t* out);

  std::int64_t K_ = 0, D_ = 0;
  bool squares_ = false;
  Array<std::uint64_t> lo_, hi_;  // K × kWindows × D: the windows' low and high words
  Array<std::uint64_t> sq_;   // K × kSqWords
  std::vector<std::int64_t> count_;
};

}  // namespace cpu
}  // namespace kmfleet
