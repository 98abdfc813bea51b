#include "row_bounds.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../row_math.h"

namespace kmfleet {
namespace cpu {

namespace {

// u < l with this relative room: fp64's evaluation of the distances (D·2^-53 relative) cannot reorder them
constexpr double kMargin = 1e-9;

}  // namespace

void RowBounds::beginPass(ThreadPool& pool, const float* centroids, std::int64_t K, std::int64_t D,
                          std::int64_t rows) {
  c_ = centroids;
  K_ = K;
  D_ = D;
  if (!label_.data()) {
    label_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
    upper_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
    lower_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
    std::fill(label_.data(), label_.data() + rows, -1);
  }
  const std::size_t n = static_cast<std::size_t>(K * D);
  if (last_.size() == n) {
    // how far each centroid moved, rounded up: fp64 of fp32 values, (D + 4)·2^-52 relative at most
    std::vector<double> drift(static_cast<std::size_t>(K));
    const double up = 1 + static_cast<double>(D + 8) * std::ldexp(1.0, -52);
    for (std::int64_t k = 0; k < K; ++k)
      drift[static_cast<std::size_t>(k)] = std::sqrt(sqDist64(centroids + k * D, last_.data() + k * D, D) * up) * up;
    std::int64_t top = 0;
    for (std::int64_t k = 1; k < K; ++k)
      if (drift[static_cast<std::size_t>(k)] > drift[static_cast<std::size_t>(top)]) top = k;
    double second = 0;
    for (std::int64_t k = 0; k < K; ++k)
      if (k != top) second = std::max(second, drift[static_cast<std::size_t>(k)]);
    const double first = drift[static_cast<std::size_t>(top)];
    if (first > 0) {
      pool.run([&](int tid, int nt) {
        std::int64_t b, e;
        ThreadPool::range(rows, tid, nt, 1, b, e);
        for (std::int64_t r = b; r < e; ++r) {
          const std::int32_t a = label_[static_cast<std::size_t>(r)];
          if (a < 0) continue;
          upper_[static_cast<std::size_t>(r)] = (upper_[static_cast<std::size_t>(r)] + drift[static_cast<std::size_t>(a)]) * up;
          lower_[static_cast<std::size_t>(r)] = (lower_[static_cast<std::size_t>(r)] - (a == top ? second : first)) / up;
        }
      });
    }
  }
  last_.assign(centroids, centroids + n);
}

std::int32_t RowBounds::settle(std::int64_t row, const float* x) {
  const std::size_t r = static_cast<std::size_t>(row);
  const std::int32_t a = label_[r];
  if (a < 0) return -1;
  if (upper_[r] * (1 + kMargin) < lower_[r]) return a;
  // the exact distance to its centroid: fp64 of fp32 values, (D + 4)·2^-53 relative at most
  const double up = 1 + static_cast<double>(D_ + 8) * std::ldexp(1.0, -52);
  upper_[r] = std::sqrt(sqDist64(x, c_ + static_cast<std::int64_t>(a) * D_, D_) * up) * up;
  return upper_[r] * (1 + kMargin) < lower_[r] ? a : -1;
}

void RowBounds::record(std::int64_t row, std::int32_t label, double norm2, double gUpper, double gLower) {
  const std::size_t r = static_cast<std::size_t>(row);
  if (!(gUpper < std::numeric_limits<double>::infinity()) || std::isnan(gLower)) {
    label_[r] = -1;
    return;
  }
  // ‖x − c‖² = ‖x‖² + g: the fp64 sum and ‖x‖²'s own rounding, (D + 8)·2^-52 of the magnitudes at most
  const double rel = static_cast<double>(D_ + 8) * std::ldexp(1.0, -52);
  const double hi = norm2 + gUpper + rel * (norm2 + std::fabs(gUpper));
  const double lo = norm2 + gLower - rel * (norm2 + std::fabs(gLower));
  label_[r] = label;
  upper_[r] = std::sqrt(std::max(0.0, hi)) * (1 + rel);
  // no other centroid (K = 1): nothing can take the row
  lower_[r] = gLower == std::numeric_limits<double>::infinity() ? gLower : std::sqrt(std::max(0.0, lo)) / (1 + rel);
}

}  // namespace cpu
}  // namespace kmfleet
