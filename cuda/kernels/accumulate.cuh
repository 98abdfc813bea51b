// Fixed-order fp64 per-cluster sums, counts and inertia (accumulate.cu): per chunk, for all resident rows in one go,
// and the fold of a chunk's partials.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// Deterministic per-cluster accumulation of one chunk into sums (K×D fp64), counts, inertia.
struct AccumulateScratch {
  void* sortTemp = nullptr; std::size_t sortTempBytes = 0;
  std::int32_t* sortedLabels = nullptr;
  std::int32_t* rowIndex = nullptr;      // iota
  std::int32_t* sortedIndex = nullptr;
  std::int32_t* chunkCounts = nullptr;   // K
  std::int32_t* starts = nullptr;        // K + 1
  std::int32_t* extraOffsets = nullptr;  // K + 1
  std::int32_t* extras = nullptr;        // K + 1
  double* partials = nullptr;            // (maxRows / kSegmentRows + 1) × D
  double* partialInertia = nullptr;      // maxRows / kSegmentRows + 1
};
std::size_t accumulateScratchBytes(std::int64_t maxRows, int d, int k);  // total, for the planner
void allocAccumulateScratch(AccumulateScratch& a, std::int64_t maxRows, int d, int k);  // throws std::bad_alloc
void freeAccumulateScratch(AccumulateScratch& a);
// Also computes every row's fp64 distance to its label's centroid, as rowDistances does: the inertia comes from it,
// and it is written to dist (and dist32 when not null: the assign pass's distances). dist may be null when
// distancesFromSums(d) — the rows' distances are then not kept (their scattered stores cost ~0.3 ms per 10M rows on
// the H200), and sumsDistances gives the same bits later, for the rare pass that needs them (farthest rows).
void accumulate(RowValues x, std::int64_t n, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                double* dist, float* dist32, bool sums, AccumulateScratch& a, double* sumsOut, long long* countsOut,
                double* inertiaOut, cudaStream_t s);
// Whether accumulate computes the rows' distances itself (D ≤ 256) — else it needs dist for rowDistances' output.
bool distancesFromSums(int d);
// The fp64 distances accumulate() computed for these rows and labels (the same bits), in row order; rounded to fp32
// into dist32 too when it is not null (accumulate's dist32).
void sumsDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                   double* dist, float* dist32, cudaStream_t s);

// Adds one chunk's partials — accumulate() run into zeroed K×D sums, K counts, K inertia — into the totals: the same
// additions accumulate() makes into the totals directly, so the same bits (a partly resident pass folds its
// streamed chunks after the resident rows, in chunk order).
void foldPartial(int d, int k, bool sums, const double* partialSums, const long long* partialCounts,
                 const double* partialInertia, double* sumsOut, long long* countsOut, double* inertiaOut,
                 cudaStream_t s);

// All resident rows in one accumulate: the same per-cluster sums, counts and inertia, bit for bit, as
// accumulate() called on each chunk of chunkRows rows in row order (accumulate.cu: one stable sort by label over
// all rows, each (cluster, chunk) run cut into the per-chunk path's segments, folded chunk after chunk), without
// the per-chunk launches. labels, dist (and dist32) are `rows` long, indexed by resident row.
struct ResidentAccumulateScratch {
  std::int64_t rows = 0, chunkRows = 0;
  int chunks = 0;
  long long maxSegments = 0;
  void* sortTemp = nullptr; std::size_t sortTempBytes = 0;
  std::int32_t* sortedLabels = nullptr;  // rows
  std::int32_t* rowIndex = nullptr;      // rows, iota
  std::int32_t* sortedIndex = nullptr;   // rows
  std::int32_t* counts = nullptr;        // chunks·K + 1, pair p = cluster·chunks + chunk
  std::int32_t* starts = nullptr;        // chunks·K + 1: first sorted position of each pair
  std::int32_t* segs = nullptr;          // chunks·K + 1
  std::int32_t* segOff = nullptr;        // chunks·K + 1: first segment of each pair
  double* partials = nullptr;            // maxSegments × D
  double* partialInertia = nullptr;      // maxSegments
};
// Device bytes of the scratch; 0 when the shape can't take this path (rows > 2^31 − 1, chunks·K ≥ 2^28).
std::size_t residentAccumulateBytes(std::int64_t rows, std::int64_t chunkRows, int d, int k);
void allocResidentAccumulate(ResidentAccumulateScratch& a, std::int64_t rows, std::int64_t chunkRows, int d, int k);
void freeResidentAccumulate(ResidentAccumulateScratch& a);
void accumulateResident(RowValues x, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                        double* dist, float* dist32, bool sums, ResidentAccumulateScratch& a, double* sumsOut,
                        long long* countsOut, double* inertiaOut, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
