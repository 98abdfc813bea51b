// Label changes between two passes (label_changes.cuh): a grid-stride count per thread, a warp sum, one atomic per warp.
#include "label_changes.cuh"

#include <algorithm>

namespace kmfleet {
namespace cuda {
namespace {

__global__ void countKernel(const int4* a, const int4* b, std::int64_t quads, const std::int32_t* aTail,
                            const std::int32_t* bTail, int tail, unsigned long long* out) {
  unsigned long long c = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < quads; i += stride) {
    const int4 x = a[i], y = b[i];
    c += (x.x != y.x) + (x.y != y.y) + (x.z != y.z) + (x.w != y.w);
  }
  if (blockIdx.x == 0 && threadIdx.x < tail) c += aTail[threadIdx.x] != bTail[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c > 0) atomicAdd(out, c);
}

}  // namespace

void countLabelChanges(const std::int32_t* a, const std::int32_t* b, std::int64_t n, unsigned long long* out,
                       cudaStream_t s) {
  if (n <= 0) return;
  // int4 loads: the arrays are cudaMalloc'd (256-byte aligned) and start at row 0
  const std::int64_t quads = n / 4;
  const int tail = static_cast<int>(n - quads * 4);
  // grid-stride: at most ~8 blocks per SM of an H100/H200 (132 SMs); more rows only loop
  const unsigned blocks = static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((quads + 255) / 256, 132 * 8)));
  countKernel<<<blocks, 256, 0, s>>>(reinterpret_cast<const int4*>(a), reinterpret_cast<const int4*>(b), quads,
                                     a + quads * 4, b + quads * 4, tail, out);
}

}  // namespace cuda
}  // namespace kmfleet
