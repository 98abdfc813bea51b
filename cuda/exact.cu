// fp64 work on CUDA cores: the exact recheck of flagged rows and the per-row distance to the chosen centroid.
// Both reduce across a warp with shfl_down + broadcast from lane 0, so every lane sees the same bits.
// The rows are read as RowValues (fp32, or 16-bit data as it is: the same fp64 results).
#include <cmath>

#include "kernels.h"
#include "row_values.cuh"

namespace kmfleet {
namespace cuda {
namespace {

__device__ __forceinline__ double warpSum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return __shfl_sync(0xffffffffu, v, 0);
}

// One warp per flagged row (grid-stride over the device-side count): argmin over all K of Σ(x−c)² in fp64.
// Ties (equal fp64 sums): the lowest index wins, whatever the candidates' order.
template <InType IN>
__global__ void recheckKernel(const void* xv, int d, const float* cf, int k, const int* flagged,
                              const unsigned* count, const int* candCount, const int* cand, int* labels) {
  const int lane = threadIdx.x & 31;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const unsigned total = *count;
  for (long long w = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < total; w += warps) {
    const int r = flagged[w];
    const size_t x = static_cast<size_t>(r) * d;
    double best = INFINITY;
    int bi = 0;
    const int m = candCount ? candCount[w] : kCandidates + 1;
    const bool window = m <= kCandidates;  // the true argmin is inside the window (assign_kernel.cu)
    const int total = window ? m : k;
    for (int q = 0; q < total; ++q) {
      const int c = window ? cand[static_cast<size_t>(w) * kCandidates + q] : q;
      const float* y = cf + static_cast<size_t>(c) * d;
      double s = 0;
      for (int j = lane; j < d; j += 32) {
        const double t = static_cast<double>(loadValue<IN>(xv, x + j)) - static_cast<double>(y[j]);
        s = fma(t, t, s);
      }
      s = warpSum(s);
      if (s < best || (s == best && c < bi)) { best = s; bi = c; }
    }
    if (lane == 0) labels[r] = bi;
  }
}

template <InType IN>
__global__ void distanceKernel(const void* xv, long long n, int d, const float* cf, const int* labels, int cosine,
                               double* dist, float* dist32) {
  const long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= n) return;
  const size_t x = static_cast<size_t>(r) * d;
  const float* y = cf + static_cast<size_t>(labels[r]) * d;
  double s = 0;
  if (cosine) {
    for (int j = lane; j < d; j += 32)
      s = fma(static_cast<double>(loadValue<IN>(xv, x + j)), static_cast<double>(y[j]), s);
    s = 1.0 - warpSum(s);
  } else {
    for (int j = lane; j < d; j += 32) {
      const double t = static_cast<double>(loadValue<IN>(xv, x + j)) - static_cast<double>(y[j]);
      s = fma(t, t, s);
    }
    s = warpSum(s);
  }
  if (lane == 0) {
    dist[r] = s;
    if (dist32) dist32[r] = static_cast<float>(s);
  }
}

}  // namespace

void recheckRows(RowValues x, int d, const float* cf, int k, const std::int32_t* flagged,
                 const unsigned int* flaggedCount, std::int64_t maxFlagged, const int* candCount, const int* cand,
                 std::int32_t* labels, cudaStream_t s) {
  if (maxFlagged <= 0) return;
  // Enough warps to fill the GPU; the device-side count bounds the work.
  const long long warps = std::min<long long>(maxFlagged, 132LL * 64);
  const unsigned blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  withValueType(x.type, [&](auto inTag) {
    recheckKernel<decltype(inTag)::value>
        <<<blocks, 256, 0, s>>>(x.p, d, cf, k, flagged, flaggedCount, candCount, cand, labels);
  });
}

void rowDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                  double* dist, float* dist32, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n * 32 + 255) / 256);
  withValueType(x.type, [&](auto inTag) {
    distanceKernel<decltype(inTag)::value><<<blocks, 256, 0, s>>>(x.p, n, d, cf, labels, cosine ? 1 : 0, dist, dist32);
  });
}

}  // namespace cuda
}  // namespace kmfleet
