// Flagged-row scratch of an exact assignment (chunk_stream.cu assignPiece): the rows the margin test could not decide,
// their windows, candidate counts and candidates, for at least as many rows as one assignment covers. A streamed
// chunk's (chunk_scratch.h), the chunk stream's (overlap_partials.h) and a piece of resident rows' (resident_rows.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "device_memory.h"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

struct FlagScratch {
  int* flagged = nullptr;
  float* thr = nullptr;
  int* candCount = nullptr;
  int* cand = nullptr;
};

// Into f field by field: one that throws leaves the others for freeFlagScratch.
inline void allocFlagScratch(FlagScratch& f, std::size_t rows, const char* what) {
  f.flagged = devAlloc<int>(rows, what);
  f.thr = devAlloc<float>(rows, what);
  f.candCount = devAlloc<int>(rows, what);
  f.cand = devAlloc<int>(rows * cuda::kCandidates, what);
}

inline void freeFlagScratch(FlagScratch& f) noexcept {
  for (void* p : {static_cast<void*>(f.flagged), static_cast<void*>(f.thr), static_cast<void*>(f.candCount),
                  static_cast<void*>(f.cand)})
    if (p) cudaFree(p);
  f = FlagScratch{};
}

}  // namespace cuda_backend
}  // namespace kmfleet
