// The farthest rows of a chunk, for empty-cluster re-seeding. A stable descending radix sort on 32-bit keys
// (the fp64 distance rounded to fp32: monotone, so every row of the exact top F has a key ≥ the F-th key)
// gives 2F candidates, 4× cheaper than sorting the fp64 pairs; the host orders the candidates of all chunks
// exactly by (fp64 distance desc, row asc) and keeps F. (Exact unless more than F rows share the F-th
// row's fp32 key with different fp64 distances, i.e. within a relative 6e-8.)
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "far_rows.cuh"

namespace kmfleet {
namespace cuda {
namespace {

__global__ void keyKernel(const double* dist, long long n, unsigned* keys, int* idx) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = __float_as_uint(static_cast<float>(fmax(dist[i], 0.0)));  // non-negative floats order as unsigned
  idx[i] = static_cast<int>(i);
}

__global__ void pickKernel(const double* dist, const int* idx, int m, long long firstRow, double* topDist,
                           long long* topRow) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  topDist[i] = dist[idx[i]];
  topRow[i] = firstRow + idx[i];
}

template <InType IN>
__global__ void gatherKernel(const void* xv, int d, const long long* rows, long long firstRow, int f, float* out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(f) * d) return;
  const long long r = i / d;
  const int j = static_cast<int>(i % d);
  out[i] = loadValue<IN>(xv, static_cast<size_t>(rows[r] - firstRow) * d + j);
}

std::size_t cubBytes(std::int64_t maxRows) {
  std::size_t b = 0;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, b, static_cast<const unsigned*>(nullptr),
                                            static_cast<unsigned*>(nullptr), static_cast<const int*>(nullptr),
                                            static_cast<int*>(nullptr), static_cast<int>(maxRows));
  return (b + 255) / 256 * 256;
}

}  // namespace

std::size_t farRowsScratchBytes(std::int64_t maxRows) {
  return cubBytes(maxRows) + static_cast<std::size_t>(maxRows) * 16 + 1024;
}

void farRows(const double* dist, RowValues x, std::int64_t n, int d, std::int64_t firstRow, int f, void* scratch,
             double* topDist, long long* topRow, float* topValues, cudaStream_t s) {
  if (n <= 0 || f <= 0) return;
  farTop(dist, n, firstRow, f, scratch, topDist, topRow, s);
  gatherRows(x, d, topRow, firstRow, farCandidates(f, n), topValues, s);
}

void gatherRows(RowValues x, int d, const long long* rows, std::int64_t firstRow, int f, float* out, cudaStream_t s) {
  if (f <= 0) return;
  const unsigned blocks = static_cast<unsigned>((static_cast<long long>(f) * d + 255) / 256);
  withValueType(x.type, [&](auto inTag) {
    gatherKernel<decltype(inTag)::value><<<blocks, 256, 0, s>>>(x.p, d, rows, firstRow, f, out);
  });
}

void farTop(const double* dist, std::int64_t n, std::int64_t firstRow, int f, void* scratch, double* topDist,
            long long* topRow, cudaStream_t s) {
  if (n <= 0 || f <= 0) return;
  const std::size_t cb = cubBytes(n);
  char* p = static_cast<char*>(scratch);
  void* temp = p;
  unsigned* keysIn = reinterpret_cast<unsigned*>(p + cb);
  unsigned* keysOut = reinterpret_cast<unsigned*>(p + cb + n * 4);
  int* valsIn = reinterpret_cast<int*>(p + cb + n * 8);
  int* valsOut = reinterpret_cast<int*>(p + cb + n * 12);
  keyKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(dist, n, keysIn, valsIn);
  std::size_t tb = cb;
  cub::DeviceRadixSort::SortPairsDescending(temp, tb, keysIn, keysOut, valsIn, valsOut, static_cast<int>(n), 0, 32, s);
  const int m = farCandidates(f, n);
  pickKernel<<<static_cast<unsigned>((m + 255) / 256), 256, 0, s>>>(dist, valsOut, m, firstRow, topDist, topRow);
}

}  // namespace cuda
}  // namespace kmfleet
