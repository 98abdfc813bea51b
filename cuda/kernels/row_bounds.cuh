// Hamerly's bounds on the device (row_bounds.cu; the state and the pass's use of them: resident_bounds.h). Per row an
// upper bound u on ‖x − c_a‖ (a its label) and a lower bound l on ‖x − c_k‖ for every other k, on distances (not
// squared) between the fp32 values the kernels see. The assignment's margin modes write them for the rows they decide
// (recordRowBounds); a later pass moves them by how far each centroid moved (the triangle inequality: u += δ_a,
// l −= the largest δ of the others) and keeps the label of every row with u < l: its label's centroid is then the
// nearest by a margin the exact assignment also sees, so the labels — and everything that follows from them — are the
// bits of a pass without bounds.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// The centroids' movement between two passes, on the device: drift[k] ≥ ‖now_k − before_k‖ (fp64, rounded up), and
// the two largest (top[0] ≥ top[1], index of top[0] in *topIndex).
void centroidDrift(const float* now, const float* before, int k, int d, float* drift, float* top, int* topIndex,
                   cudaStream_t s);

// Each centroid's neighbours, for the settle's second test (settleRows): up to kNeighbourK centroids, where the K×K
// lists stay small. Row a of `dist` holds the distances from c_a to the other centroids in increasing order, rounded
// down (+inf last: c_a itself); row a of `drift`, in the same order, the largest drift among the first j + 1 of them.
constexpr int kNeighbourK = 4096;
struct CentroidNeighbours {
  float* dist = nullptr;  // K×K
  float* drift = nullptr; // K×K
  // scratch of the sort
  float* keys = nullptr;
  int* index = nullptr;
  int* sortedIndex = nullptr;
  int* offsets = nullptr;  // K + 1
  void* temp = nullptr;
  std::size_t tempBytes = 0;
};
// The sort's scratch bytes for k centroids (CentroidNeighbours.temp).
std::size_t neighbourSortBytes(int k);
// The lists of the centroids `now` (device, K×D) with their drift (centroidDrift's).
void centroidNeighbours(const float* now, int k, int d, const float* drift, const CentroidNeighbours& nb, cudaStream_t s);

// A row both of settleRows' tests leave open, with at most kNearMax centroids within 2u(1 + 2⁻²⁰) of its label's
// (nearCentroids), is a near row: every other centroid is farther from it than its label's by a relative 2⁻¹⁹ or more
// (‖x − c_k‖ ≥ ‖c_k − c_a‖ − u), far beyond fp64's rounding, so the fp64 argmin over those few and the label's is the
// fp64 argmin over all K — what the recheck finds, and what the margin test's label is when it decides. On clustered
// data in late passes they include the near ties the recheck would otherwise take every pass.
constexpr int kNearMax = 32;

// Rows [0, n): each row's bounds moved to the new centroids; a row they settle takes its previous label into labels,
// the others are appended to open (count in *openCount, which the call zeroes first; in any order) — near rows (with
// the neighbour lists) from the list's end instead: open[n − 1 − i] for i < *nearCount. Rows without bounds
// (u = +inf) are open. Two tests, each on valid bounds: Hamerly's (l − the largest drift of the other centroids),
// then, with the neighbour lists (nb.dist not null), the centroids within 2u of the label's: any other is farther from
// the row than its label's (‖x − c_k‖ ≥ ‖c_k − c_a‖ − u), so only the drift of the nearer ones lowers l.
void settleRows(float* upper, float* lower, const std::int32_t* previousLabels, std::int32_t* labels, std::int64_t n,
                const float* drift, const float* top, const int* topIndex, const CentroidNeighbours& nb, int k,
                std::int32_t* open, unsigned* openCount, unsigned* nearCount, cudaStream_t s);

// The near rows settleRows listed (open[n − 1 − i], i < *nearCount): each one's label, the fp64 argmin over its
// label's centroid and the nearCentroids of it (Σ(x − c)² as recheckRows computes it, so the same bits; ties → the
// lowest index), and its bounds from those distances: u the best, l the least of the second and of the first
// centroid not computed (its neighbour distance less the label's). One warp a row.
void assignNearRows(RowValues x, int d, const float* centroids, int k, const CentroidNeighbours& nb,
                    const std::int32_t* previousLabels, std::int32_t* labels, float* upper, float* lower,
                    const std::int32_t* open, const unsigned* nearCount, std::int64_t n, cudaStream_t s);

// The rows the assignment just decided (rowIds[0..*count), or rows [0, n) when rowIds is null): their bounds from the
// form recordRawBounds left them in, with n2 = ‖fl(x − μ)‖² of each row (RowOps.rowSqNorm).
void finishRowBounds(float* upper, float* lower, const float* sqNorm, const std::int32_t* rowIds,
                     const unsigned* count, std::int64_t n, cudaStream_t s);

#ifdef __CUDACC__
// The margin modes' epilogues, for a row r they decided or not: with the row's factor g (d' = g·(‖x − c‖² − n2) up
// to the kernel's error), up ≥ d' of its label's centroid and lo ≤ d' of every other centroid, both including that
// error. Kept as up/g and lo/g (exact: g is a power of two) until finishRowBounds adds n2, so the kernels read nothing
// more per row. Undecided rows (the recheck decides them) get none: +inf.
__device__ __forceinline__ void recordRawBounds(float* upper, float* lower, int r, bool decided, float g, float up,
                                                float lo) {
  if (!upper) return;
  upper[r] = decided ? up / g : INFINITY;
  lower[r] = decided ? lo / g : 0.f;
}
#endif

}  // namespace cuda
}  // namespace kmfleet
