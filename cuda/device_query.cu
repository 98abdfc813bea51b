// queryCudaDevices(): what GPUs this process can use. Never throws: a machine without a driver
// or without a device is an ordinary answer ("no CUDA driver" / "no device"), not an error.
#include <cuda_runtime.h>

#include "cuda_bridge.h"

namespace kmfleet {

GpuInfo queryCudaDevices() {
  GpuInfo info;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    info.available = false;
    if (err == cudaErrorInsufficientDriver)
      info.reason = "no CUDA driver";
    else if (err == cudaErrorNoDevice)
      info.reason = "no device";
    else
      info.reason = std::string("no CUDA driver (") + cudaGetErrorString(err) + ")";
    return info;
  }
  if (count == 0) {
    info.available = false;
    info.reason = "no device";
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) { cudaGetLastError(); continue; }
    GpuDevice d;
    d.ordinal = i;
    d.name = p.name;
    d.computeCapability = std::to_string(p.major) + "." + std::to_string(p.minor);
    d.totalMemory = static_cast<std::uint64_t>(p.totalGlobalMem);
    size_t freeB = 0, totalB = 0;
    int prev = 0;
    cudaGetDevice(&prev);
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&freeB, &totalB) == cudaSuccess)
      d.freeMemory = static_cast<std::uint64_t>(freeB);
    else
      cudaGetLastError();
    cudaSetDevice(prev);
    info.devices.push_back(d);
  }
  info.available = !info.devices.empty();
  if (!info.available) info.reason = "no device";
  return info;
}

}  // namespace kmfleet
