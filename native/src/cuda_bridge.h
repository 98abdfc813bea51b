// What the engine needs from cuda/ (the static library `kmfleet_cuda`, built by cuda/CMakeLists.txt).
// Compiled in only when CMake found nvcc and KMFLEET_CUDA=ON: then KMFLEET_WITH_CUDA is defined.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"

namespace kmfleet {

class ThreadPool;

// Never throws. No driver (cudaErrorInsufficientDriver / cudaErrorNoDevice at cudaGetDeviceCount) →
// {available:false, reason:"no CUDA driver" | "no device"}.
GpuInfo queryCudaDevices();

// A CUDA backend for config (config.device is the ordinal; several config.devices: one job across them). The config is already validated by the engine
// (rows, dims, k >= 1, k <= rows). Throws EngineError: Device (no device, CUDA error), OutOfMemory (with the numbers).
// pool: the engine's threads (may be null), for the host copies of a pass's outputs; the engine does not use it
// while the backend's calls run.
std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config, ThreadPool* pool);

// Greedy k-means++ on the GPU (cuda/kernels/kmeans_plusplus.cu): the algorithm and the seeded draws of the CPU's
// kmeansPlusPlus (engine.h) over n fp32 rows (already normalized for cosine), K×D centers that are rows of the
// sample. Deterministic: the same seed gives bitwise the same centers on a given device. The cancel flag is
// polled between centers. Throws EngineError: OutOfMemory (with the numbers), Device, Cancelled.
std::vector<float> cudaKmeansPlusPlus(const float* sample, std::int64_t n, std::int64_t D, std::int64_t K,
                                      std::uint64_t seed, int device, const std::atomic<bool>* cancel);

}  // namespace kmfleet
