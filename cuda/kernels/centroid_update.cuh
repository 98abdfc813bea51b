// The fit pass's centroid update on the device, where the pass's fp64 totals already are: the same arithmetic as the
// Engine's host update (native/src/engine_update.cpp applyFit and dataVariance), operation for operation and in the
// same order, so the next centroids, the shift and the data variance have the same bits as on the host — and neither
// the K×D sums need to come down nor the next centroids go up again (1M×256×4096: ~1.5 ms of host work a pass).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kmfleet {
namespace cuda {

struct ClusterUpdateArgs {
  const double* sums = nullptr;        // K×D fp64 Σ rows per cluster
  const long long* counts = nullptr;   // K, every one > 0 when `next` is asked (re-seeding stays on the host)
  const double* inertia = nullptr;     // K Σ distances per cluster (squared L2, or 1 − cos)
  const float* centroids = nullptr;    // K×D the pass's centroids
  int k = 0, d = 0;
  bool cosine = false;
  double rows = 0;                     // rows of the pass (the data variance's N)
  double* mu = nullptr;                // D scratch: the data mean (fp64), when `scatter` is asked
  double* scatter = nullptr;           // K out, or null: cluster k's term of Σ‖x − μ‖² (0 for an empty cluster)
  float* next = nullptr;               // K×D out, or null: the next centroids (unit length for cosine)
  double* shift = nullptr;             // K out with `next`: ‖next_k − c_k‖² (row_math.h sqDist64's order)
};

void clusterUpdate(const ClusterUpdateArgs& a, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
