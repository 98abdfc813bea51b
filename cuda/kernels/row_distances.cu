// fp64 work on CUDA cores: each row's distance to its labelled centroid. The warp reduces with shfl_down + broadcast
// from lane 0, so every lane sees the same bits. The rows are read as RowValues (fp32, or 16-bit data as it is: the
// same fp64 results).
#include <cmath>

#include "common.cuh"
#include "row_distances.cuh"

namespace kmfleet {
namespace cuda {
namespace {

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
    s = warpSqDist64<IN>(xv, x, y, d, lane);
  }
  if (lane == 0) {
    dist[r] = s;
    if (dist32) dist32[r] = static_cast<float>(s);
  }
}

}  // namespace

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
