// What the engine needs from cuda/ (the CUDA engineer's static library `kmfleet_cuda`, built by cuda/CMakeLists.txt).
// Compiled in only when CMake found nvcc and KMFLEET_CUDA=ON: then KMFLEET_WITH_CUDA is defined.
#pragma once

#include <memory>

#include "backend.h"

namespace kmfleet {

// Never throws. No driver (cudaErrorInsufficientDriver / cudaErrorNoDevice at cudaGetDeviceCount) →
// {available:false, reason:"no CUDA driver" | "no device"}.
GpuInfo queryCudaDevices();

// A CUDA backend for config (config.device is the ordinal). The config is already validated by the engine
// (rows, dims, k >= 1, k <= rows). Throws EngineError: Device (no device, CUDA error), OutOfMemory (with the numbers).
std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config);

}  // namespace kmfleet
