// fp64 work on CUDA cores: the exact recheck of the flagged rows. The warp reduces with shfl_down + broadcast from
// lane 0, so every lane sees the same bits. The rows are read as RowValues (fp32, or 16-bit data as it is: the same
// fp64 results).
#include <cmath>

#include "common.cuh"
#include "recheck.cuh"

namespace kmfleet {
namespace cuda {
namespace {

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
    const bool window = m <= kCandidates;  // the true argmin is inside the window (assign.cu)
    const int total = window ? m : k;
    for (int q = 0; q < total; ++q) {
      const int c = window ? cand[static_cast<size_t>(w) * kCandidates + q] : q;
      const double s = warpSqDist64<IN>(xv, x, cf + static_cast<size_t>(c) * d, d, lane);
      if (s < best || (s == best && c < bi)) { best = s; bi = c; }
    }
    if (lane == 0) labels[r] = bi;
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

}  // namespace cuda
}  // namespace kmfleet
