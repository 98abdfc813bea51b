#include "row_bounds.h"

#include <algorithm>
#include <cmath>
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
  K_ = K;
  D_ = D;
  rel_ = static_cast<double>(D + 8) * std::ldexp(1.0, -52);
  if (unusable_) return;
  if (!label_.data()) {
    try {
      label_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
      upper_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
      lower_.allocate(static_cast<std::size_t>(rows), "the rows' bounds");
    } catch (const EngineError&) {  // they only save work: without the memory for them, the job runs without
      label_.reset();
      upper_.reset();
      lower_.reset();
      unusable_ = true;
      return;
    }
    std::fill(label_.data(), label_.data() + rows, -1);
  }
  const std::size_t n = static_cast<std::size_t>(K * D);
  if (cumDrift_.size() != static_cast<std::size_t>(K)) {
    cumDrift_.assign(static_cast<std::size_t>(K), 0.0);
    cumOther_.assign(static_cast<std::size_t>(K), 0.0);
  }
  if (last_.size() == n) {
    // how far each centroid moved, rounded up: fp64 of fp32 values, (D + 4)·2^-52 relative at most
    std::vector<double> drift(static_cast<std::size_t>(K));
    const double up = 1 + rel_;
    for (std::int64_t k = 0; k < K; ++k)
      drift[static_cast<std::size_t>(k)] = std::sqrt(sqDist64(centroids + k * D, last_.data() + k * D, D) * up) * up;
    std::int64_t top = 0;
    for (std::int64_t k = 1; k < K; ++k)
      if (drift[static_cast<std::size_t>(k)] > drift[static_cast<std::size_t>(top)]) top = k;
    double second = 0;
    for (std::int64_t k = 0; k < K; ++k)
      if (k != top) second = std::max(second, drift[static_cast<std::size_t>(k)]);
    const double first = drift[static_cast<std::size_t>(top)];
    // every row's bounds move with its label's sums, rounded up at each step so that a difference of two of them is
    // never less than the drift between
    for (std::int64_t k = 0; k < K; ++k) {
      const std::size_t i = static_cast<std::size_t>(k);
      cumDrift_[i] = (cumDrift_[i] + drift[i]) * up;
      cumOther_[i] = (cumOther_[i] + (k == top ? second : first)) * up;
    }
  }
  last_.assign(centroids, centroids + n);
}

std::int64_t RowBounds::settle(std::int64_t firstRow, std::int64_t b, std::int64_t e, std::int32_t* labels,
                                std::vector<std::int32_t>& open) const {
  std::int64_t settled = 0;
  for (std::int64_t i = b; i < e; ++i) {
    const std::size_t r = static_cast<std::size_t>(firstRow + i);
    const std::int32_t a = label_[r];
    if (a >= 0 && upper(r, a) * (1 + kMargin) < lower(r, a)) {
      labels[i] = a;
      ++settled;
    } else {
      open.push_back(static_cast<std::int32_t>(i));
    }
  }
  return settled;
}

}  // namespace cpu
}  // namespace kmfleet
