// The rows of the engine's host tier that a pass's bounds leave open (tier_rows.h), gathered from page-locked host
// memory by the device and their results scattered back: a pass reads only those rows over the link, one warp a row
// (kmbench gather: ~51 GB/s of rows on an H200, in proportion to their share).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kmfleet {
namespace cuda {

// Where the tier's rows are: its first (global) row, its blocks (host pointers the device can read: page-locked and
// mapped), one per chunk of the feeds' grid, whose first block starts at firstRow and the others at multiples of
// chunkRows.
struct TierBlocks {
  const void* const* blocks = nullptr;  // device array
  std::int64_t firstRow = 0, chunkRows = 1;
  std::size_t rowBytes = 0;
};

// For i < n: row list[i] of the tier (a tier row, from 0) into out[i] (rowBytes each), previous[list[i]] into
// previousOut[i], and, when upper is not null, upper[list[i]] into upperOut[i] (near rows: the moved bound says which
// centroids they compare, row_bounds.cuh assignNearRows).
void gatherTierRows(const TierBlocks& tier, const std::int32_t* list, std::int64_t n, void* out,
                    const std::int32_t* previous, std::int32_t* previousOut, const float* upper, float* upperOut,
                    cudaStream_t s);

// For i < n: labels[list[i]] = labelsIn[i], upper[list[i]] = upperIn[i], lower[list[i]] = lowerIn[i].
void scatterTierResults(const std::int32_t* list, std::int64_t n, const std::int32_t* labelsIn, const float* upperIn,
                        const float* lowerIn, std::int32_t* labels, float* upper, float* lower, cudaStream_t s);

// a[i] = i for i < n (the list that names a gathered piece's rows by their place in it).
void fillIdentity(std::int32_t* a, std::int64_t n, cudaStream_t s);
// *count = value, queued on s (a device count the list kernels read).
void storeCount(unsigned* count, unsigned value, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
