// Centroid operands of one pass, prepared on the device (statistics and conversion); see operands.cu.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "types.h"

namespace kmfleet {
namespace cuda {

// prepareRows: raw → RowOps. Writes xf when not null; else copies raw into x16 unless x16 == raw (a streamed
// chunk's slot). Non-finite rows are written as zeros (xf, x16 — also when x16 == raw).
// mu: the fixed shift of the operands (D floats, device) or null.
void prepareRows(const void* raw, InType in, std::int64_t n, int d, OpKind op, bool cosine, std::int64_t firstRow,
                 const float* mu, const RowOps& rows, const RowFlags& flags, cudaStream_t s);

struct CentroidStats {
  float scale = 1;    // power of two s_c with max|ĉ| ∈ [2^14, 2^15)
  float maxNorm = 0;  // max ‖c − μ‖, rounded up
  // F16x3, prepareCentroidOps only (0 from the host's centroidStats and prepareCentroids): max ‖ch‖ and max ‖cl‖ of
  // the scaled hi and lo operands, rounded up — the one-product screen's bound (assign.cu withScreenBound)
  float hiNorm = 0, loNorm = 0;
};
// Statistics of c − μ on the host (mu may be null: μ = 0): the reference of the device version (kmbench check).
CentroidStats centroidStats(const float* c, const float* mu, std::int64_t k, std::int64_t d);

// Device scratch of prepareCentroidOps: the maxima (as bits) and the resulting statistics.
struct CentroidStatsDevice {
  unsigned maxAbsBits;
  unsigned pad_;
  unsigned long long maxN2Bits;
  CentroidStats out;  // the same bits as centroidStats(c, μ) on the host
};

// The pass's centroid operands, all on the device: stats->out = the statistics of cfDevice − μ, then bhi/blo
// (Kp×Dp 16-bit, zero padded) and cnorm (Kp: ‖c − μ‖², +inf for padding) with that scale. No host work, no sync:
// copy stats->out back for the launch arguments (CentroidOps.scale, maxNorm).
void prepareCentroidOps(const float* cfDevice, const float* muDevice, int k, int d, OpKind op,
                        CentroidStatsDevice* stats, void* bhi, void* blo, float* cnorm, cudaStream_t s);
// The same operands with a given scale (the host-statistics path, kept as the check's reference).
void prepareCentroids(const float* cfDevice, const float* muDevice, int k, int d, OpKind op, float scale, void* bhi,
                      void* blo, float* cnorm, cudaStream_t s);
// μ = mean of the first min(n, 4096) rows (fp64 sums, fixed order), on the device.
void rowMean(RowValues x, std::int64_t n, int d, float* mu, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
