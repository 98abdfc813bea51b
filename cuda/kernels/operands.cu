// Operands for the tensor-core products: rows (per chunk, on the device) and centroids (per pass).
//
// Both are shifted by one fixed point μ (the mean of the first rows the backend saw): distances don't change,
// but the magnitudes ‖x − μ‖·‖c − μ‖ that bound the products' rounding error shrink for data far from the
// origin (embeddings), so fewer rows need the exact recheck and the low-precision modes lose less.
//
// Every row is scaled by its own power of two s_r so that max|x̂| ∈ [2^14, 2^15): fp16's range then always
// fits (no overflow, subnormals only for elements 2^-24 below the row's largest), and the scaling is exact.
// The argmin is invariant to the per-row factor (assign.cu). Centroids share one power of two s_c.
// Exact mode splits x̂ = hi + lo with hi = fp16(x̂), lo = fp16(x̂ − hi) (x̂ − hi is exact in fp32).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "common.cuh"
#include "operands.cuh"

namespace kmfleet {
namespace cuda {
namespace {

template <InType IN>
__device__ __forceinline__ float loadIn(const void* raw, size_t i) {
  if constexpr (IN == InType::F32) return static_cast<const float*>(raw)[i];
  else if constexpr (IN == InType::F16) return __half2float(static_cast<const __half*>(raw)[i]);
  else return __bfloat162float(static_cast<const __nv_bfloat16*>(raw)[i]);
}

__device__ __forceinline__ float scaleFor(float maxAbs) {
  if (!(maxAbs > 0.f) || !isfinite(maxAbs)) return 1.f;
  int e = 0;
  frexpf(maxAbs, &e);  // maxAbs = m·2^e, m ∈ [0.5, 1)
  const int sh = max(-126, min(127, 15 - e));
  return ldexpf(1.f, sh);
}

__device__ __forceinline__ void storeOps(unsigned short* hi, unsigned short* lo, size_t i, float v, int op) {
  const __half h = __float2half_rn(v);
  hi[i] = __half_as_ushort(h);
  if (op == static_cast<int>(OpKind::F16x3)) lo[i] = __half_as_ushort(__float2half_rn(v - __half2float(h)));
}

// √s (fp64) as a float no smaller than it: a bound, not an estimate (the screen's error bound uses it).
__device__ __forceinline__ float roundUpNorm(double s) { return __double2float_ru(sqrt(s) * (1 + 0x1p-40)); }

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per row.
template <InType IN>
__global__ void prepareKernel(const void* raw, long long n, int d, int dp, int op, int cosine, long long firstRow,
                              const float* mu, RowOps rows, RowFlags flags) {
  const long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= n) return;
  const size_t base = static_cast<size_t>(r) * d;
  double ss = 0;
  bool finite = true;
  for (int j = lane; j < d; j += 32) {
    const float v = loadIn<IN>(raw, base + j);
    finite &= isfinite(v);
    ss += static_cast<double>(v) * v;
  }
  finite = __all_sync(0xffffffffu, finite);
  ss = warpSum(ss);
  float inv = 1.f;
  if (!finite) {
    if (lane == 0 && flags.nonFinite) atomicMin(flags.nonFinite, static_cast<unsigned long long>(firstRow + r));
    inv = 0.f;  // the pass fails anyway; keep the arithmetic finite
  } else if (cosine) {
    if (ss == 0) {
      if (lane == 0 && flags.zeroNorm) atomicMin(flags.zeroNorm, static_cast<unsigned long long>(firstRow + r));
      inv = 0.f;
    } else {
      inv = static_cast<float>(1.0 / sqrt(ss));
    }
  }
  // the row's values as every later kernel sees them (xf, or the 16-bit rows as they are: x16, which may be raw
  // itself) and the largest |x − μ| for the operand scale
  unsigned short* x16 = static_cast<unsigned short*>(rows.x16);
  const unsigned short* raw16 = static_cast<const unsigned short*>(raw);
  float mx = 0.f;
  bool beyond = false;
  for (int j = lane; j < d; j += 32) {
    float v = finite ? loadIn<IN>(raw, base + j) : 0.f;
    if (cosine) v *= inv;
    if constexpr (IN != InType::F16) beyond |= !(fabsf(v) < 0x1p64f);  // fp16 stops at 65504
    if (rows.xf) {
      rows.xf[base + j] = v;
    } else if constexpr (IN != InType::F32) {
      if (x16 != raw16) x16[base + j] = finite ? raw16[base + j] : 0;
      else if (!finite) x16[base + j] = 0;  // the same zeros as an fp32 copy would hold (this lane's own element)
    }
    mx = fmaxf(mx, fabsf(v - (mu ? mu[j] : 0.f)));
  }
  mx = warpMax(mx);
  if (flags.beyondExact && __any_sync(0xffffffffu, beyond) && lane == 0)
    atomicMin(flags.beyondExact, static_cast<unsigned long long>(firstRow + r));
  const float sx = scaleFor(mx);
  double sn = 0, sl = 0;
  unsigned short* hi = static_cast<unsigned short*>(rows.ahi);
  unsigned short* lo = static_cast<unsigned short*>(rows.alo);
  const bool loNorm = rows.rowNormLo && hi && op == static_cast<int>(OpKind::F16x3);
  const size_t obase = static_cast<size_t>(r) * dp;
  for (int j = lane; j < dp; j += 32) {
    float v = 0.f;
    if (j < d) {
      const float x = rows.xf ? rows.xf[base + j] : (finite ? loadIn<IN>(raw, base + j) : 0.f);  // x16: no cosine
      v = x - (mu ? mu[j] : 0.f);
    }
    const float vs = v * sx;
    sn += static_cast<double>(vs) * vs;
    if (hi) storeOps(hi, lo, obase + j, vs, op);
    if (loNorm) {
      const double l = __half2float(__ushort_as_half(lo[obase + j]));
      sl += l * l;
    }
  }
  sn = warpSum(sn);
  if (loNorm) sl = warpSum(sl);
  if (lane == 0) {
    rows.rowScale[r] = sx;
    rows.rowNorm[r] = static_cast<float>(sqrt(sn));
    if (loNorm) rows.rowNormLo[r] = roundUpNorm(sl);
    // ‖fl(x − μ)‖²: sn is its square scaled by sx² (a power of two), so the division is exact
    if (rows.rowSqNorm) rows.rowSqNorm[r] = static_cast<float>(sn / (static_cast<double>(sx) * sx));
  }
}

// One warp per (padded) centroid. The scale: scDevice when not null (computed on the device), else sc.
// stats (F16x3, not null): max ‖ch‖ and ‖cl‖ over the centroids, rounded up, into stats->out.hiNorm/loNorm (maxima
// of non-negative floats as their bit patterns; one atomic per block).
__global__ void centroidKernel(const float* cf, const float* mu, int k, int kp, int d, int dp, int op, float sc,
                               const float* scDevice, unsigned short* bhi, unsigned short* blo, float* cnorm,
                               CentroidStatsDevice* stats) {
  __shared__ float blockMax[2];
  const bool norms = stats && op == static_cast<int>(OpKind::F16x3);
  if (norms && threadIdx.x < 2) blockMax[threadIdx.x] = 0.f;
  if (norms) __syncthreads();
  const int c = static_cast<int>((static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (c < kp) {
    if (scDevice) sc = *scDevice;
    double ss = 0, sh = 0, sl = 0;
    const size_t obase = static_cast<size_t>(c) * dp;
    for (int j = lane; j < dp; j += 32) {
      const float v = (c < k && j < d) ? cf[static_cast<size_t>(c) * d + j] - (mu ? mu[j] : 0.f) : 0.f;
      ss += static_cast<double>(v) * v;
      storeOps(bhi, blo, obase + j, v * sc, op);
      if (norms) {
        const double h = __half2float(__ushort_as_half(bhi[obase + j])), l = __half2float(__ushort_as_half(blo[obase + j]));
        sh += h * h;
        sl += l * l;
      }
    }
    ss = warpSum(ss);
    if (lane == 0) cnorm[c] = c < k ? static_cast<float>(ss) : INFINITY;
    if (norms) {
      sh = warpSum(sh);
      sl = warpSum(sl);
      if (lane == 0 && c < k) {
        atomicMax(reinterpret_cast<unsigned*>(&blockMax[0]), __float_as_uint(roundUpNorm(sh)));
        atomicMax(reinterpret_cast<unsigned*>(&blockMax[1]), __float_as_uint(roundUpNorm(sl)));
      }
    }
  }
  if (norms) {
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicMax(reinterpret_cast<unsigned*>(&stats->out.hiNorm), __float_as_uint(blockMax[0]));
      atomicMax(reinterpret_cast<unsigned*>(&stats->out.loNorm), __float_as_uint(blockMax[1]));
    }
  }
}

// centroidStats (below, on the host) on the device, with the same bits: per centroid Σ (c_j − μ_j)² in fp64 in
// column order (each product of two floats is exact in fp64, so only the order of the additions matters, and lane
// 0's running sum adds them in the host's order), max |c_j − μ_j| in fp32. Maxima of non-negative values compare
// as their unsigned bit patterns: atomicMax gives the same result in any order. NaN is skipped, as std::fmax does.
__global__ void centroidStatsKernel(const float* cf, const float* mu, int k, int d, CentroidStatsDevice* st) {
  __shared__ float bAbs[8];
  __shared__ double bN2[8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  float mx = 0.f;
  double mn2 = 0;
  for (long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; c < k; c += warps) {
    const float* row = cf + static_cast<size_t>(c) * d;
    double sum = 0;
    for (int j0 = 0; j0 < d; j0 += 32) {
      const int j = j0 + lane;
      const float v = j < d ? __fsub_rn(row[j], mu ? mu[j] : 0.f) : 0.f;
      mx = fmaxf(mx, fabsf(v));
      const double p = static_cast<double>(v) * static_cast<double>(v);  // exact
      const int m = min(32, d - j0);
      for (int l = 0; l < m; ++l) sum = __dadd_rn(sum, __shfl_sync(0xffffffffu, p, l));
    }
    if (!isnan(sum)) mn2 = fmax(mn2, sum);
  }
  mx = warpMax(mx);
  if (lane == 0) { bAbs[warp] = mx; bN2[warp] = mn2; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) { mx = fmaxf(mx, bAbs[w]); mn2 = fmax(mn2, bN2[w]); }
    atomicMax(&st->maxAbsBits, __float_as_uint(mx));
    atomicMax(&st->maxN2Bits, static_cast<unsigned long long>(__double_as_longlong(mn2)));
  }
}

// The host's formulas of scale and maxNorm (centroidStats) from the maxima.
__global__ void centroidStatsFinish(CentroidStatsDevice* st) {
  const float maxAbs = __uint_as_float(st->maxAbsBits);
  const double maxN2 = __longlong_as_double(static_cast<long long>(st->maxN2Bits));
  float scale = 1.f;
  if (maxAbs > 0) {
    int e = 0;
    frexpf(maxAbs, &e);  // +inf: e = 0, as glibc's frexpf
    scale = ldexpf(1.f, max(-126, min(127, 15 - e)));
  }
  st->out.scale = scale;
  st->out.maxNorm = __fmul_rn(__double2float_rn(sqrt(maxN2)), 1 + 1e-6f);
}

}  // namespace

void prepareRows(const void* raw, InType in, std::int64_t n, int d, OpKind op, bool cosine, std::int64_t firstRow,
                 const float* mu, const RowOps& rows, const RowFlags& flags, cudaStream_t s) {
  if (n <= 0) return;
  const int dp = static_cast<int>(padDims(d));
  const unsigned blocks = static_cast<unsigned>((n * 32 + 255) / 256);
  switch (in) {
    case InType::F32:
      prepareKernel<InType::F32><<<blocks, 256, 0, s>>>(raw, n, d, dp, static_cast<int>(op), cosine, firstRow, mu,
                                                        rows, flags);
      break;
    case InType::F16:
      prepareKernel<InType::F16><<<blocks, 256, 0, s>>>(raw, n, d, dp, static_cast<int>(op), cosine, firstRow, mu,
                                                        rows, flags);
      break;
    case InType::BF16:
      prepareKernel<InType::BF16><<<blocks, 256, 0, s>>>(raw, n, d, dp, static_cast<int>(op), cosine, firstRow,
                                                         mu, rows, flags);
      break;
  }
}

void prepareCentroids(const float* cfDevice, const float* mu, int k, int d, OpKind op, float scale, void* bhi, void* blo,
                      float* cnorm, cudaStream_t s) {
  const int kp = static_cast<int>(padCentroids(k)), dp = static_cast<int>(padDims(d));
  const unsigned blocks = static_cast<unsigned>((static_cast<long long>(kp) * 32 + 255) / 256);
  centroidKernel<<<blocks, 256, 0, s>>>(cfDevice, mu, k, kp, d, dp, static_cast<int>(op), scale, nullptr,
                                        static_cast<unsigned short*>(bhi), static_cast<unsigned short*>(blo), cnorm,
                                        nullptr);
}

void prepareCentroidOps(const float* cfDevice, const float* mu, int k, int d, OpKind op, CentroidStatsDevice* stats,
                        void* bhi, void* blo, float* cnorm, cudaStream_t s) {
  cudaMemsetAsync(stats, 0, sizeof(CentroidStatsDevice), s);
  // a warp per centroid, a bounded grid (each warp takes centroids c, c + all warps, …): ≤ 1024 atomics per max
  const long long warps = std::min<long long>(k, 1024LL * 8);
  centroidStatsKernel<<<static_cast<unsigned>((warps + 7) / 8), 256, 0, s>>>(cfDevice, mu, k, d, stats);
  centroidStatsFinish<<<1, 1, 0, s>>>(stats);
  const int kp = static_cast<int>(padCentroids(k)), dp = static_cast<int>(padDims(d));
  const unsigned blocks = static_cast<unsigned>((static_cast<long long>(kp) * 32 + 255) / 256);
  centroidKernel<<<blocks, 256, 0, s>>>(cfDevice, mu, k, kp, d, dp, static_cast<int>(op), 1.f, &stats->out.scale,
                                        static_cast<unsigned short*>(bhi), static_cast<unsigned short*>(blo), cnorm,
                                        stats);
}

CentroidStats centroidStats(const float* c, const float* mu, std::int64_t k, std::int64_t d) {
  CentroidStats st;
  double maxN2 = 0;
  float maxAbs = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    double s = 0;
    const float* row = c + i * d;
    for (std::int64_t j = 0; j < d; ++j) {
      const float v = row[j] - (mu ? mu[j] : 0.f);  // the same fp32 subtraction as centroidKernel
      s += static_cast<double>(v) * v;
      maxAbs = std::fmax(maxAbs, std::fabs(v));
    }
    maxN2 = std::fmax(maxN2, s);
  }
  st.maxNorm = static_cast<float>(std::sqrt(maxN2)) * (1 + 1e-6f);
  if (maxAbs > 0) {
    int e = 0;
    std::frexp(maxAbs, &e);
    st.scale = std::ldexp(1.f, std::max(-126, std::min(127, 15 - e)));
  }
  return st;
}

}  // namespace cuda
}  // namespace kmfleet

namespace kmfleet {
namespace cuda {
namespace {
// One thread per column, rows in order: fp64, deterministic.
template <InType IN>
__global__ void meanKernel(const void* x, long long n, int d, float* mu) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  double s = 0;
  for (long long r = 0; r < n; ++r) s += loadValue<IN>(x, static_cast<size_t>(r) * d + j);
  mu[j] = static_cast<float>(s / static_cast<double>(n));
}
}  // namespace

void rowMean(RowValues x, std::int64_t n, int d, float* mu, cudaStream_t s) {
  withValueType(x.type, [&](auto inTag) {
    meanKernel<decltype(inTag)::value>
        <<<static_cast<unsigned>((d + 127) / 128), 128, 0, s>>>(x.p, std::min<std::int64_t>(n, 4096), d, mu);
  });
}

}  // namespace cuda
}  // namespace kmfleet
