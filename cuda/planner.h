// Memory planner of the CUDA backend: from (N, D, K, dtype, precision, budget, free device memory) decide
// the chunk size, the host buffers and how many rows stay resident on the device. Pure arithmetic (no CUDA
// calls), so it is unit-testable on a machine without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend.h"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda {

struct MemoryPlan {
  std::int64_t chunkRows = 0;
  int buffers = 0;
  std::int64_t residentRows = 0;
  OpKind op = OpKind::F16x3;
  Precision precision = Precision::FP32;  // resolved (never Auto)
  std::size_t fixedBytes = 0;             // centroids, operands, K×D sums
  std::size_t streamBytes = 0;            // per-chunk scratch + the slots, for chunkRows rows
  // Device slots that streamed chunks land in (H2D) and are computed from: 2 when every row stays resident (only
  // the first pass streams), more when chunks are streamed on every pass, so that a copy never waits for the
  // compute of the chunk two before it (chunk_stream.cu; cuda/NOTES.md "Streaming").
  int slots = 2;
  std::size_t residentRowBytes = 0;       // device bytes per resident row
  std::size_t residentBudget = 0;         // bytes allowed for resident rows
  std::size_t residentAccBytes = 0;        // > 0: resident rows accumulated in one go, this much scratch (of the budget)
  // Resident rows assigned per launch when they go in one go (resident_pass.cu processResidentWhole): all of them when
  // the exact mode's flagged-row scratch for all fits in the budget too, else ~2M (residentPieceRows)
  std::int64_t residentPiece = 0;
  // Partly resident passes: streamed chunks computed on their own stream while the resident rows are, each into
  // one of `overlapPartials` per-chunk partial buffers (a ring) folded into the totals in chunk order after the
  // resident rows (overlap_partials.h, resident_steps.h). 0 (no room for them): streamed chunks run behind the
  // resident rows on the compute stream.
  std::int64_t overlapPartials = 0;
  std::size_t overlapBytes = 0;            // the partials + the chunk stream's own scratch (beside the budget)
  // Fit passes keep exact integer statistics (exact_sums.cuh): the resident rows' across passes (moved by the rows
  // whose label changed) and each pass's streamed chunks'. A function of the shape only (exactSumsFits), so a
  // resumed run sums the same way.
  bool exactSums = false;
  // Device bytes kept beside the budget for the bounds of the rows past the resident ones (tier_rows.h: their
  // labels, bounds and list entries, the neighbour lists, a chunk of scratch, their statistics), so that a pass can
  // leave out the host tier's rows they settle; 0: none (not exact mode, or they would take over a quarter of it).
  std::size_t tierBytes = 0;
};

// The device bytes of the bounds of `rows` rows of the host tier (MemoryPlan.tierBytes, tier_rows.h).
std::size_t tierBoundsBytes(std::int64_t rows, std::int64_t chunkRows, std::int64_t d, std::int64_t k);

// The operand format for a precision (FP32 → exact split fp16; TF32 → per-row-scaled fp16, whose 11-bit
// significand is TF32's; BF16 → bf16; FP16 → fp16). Auto: fp32 for f32 data, else the data's own type.
Precision resolvePrecision(Precision p, DType t);
OpKind opFor(Precision resolved);

std::size_t fixedBytes(std::int64_t d, std::int64_t k, OpKind op);
// Rows of f16/bf16 data with l2 are kept as they are (16-bit, types.h RowValues), else as an fp32 copy.
bool keepsRows16(DType t, Metric m);
std::size_t chunkBytes(std::int64_t chunkRows, std::int64_t d, std::int64_t k, DType t, OpKind op, Metric m,
                       int slots = 2);
// Slots for passes that stream (some rows not resident): the copy may run this many chunks ahead of the compute.
constexpr int kStreamingSlots = 4;
std::size_t residentRowBytes(std::int64_t d, OpKind op, DType t, Metric m);

// Resident rows are assigned in one launch where the budget allows (MemoryPlan.residentPiece), else in pieces of
// whole chunks, ~2M rows (one launch each instead of one per chunk); exact mode has flagged-row scratch for one
// piece. Pieces cost ~0.3 ms a pass at 10M rows (H200, 10M×128×1024, exact and fp16): each is a launch chain with
// its tails, and the labels' copies they let overlap are covered by the sums after them anyway.
inline std::int64_t residentPieceRows(std::int64_t residentRows, std::int64_t chunkRows) {
  const std::int64_t whole = std::max<std::int64_t>(1, (std::int64_t{1} << 21) / chunkRows) * chunkRows;
  return std::min(residentRows, whole);
}
// One streamed chunk's per-cluster sums, counts and inertia (the values accumulate() adds into the totals).
inline std::size_t overlapPartialBytes(std::int64_t d, std::int64_t k) {
  return std::size_t(k) * std::size_t(d) * 8 + std::size_t(k) * 16;
}
inline std::size_t flaggedRowBytes(OpKind op) { return op == OpKind::F16x3 ? 4 + 4 + 4 + 4 * kCandidates : 0; }

// freeMemory: the device's free bytes now. Throws EngineError OutOfMemory (with the numbers) when even
// streaming with the smallest chunk can't fit, InvalidArgument for a chunkRows that can't work.
MemoryPlan planMemory(const EngineConfig& cfg, std::uint64_t freeMemory);

}  // namespace cuda
}  // namespace kmfleet
