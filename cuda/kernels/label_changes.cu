// Label changes between two passes (label_changes.cuh): a grid-stride count per thread, a warp sum, one atomic per
// warp; the list the same way, its places from a prefix sum over the warp.
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

// One quad of rows per thread; a warp's changed rows get consecutive places from one atomic (a prefix sum of the
// lanes' counts). The loop's bound is the warp's first quad, so every lane takes part in the shuffles.
__global__ void listKernel(const int4* labels, const int4* previous, std::int64_t quads, int tailFirst, int tail,
                           int2* list, unsigned long long capacity, unsigned long long* count) {
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31); w < quads; w += stride) {
    const std::int64_t q = w + lane;
    int4 x = make_int4(0, 0, 0, 0), y = x;
    if (q < quads) {
      x = labels[q];
      y = previous[q];
    }
    const int changed[4] = {x.x != y.x, x.y != y.y, x.z != y.z, x.w != y.w};
    const int mine = changed[0] + changed[1] + changed[2] + changed[3];
    int before = mine;  // inclusive prefix over the lanes
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, before, o);
      if (lane >= o) before += v;
    }
    const int total = __shfl_sync(0xffffffffu, before, 31);
    if (total == 0) continue;
    unsigned long long base = 0;
    if (lane == 31) base = atomicAdd(count, static_cast<unsigned long long>(total));
    base = __shfl_sync(0xffffffffu, base, 31);
    unsigned long long at = base + static_cast<unsigned long long>(before - mine);
    const int value[4] = {x.x, x.y, x.z, x.w};
    for (int j = 0; j < 4; ++j) {
      if (!changed[j]) continue;
      if (at < capacity) list[at] = make_int2(static_cast<int>(q * 4 + j), value[j]);
      ++at;
    }
  }
  // the last n mod 4 rows (int4 loads cover whole quads)
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const int row = tailFirst + static_cast<int>(threadIdx.x);
    const int* l = reinterpret_cast<const int*>(labels);
    const int* p = reinterpret_cast<const int*>(previous);
    if (l[row] != p[row]) {
      const unsigned long long at = atomicAdd(count, 1ULL);
      if (at < capacity) list[at] = make_int2(row, l[row]);
    }
  }
}

}  // namespace

void listLabelChanges(const std::int32_t* labels, const std::int32_t* previous, std::int64_t n, int2* list,
                      std::int64_t capacity, unsigned long long* count, cudaStream_t s) {
  if (n <= 0) return;
  const std::int64_t quads = n / 4;
  const int tail = static_cast<int>(n - quads * 4);
  const unsigned blocks = static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((quads + 255) / 256, 132 * 8)));
  listKernel<<<blocks, 256, 0, s>>>(reinterpret_cast<const int4*>(labels), reinterpret_cast<const int4*>(previous),
                                    quads, static_cast<int>(quads * 4), tail, list,
                                    static_cast<unsigned long long>(capacity), count);
}

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
