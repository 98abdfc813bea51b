// Device and pinned allocations and the CUDA error mapping that the backend's classes share.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "backend.h"

namespace kmfleet {
namespace cuda_backend {

// Error mapping: a CUDA error → EngineError (OutOfMemory for an allocation failure, Device otherwise).
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    throw EngineError(ErrorCode::OutOfMemory, std::string("CUDA out of memory in ") + what);
  throw EngineError(ErrorCode::Device, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

// Whether e's work is done (a query, no wait); a failed one throws as check() does.
inline bool eventDone(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(r, "compute");
  return true;
}

template <typename T>
T* devAlloc(std::size_t count, const char* what) {
  void* p = nullptr;
  if (count == 0) count = 1;
  const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    throw EngineError(ErrorCode::OutOfMemory, std::string("CUDA: cannot allocate ") +
                                                  std::to_string(count * sizeof(T) >> 20) + " MiB for " + what +
                                                  " (" + std::to_string(fr >> 20) + " MiB free)");
  }
  return static_cast<T*>(p);
}

template <typename T>
T* hostAlloc(std::size_t count, const char* what) {
  void* p = nullptr;
  if (count == 0) count = 1;
  const cudaError_t e = cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw EngineError(ErrorCode::OutOfMemory, std::string("cannot allocate ") + std::to_string(count * sizeof(T) >> 20) +
                                                  " MiB of pinned host memory for " + what);
  }
  return static_cast<T*>(p);
}

}  // namespace cuda_backend
}  // namespace kmfleet
