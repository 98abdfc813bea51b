// Host-side launchers of the CUDA kernels (no engine types here: the backend and the standalone
// harness bench/gpu/tools/kmbench.cu both drive the kernels through this header).
//
// Data flow of one chunk of n rows (all device pointers, one stream):
//   prepareRows   raw rows (f32/f16/bf16) → values (fp32 xf, unit length for cosine; or the 16-bit rows kept as
//                 they are, see RowValues), tensor-core operands
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
// Rows per fixed-order segment of the centroid sums: the cut orders the sums' additions, so it is part of their bits.
constexpr int kSegmentRows = 256;

inline std::int64_t padDims(std::int64_t d) { return (d + kDimChunk - 1) / kDimChunk * kDimChunk; }
inline std::int64_t padCentroids(std::int64_t k) { return (k + kBlockCentroids - 1) / kBlockCentroids * kBlockCentroids; }
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
                                              // exact statistics hold (exact_sums.h)
};

// prepareRows: raw → RowOps. Writes xf when not null; else copies raw into x16 unless x16 == raw (a streamed
// chunk's slot). Non-finite rows are written as zeros (xf, x16 — also when x16 == raw).
// mu: the fixed shift of the operands (D floats, device) or null.
void prepareRows(const void* raw, InType in, std::int64_t n, int d, OpKind op, bool cosine, std::int64_t firstRow,
                 const float* mu, const RowOps& rows, const RowFlags& flags, cudaStream_t s);

constexpr int kCandidates = 16;  // candidate window capacity per flagged row (more → recheck over all K)

// Which assignment kernel runs and how the portable one lays out its shared memory (EngineConfig.cuda, backend.h
// CudaSettings). Both kernels give the same labels in exact mode; the settings let tests and tools compare them.
struct AssignKernel {
  bool portable = false;      // the portable mma.sync kernel even where the Hopper one could run
  int sharedMemoryLimit = 0;  // bytes per block the portable kernel plans for, when below the device's opt-in limit
};

// assignRows: labels for n rows. With F16x3, rows whose margin is within the bound are appended to
// flagged[] (count in *flaggedCount, window b1 + 2ε in flaggedThr[]) and must go through candidateRows +
// recheckRows. screened (n ints) and *screenedCount (F16x3, may be null = no screen): scratch of the one-product
// screen that spares most rows two of the three products (both kernels; assign_wgmma.h ExactScreen); free again once
// the assignment's launches on s are done, so a caller may lend candidateRows' candCount (later on the same stream).
void assignRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                OpKind op, std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s);

// Exact mode's one-product screen alone — the first launch of a screened F16x3 assignRows: labels from the hi·hi
// product and the rows its bound can't decide (screened, *screenedCount). Its labels are NOT exact: the tools' checks
// (that the screen decides rows) and timing splits only; no pass runs it alone.
void screenRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                std::int32_t* labels, std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s);

// Which assignment kernel assignRows runs for rows of d dims on the current device, as the engine's plan names it:
// "wgmma" (the Hopper kernel: this build has it, the device is compute capability 9.0, Dp ≤ 256 and the settings
// don't ask for the portable one) or "mma.sync" (the portable one).
const char* assignKernelName(const AssignKernel& kernel, int d);

// candidateRows: the same tensor-core products again for the flagged rows only, appending every centroid
// inside the row's window to cand[slot·kCandidates ..] (count candCount[slot], may exceed kCandidates).
// maxRows bounds the flagged count (the grid size); the count itself is read on the device.
void candidateRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c, int k,
                   const std::int32_t* flagged, const unsigned int* flaggedCount, const float* flaggedThr,
                   int* candCount, int* cand, cudaStream_t s);

// recheckRows: exact fp64 argmin for the flagged rows (count read on the device): over the candidate window
// when it held at most kCandidates centroids (the true argmin is always inside it), else over all K.
// candCount/cand may be null: then over all K.
void recheckRows(RowValues x, int d, const float* cf, int k, const std::int32_t* flagged,
                 const unsigned int* flaggedCount, std::int64_t maxFlagged, const int* candCount, const int* cand,
                 std::int32_t* labels, cudaStream_t s);

// rowDistances: fp64 Σ(x−c)² (or 1 − x·c for cosine) to the labelled centroid.
void rowDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
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
// Also computes every row's fp64 distance to its label's centroid, as rowDistances does: the inertia comes from it,
// and it is written to dist (and dist32 when not null: the assign pass's distances). dist may be null when
// distancesFromSums(d) — the rows' distances are then not kept (their scattered stores cost ~0.3 ms per 10M rows on
// the H200), and sumsDistances gives the same bits later, for the rare pass that needs them (farthest rows).
void accumulate(RowValues x, std::int64_t n, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                double* dist, float* dist32, bool sums, AccumulateScratch& a, double* sumsOut, long long* countsOut,
                double* inertiaOut, cudaStream_t s);
// Whether accumulate computes the rows' distances itself (D ≤ 256) — else it needs dist for rowDistances' output.
bool distancesFromSums(int d);
// The fp64 distances accumulate() computed for these rows and labels (the same bits), in row order.
void sumsDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                   double* dist, cudaStream_t s);

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

// Shared-memory bytes the portable assignment kernel needs for (op, Dp) under the device's opt-in limit, or
// sharedMemoryLimit when that is lower (0: none); aResident: whether the block's rows stay in shared memory.
std::size_t assignSharedBytes(OpKind op, int dp, int sharedMemoryLimit = 0, bool* aResident = nullptr);

}  // namespace cuda
}  // namespace kmfleet
