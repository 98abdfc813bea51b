// fp64 row arithmetic with a FIXED summation order (8 interleaved partial sums combined as a fixed tree), so the
// bits do not depend on the CPU, the vector width or the thread count. Compiled only in baseline (non-ISA) units
// with -ffp-contract=off: these values decide labels on near-ties, distances, inertia and re-seeding.
// cpu/kernels_avx512bf16.cpp's sqDist64 computes sqDist64 with its 8 partial sums as 8 fp64 lanes, bit for bit: change
// both or neither.
#pragma once

#include <cstdint>

namespace kmfleet {

inline double combine8(const double* s) { return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])); }

inline double sqDist64(const float* x, const float* c, std::int64_t D) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    for (int j = 0; j < 8; ++j) {
      const double t = static_cast<double>(x[d + j]) - static_cast<double>(c[d + j]);
      s[j] += t * t;
    }
  for (int j = 0; d + j < D; ++j) {
    const double t = static_cast<double>(x[d + j]) - static_cast<double>(c[d + j]);
    s[j] += t * t;
  }
  return combine8(s);
}

inline double dot64(const float* x, const float* c, std::int64_t D) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(x[d + j]) * static_cast<double>(c[d + j]);
  for (int j = 0; d + j < D; ++j) s[j] += static_cast<double>(x[d + j]) * static_cast<double>(c[d + j]);
  return combine8(s);
}

inline double sqNorm64(const float* x, std::int64_t D) { return dot64(x, x, D); }

}  // namespace kmfleet
