// The fixed shape of a CUDA backend: its device, the memory plan, the plan the engine reads, the assignment kernel and
// the sizes every part of the backend reads. Made once when the backend is built, never changed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.h"
#include "kernels/assign.cuh"
#include "kernels/types.h"
#include "planner.h"

namespace kmfleet {
namespace cuda_backend {

inline cuda::InType inType(DType t) {
  return t == DType::F32 ? cuda::InType::F32 : t == DType::F16 ? cuda::InType::F16 : cuda::InType::BF16;
}

struct BackendShape {
  // The shape of cfg on the current device (cfg.device, made current by the caller): the memory plan from its free
  // memory, the plan named after it. Throws EngineError.
  static BackendShape onCurrentDevice(const EngineConfig& cfg);

  int device = 0;             // EngineConfig.device
  cuda::MemoryPlan memory;    // planner.h
  Plan plan;                  // what Backend::plan() reports
  cuda::AssignKernel kernel;  // which assignment kernel, the portable one's shared-memory plan (settings)
  CudaSettings settings;      // EngineConfig.cuda
  bool stats = false;         // EngineConfig.stats: per-pass device times on stderr (stage_timer.h)
  cuda::InType input = cuda::InType::F32;
  std::int64_t n = 0;         // rows
  int d = 0, k = 0;
  std::int64_t dp = 0, kp = 0;  // dims and centroids padded for the operands
  std::size_t rowBytes = 0;     // an input row
  bool cosine = false;
  bool rows16 = false;  // 16-bit rows kept as they are (types.h keepsRows16)
  // Hamerly's bounds on the resident rows (resident_bounds.h): EngineConfig.rowBounds, exact mode, rows resident
  bool rowBounds = false;

  // Chunks of the resident rows (whole chunks of the plan's chunk rows).
  std::int64_t residentChunks() const { return (memory.residentRows + memory.chunkRows - 1) / memory.chunkRows; }
  // Whether a pass writes the resident rows' fp64 distances as it goes: D > 256 (rowDistances feeds the sums).
  // Otherwise the farthest-row search computes them when a cluster came out empty.
  bool keepsResidentDistances() const;
};

// Device arrays of `rows` prepared rows (values, operands, scale and norms). streamed: the scratch of streamed chunks
// (no values when the 16-bit rows are read in their slot, no screen references). Throws EngineError (OutOfMemory).
cuda::RowOps allocRowOps(const BackendShape& shape, std::size_t rows, const char* what, bool streamed);
void freeRowOps(cuda::RowOps& o) noexcept;

}  // namespace cuda_backend
}  // namespace kmfleet
