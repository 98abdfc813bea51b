// The CUDA Backend's buffers (cuda_backend.h): streams, events, device scratch and pinned staging, allocated once
// as the memory plan (planner.cpp) counted them, and released (also after a failed allocation).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "cuda_backend.h"
#include "kernels/far_rows.cuh"

namespace kmfleet {
namespace cuda_backend {

void CudaBackend::allocate() {
  const std::size_t chunk = std::size_t(shape_.memory.chunkRows);
  streams_.create();
  for (int b = 0; b < shape_.memory.buffers; ++b)
    host_.push_back(hostAlloc<char>(chunk * shape_.rowBytes, "host buffers"));
  centroids_.allocate();
  ring_.allocate();
  totals_.allocate(shape_);
  // streamed rows' scratch (one: only the compute stream uses it)
  scratch_.allocate(shape_);
  const MemoryPlan& mp = shape_.memory;
  exact_.allocate(mp.exactSums, shape_.k, shape_.d, mp.chunkRows, mp.residentRows, mp.overlapPartials > 0);
  overlap_.allocate();
  steps_.allocate();
  resident_.allocate();
  // resident bounds only where the resident rows run in one go with flagged-row scratch for all of them
  // (resident_pass.cu): the open rows then take one listed assignment
  if (shape_.rowBounds && mp.residentAccBytes > 0 && mp.residentPiece >= mp.residentRows)
    bounds_.allocate(mp.residentRows);
  slots_.allocate(shape_.memory.slots, chunk, shape_.rowBytes);
}

void CudaBackend::release() noexcept {
  slots_.release();
  scratch_.release();
  farthest_.release();
  stages_.release();
  resident_.release();
  bounds_.release();
  tier_.release();
  exact_.release();
  overlap_.release();
  steps_.release();
  for (void* p : host_) cudaFreeHost(p);
  host_.clear();
  centroids_.release();
  totals_.release();
  ring_.release();
  uploads_.release();
  streams_.destroy();
  cudaGetLastError();
}

}  // namespace cuda_backend
}  // namespace kmfleet

namespace kmfleet {
namespace cuda_backend {

// Page-locked, so that a held chunk goes to the device by DMA at the link's speed. A host that refuses to lock more
// (RLIMIT_MEMLOCK, a container's limit) gets pageable memory, whose copies the driver stages: slower, still correct.
HostBlock CudaBackend::allocateHostRows(std::size_t bytes, std::string& warning) {
  DeviceScope on(shape_.device);
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess)
    return HostBlock(p, [](void* q) { cudaFreeHost(q); });
  cudaGetLastError();
  if (warning.empty())
    warning = "cannot page-lock " + std::to_string(bytes >> 20) +
              " MiB more of host memory (ulimit -l, or the container's limit): the host tier continues in pageable "
              "memory, whose copies to the GPU are slower";
  return Backend::allocateHostRows(bytes, warning);
}

}  // namespace cuda_backend
}  // namespace kmfleet
