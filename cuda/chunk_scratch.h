// The compute stream's scratch for one streamed chunk: its prepared rows, flagged rows (exact mode), fp64 distances,
// farthest-row and accumulate scratch. One set: only the compute stream uses it (the chunk stream of an overlapped
// pass has its own, overlap_partials.h).
#pragma once

#include "backend_shape.h"
#include "flag_scratch.h"
#include "kernels/accumulate.cuh"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

struct ChunkScratch {
  cuda::RowOps ops;                 // prepared rows (no values when 16-bit rows are read in their slot)
  FlagScratch flags;                // assignPiece's flagged rows
  double* dist64 = nullptr;         // the rows' fp64 distances: farthest candidates, exact statistics' distances
  char* farScratch = nullptr;       // farRows / farTop
  cuda::AccumulateScratch accumulate;

  void allocate(const BackendShape& shape);
  void release() noexcept;
};

}  // namespace cuda_backend
}  // namespace kmfleet
