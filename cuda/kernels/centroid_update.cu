// Centroid update on the device (centroid_update.cuh). Every fp64 operation is an explicit round-to-nearest intrinsic
// (__dadd_rn, __dmul_rn, ...): nvcc contracts a*b + c into an FMA by default, the host build does not
// (-ffp-contract=off), and one FMA would change the bits. The sums the host adds in order are added in that order by
// one thread; everything else runs in parallel.
#include "centroid_update.cuh"

namespace kmfleet {
namespace cuda {
namespace {

constexpr int kTile = 256;  // values a warp stages at a time (a multiple of 8: sqDist64's lanes)
constexpr int kWarps = 4;   // clusters per block

// μ[j] = (Σ_k sums[k][j], clusters in order) / N — Engine::dataVariance's mean. A block stages 64 clusters × 32
// columns (coalesced) in shared memory, then one thread per column adds them in cluster order: the chain is
// inherently serial (the host's order), the loads are not.
__global__ void meanKernel(const double* sums, int k, int d, double rows, double* mu) {
  __shared__ double tile[64][33];
  const int j0 = blockIdx.x * 32, col = threadIdx.x & 31, r0 = threadIdx.x >> 5;  // 256 threads: 8 rows at a time
  double m = 0;
  for (int c0 = 0; c0 < k; c0 += 64) {
    for (int r = r0; r < 64; r += 8) {
      const int c = c0 + r, j = j0 + col;
      tile[r][col] = c < k && j < d ? sums[static_cast<std::size_t>(c) * d + j] : 0.0;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const int rows = min(64, k - c0);
      for (int r = 0; r < rows; ++r) m = __dadd_rn(m, tile[r][col]);
    }
    __syncthreads();
  }
  if (threadIdx.x < 32 && j0 + col < d) mu[j0 + col] = __ddiv_rn(m, rows);
}

__device__ double combine8(const double* s) {
  return __dadd_rn(__dadd_rn(__dadd_rn(s[0], s[1]), __dadd_rn(s[2], s[3])),
                   __dadd_rn(__dadd_rn(s[4], s[5]), __dadd_rn(s[6], s[7])));
}

// One warp per cluster. The lanes compute the independent terms (quotients, differences, squares) of a tile of
// columns into shared memory; the additions that the host does in column order are then done in that order by one
// lane (two lanes for the two chains of the data variance, eight for sqDist64's eight partial sums).
__global__ void clusterKernel(ClusterUpdateArgs a) {
  __shared__ double stage[kWarps][2][kTile];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = blockIdx.x * kWarps + w;
  if (c >= a.k) return;  // whole warps: c is the same on every lane
  double* s0 = stage[w][0];
  double* s1 = stage[w][1];
  const std::size_t row = static_cast<std::size_t>(c) * a.d;
  const double* sum = a.sums + row;
  const float* old = a.centroids + row;
  const double n = static_cast<double>(a.counts[c]);
  if (a.scatter) {  // Engine::dataVariance's part[k]: off += a·a, spread += c·c over the columns in order
    double off = 0, spread = 0;
    if (n != 0)
      for (int j0 = 0; j0 < a.d; j0 += kTile) {
        const int len = min(kTile, a.d - j0);
        for (int t = lane; t < len; t += 32) {
          const double mk = __ddiv_rn(sum[j0 + t], n);
          const double o = __dsub_rn(mk, static_cast<double>(old[j0 + t])), m = __dsub_rn(mk, a.mu[j0 + t]);
          s0[t] = __dmul_rn(o, o);
          s1[t] = __dmul_rn(m, m);
        }
        __syncwarp();
        if (lane == 0) for (int t = 0; t < len; ++t) off = __dadd_rn(off, s0[t]);
        if (lane == 1) for (int t = 0; t < len; ++t) spread = __dadd_rn(spread, s1[t]);
        __syncwarp();
      }
    spread = __shfl_sync(0xffffffffu, spread, 1);
    if (lane == 0) {
      double part = 0;
      if (n != 0) {
        const double s = a.cosine ? __dmul_rn(2.0, a.inertia[c]) : a.inertia[c];
        part = __dadd_rn(__dsub_rn(s, __dmul_rn(n, off)), __dmul_rn(n, spread));
      }
      a.scatter[c] = part;
    }
  }
  if (!a.next) return;
  // Engine::applyFit for a non-empty cluster: m = sums · (1/n); cosine: m / ‖m‖ unless ‖m‖ = 0 (keep the old one)
  const double inv = __ddiv_rn(1.0, n);
  double scale = 1;
  bool keep = false;
  if (a.cosine) {
    double n2 = 0;
    for (int j0 = 0; j0 < a.d; j0 += kTile) {
      const int len = min(kTile, a.d - j0);
      for (int t = lane; t < len; t += 32) {
        const double v = __dmul_rn(sum[j0 + t], inv);
        s0[t] = __dmul_rn(v, v);
      }
      __syncwarp();
      if (lane == 0) for (int t = 0; t < len; ++t) n2 = __dadd_rn(n2, s0[t]);
      __syncwarp();
    }
    n2 = __shfl_sync(0xffffffffu, n2, 0);
    keep = !(n2 > 0);
    if (!keep) scale = __ddiv_rn(1.0, __dsqrt_rn(n2));
  }
  // the next centroid, and row_math.h sqDist64(next, old): partial sum l adds the columns j ≡ l (mod 8) in order
  float* next = a.next + row;
  double part8 = 0;  // lane l < 8: partial sum l
  for (int j0 = 0; j0 < a.d; j0 += kTile) {
    const int len = min(kTile, a.d - j0);
    for (int t = lane; t < len; t += 32) {
      const double v = __dmul_rn(sum[j0 + t], inv);
      const float x = keep ? old[j0 + t] : __double2float_rn(a.cosine ? __dmul_rn(v, scale) : v);
      next[j0 + t] = x;
      const double u = __dsub_rn(static_cast<double>(x), static_cast<double>(old[j0 + t]));
      s0[t] = __dmul_rn(u, u);
    }
    __syncwarp();
    if (lane < 8)
      for (int t = lane; t < len; t += 8) part8 = __dadd_rn(part8, s0[t]);
    __syncwarp();
  }
  double p[8];
#pragma unroll
  for (int l = 0; l < 8; ++l) p[l] = __shfl_sync(0xffffffffu, part8, l);
  if (lane == 0) a.shift[c] = combine8(p);
}

}  // namespace

void clusterUpdate(const ClusterUpdateArgs& a, cudaStream_t s) {
  if (a.k <= 0) return;
  if (a.scatter) meanKernel<<<(a.d + 31) / 32, 256, 0, s>>>(a.sums, a.k, a.d, a.rows, a.mu);
  clusterKernel<<<(a.k + kWarps - 1) / kWarps, kWarps * 32, 0, s>>>(a);
}

}  // namespace cuda
}  // namespace kmfleet
