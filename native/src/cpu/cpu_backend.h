// The CPU backend: makeCpuBackend() returns a Backend (backend.h) that runs on the engine's thread pool.
#pragma once

#include <memory>
#include <string>

#include "../backend.h"
#include "../thread_pool.h"

namespace kmfleet {

std::unique_ptr<Backend> makeCpuBackend(const EngineConfig& config, ThreadPool& pool);

// "cpu x86_64 avx512bf16 (2 threads)"
std::string cpuDeviceName(int threads, const char* isa);

}  // namespace kmfleet
