// Top-F rows of a chunk by (fp64 distance desc, row asc), with their values (see far_rows.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

std::size_t farRowsScratchBytes(std::int64_t maxRows);
// Candidates written per chunk for f requested rows: the host keeps the exact top f of all candidates.
inline int farCandidates(int f, std::int64_t n) { return static_cast<int>(n < 2LL * f ? n : 2LL * f); }
// Writes farCandidates(f, n) entries: topDist, topRow (global rows), topValues (× d fp32).
void farRows(const double* dist, RowValues x, std::int64_t n, int d, std::int64_t firstRow, int f, void* scratch,
             double* topDist, long long* topRow, float* topValues, cudaStream_t s);

// Only the (distance, row) pairs of the candidates.
void farTop(const double* dist, std::int64_t n, std::int64_t firstRow, int f, void* scratch, double* topDist,
            long long* topRow, cudaStream_t s);
// out[i] = row (rows[i] − firstRow) of x as fp32, i < f.
void gatherRows(RowValues x, int d, const long long* rows, std::int64_t firstRow, int f, float* out, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
