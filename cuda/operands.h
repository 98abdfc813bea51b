// Centroid operands of one pass (host statistics + device conversion); see operands.cu.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels.h"

namespace kmfleet {
namespace cuda {

struct CentroidStats {
  float scale = 1;    // power of two s_c with max|ĉ| ∈ [2^14, 2^15)
  float maxNorm = 0;  // max ‖c − μ‖, rounded up
};
// Statistics of c − μ (mu may be null: μ = 0).
CentroidStats centroidStats(const float* c, const float* mu, std::int64_t k, std::int64_t d);

// cfDevice (K×D fp32) → bhi/blo (Kp×Dp 16-bit, zero padded) and cnorm (Kp, +inf for padding).
void prepareCentroids(const float* cfDevice, const float* muDevice, int k, int d, OpKind op, float scale, void* bhi,
                      void* blo, float* cnorm, cudaStream_t s);
// μ = mean of the n rows of xf (fp64 sums, fixed order), on the device.
void rowMean(const float* xf, std::int64_t n, int d, float* mu, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
