// The bounds' kernels (row_bounds.cuh): the centroids' drift and its two largest values, and the rows they settle.
#include "row_bounds.cuh"

#include <cuda_runtime.h>

#include <cub/device/device_segmented_sort.cuh>

#include "common.cuh"

namespace kmfleet {
namespace cuda {
namespace {

constexpr int kTopThreads = 1024;

// One warp per centroid: ‖now_k − before_k‖ in fp64 (relative error ≤ (d + 2)·2⁻⁵³), widened and rounded up to fp32.
__global__ void driftKernel(const float* now, const float* before, int k, int d, float* drift) {
  const long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (c >= k) return;
  const std::size_t base = static_cast<std::size_t>(c) * d;
  double s = 0;
  for (int j = lane; j < d; j += 32) {
    const double v = static_cast<double>(now[base + j]) - static_cast<double>(before[base + j]);
    s += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) drift[c] = __double2float_ru(sqrt(s) * (1 + 0x1p-30));
}

// (value, index) pairs: the largest two of a and b into a
__device__ __forceinline__ void mergeTop(float& v0, int& i0, float& v1, float w0, int j0, float w1) {
  if (w0 > v0) {
    v1 = fmaxf(v0, w1);
    v0 = w0;
    i0 = j0;
  } else {
    v1 = fmaxf(v1, w0);
  }
}

// One block: the two largest drifts.
__global__ void topKernel(const float* drift, int k, float* top, int* topIndex) {
  __shared__ float s0[kTopThreads], s1[kTopThreads];
  __shared__ int si[kTopThreads];
  float v0 = 0.f, v1 = 0.f;
  int i0 = -1;
  for (int c = threadIdx.x; c < k; c += blockDim.x) mergeTop(v0, i0, v1, drift[c], c, 0.f);
  s0[threadIdx.x] = v0;
  s1[threadIdx.x] = v1;
  si[threadIdx.x] = i0;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      const int o = threadIdx.x + half;
      float a0 = s0[threadIdx.x], a1 = s1[threadIdx.x];
      int ai = si[threadIdx.x];
      mergeTop(a0, ai, a1, s0[o], si[o], s1[o]);
      s0[threadIdx.x] = a0;
      s1[threadIdx.x] = a1;
      si[threadIdx.x] = ai;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    top[0] = s0[0];
    top[1] = s1[0];
    *topIndex = si[0];
  }
}

constexpr int kPairTile = 32;

// The distance of every pair of centroids, fp64 in 32 × 32 tiles (rounded down; +inf for a centroid and itself), each
// row's keys beside the index of the other centroid, and the sort's segment offsets.
__global__ void pairKernel(const float* c, int k, int d, float* keys, int* index, int* offsets) {
  __shared__ float ta[kPairTile][kPairTile + 1], tb[kPairTile][kPairTile + 1];
  const int a0 = blockIdx.y * kPairTile, b0 = blockIdx.x * kPairTile;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 32 × 8: each thread four pairs (a0 + ty + 8i, b0 + tx)
  double s[4] = {0, 0, 0, 0};
  for (int j0 = 0; j0 < d; j0 += kPairTile) {
    for (int i = ty; i < kPairTile; i += 8) {
      const int j = j0 + tx;
      ta[i][tx] = a0 + i < k && j < d ? c[static_cast<std::size_t>(a0 + i) * d + j] : 0.f;
      tb[i][tx] = b0 + i < k && j < d ? c[static_cast<std::size_t>(b0 + i) * d + j] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < kPairTile; ++j) {
      const double vb = tb[tx][j];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const double v = static_cast<double>(ta[ty + 8 * q][j]) - vb;
        s[q] += v * v;
      }
    }
    __syncthreads();
  }
  const int b = b0 + tx;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int a = a0 + ty + 8 * q;
    if (a >= k || b >= k) continue;
    const std::size_t i = static_cast<std::size_t>(a) * k + b;
    keys[i] = a == b ? INFINITY : __double2float_rd(sqrt(s[q]) * (1 - 0x1p-30));
    index[i] = b;
  }
  if (blockIdx.x == 0 && ty == 0) {
    if (a0 + tx < k) offsets[a0 + tx] = (a0 + tx) * k;
    if (blockIdx.y == gridDim.y - 1 && tx == 0) offsets[k] = k * k;
  }
}

// One warp per centroid: the running largest drift along its sorted neighbours.
__global__ void runningDriftKernel(const int* sortedIndex, const float* drift, int k, float* out) {
  const long long a = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (a >= k) return;
  const std::size_t base = static_cast<std::size_t>(a) * k;
  float carry = 0.f;
  for (int j0 = 0; j0 < k; j0 += 32) {
    const int j = j0 + lane;
    float v = j < k - 1 ? drift[sortedIndex[base + j]] : 0.f;  // the last place is c_a itself
    for (int off = 1; off < 32; off <<= 1) {
      const float o = __shfl_up_sync(0xffffffffu, v, off);
      if (lane >= off) v = fmaxf(v, o);
    }
    v = fmaxf(v, carry);
    if (j < k) out[base + j] = v;
    carry = __shfl_sync(0xffffffffu, v, 31);
  }
}

// How many of c_a's neighbours (S its sorted distances, S[k − 1] = +inf) lie within 2u widened by 2⁻²⁰: the
// centroids a near row computes (kNearMax).
__device__ __forceinline__ int nearCentroids(const float* S, int k, float u) {
  const float r2 = __fmul_ru(2.f * u, 1.f + 0x1p-20f);
  int j = 0, hi = k - 1;
  while (j < hi) {
    const int mid = (j + hi) >> 1;
    if (S[mid] <= r2) j = mid + 1;
    else hi = mid;
  }
  return j;
}

// A warp's open rows appended to a list at *count: one atomic per warp. Near rows are written from the list's end.
__device__ __forceinline__ void appendRows(bool mine, long long r, int lane, std::int32_t* list, long long end,
                                           unsigned* count) {
  const unsigned ballot = __ballot_sync(0xffffffffu, mine);
  if (!ballot) return;
  unsigned base = 0;
  const int leader = __ffs(ballot) - 1;
  if (lane == leader) base = atomicAdd(count, static_cast<unsigned>(__popc(ballot)));
  base = __shfl_sync(0xffffffffu, base, leader);
  const unsigned at = base + __popc(ballot & ((1u << lane) - 1u));
  if (mine) list[end < 0 ? static_cast<long long>(at) : end - at] = static_cast<std::int32_t>(r);
}

// One thread per row; the open and near rows appended with one atomic per warp each.
__global__ void settleKernel(float* upper, float* lower, const std::int32_t* previousLabels, std::int32_t* labels,
                             long long n, const float* drift, const float* top, const int* topIndex,
                             const float* nbDist, const float* nbDrift, int k, std::int32_t* open,
                             unsigned* openCount, unsigned* nearCount) {
  const long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  bool isOpen = false, isNear = false;
  if (r < n) {
    const int a = previousLabels[r];
    float u = upper[r];
    const float l = lower[r];
    // moved by the drift: rounded outwards, so they stay bounds
    u = __fadd_ru(u, drift[a]);
    float lo = __fsub_rd(l, a == *topIndex ? top[1] : top[0]);
    if (!(u < lo) && nbDist && u < INFINITY) {
      // the first j neighbours of c_a lie within 2u; every other one, at S[j] or more, is at least S[j] − u from the
      // row: l moves by the largest drift of the j alone
      const float* S = nbDist + static_cast<std::size_t>(a) * k;
      const float r2 = 2.f * u;
      int j = 0, hi = k - 1;  // S[k − 1] = +inf
      while (j < hi) {
        const int mid = (j + hi) >> 1;
        if (S[mid] <= r2) j = mid + 1;
        else hi = mid;
      }
      const float near = j == 0 ? INFINITY : __fsub_rd(l, nbDrift[static_cast<std::size_t>(a) * k + j - 1]);
      lo = fmaxf(lo, fminf(near, __fsub_rd(S[j], u)));
    }
    upper[r] = u;
    lower[r] = lo;
    if (u < lo) labels[r] = a;
    else if (nbDist && u < INFINITY && nearCentroids(nbDist + static_cast<std::size_t>(a) * k, k, u) <= kNearMax)
      isNear = true;
    else
      isOpen = true;
  }
  appendRows(isOpen, r, lane, open, -1, openCount);
  appendRows(isNear, r, lane, open, n - 1, nearCount);
}

// One warp per near row (grid-stride over the device-side count), its distances recheckKernel's (warpSqDist64).
template <InType IN>
__global__ void nearKernel(const void* xv, int d, const float* cf, int k, const float* nbDist, const int* nbIndex,
                           const std::int32_t* previousLabels, std::int32_t* labels, float* upper, float* lower,
                           const std::int32_t* open, const unsigned* nearCount, long long n) {
  const int lane = threadIdx.x & 31;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  const unsigned total = *nearCount;
  for (long long w = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < total; w += warps) {
    const int r = open[n - 1 - w];
    const int a = previousLabels[r];
    const std::size_t x = static_cast<std::size_t>(r) * d, list = static_cast<std::size_t>(a) * k;
    const int m = nearCentroids(nbDist + list, k, upper[r]);  // the settle's count: ≤ kNearMax
    double best = INFINITY, second = INFINITY, own = 0;
    int bi = 0;
    for (int q = 0; q <= m; ++q) {
      const int c = q == 0 ? a : nbIndex[list + q - 1];
      const double s = warpSqDist64<IN>(xv, x, cf + static_cast<std::size_t>(c) * d, d, lane);
      if (q == 0) own = s;
      if (s < best || (s == best && c < bi)) {
        second = best;
        best = s;
        bi = c;
      } else {
        second = fmin(second, s);
      }
    }
    if (lane == 0) {
      labels[r] = bi;
      // fp64 sums of d squares: relative error ≤ (d + 2)·2⁻⁵³, far inside the 2⁻³⁰ widening (as driftKernel's)
      const float u = __double2float_ru(sqrt(best) * (1 + 0x1p-30));
      const float ownUp = __double2float_ru(sqrt(own) * (1 + 0x1p-30));
      const float beyond = __fsub_rd(nbDist[list + m], ownUp);  // S[k − 1] = +inf when every centroid was computed
      const float l = fminf(__double2float_rd(sqrt(second) * (1 - 0x1p-30)), beyond);
      upper[r] = u;
      lower[r] = fmaxf(l, 0.f);
    }
  }
}

// One thread per listed row (or per row): ‖x − c‖² = n2 + d'/g. One fp32 addition and n2's own rounding, each far
// below 2⁻²⁰ of the magnitudes; the square roots are correctly rounded, then widened by 2⁻²⁰ as well.
__global__ void finishKernel(float* upper, float* lower, const float* sqNorm, const std::int32_t* rowIds,
                             const unsigned* count, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long rows = rowIds ? min(static_cast<long long>(*count), n) : n;
  if (i >= rows) return;
  const long long r = rowIds ? rowIds[i] : i;
  const float a = upper[r];
  if (!(a < INFINITY)) return;  // undecided: no bounds
  const float n2 = sqNorm[r], b = lower[r];
  const float hi = (n2 + a) + 0x1p-20f * (n2 + fabsf(a)) + 0x1p-126f;
  const float u = sqrtf(fmaxf(hi, 0.f)) * (1.f + 0x1p-20f);
  float l = INFINITY;  // b = +inf: no other centroid (K = 1)
  if (b < INFINITY) {
    const float low = (n2 + b) - 0x1p-20f * (n2 + fabsf(b)) - 0x1p-126f;
    l = sqrtf(fmaxf(low, 0.f)) * (1.f - 0x1p-20f);
  }
  const bool ok = u < INFINITY && l == l;  // overflow or nan: no bounds
  upper[r] = ok ? u : INFINITY;
  lower[r] = ok ? l : 0.f;
}

}  // namespace

void finishRowBounds(float* upper, float* lower, const float* sqNorm, const std::int32_t* rowIds,
                     const unsigned* count, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  finishKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(upper, lower, sqNorm, rowIds, count, n);
}

void centroidDrift(const float* now, const float* before, int k, int d, float* drift, float* top, int* topIndex,
                   cudaStream_t s) {
  if (k <= 0) return;
  const long long threads = static_cast<long long>(k) * 32;
  driftKernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(now, before, k, d, drift);
  topKernel<<<1, kTopThreads, 0, s>>>(drift, k, top, topIndex);
}

std::size_t neighbourSortBytes(int k) {
  std::size_t bytes = 0;
  const long long items = static_cast<long long>(k) * k;
  cub::DeviceSegmentedSort::SortPairs(nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
                                      static_cast<const int*>(nullptr), static_cast<int*>(nullptr), items, k,
                                      static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
  return bytes;
}

void centroidNeighbours(const float* now, int k, int d, const float* drift, const CentroidNeighbours& nb,
                        cudaStream_t s) {
  if (k <= 0) return;
  const unsigned tiles = static_cast<unsigned>((k + kPairTile - 1) / kPairTile);
  pairKernel<<<dim3(tiles, tiles), dim3(32, 8), 0, s>>>(now, k, d, nb.keys, nb.index, nb.offsets);
  std::size_t bytes = nb.tempBytes;
  cub::DeviceSegmentedSort::SortPairs(nb.temp, bytes, nb.keys, nb.dist, nb.index, nb.sortedIndex,
                                      static_cast<long long>(k) * k, k, nb.offsets, nb.offsets + 1, s);
  const long long threads = static_cast<long long>(k) * 32;
  runningDriftKernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(nb.sortedIndex, drift, k, nb.drift);
}

void settleRows(float* upper, float* lower, const std::int32_t* previousLabels, std::int32_t* labels, std::int64_t n,
                const float* drift, const float* top, const int* topIndex, const CentroidNeighbours& nb, int k,
                std::int32_t* open, unsigned* openCount, unsigned* nearCount, cudaStream_t s) {
  cudaMemsetAsync(openCount, 0, sizeof(unsigned), s);
  cudaMemsetAsync(nearCount, 0, sizeof(unsigned), s);
  if (n <= 0) return;
  settleKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(upper, lower, previousLabels, labels, n, drift,
                                                                      top, topIndex, nb.dist, nb.drift, k, open,
                                                                      openCount, nearCount);
}

void assignNearRows(RowValues x, int d, const float* centroids, int k, const CentroidNeighbours& nb,
                    const std::int32_t* previousLabels, std::int32_t* labels, float* upper, float* lower,
                    const std::int32_t* open, const unsigned* nearCount, std::int64_t n, cudaStream_t s) {
  if (n <= 0 || !nb.dist) return;
  // enough warps to fill the GPU (as recheckRows); the device-side count bounds the work
  const long long warps = std::min<long long>(n, 132LL * 64);
  const unsigned blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  withValueType(x.type, [&](auto inTag) {
    nearKernel<decltype(inTag)::value><<<blocks, 256, 0, s>>>(x.p, d, centroids, k, nb.dist, nb.sortedIndex,
                                                              previousLabels, labels, upper, lower, open, nearCount, n);
  });
}

}  // namespace cuda
}  // namespace kmfleet
