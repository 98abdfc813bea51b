// The types and constants that the kernels' launch functions share with the backend and the tools: operand kinds,
// the rows' and centroids' device operands (RowOps, CentroidOps), the rows' values (RowValues), the flags prepareRows
// reports. Host-only (planner.cpp includes it); each operation's launch function is declared in its own .cuh.
//
// Data flow of one chunk of n rows (all device pointers, one stream):
//   prepareRows   (operands.cuh) raw rows (f32/f16/bf16) → values (fp32 xf, unit length for cosine; or the 16-bit
//                 rows kept as they are, see RowValues), tensor-core operands
//                 ahi/alo (fp16 or bf16, each row scaled by a power of two), per-row scale and norm,
//                 first non-finite / zero-norm row
//   assignRows    (assign.cuh) fused distance + argmin on tensor cores → labels; exact mode also flags the rows whose
//                 margin between the two best candidates is within the error bound
//   recheckRows   (recheck.cuh) flagged rows: argmin of Σ(x−c)² in fp64 over all K (CUDA cores) → labels
//   accumulate    (accumulate.cuh) stable radix sort by label + fixed-order fp64 segment sums → per-cluster
//                 sums/counts/inertia, and the fp64 distance of each row to its label's centroid
//   exactAddRows  (exact_sums.cuh) exact integer statistics of a fit pass
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace kmfleet {
namespace cuda {

// Operand format of the tensor-core products.
enum class OpKind : int {
  F16x1 = 0,  // x, c rounded to fp16 (per-row / global power-of-two scaling): one MMA per product (tf32 jobs)
  F16x3 = 1,  // x = hi + lo, c = hi + lo (fp16): hi·hi + hi·lo + lo·hi, plus margin test + fp64 recheck = exact
};
enum class InType : int { F32 = 0, F16 = 1, BF16 = 2 };

constexpr int kBlockRows = 128;      // rows per assignment block
constexpr int kBlockCentroids = 128; // centroids per shared-memory tile
constexpr int kDimChunk = 64;        // reduction-dimension chunk (the padding unit of D)
// Rows per fixed-order segment of the centroid sums: the cut orders the sums' additions, so it is part of their bits.
constexpr int kSegmentRows = 256;

inline std::int64_t padDims(std::int64_t d) { return (d + kDimChunk - 1) / kDimChunk * kDimChunk; }
inline std::int64_t padCentroids(std::int64_t k) { return (k + kBlockCentroids - 1) / kBlockCentroids * kBlockCentroids; }
constexpr int kCandidates = 16;  // candidate window capacity per flagged row (more → recheck over all K)

inline int opTerms(OpKind op) { return op == OpKind::F16x3 ? 2 : 1; }  // 16-bit arrays per operand

// Centroid operands of one pass, prepared on the device from the K×D fp32 centroids (operands.cu
// prepareCentroidOps); scale and maxNorm are copied back to the host for the launch arguments.
struct CentroidOps {
  const void* bhi = nullptr;   // Kp × Dp, 16-bit
  const void* blo = nullptr;   // Kp × Dp (F16x3 only)
  const float* cnorm = nullptr;// Kp: ‖c − μ‖² (fp32 rounded from fp64); +inf for the padding centroids
  const float* cf = nullptr;   // K × D fp32 centroids (recheck, distances)
  float scale = 1;             // global power-of-two scale sc of the operands
  float maxNorm = 0;           // max ‖c − μ‖ (unscaled)
  float hiNorm = 0, loNorm = 0;// F16x3: max ‖ch‖, max ‖cl‖ (scaled operands, rounded up); 0 = not known
  bool shifted = false;        // operands are shifted by μ
};

struct RowOps {
  float* xf = nullptr;         // n × D fp32 rows; null when x16 holds the rows' values
  void* ahi = nullptr;         // n × Dp, 16-bit
  void* alo = nullptr;         // n × Dp (F16x3 only)
  float* rowScale = nullptr;   // n: power-of-two scale sx of the row's operands
  float* rowNorm = nullptr;    // n: ‖x̂‖ of the scaled row (error bound)
  float* rowNormLo = nullptr;  // n, F16x3 (may be null): ‖xl‖ of the row's lo operand, rounded up (the screen's bound)
  // n, F16x3 (may be null): the Hopper screen writes each row's best there (‖x̃ − c̃‖² − ‖x̃‖², approximate) and, when
  // screenRelative, reads it first as the guess its 16-bit keys are relative to (the caller decides: a screen wrote
  // them for these rows, its policy, CudaSettings.relativeKeys). Any finite contents keep the labels exact; stale ones
  // only pass more rows on.
  float* screenRef = nullptr;
  bool screenRelative = false;
  // Exact mode, resident rows with bounds (resident_bounds.h; each may be null): prepareRows writes rowSqNorm, the
  // row's ‖fl(x − μ)‖² in fp64 rounded to fp32 — the term that turns the kernels' d' into a distance; the margin
  // modes write for every row they decide an upper bound on its distance to its label's centroid (boundUpper) and a
  // lower bound on its distance to every other centroid (boundLower), +inf / 0 for the rows they leave to the recheck.
  float* rowSqNorm = nullptr;
  float* boundUpper = nullptr;
  float* boundLower = nullptr;
  void* x16 = nullptr;         // n × D raw 16-bit input rows (f16/bf16 data, l2) when xf is null
  InType x16Type = InType::F16;
};

// The rows' values as the fp64 kernels (sums, distances, recheck, farthest rows) read them: the fp32 rows, or the
// raw 16-bit input rows when those are the values (f16/bf16 data with l2: 16-bit → fp32 is exact, so every fp64
// result has the same bits as from an fp32 copy, and the pass reads half the bytes). Cosine rows are normalized
// in fp32, so they keep the fp32 copy.
struct RowValues {
  const void* p = nullptr;
  InType type = InType::F32;
  std::size_t elementBytes() const { return type == InType::F32 ? 4 : 2; }
  // The values of row `first` onwards.
  RowValues rows(std::int64_t first, int d) const {
    return {static_cast<const char*>(p) + static_cast<std::size_t>(first) * d * elementBytes(), type};
  }
};
inline RowValues rowValues(const RowOps& o) {
  return o.xf ? RowValues{o.xf, InType::F32} : RowValues{o.x16, o.x16Type};
}
// Whether the backend keeps 16-bit input rows as they are (no fp32 copy): f16/bf16 data and l2.
inline bool keepsRows16(InType in, bool cosine) { return in != InType::F32 && !cosine; }

// Where prepareRows reports the rows a pass cannot take: device int64s, each the atomicMin of a global row index
// (all ones: none). A null pointer is not checked.
struct RowFlags {
  unsigned long long* nonFinite = nullptr;    // a value is inf or nan
  unsigned long long* zeroNorm = nullptr;     // cosine: every value is 0
  unsigned long long* beyondExact = nullptr;  // a value, as later kernels see it, of magnitude ≥ 2^64: more than the
                                              // exact statistics hold (exact_sums.cuh)
};

}  // namespace cuda
}  // namespace kmfleet
