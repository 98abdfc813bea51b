// Gather and scatter of the host tier's open rows (tier_rows.cuh).
#include "tier_rows.cuh"

#include <algorithm>

namespace kmfleet {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// One warp a row, V-byte words a lane (V divides the row's bytes and, rows being whole in page-aligned blocks, their
// offsets).
template <typename V>
__global__ void gatherKernel(TierBlocks tier, const std::int32_t* __restrict__ list, std::int64_t n,
                             V* __restrict__ out, const std::int32_t* __restrict__ previous,
                             std::int32_t* __restrict__ previousOut, const float* __restrict__ upper,
                             float* __restrict__ upperOut) {
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x & 31;
  const std::int64_t words = std::int64_t(tier.rowBytes / sizeof(V));
  for (std::int64_t i = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const std::int64_t t = list[i];
    const std::int64_t g = tier.firstRow + t;
    const std::int64_t chunk = g / tier.chunkRows, firstChunk = tier.firstRow / tier.chunkRows;
    const std::int64_t begin = chunk == firstChunk ? tier.firstRow : chunk * tier.chunkRows;
    const V* row = static_cast<const V*>(tier.blocks[chunk - firstChunk]) + (g - begin) * words;
    V* to = out + i * words;
    for (std::int64_t w = lane; w < words; w += 32) to[w] = row[w];
    if (lane == 0) {
      previousOut[i] = previous[t];
      if (upper) upperOut[i] = upper[t];
    }
  }
}

__global__ void scatterKernel(const std::int32_t* __restrict__ list, std::int64_t n,
                              const std::int32_t* __restrict__ labelsIn, const float* __restrict__ upperIn,
                              const float* __restrict__ lowerIn, std::int32_t* __restrict__ labels,
                              float* __restrict__ upper, float* __restrict__ lower) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int32_t t = list[i];
    labels[t] = labelsIn[i];
    upper[t] = upperIn[i];
    lower[t] = lowerIn[i];
  }
}

__global__ void identityKernel(std::int32_t* a, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) a[i] = std::int32_t(i);
}

__global__ void storeKernel(unsigned* count, unsigned value) { *count = value; }

int gridFor(std::int64_t items, int perBlock) {
  return int(std::max<std::int64_t>(1, std::min<std::int64_t>((items + perBlock - 1) / perBlock, 65535)));
}

}  // namespace

void gatherTierRows(const TierBlocks& tier, const std::int32_t* list, std::int64_t n, void* out,
                    const std::int32_t* previous, std::int32_t* previousOut, const float* upper, float* upperOut,
                    cudaStream_t s) {
  if (n <= 0) return;
  const int grid = gridFor(n, kThreads / 32);
  if (tier.rowBytes % 16 == 0)
    gatherKernel<int4>
        <<<grid, kThreads, 0, s>>>(tier, list, n, static_cast<int4*>(out), previous, previousOut, upper, upperOut);
  else if (tier.rowBytes % 8 == 0)
    gatherKernel<int2>
        <<<grid, kThreads, 0, s>>>(tier, list, n, static_cast<int2*>(out), previous, previousOut, upper, upperOut);
  else if (tier.rowBytes % 4 == 0)
    gatherKernel<int>
        <<<grid, kThreads, 0, s>>>(tier, list, n, static_cast<int*>(out), previous, previousOut, upper, upperOut);
  else
    gatherKernel<short>
        <<<grid, kThreads, 0, s>>>(tier, list, n, static_cast<short*>(out), previous, previousOut, upper, upperOut);
}

void scatterTierResults(const std::int32_t* list, std::int64_t n, const std::int32_t* labelsIn, const float* upperIn,
                        const float* lowerIn, std::int32_t* labels, float* upper, float* lower, cudaStream_t s) {
  if (n <= 0) return;
  scatterKernel<<<gridFor(n, kThreads), kThreads, 0, s>>>(list, n, labelsIn, upperIn, lowerIn, labels, upper, lower);
}

void fillIdentity(std::int32_t* a, std::int64_t n, cudaStream_t s) {
  if (n > 0) identityKernel<<<gridFor(n, kThreads), kThreads, 0, s>>>(a, n);
}

void storeCount(unsigned* count, unsigned value, cudaStream_t s) { storeKernel<<<1, 1, 0, s>>>(count, value); }

}  // namespace cuda
}  // namespace kmfleet
