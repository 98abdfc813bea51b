// The fp64 recheck of the rows the assignment flagged (recheck.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// recheckRows: exact fp64 argmin for the flagged rows (count read on the device): over the candidate window
// when it held at most kCandidates centroids (the true argmin is always inside it), else over all K.
// candCount/cand may be null: then over all K.
void recheckRows(RowValues x, int d, const float* cf, int k, const std::int32_t* flagged,
                 const unsigned int* flaggedCount, std::int64_t maxFlagged, const int* candCount, const int* cand,
                 std::int32_t* labels, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
