// The pass's totals and row flags on the device (device_totals.h).
#include "device_totals.h"

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

void DeviceTotals::allocate(const BackendShape& shape) {
  hostFlags = hostAlloc<unsigned long long>(6, "flags");
  sums = devAlloc<double>(std::size_t(shape.k) * shape.d, "sums");
  counts = devAlloc<long long>(shape.k, "counts");
  inertia = devAlloc<double>(shape.k, "inertia");
  rowFlags = devAlloc<unsigned long long>(3, "flags");
  flaggedTotal = devAlloc<unsigned long long>(2, "flags");  // rows flagged, rows the screen passed on
  flaggedCount = devAlloc<unsigned>(2, "flags");            // flagged rows, screened rows (assignPiece)
}

void DeviceTotals::release() noexcept {
  for (void* p : {static_cast<void*>(sums), static_cast<void*>(counts), static_cast<void*>(inertia),
                  static_cast<void*>(rowFlags), static_cast<void*>(flaggedTotal), static_cast<void*>(flaggedCount)})
    if (p) cudaFree(p);
  if (hostFlags) cudaFreeHost(hostFlags);
  *this = DeviceTotals{};
}

void DeviceTotals::zero(const BackendShape& shape, cudaStream_t s) {
  check(cudaMemsetAsync(sums, 0, sizeof(double) * std::size_t(shape.k) * shape.d, s), "memset");
  check(cudaMemsetAsync(counts, 0, sizeof(long long) * shape.k, s), "memset");
  check(cudaMemsetAsync(inertia, 0, sizeof(double) * shape.k, s), "memset");
  check(cudaMemsetAsync(rowFlags, 0xff, 3 * sizeof(unsigned long long), s), "memset");
  check(cudaMemsetAsync(flaggedTotal, 0, 2 * sizeof(unsigned long long), s), "memset");
}

namespace {

// atomic: the compute stream and the chunk stream may add at the same time
__global__ void addFlaggedKernel(unsigned long long* total, const unsigned* count) {
  atomicAdd(total, static_cast<unsigned long long>(count[0]));      // flagged for the recheck
  atomicAdd(total + 1, static_cast<unsigned long long>(count[1]));  // passed on by the screen
}

}  // namespace

void DeviceTotals::addFlagged(cudaStream_t s, const unsigned* count) {
  addFlaggedKernel<<<1, 1, 0, s>>>(flaggedTotal, count);
}

}  // namespace cuda_backend
}  // namespace kmfleet
