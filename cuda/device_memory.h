// Device and pinned allocations and the CUDA error mapping that the backend's classes share.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <new>
#include <string>

#include "backend.h"

namespace kmfleet {
namespace cuda_backend {

// " on CUDA device N" for the current device: a job on several GPUs (or a worker of several jobs) names the one that
// failed, so that an operator can find it (Xid, ECC) while the job resumes elsewhere from its checkpoint.
inline std::string onCurrentDevice() {
  int device = -1;
  return cudaGetDevice(&device) == cudaSuccess ? " on CUDA device " + std::to_string(device) : std::string();
}

// Error mapping: a CUDA error → EngineError (OutOfMemory for an allocation failure, Device otherwise), naming the device.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    throw EngineError(ErrorCode::OutOfMemory, "CUDA out of memory" + onCurrentDevice() + " in " + what);
  throw EngineError(ErrorCode::Device, "CUDA error" + onCurrentDevice() + " in " + what + ": " + cudaGetErrorString(e));
}

// Makes `device` current for the scope and gives the thread back the device it had after: a backend's calls, and the
// pool-thread tasks they start, may come on a thread that works with another device of the process.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    check(cudaSetDevice(device), "cudaSetDevice");
    restore_ = previous_ != device;
  }
  // For what must not throw (destruction, abortPass): errors are dropped.
  DeviceScope(int device, std::nothrow_t) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device;
    cudaSetDevice(device);
    cudaGetLastError();
    restore_ = previous_ != device;
  }
  ~DeviceScope() {
    if (restore_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// Throws InvalidArgument unless `device` is an ordinal of this process's CUDA devices.
inline void requireDevice(int device) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw EngineError(ErrorCode::InvalidArgument, "CUDA device " + std::to_string(device) + " does not exist (" +
                                                      std::to_string(count) + " device(s))");
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
