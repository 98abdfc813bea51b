// Each row's fp64 distance to its labelled centroid (row_distances.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// rowDistances: fp64 Σ(x−c)² (or 1 − x·c for cosine) to the labelled centroid.
void rowDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                  double* dist, float* dist32, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
