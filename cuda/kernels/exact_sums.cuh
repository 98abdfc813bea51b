// Exact per-cluster statistics of the rows, kept across passes and updated by the rows whose label changed
// (cuda/NOTES.md "Exact statistics").
//
// Every value x (fp32, or fp16/bf16 widened exactly) is truncated once, toward zero, onto a 2^-96 grid: x̃ = M·2^-96
// with the integer M = m·2^s (m the ≤ 24-bit magnitude of the significand, s ≥ 0) — exact for |x| ≥ 2^-72, which is
// every value a k-means would notice. Per cluster c:
//   sum[c][j]   Σ x̃_j over its rows        192-bit two's complement on the 2^-96 grid   (3 words, w0 lowest)
//   sq[c]       Σ ‖x̃‖² over its rows       384-bit two's complement on the 2^-192 grid  (6 words; x̃² is exact there)
//   count[c]    its rows                    int64
// Integer additions are exact and commute, so the statistics are the same bits whatever the order, chunking,
// residency or history of the additions: S(t) = S(t−1) + Σ(rows in) − Σ(rows out) equals a fresh sum bit for bit.
//
// Range: |x| < 2^64 and at most 2^31 − 1 rows (then |Σ| < 2^95 and Σ‖x̃‖² < 2^171 fit their words). exactSumsFits()
// says whether a shape may take this path; the values are checked as they enter the device (prepareRows'
// RowFlags::beyondExact, types.h).
//
// From the statistics and the pass's centroids c (fp32, truncated onto the same grid: c̃), exactFinish gives
//   sums[c][j]  = Σ x̃_j as the fp64 nearest to it (round to nearest even, from the exact integer)
//   counts[c]
//   inertia[c]  l2: Σ‖x̃ − c̃‖² = sq − 2·Σ_j c̃_j·sum_j + count·‖c̃‖², computed exactly (384-bit integers on the 2^-192
//               grid, so it is exactly 0 where every row sits on its centroid: duplicates, K = N) and rounded once;
//               cosine (unit rows and centroids): Σ(1 − x̃·c̃) = count − Σ_j c̃_j·sum_j, exactly, rounded once.
// The fp64 results are therefore independent of chunking too.
//
// Work per call, on one stream, no host synchronization (counts stay on the device):
//   exactAddRows    rows [0, n) with their labels: sorted by label (cub's radix sort), then one warp per run of
//                   sorted rows adds each lane's values
//                   into shared-memory bins folded into the run's sums,
//                   runs merged with 64-bit atomics and carries.
//   exactMoveRows   statistics that hold the rows under `prev` become those under `cur`: only rows with
//                   prev[r] ≠ cur[r] are read, each added at cur[r] and subtracted at prev[r] (a counting sort with
//                   warp-aggregated atomics: the number of changed rows stays on the device; the order inside a
//                   cluster does not matter).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "types.h"

namespace kmfleet {
namespace cuda {

// Whether rows × d × k may take this path: rows < 2^31 and k·d ≤ 2^26 (the statistics: 24 bytes a centroid value).
// A function of the shape only, so a resumed run takes the same path as the run it resumes.
bool exactSumsFits(std::int64_t rows, int d, int k);

struct ExactStats {
  unsigned long long* sum = nullptr;  // K × D × 3
  unsigned long long* sq = nullptr;   // K × 6
  long long* count = nullptr;         // K
  int k = 0, d = 0;
};
std::size_t exactStatsBytes(int k, int d);
void allocExactStats(ExactStats& s, int k, int d);  // throws std::bad_alloc
void freeExactStats(ExactStats& s);
void zeroExactStats(const ExactStats& s, cudaStream_t st);
// dst += src (both K × D of the same shape)
void addExactStats(const ExactStats& dst, const ExactStats& src, cudaStream_t st);

// Sorting scratch for calls of up to maxRows rows (exactAddRows) or maxRows changed rows (exactMoveRows: two entries
// each); one per stream that calls concurrently.
struct ExactScratch {
  std::int64_t maxRows = 0;
  int k = 0;
  int* keys = nullptr;                // 2·maxRows: cluster of each sorted entry
  unsigned* entries = nullptr;        // 2·maxRows: row index, bit 31 set = subtract
  unsigned* clusterStart = nullptr;   // K + 1: counts, then the exclusive scan (cursor)
  unsigned* total = nullptr;          // 1: entries of this call (device)
  void* scanTemp = nullptr;
  std::size_t scanTempBytes = 0;
};
std::size_t exactScratchBytes(std::int64_t maxRows, int k);
void allocExactScratch(ExactScratch& a, std::int64_t maxRows, int k);  // throws std::bad_alloc
void freeExactScratch(ExactScratch& a);

// Adds rows [0, n) (n ≤ a.maxRows, labels in [0, K)) into s. sq is skipped (left as it is) when wantSq is false
// (cosine needs no Σ‖x‖²).
void exactAddRows(RowValues x, std::int64_t n, int d, const std::int32_t* labels, bool wantSq, ExactScratch& a,
                  const ExactStats& s, cudaStream_t st);

// s holds rows [0, n) under `prev`; afterwards under `cur`. n ≤ 2^31 − 1 and a.maxRows ≥ n (every row may change).
void exactMoveRows(RowValues x, std::int64_t n, int d, const std::int32_t* prev, const std::int32_t* cur, bool wantSq,
                   ExactScratch& a, const ExactStats& s, cudaStream_t st);

// sums (K × D fp64), counts (K), inertia (K fp64) from s and the pass's centroids cf (K × D fp32) — see the header.
// The exact inertia needs |c| < 2^64 too: a non-empty cluster whose centroid has a value beyond (only a given initial
// centroid can: means of in-range rows cannot) gets a NaN inertia; its sums and count are still right.
// s must come from allocExactStats (one allocation, sum first: zeroExactStats clears it whole).
void exactFinish(const ExactStats& s, const float* cf, bool cosine, double* sumsOut, long long* countsOut,
                 double* inertiaOut, cudaStream_t st);

}  // namespace cuda
}  // namespace kmfleet
