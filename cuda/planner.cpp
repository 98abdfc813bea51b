// Memory planner (see planner.h). Every device allocation of the backend is counted here; the owners' allocate()
// (backend_buffers.cu) allocate exactly these pieces.
#include "planner.h"

#include <algorithm>
#include <cstdio>

#include "kernels/accumulate.cuh"
#include "kernels/exact_sums.cuh"
#include "kernels/far_rows.cuh"
#include "kernels/row_bounds.cuh"

namespace kmfleet {
namespace cuda {

namespace {
constexpr std::size_t kMiB = 1024 * 1024;
constexpr std::int64_t kMaxChunkRows = 1 << 24;      // kernels index a chunk with int
// Of input rows: long enough copies for full PCIe speed, and chunks of enough rows that the sums' segments (one per
// chunk and cluster, since the chunk boundaries fix the order of the additions) are not mostly fixed costs: at
// 1M×256×4096 fp32, 64 MiB chunks (65,536 rows) leave ~16 rows a segment.
constexpr std::size_t kTargetChunkBytes = 128 * kMiB;
// Rows streamed on every pass: each streamed chunk pays fixed costs (its sums' sort and segments, the farthest-row
// candidates, a persistent assignment kernel's ramp) beside the resident compute; twice the rows halve them
// (cuda/NOTES.md "Streaming and residency").
constexpr std::size_t kStreamingChunkBytes = 128 * kMiB;
constexpr std::int64_t kMaxOverlapPartials = 512;    // per-chunk partials of the overlapped streamed chunks

std::string mib(std::size_t b) {
  char s[64];
  std::snprintf(s, sizeof s, "%.1f MiB", b / double(kMiB));
  return s;
}
}  // namespace

Precision resolvePrecision(Precision p, DType t) {
  if (p != Precision::Auto) return p;
  switch (t) {
    case DType::F32: return Precision::FP32;
    case DType::F16: return Precision::FP16;
    case DType::BF16: return Precision::BF16;
  }
  return Precision::FP32;
}

// fp16 and bf16 jobs take exact mode's operands: their labels are the exact ones of their 16-bit rows, so they converge
// as fp32 jobs do (one-product labels flip near-ties as the centroids' roundings change, and never settle). tf32 is the
// one-product mode.
OpKind opFor(Precision p) { return p == Precision::TF32 ? OpKind::F16x1 : OpKind::F16x3; }

// Exact mode's resident-row bounds (resident_bounds.h): the centroids they hold for, the drift, and up to
// kNeighbourK centroids each one's neighbours (five K×K arrays and the sort's scratch, about as large again).
std::size_t boundsBytes(std::int64_t k, std::int64_t d) {
  const std::size_t K = k;
  return K * d * 4 + K * 4 + (k >= 2 && k <= kNeighbourK ? K * K * 4 * 5 + K * K * 8 + kMiB : 0);
}

std::size_t fixedBytes(std::int64_t d, std::int64_t k, OpKind op) {
  const std::size_t dp = padDims(d), kp = padCentroids(k), K = k, D = d;
  return K * D * 4 * 2                 // fp32 centroids: the pass's and the next (centroid_update.cu)
         + kp * dp * 2 * 2             // operands hi (+ lo)
         + kp * 4 + D * 4              // ‖c‖², μ
         + K * D * 8 + K * 16          // fp64 sums, counts, inertia
         + K * 16 + D * 8              // the update's shift and scatter per cluster, fp64 data mean
         + 8 * kMiB                    // small buffers, allocator slack
         + (op == OpKind::F16x3 ? boundsBytes(k, d) : 0);
}

bool keepsRows16(DType t, Metric m) { return t != DType::F32 && m == Metric::L2; }

namespace {
// tensor-core operands + scale/norm (exact mode: + the lo operand's norm, for the one-product screen's bound)
std::size_t operandRowBytes(std::int64_t d, OpKind op) {
  return std::size_t(padDims(d)) * 2 * opTerms(op) + 8 + (op == OpKind::F16x3 ? 4 : 0);
}
}  // namespace

std::size_t residentRowBytes(std::int64_t d, OpKind op, DType t, Metric m) {
  // values (16-bit rows as they are, else fp32) + operands + scale/norm + label/distance outputs (device)
  // + the fp64 distance kept for the pass's farthest rows (asked for only when a cluster came out empty)
  // + the previous pass's label (changed rows counted on the device)
  // + exact mode: the row's best from the last screened pass (the next screen's guess, RowOps.screenRef), and its
  //   bounds (resident_bounds.h: ‖x − μ‖², upper, lower, its place in the open rows' list)
  return std::size_t(d) * (keepsRows16(t, m) ? 2 : 4) + operandRowBytes(d, op) + 8 + 8 + 4 +
         (op == OpKind::F16x3 ? 4 + 16 : 0);
}

std::size_t chunkBytes(std::int64_t rows, std::int64_t d, std::int64_t k, DType t, OpKind op, Metric m,
                       int slotCount) {
  const std::size_t r = rows, rowBytes = std::size_t(d) * dtypeBytes(t);
  const std::size_t slots = std::size_t(slotCount) * (r * rowBytes + r * 8);  // raw input + labels/distances out
  // streamed rows' fp32 copy (none when the 16-bit rows are read in their slot) + operands
  const std::size_t values = keepsRows16(t, m) ? 0 : std::size_t(d) * 4;
  const std::size_t scratch = r * (values + operandRowBytes(d, op))
                              + r * (4 + 8 + 8 + 4 * kCandidates) // flagged list + windows, fp64 distances, candidates
                              + accumulateScratchBytes(rows, int(d), int(k)) + farRowsScratchBytes(rows);
  return slots + scratch;
}

namespace {
MemoryPlan planFor(const EngineConfig& cfg, std::uint64_t freeMemory, std::size_t targetChunkBytes) {
  MemoryPlan p;
  p.precision = resolvePrecision(cfg.precision, cfg.dtype);
  p.op = opFor(p.precision);
  const std::int64_t n = cfg.rows, d = cfg.dims, k = cfg.k;
  const std::size_t rowBytes = std::size_t(d) * dtypeBytes(cfg.dtype);
  if (d > 65536) throw EngineError(ErrorCode::InvalidArgument, "dims " + std::to_string(d) + " > 65536 on CUDA");
  if (k >= (1LL << 31) / 2) throw EngineError(ErrorCode::InvalidArgument, "k too large for CUDA");

  if (cfg.chunkRows > 0) {
    if (cfg.chunkRows > kMaxChunkRows)
      throw EngineError(ErrorCode::InvalidArgument, "chunkRows " + std::to_string(cfg.chunkRows) + " > " +
                                                        std::to_string(kMaxChunkRows) + " (CUDA backend limit)");
    p.chunkRows = std::min<std::int64_t>(cfg.chunkRows, n);
  } else {
    p.chunkRows = std::clamp<std::int64_t>(std::int64_t(targetChunkBytes / std::max<std::size_t>(rowBytes, 1)), 1024,
                                           kMaxChunkRows);
    p.chunkRows = std::min(p.chunkRows, n);
  }

  p.exactSums = exactSumsFits(n, int(d), int(k));
  // exact sums: the resident rows' statistics and the pass's (fixed), their sort scratch (per chunk)
  const auto exactScratch = [&](std::int64_t rows) -> std::size_t {
    return p.exactSums ? exactScratchBytes(rows, int(k)) : 0;
  };
  p.fixedBytes = fixedBytes(d, k, p.op) + (p.exactSums ? 2 * exactStatsBytes(int(k), int(d)) : 0);
  const std::size_t headroom = std::max<std::size_t>(256 * kMiB, freeMemory / 20);
  std::size_t usable = freeMemory > headroom ? freeMemory - headroom : 0;
  // the caller's cap on all of it (a shared device): within what the device has free
  const bool capped = cfg.deviceMemoryLimit >= 0 && std::size_t(cfg.deviceMemoryLimit) < usable;
  if (capped) usable = std::size_t(cfg.deviceMemoryLimit);
  // Shrink an automatic chunk until the streaming part fits (a given chunkRows is kept and checked).
  for (;;) {
    p.streamBytes = chunkBytes(p.chunkRows, d, k, cfg.dtype, p.op, cfg.metric) + exactScratch(p.chunkRows);
    if (p.fixedBytes + p.streamBytes <= usable || cfg.chunkRows > 0 || p.chunkRows <= 1024) break;
    p.chunkRows = std::max<std::int64_t>(1024, p.chunkRows / 2);
  }
  // Pinned host buffers: three in flight, but never more than the dataset has chunks. A feed fills a buffer the pass
  // has finished with, so a dataset of one or two chunks never uses a third; each is a chunk (128 MiB by default) of
  // page-locked memory that the open pins (cudaHostAlloc) and no other process may page out.
  const std::int64_t chunks = (n + p.chunkRows - 1) / p.chunkRows;
  p.buffers = cfg.buffers > 0 ? cfg.buffers : int(std::clamp<std::int64_t>(chunks, 1, 3));
  if (capped && p.fixedBytes + p.streamBytes > usable) {
    const std::int64_t least = cfg.chunkRows > 0 ? p.chunkRows : std::min<std::int64_t>(1024, n);
    const std::size_t smallest = p.fixedBytes + chunkBytes(least, d, k, cfg.dtype, p.op, cfg.metric) + exactScratch(least);
    throw EngineError(ErrorCode::InvalidArgument,
                      "a device memory budget of " + mib(usable) + " is too small for K×D = " + std::to_string(k) +
                          "×" + std::to_string(d) + ": the centroids and sums need " + mib(p.fixedBytes) +
                          " and streaming chunks of " + std::to_string(p.chunkRows) + " rows " + mib(p.streamBytes) +
                          "; the smallest budget that works is " + std::to_string((smallest + kMiB - 1) / kMiB) +
                          " MiB (chunks of " +
                          std::to_string(least) + " rows)");
  }
  if (p.fixedBytes + p.streamBytes > usable)
    throw EngineError(ErrorCode::OutOfMemory,
                      "CUDA: K×D = " + std::to_string(k) + "×" + std::to_string(d) + " needs " + mib(p.fixedBytes) +
                          " for centroids and sums plus " + mib(p.streamBytes) + " to stream chunks of " +
                          std::to_string(p.chunkRows) + " rows, but the device has " + mib(freeMemory) +
                          " free (" + mib(headroom) + " kept as headroom)");

  // + exact sums: the compute stream's scratch grows to all resident rows at once (two sort entries a row)
  p.residentRowBytes = residentRowBytes(d, p.op, cfg.dtype, cfg.metric) + (p.exactSums ? 16 : 0);
  std::size_t left = usable - p.fixedBytes - p.streamBytes;
  // the bytes resident rows may take out of what is left: the configured budget, at most what is left
  const auto budgetOf = [&](std::size_t l) {
    return cfg.memoryBudget >= 0 ? std::min<std::size_t>(std::size_t(cfg.memoryBudget), l) : l;
  };
  const auto allFit = [&](std::size_t l) { return std::int64_t(budgetOf(l) / p.residentRowBytes) >= n; };
  // Rows streamed on every pass: more slots, beside the budget (~64 MiB each at the default chunk), so the copies
  // run ahead of a compute that resident work may delay. CudaSettings.slots (2..16) overrides it.
  {
    const std::size_t slotBytes = std::size_t(p.chunkRows) * (rowBytes + 8);
    int want = allFit(left) ? 2 : kStreamingSlots;
    if (cfg.cuda.slots > 0) want = std::clamp(cfg.cuda.slots, 2, 16);
    const std::size_t extra = std::size_t(want - 2) * slotBytes;
    if (want > 2 && extra <= left / 4) {
      p.slots = want;
      p.streamBytes += extra;
      left -= extra;
    }
  }
  // Partly resident (the rows don't all fit): reserve the overlap's per-chunk partials and the chunk stream's
  // scratch (accumulate + flagged rows) beside the resident budget: ~4 MiB a partial at K×D = 4096×128 against
  // ~130 MiB a resident chunk. At most one partial per chunk and ≤ 1/8 of the usable memory; none → old path.
  std::size_t overlapScratch = 0;
  if (!allFit(left)) {
    const std::size_t per = overlapPartialBytes(d, k);
    overlapScratch = accumulateScratchBytes(p.chunkRows, int(d), int(k)) +
                     std::size_t(p.chunkRows) * (4 + 4 + 4 + 4 * kCandidates) + 256 +  // flagged rows (overlap_partials.h flags)
                     exactScratch(p.chunkRows);                                          // the chunk stream's (ExactStatistics)
    std::int64_t parts = std::min<std::int64_t>((n + p.chunkRows - 1) / p.chunkRows, kMaxOverlapPartials);
    parts = std::min<std::int64_t>(parts, std::int64_t(usable / 8 / per));
    if (parts >= 1 && overlapScratch + std::size_t(parts) * per <= left) {
      p.overlapPartials = parts;
      left -= overlapScratch + std::size_t(parts) * per;
    }
  }
  // Rows past the resident ones may keep bounds on the device, ~20 bytes a row against hundreds for a resident one:
  // room for every row's beside the budget (over-counted by the resident rows' share), if a quarter of it holds them.
  // Not without an engine host tier (hostMemoryBudget 0, or a lane of several devices, whose tier is its own).
  if (cfg.rowBounds && cfg.hostMemoryBudget != 0 && p.op == OpKind::F16x3 && p.exactSums && !allFit(left)) {
    const std::size_t need = tierBoundsBytes(n, p.chunkRows, d, k);
    if (need <= left / 4) {
      p.tierBytes = need;
      left -= need;
    }
  }
  p.residentBudget = budgetOf(left);
  const std::int64_t fit = std::int64_t(p.residentBudget / p.residentRowBytes);
  if (fit >= n) p.residentRows = n;
  else p.residentRows = fit / p.chunkRows * p.chunkRows;  // whole chunks: a chunk is resident or streamed
  // Two resident chunks or more: one accumulate over all of them (accumulate.cuh accumulateResident) when its scratch
  // fits in the budget beside the rows; else chunk by chunk (the same bits either way). Their assignment: one launch
  // over all of them when the exact mode's flagged-row scratch for all fits as well, else pieces of ~2M rows.
  if (p.residentRows > p.chunkRows) {
    const std::size_t acc = residentAccumulateBytes(p.residentRows, p.chunkRows, int(d), int(k));
    const std::size_t rowsBytes = std::size_t(p.residentRows) * p.residentRowBytes;
    for (const std::int64_t piece : {p.residentRows, residentPieceRows(p.residentRows, p.chunkRows)}) {
      const std::size_t need = acc + std::size_t(piece) * flaggedRowBytes(p.op);
      if (acc > 0 && rowsBytes + need <= p.residentBudget) {
        p.residentAccBytes = need;
        p.residentPiece = piece;
        break;
      }
    }
  }
  if (p.residentRows == 0 || p.residentRows >= n) {
    p.overlapPartials = 0;  // nothing to overlap (fully streamed, or all resident after all)
  } else if (p.overlapPartials > 0) {
    p.overlapPartials = std::min(p.overlapPartials, (n - p.residentRows + p.chunkRows - 1) / p.chunkRows);
    p.overlapBytes = overlapScratch + std::size_t(p.overlapPartials) * overlapPartialBytes(d, k);
  }
  return p;
}
}  // namespace

std::size_t tierBoundsBytes(std::int64_t rows, std::int64_t chunkRows, std::int64_t d, std::int64_t k) {
  const std::size_t r = std::size_t(rows), c = std::size_t(chunkRows), kk = std::size_t(k);
  const std::size_t perRow = 4 + 4 + 4 + 4 + 4;     // labels of the pass and the last, upper, lower, list entry
  // a gathered piece's previous labels, labels, upper, lower; the chunk scratch's ‖x − μ‖² (backend_shape.cu)
  const std::size_t perChunkRow = 4 + 4 + 4 + 4 + 4;
  const std::size_t neighbours =
      k >= 2 && k <= kNeighbourK ? 5 * 4 * kk * kk + 4 * (kk + 1) + neighbourSortBytes(int(k)) : 0;
  return r * perRow + c * perChunkRow + neighbours + 4 * kk * std::size_t(d) + 4 * (kk + 2) + 64 +
         exactStatsBytes(int(k), int(d));
}

MemoryPlan planMemory(const EngineConfig& cfg, std::uint64_t freeMemory) {
  MemoryPlan p = planFor(cfg, freeMemory, kTargetChunkBytes);
  if (cfg.chunkRows <= 0 && p.residentRows < cfg.rows) {  // streamed on every pass: larger chunks, if they fit
    try {
      MemoryPlan q = planFor(cfg, freeMemory, kStreamingChunkBytes);
      if (q.chunkRows > p.chunkRows) return q;
    } catch (const EngineError&) {
    }
  }
  return p;
}

}  // namespace cuda
}  // namespace kmfleet
