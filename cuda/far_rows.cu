// The farthest rows of a chunk, for empty-cluster re-seeding: a stable descending radix sort of the fp64
// distances (ties keep row order → (distance desc, row asc), a total order), then the first F.
#include <cub/device/device_radix_sort.cuh>

#include "far_rows.h"

namespace kmfleet {
namespace cuda {
namespace {

__global__ void iota64(long long* v, long long n, long long first) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = first + i;
}

__global__ void gatherKernel(const float* xf, int d, const long long* rows, long long firstRow, int f, float* out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(f) * d) return;
  const long long r = i / d;
  const int j = static_cast<int>(i % d);
  out[i] = xf[static_cast<size_t>(rows[r] - firstRow) * d + j];
}

std::size_t cubBytes(std::int64_t maxRows) {
  std::size_t b = 0;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, b, static_cast<const double*>(nullptr),
                                            static_cast<double*>(nullptr), static_cast<const long long*>(nullptr),
                                            static_cast<long long*>(nullptr), static_cast<int>(maxRows));
  return (b + 255) / 256 * 256;
}

}  // namespace

std::size_t farRowsScratchBytes(std::int64_t maxRows) {
  return cubBytes(maxRows) + static_cast<std::size_t>(maxRows) * 24 + 1024;
}

void farRows(const double* dist, const float* xf, std::int64_t n, int d, std::int64_t firstRow, int f, void* scratch,
             double* topDist, long long* topRow, float* topValues, cudaStream_t s) {
  if (n <= 0 || f <= 0) return;
  farTop(dist, n, firstRow, f, scratch, topDist, topRow, s);
  const int m = static_cast<int>(std::min<std::int64_t>(f, n));
  gatherRows(xf, d, topRow, firstRow, m, topValues, s);
}

void gatherRows(const float* xf, int d, const long long* rows, std::int64_t firstRow, int f, float* out, cudaStream_t s) {
  if (f <= 0) return;
  gatherKernel<<<static_cast<unsigned>((static_cast<long long>(f) * d + 255) / 256), 256, 0, s>>>(xf, d, rows, firstRow,
                                                                                                 f, out);
}

void farTop(const double* dist, std::int64_t n, std::int64_t firstRow, int f, void* scratch, double* topDist,
            long long* topRow, cudaStream_t s) {
  if (n <= 0 || f <= 0) return;
  const std::size_t cb = cubBytes(n);
  char* p = static_cast<char*>(scratch);
  void* temp = p;
  double* keysOut = reinterpret_cast<double*>(p + cb);
  long long* valsIn = reinterpret_cast<long long*>(p + cb + n * 8);
  long long* valsOut = reinterpret_cast<long long*>(p + cb + n * 16);
  iota64<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(valsIn, n, firstRow);
  std::size_t tb = cb;
  cub::DeviceRadixSort::SortPairsDescending(temp, tb, dist, keysOut, valsIn, valsOut, static_cast<int>(n), 0, 64, s);
  const int m = static_cast<int>(std::min<std::int64_t>(f, n));
  cudaMemcpyAsync(topDist, keysOut, m * 8, cudaMemcpyDeviceToDevice, s);
  cudaMemcpyAsync(topRow, valsOut, m * 8, cudaMemcpyDeviceToDevice, s);
}

}  // namespace cuda
}  // namespace kmfleet
