// The compute stream's chunk scratch (chunk_scratch.h).
#include "chunk_scratch.h"

#include "device_memory.h"
#include "kernels/far_rows.cuh"

namespace kmfleet {
namespace cuda_backend {

void ChunkScratch::allocate(const BackendShape& shape) {
  const std::size_t chunk = std::size_t(shape.memory.chunkRows);
  ops = allocRowOps(shape, chunk, "chunk scratch", true);
  allocFlagScratch(flags, chunk, "chunk scratch");
  dist64 = devAlloc<double>(chunk, "chunk scratch");
  farScratch = devAlloc<char>(cuda::farRowsScratchBytes(shape.memory.chunkRows), "chunk scratch");
  cuda::allocAccumulateScratch(accumulate, shape.memory.chunkRows, shape.d, shape.k);  // throws std::bad_alloc
}

void ChunkScratch::release() noexcept {
  freeRowOps(ops);
  freeFlagScratch(flags);
  for (void* p : {static_cast<void*>(dist64), static_cast<void*>(farScratch)})
    if (p) cudaFree(p);
  dist64 = nullptr;
  farScratch = nullptr;
  cuda::freeAccumulateScratch(accumulate);
}

}  // namespace cuda_backend
}  // namespace kmfleet
