// Host-side launchers of the CUDA kernels (no engine types here: the backend and the standalone
// harness cuda/tools/kmbench.cu both drive the kernels through this header).
//
// Data flow of one chunk of n rows (all device pointers, one stream):
//   prepareRows   raw rows (f32/f16/bf16) → xf (fp32, unit length for cosine), tensor-core operands
//                 ahi/alo (fp16 or bf16, each row scaled by a power of two), per-row scale and norm,
//                 first non-finite / zero-norm row
//   assignRows    fused distance + argmin on tensor cores → labels; exact mode also flags the rows whose
//                 margin between the two best candidates is within the error bound
//   recheckRows   flagged rows: argmin of Σ(x−c)² in fp64 over all K (CUDA cores) → labels
//   accumulate    stable radix sort by label + fixed-order fp64 segment sums → per-cluster sums/counts/inertia,
//                 and the fp64 distance of each row to its label's centroid (inertia, distances, farthest rows)
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kmfleet {
namespace cuda {

// Operand format of the tensor-core products.
enum class OpKind : int {
  F16x1 = 0,   // x, c rounded to fp16 (per-row / global power-of-two scaling): one MMA per product
  BF16x1 = 1,  // x, c rounded to bf16: one MMA
  F16x3 = 2,   // x = hi + lo, c = hi + lo (fp16): hi·hi + hi·lo + lo·hi, plus margin test + fp64 recheck = exact
};
enum class InType : int { F32 = 0, F16 = 1, BF16 = 2 };

constexpr int kBlockRows = 128;      // rows per assignment block
constexpr int kBlockCentroids = 128; // centroids per shared-memory tile
constexpr int kDimChunk = 64;        // reduction-dimension chunk (the padding unit of D)
constexpr int kSegmentRows = 256;    // rows per fixed-order segment of the centroid sums

inline std::int64_t padDims(std::int64_t d) { return (d + kDimChunk - 1) / kDimChunk * kDimChunk; }
inline std::int64_t padCentroids(std::int64_t k) { return (k + kBlockCentroids - 1) / kBlockCentroids * kBlockCentroids; }
inline int opTerms(OpKind op) { return op == OpKind::F16x3 ? 2 : 1; }  // 16-bit arrays per operand

// Centroid operands of one pass, prepared on the host (centroid_operands.cpp) and uploaded.
struct CentroidOps {
  const void* bhi = nullptr;   // Kp × Dp, 16-bit
  const void* blo = nullptr;   // Kp × Dp (F16x3 only)
  const float* cnorm = nullptr;// Kp: ‖c − μ‖² (fp32 rounded from fp64); +inf for the padding centroids
  const float* cf = nullptr;   // K × D fp32 centroids (recheck, distances)
  float scale = 1;             // global power-of-two scale sc of the operands
  float maxNorm = 0;           // max ‖c − μ‖ (unscaled)
  bool shifted = false;        // operands are shifted by μ
};

struct RowOps {
  float* xf = nullptr;         // n × D fp32 rows
  void* ahi = nullptr;         // n × Dp, 16-bit
  void* alo = nullptr;         // n × Dp (F16x3 only)
  float* rowScale = nullptr;   // n: power-of-two scale sx of the row's operands
  float* rowNorm = nullptr;    // n: ‖x̂‖ of the scaled row (error bound)
};

// prepareRows: raw → RowOps. badRow (int64, device) receives atomicMin(first non-finite global row),
// zeroRow atomicMin(first zero-norm global row) when cosine.
// mu: the fixed shift of the operands (D floats, device) or null.
void prepareRows(const void* raw, InType in, std::int64_t n, int d, OpKind op, bool cosine, std::int64_t firstRow,
                 const float* mu, const RowOps& rows, unsigned long long* badRow, unsigned long long* zeroRow, cudaStream_t s);

constexpr int kCandidates = 16;  // candidate window capacity per flagged row (more → recheck over all K)

// assignRows: labels for n rows. With F16x3, rows whose margin is within the bound are appended to
// flagged[] (count in *flaggedCount, window b1 + 2ε in flaggedThr[]) and must go through candidateRows +
// recheckRows.
void assignRows(const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k, OpKind op,
                std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                cudaStream_t s);

// candidateRows: the same tensor-core products again for the flagged rows only, appending every centroid
// inside the row's window to cand[slot·kCandidates ..] (count candCount[slot], may exceed kCandidates).
// maxRows bounds the flagged count (the grid size); the count itself is read on the device.
void candidateRows(const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c, int k,
                   const std::int32_t* flagged, const unsigned int* flaggedCount, const float* flaggedThr,
                   int* candCount, int* cand, cudaStream_t s);

// recheckRows: exact fp64 argmin for the flagged rows (count read on the device): over the candidate window
// when it held at most kCandidates centroids (the true argmin is always inside it), else over all K.
// candCount/cand may be null: then over all K.
void recheckRows(const float* xf, int d, const float* cf, int k, const std::int32_t* flagged,
                 const unsigned int* flaggedCount, std::int64_t maxFlagged, const int* candCount, const int* cand,
                 std::int32_t* labels, cudaStream_t s);

// rowDistances: fp64 Σ(x−c)² (or 1 − x·c for cosine) to the labelled centroid.
void rowDistances(const float* xf, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                  double* dist, float* dist32, cudaStream_t s);

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
// Also writes every row's fp64 distance to its label's centroid (dist; dist32 too when not null), as
// rowDistances does: the inertia, the farthest rows and the assign pass's distances come from it.
void accumulate(const float* xf, std::int64_t n, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                double* dist, float* dist32, bool sums, AccumulateScratch& a, double* sumsOut, long long* countsOut,
                double* inertiaOut, cudaStream_t s);

// Shared-memory bytes the assignment kernel needs for (op, Dp); 0 if it can't run (never for Dp <= 4096).
std::size_t assignSharedBytes(OpKind op, int dp, bool* aResident = nullptr);

}  // namespace cuda
}  // namespace kmfleet
