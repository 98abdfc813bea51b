// Deterministic per-cluster accumulation of one chunk (no float atomics):
//   labels → per-cluster counts (integer atomics: exact) → stable radix sort of row indices by label →
//   each cluster's rows cut into fixed segments of kSegmentRows sorted positions; every segment after the
//   first is summed in fp64 by its own block (segmentKernel), then one block per cluster adds its first
//   segment and the partials in segment order into the K×D fp64 totals (clusterKernel).
// Given the chunking, every addition happens in one fixed order: bitwise-identical results run to run.
// For D ≤ 256 the same kernels also compute each row's fp64 distance (one read of the rows instead of two);
// wider rows take rowDistances (row_distances.cu) first. The rows are read as RowValues: fp32, or f16/bf16 data as it is
// (exact in fp32: the same bits from half the bytes).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>

#include "accumulate.cuh"
#include "common.cuh"
#include "row_distances.cuh"

namespace kmfleet {
namespace cuda {
namespace {

constexpr int S = kSegmentRows;

__global__ void iotaKernel(int* v, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) v[i] = static_cast<int>(i);
}

__global__ void histKernel(const int* labels, long long n, int* counts) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(counts + labels[i], 1);
}

// Same counts (integer atomics: exact) with a per-block shared histogram, for K ≤ kSharedHistBins: one global
// atomic per (block, non-empty bin) instead of one per row on only K addresses.
constexpr int kSharedHistBins = 12 * 1024;
__global__ void sharedHistKernel(const int* labels, long long n, int k, int* counts) {
  extern __shared__ int h[];
  for (int c = threadIdx.x; c < k; c += blockDim.x) h[c] = 0;
  __syncthreads();
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    atomicAdd(h + labels[i], 1);
  __syncthreads();
  for (int c = threadIdx.x; c < k; c += blockDim.x)
    if (h[c]) atomicAdd(counts + c, h[c]);
}

__global__ void extrasKernel(const int* counts, int k, int* extras) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < k) extras[i] = counts[i] > S ? (counts[i] - 1) / S : 0;
  if (i == k) extras[i] = 0;
}

// Sum sorted positions [p0, p1) of the cluster: columns over threads, rows in order, fp64.
template <InType IN>
__device__ void segmentSum(const void* xv, int d, const int* sortedIndex, const double* dist, int p0, int p1,
                           bool sums, double* out, double* inertia, int* idx) {
  const int m = p1 - p0;
  for (int i = threadIdx.x; i < m; i += blockDim.x) idx[i] = sortedIndex[p0 + i];
  __syncthreads();
  if (sums) {
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double s = 0;
      int i = 0;
      for (; i + 4 <= m; i += 4) {
        const float a = loadValue<IN>(xv, static_cast<size_t>(idx[i]) * d + j);
        const float b = loadValue<IN>(xv, static_cast<size_t>(idx[i + 1]) * d + j);
        const float c = loadValue<IN>(xv, static_cast<size_t>(idx[i + 2]) * d + j);
        const float e = loadValue<IN>(xv, static_cast<size_t>(idx[i + 3]) * d + j);
        s += a; s += b; s += c; s += e;
      }
      for (; i < m; ++i) s += loadValue<IN>(xv, static_cast<size_t>(idx[i]) * d + j);
      out[j] = s;
    }
  }
  if (threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < m; ++i) s += dist[idx[i]];
    *inertia = s;
  }
}

template <InType IN>
__global__ void segmentKernel(const void* xv, int d, int k, const int* sortedIndex, const double* dist,
                              const int* counts, const int* starts, const int* extraOff, bool sums,
                              double* partials, double* partialInertia) {
  __shared__ int idx[S];
  const int b = blockIdx.x;
  if (b >= extraOff[k]) return;
  int lo = 0, hi = k;  // largest c with extraOff[c] <= b
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (extraOff[mid] <= b) lo = mid; else hi = mid;
  }
  const int c = lo;
  const int seg = b - extraOff[c] + 1;
  const int p0 = starts[c] + seg * S;
  const int p1 = min(p0 + S, starts[c] + counts[c]);
  segmentSum<IN>(xv, d, sortedIndex, dist, p0, p1, sums, partials + static_cast<size_t>(b) * d, partialInertia + b, idx);
}

template <InType IN>
__global__ void clusterKernel(const void* xv, int d, const int* sortedIndex, const double* dist, const int* counts,
                              const int* starts, const int* extraOff, bool sums, double* partials,
                              const double* partialInertia, double* sumsOut, long long* countsOut,
                              double* inertiaOut) {
  __shared__ int idx[S];
  const int c = blockIdx.x;
  const int cnt = counts[c];
  if (cnt == 0) return;
  const int p0 = starts[c];
  // First segment: sum straight into registers per column.
  const int m = min(cnt, S);
  for (int i = threadIdx.x; i < m; i += blockDim.x) idx[i] = sortedIndex[p0 + i];
  __syncthreads();
  const int e0 = extraOff[c], e1 = extraOff[c + 1];
  if (sums) {
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double s = 0;
      for (int i = 0; i < m; ++i) s += loadValue<IN>(xv, static_cast<size_t>(idx[i]) * d + j);
      for (int e = e0; e < e1; ++e) s += partials[static_cast<size_t>(e) * d + j];
      sumsOut[static_cast<size_t>(c) * d + j] += s;
    }
  }
  if (threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < m; ++i) s += dist[idx[i]];
    for (int e = e0; e < e1; ++e) s += partialInertia[e];
    inertiaOut[c] += s;
    countsOut[c] += cnt;
  }
}


// ---- fused path (D ≤ kFusedMaxDims): one read of each row gives its fp64 distance and the column sums ----
// Warps take the segment's rows round-robin (row i → warp i % W), lanes the columns; a warp-reduced fp64
// distance per row; per-warp column sums combined over warps 0..W−1: every addition in a fixed order.
constexpr int kFusedMaxDims = 256;
constexpr int W = 4;  // warps per block (128 threads)
constexpr int kFusedRows = 4;  // rows per warp step in fusedSegment (measured faster than 2 or 8)

// A row's fp64 distance: its lanes' partial sums added pairwise over lane bits 0, 1, 2, 3, 4 in that order (xor
// butterflies). fp64 addition is commutative bit for bit, so one row alone (warpSum64) and four rows reduced together
// (warpSum64x4: 6 shuffles instead of 4 × 5) group the same terms: a row's distance has the same bits wherever it
// falls in its segment.
__device__ __forceinline__ double warpSum64(double v) {  // every lane gets the sum
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Four rows at once: lane l gets the sum of row 2·(l & 1) + ((l >> 1) & 1) (lanes 0–3: rows 0, 2, 1, 3). Bit 0 first:
// even lanes keep rows 0 and 1 and send 2 and 3, odd lanes the reverse; then bit 1 halves again; bits 2–4 as one row.
__device__ __forceinline__ double warpSum64x4(double a0, double a1, double a2, double a3, int lane) {
  const bool odd = lane & 1, hi = lane & 2;
  const double c0 = (odd ? a2 : a0) + __shfl_xor_sync(0xffffffffu, odd ? a0 : a2, 1);
  const double c1 = (odd ? a3 : a1) + __shfl_xor_sync(0xffffffffu, odd ? a1 : a3, 1);
  double v = (hi ? c1 : c0) + __shfl_xor_sync(0xffffffffu, hi ? c0 : c1, 2);
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// C = the columns a block's lanes cover (T·V·32 ≥ D): D ≤ 128 needs half the shared memory of D ≤ 256.
template <int C>
struct FusedShared {
  int idx[S];
  double rowDist[S];
  double wsum[W * C];
  double col[C];
};
// Blocks per SM of the fused segment kernels for D ≤ 128 (T·V ≤ 4): registers capped at 56, which the kernel needs
// without the cap until the optional distance store is added (62–86 then, fewer blocks per SM).
constexpr int kFusedBlocksPerSM = 9;

// The columns of a row one lane covers in the fused kernels (see fusedSegment), its loads and its share of the
// row's fp64 distance. fusedSegment and sumsDistancesKernel both use them, so the two give the same bits.
template <int T, int V, InType IN>
struct LaneColumns {
  __device__ static int column(int lane, int t, int v) { return (lane + 32 * t) * V + v; }
  // group t of the row starting at element x (whole group or none)
  __device__ static void load(const void* xv, size_t x, int d, int lane, int t, float* out) {
    if (column(lane, t, 0) < d) {
      loadValues<IN, V>(xv, x + column(lane, t, 0), out);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) out[v] = 0.f;
    }
  }
  // one column's term added to the lane's part q of the row's distance: (x−c)², or x·c for cosine (c: the
  // centroid's fp32 value, already widened — see centroidColumns)
  __device__ static double term(float x, double c, bool cosine, double q) {
    if (cosine) return fma(static_cast<double>(x), c, q);
    const double u = static_cast<double>(x) - c;
    return fma(u, u, q);
  }
  // The lane's columns of the centroid, widened to fp64 once. The empty asm makes each value opaque, so the compiler
  // keeps the doubles instead of converting the floats again for every row: under the kernels' register cap it did,
  // and F2F.F64.F32 issues at a quarter of the fp64 add rate: 7.8 of them a row, half of them these, took ~70 % of the
  // f16 sums kernel's cycles (ncu, 10M×128 fp16).
  __device__ static void centroidColumns(const float* cRow, int d, int lane, double* cd) {
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int j = column(lane, t, v);
        double c = j < d ? static_cast<double>(cRow[j]) : 0.0;
        asm volatile("" : "+d"(c));  // keeps the converted value: else the compiler converts the float again per row
        cd[t * V + v] = c;
      }
  }
  // this lane's part of the row's distance, its columns in increasing order (as fusedSegment's add)
  __device__ static double distance(const float* val, const double* cj, int d, int lane, bool cosine) {
    double q = 0;
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (column(lane, t, v) < d) q = term(val[t * V + v], cj[t * V + v], cosine, q);
    return q;
  }
};

// Segment = sorted positions [p0, p0 + m) of cluster c. Leaves the column sums in sh.col, writes every row's
// distance (to dist and dist32 where not null), returns the segment's inertia in thread 0.
// Columns per lane: T groups of V adjacent columns, group t of lane l = columns (l + 32t)·V … +V−1: V = 4 reads a
// row with one 8- or 16-byte load per lane (D % 4 == 0), V = 1 is the scalar layout (column l + 32t). The column
// sums add the rows in the same order either way (same bits); a row's fp64 distance adds its columns in the lane's
// order, so it depends on V (fixed by D: every path of a pass, resident or streamed, uses the same V).
template <int T, int V, InType IN>
__device__ double fusedSegment(const void* xv, int d, const int* sortedIndex, int p0, int m, const float* cRow,
                               bool cosine, bool sums, double* dist, float* dist32, FusedShared<T * V * 32>& sh) {
  constexpr int TV = T * V, C = TV * 32;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < m; i += blockDim.x) sh.idx[i] = sortedIndex[p0 + i];
  __syncthreads();
  using L = LaneColumns<T, V, IN>;
  auto column = [&](int t, int v) { return L::column(lane, t, v); };
  double cj[TV], cs[TV];
  L::centroidColumns(cRow, d, lane, cj);
#pragma unroll
  for (int e = 0; e < TV; ++e) cs[e] = 0;
  auto load = [&](size_t x, int t, float* out) { L::load(xv, x, d, lane, t, out); };
  auto add = [&](const float* val, double& q) {  // one row's values into the column sums and its distance
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int e = t * V + v;
        if (column(t, v) < d) {
          cs[e] += val[e];
          q = L::term(val[e], cj[e], cosine, q);
        }
      }
  };
  // R rows of the warp per step (i, i+W, …): their loads are all in flight before the first sum; the column
  // sums still add row i, then i+W, … — the order of one row per step, so the same bits.
  constexpr int R = kFusedRows;
  int i = warp;
  for (; i + (R - 1) * W < m; i += R * W) {
    float val[R][TV];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const size_t x = static_cast<size_t>(sh.idx[i + r * W]) * d;
#pragma unroll
      for (int t = 0; t < T; ++t) load(x, t, &val[r][t * V]);
    }
    if constexpr (R == 4 && T == 1) {  // (D > 128: the extra registers cost more than the shuffles save)
      double q[4] = {0, 0, 0, 0};
#pragma unroll
      for (int r = 0; r < 4; ++r) add(val[r], q[r]);
      const double qs = warpSum64x4(q[0], q[1], q[2], q[3], lane);
      if (lane < 4) sh.rowDist[i + (2 * (lane & 1) + (lane >> 1)) * W] = cosine ? 1.0 - qs : qs;
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        double q = 0;
        add(val[r], q);
        const double qs = warpSum64(q);
        if (lane == 0) sh.rowDist[i + r * W] = cosine ? 1.0 - qs : qs;
      }
    }
  }
  for (; i < m; i += W) {
    const size_t x = static_cast<size_t>(sh.idx[i]) * d;
    float val[TV];
#pragma unroll
    for (int t = 0; t < T; ++t) load(x, t, &val[t * V]);
    double q = 0;
    add(val, q);
    q = warpSum64(q);
    if (lane == 0) sh.rowDist[i] = cosine ? 1.0 - q : q;
  }
  if (sums) {
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int j = column(t, v);
        if (j < d) sh.wsum[warp * C + j] = cs[t * V + v];
      }
  }
  __syncthreads();
  if (sums)
    for (int j = tid; j < d; j += blockDim.x) {
      double v = sh.wsum[j];
#pragma unroll
      for (int w = 1; w < W; ++w) v += sh.wsum[w * C + j];
      sh.col[j] = v;
    }
  for (int i = tid; i < m; i += blockDim.x) {
    // dist == null: the caller does not keep them (a scattered 8-byte store per row costs ~0.3 ms per 10M rows on
    // the H200); sumsDistances computes the same bits when they are needed
    if (dist) dist[sh.idx[i]] = sh.rowDist[i];
    if (dist32) dist32[sh.idx[i]] = static_cast<float>(sh.rowDist[i]);
  }
  double in = 0;
  if (tid == 0)
    for (int i = 0; i < m; ++i) in += sh.rowDist[i];
  __syncthreads();
  return in;
}

// The fused kernels' columns per lane (fusedSegment): f(T, V) as integral constants. V = 4 when D % 4 == 0 and
// the rows start 4-value aligned (cudaMalloc'd arrays, whole rows: always), so one load per lane reads 4 values;
// T groups cover D ≤ 128 or ≤ 256 with the fewest registers. (V is part of the distances' bits: it orders the
// additions of a row's columns.)
template <typename F>
void withFusedShape(RowValues x, int d, F&& f) {
  const std::size_t vecBytes = 4 * (x.type == InType::F32 ? 4 : 2);
  const bool vec = d % 4 == 0 && reinterpret_cast<std::uintptr_t>(x.p) % vecBytes == 0;
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I8 = std::integral_constant<int, kFusedMaxDims / 32>;
  if (vec) {
    if (d <= 128) f(I1{}, I4{}); else f(I2{}, I4{});
  } else {  // 4 groups up to D = 128: half the registers of the general 8, more blocks per SM
    if (d <= 128) f(I4{}, I1{}); else f(I8{}, I1{});
  }
}

template <int T, int V, InType IN>
__global__ void __launch_bounds__(W * 32, T * V <= 4 ? kFusedBlocksPerSM : 1) fusedSegmentKernel(const void* xv, int d, int k, const float* cf, int cosine, const int* sortedIndex,
                                   const int* counts, const int* starts, const int* extraOff, bool sums,
                                   double* dist, float* dist32, double* partials, double* partialInertia) {
  __shared__ FusedShared<T * V * 32> sh;
  const int b = blockIdx.x;
  if (b >= extraOff[k]) return;
  int lo = 0, hi = k;  // largest c with extraOff[c] <= b
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (extraOff[mid] <= b) lo = mid; else hi = mid;
  }
  const int c = lo;
  const int seg = b - extraOff[c] + 1;
  const int p0 = starts[c] + seg * S;
  const int m = min(S, starts[c] + counts[c] - p0);
  const double in = fusedSegment<T, V, IN>(xv, d, sortedIndex, p0, m, cf + static_cast<size_t>(c) * d, cosine, sums, dist,
                                 dist32, sh);
  if (sums)
    for (int j = threadIdx.x; j < d; j += blockDim.x) partials[static_cast<size_t>(b) * d + j] = sh.col[j];
  if (threadIdx.x == 0) partialInertia[b] = in;
}

template <int T, int V, InType IN>
__global__ void fusedClusterKernel(const void* xv, int d, const float* cf, int cosine, const int* sortedIndex,
                                   const int* counts, const int* starts, const int* extraOff, bool sums,
                                   double* dist, float* dist32, const double* partials, const double* partialInertia,
                                   double* sumsOut, long long* countsOut, double* inertiaOut) {
  __shared__ FusedShared<T * V * 32> sh;
  const int c = blockIdx.x;
  const int cnt = counts[c];
  if (cnt == 0) return;
  const double in = fusedSegment<T, V, IN>(xv, d, sortedIndex, starts[c], min(cnt, S), cf + static_cast<size_t>(c) * d, cosine,
                                 sums, dist, dist32, sh);
  const int e0 = extraOff[c], e1 = extraOff[c + 1];
  if (sums)
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double v = sh.col[j];
      for (int e = e0; e < e1; ++e) v += partials[static_cast<size_t>(e) * d + j];
      sumsOut[static_cast<size_t>(c) * d + j] += v;
    }
  if (threadIdx.x == 0) {
    double v = in;
    for (int e = e0; e < e1; ++e) v += partialInertia[e];
    inertiaOut[c] += v;
    countsOut[c] += cnt;
  }
}

// Every row's fp64 distance to its label's centroid, row order, with the fused kernels' arithmetic (LaneColumns,
// and warpSum64: a row reduced alone has the bits of four reduced together): for the passes that did not keep them.
template <int T, int V, InType IN>
__global__ void sumsDistancesKernel(const void* xv, long long n, int d, const float* cf, const int* labels, int cosine,
                                    double* dist, float* dist32) {
  using L = LaneColumns<T, V, IN>;
  const int lane = threadIdx.x & 31, warpsPerBlock = blockDim.x >> 5;
  const long long warps = static_cast<long long>(gridDim.x) * warpsPerBlock;
  for (long long r = static_cast<long long>(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5); r < n; r += warps) {
    const float* cRow = cf + static_cast<size_t>(labels[r]) * d;
    double cj[T * V];
    float val[T * V];
    L::centroidColumns(cRow, d, lane, cj);
#pragma unroll
    for (int t = 0; t < T; ++t) L::load(xv, static_cast<size_t>(r) * d, d, lane, t, &val[t * V]);
    const double qs = warpSum64(L::distance(val, cj, d, lane, cosine != 0));
    if (lane == 0) {
      const double v = cosine ? 1.0 - qs : qs;
      dist[r] = v;
      if (dist32) dist32[r] = static_cast<float>(v);
    }
  }
}

// ---- resident rows in one accumulate (see accumulateResident in accumulate.cuh) ----
// Rows of all resident chunks sorted stably by label: each cluster's rows in row order, so chunk j's rows of
// cluster c form one run (pair p = c·C + j). Every run is cut into segments of S sorted positions exactly as the
// per-chunk path cuts that chunk's rows of c; each segment → one partial (the same kernels' arithmetic), and
// foldKernel adds them as the per-chunk path does: s = first segment, s += later segments in order, total += s,
// chunk after chunk. The same additions in the same order: the same bits.

// counts[c·C + j] = rows of chunk j labelled c. blockIdx.y = chunk; a shared histogram when K is small.
__global__ void pairHistKernel(const int* labels, long long rows, long long chunkRows, int chunks, int k, bool shared,
                               int* counts) {
  extern __shared__ int h[];
  const int j = blockIdx.y;
  const long long r0 = static_cast<long long>(j) * chunkRows;
  const long long r1 = min(rows, r0 + chunkRows);
  if (shared) {
    for (int c = threadIdx.x; c < k; c += blockDim.x) h[c] = 0;
    __syncthreads();
  }
  for (long long r = r0 + static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < r1;
       r += static_cast<long long>(gridDim.x) * blockDim.x) {
    if (shared) atomicAdd(h + labels[r], 1);
    else atomicAdd(counts + static_cast<long long>(labels[r]) * chunks + j, 1);
  }
  if (shared) {
    __syncthreads();
    for (int c = threadIdx.x; c < k; c += blockDim.x)
      if (h[c]) atomicAdd(counts + static_cast<long long>(c) * chunks + j, h[c]);
  }
}

// segs[p] = segments of pair p (every one, the first included); segs[pairs] = 0 (the scan's total).
__global__ void pairSegsKernel(const int* counts, int pairs, int* segs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) segs[i] = (counts[i] + S - 1) / S;
  if (i == pairs) segs[i] = 0;
}

// Segment b of the pairs: its pair p (largest p with segOff[p] ≤ b: empty pairs have no segment), the cluster
// and the sorted positions [p0, p0 + m).
__device__ bool findSegment(int b, const int* counts, const int* starts, const int* segOff, int pairs, int chunks,
                            int& c, int& p0, int& m) {
  if (b >= segOff[pairs]) return false;
  int lo = 0, hi = pairs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (segOff[mid] <= b) lo = mid; else hi = mid;
  }
  c = lo / chunks;
  p0 = starts[lo] + (b - segOff[lo]) * S;
  m = min(S, starts[lo] + counts[lo] - p0);
  return true;
}

template <int T, int V, InType IN>
__global__ void __launch_bounds__(W * 32, T * V <= 4 ? kFusedBlocksPerSM : 1) residentFusedSegmentKernel(const void* xv, int d, const float* cf, int cosine, const int* sortedIndex,
                                           const int* counts, const int* starts, const int* segOff, int pairs,
                                           int chunks, bool sums, double* dist, float* dist32, double* partials,
                                           double* partialInertia) {
  __shared__ FusedShared<T * V * 32> sh;
  int c, p0, m;
  if (!findSegment(blockIdx.x, counts, starts, segOff, pairs, chunks, c, p0, m)) return;
  const double in = fusedSegment<T, V, IN>(xv, d, sortedIndex, p0, m, cf + static_cast<size_t>(c) * d, cosine, sums,
                                        dist, dist32, sh);
  if (sums)
    for (int j = threadIdx.x; j < d; j += blockDim.x) partials[static_cast<size_t>(blockIdx.x) * d + j] = sh.col[j];
  if (threadIdx.x == 0) partialInertia[blockIdx.x] = in;
}

template <InType IN>
__global__ void residentSegmentKernel(const void* xv, int d, const int* sortedIndex, const double* dist,
                                      const int* counts, const int* starts, const int* segOff, int pairs, int chunks,
                                      bool sums, double* partials, double* partialInertia) {
  __shared__ int idx[S];
  int c, p0, m;
  if (!findSegment(blockIdx.x, counts, starts, segOff, pairs, chunks, c, p0, m)) return;
  segmentSum<IN>(xv, d, sortedIndex, dist, p0, p0 + m, sums, partials + static_cast<size_t>(blockIdx.x) * d,
                 partialInertia + blockIdx.x, idx);
}

// One block per cluster: chunk after chunk, the chunk's segments summed in order and added to the totals.
__global__ void foldKernel(int d, int chunks, const int* counts, const int* segOff, bool sums, const double* partials,
                           const double* partialInertia, double* sumsOut, long long* countsOut, double* inertiaOut) {
  const int c = blockIdx.x;
  const int q0 = c * chunks;
  if (sums)
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double v = sumsOut[static_cast<size_t>(c) * d + j];
      for (int q = q0; q < q0 + chunks; ++q) {
        if (counts[q] == 0) continue;
        const int e0 = segOff[q], e1 = segOff[q + 1];
        double s = partials[static_cast<size_t>(e0) * d + j];
        for (int e = e0 + 1; e < e1; ++e) s += partials[static_cast<size_t>(e) * d + j];
        v += s;
      }
      sumsOut[static_cast<size_t>(c) * d + j] = v;
    }
  if (threadIdx.x == 0) {
    double v = inertiaOut[c];
    long long n = 0;
    for (int q = q0; q < q0 + chunks; ++q) {
      if (counts[q] == 0) continue;
      const int e0 = segOff[q], e1 = segOff[q + 1];
      double s = partialInertia[e0];
      for (int e = e0 + 1; e < e1; ++e) s += partialInertia[e];
      v += s;
      n += counts[q];
    }
    inertiaOut[c] = v;
    countsOut[c] += n;
  }
}

int bitsFor(int k) {
  int b = 1;
  while ((1LL << b) < k) ++b;
  return b;
}

template <typename T>
T* carve(char*& p, std::size_t n) {
  T* r = reinterpret_cast<T*>(p);
  p += (n * sizeof(T) + 255) / 256 * 256;
  return r;
}

std::size_t cubTempBytes(std::int64_t maxRows, int k) {
  std::size_t a = 0, b = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, a, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                  static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                  static_cast<int>(maxRows), 0, 32);
  cub::DeviceScan::ExclusiveSum(nullptr, b, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), k + 1);
  return std::max(a, b);
}

std::size_t layoutBytes(std::int64_t maxRows, int d, int k, std::size_t temp) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const std::size_t segs = static_cast<std::size_t>(maxRows / S + 2);
  return up(temp) + 3 * up(maxRows * 4) + 4 * up((k + 1) * 4ull) + up(segs * d * 8) + up(segs * 8);
}

}  // namespace

std::size_t accumulateScratchBytes(std::int64_t maxRows, int d, int k) {
  return layoutBytes(maxRows, d, k, cubTempBytes(maxRows, k));
}

void allocAccumulateScratch(AccumulateScratch& a, std::int64_t maxRows, int d, int k) {
  const std::size_t temp = cubTempBytes(maxRows, k);
  const std::size_t bytes = layoutBytes(maxRows, d, k, temp);
  void* base = nullptr;
  if (cudaMalloc(&base, bytes) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  char* p = static_cast<char*>(base);
  const std::size_t segs = static_cast<std::size_t>(maxRows / S + 2);
  a.sortTemp = carve<char>(p, temp);
  a.sortTempBytes = temp;
  a.sortedLabels = carve<int>(p, maxRows);
  a.rowIndex = carve<int>(p, maxRows);
  a.sortedIndex = carve<int>(p, maxRows);
  a.chunkCounts = carve<int>(p, k + 1);
  a.starts = carve<int>(p, k + 1);
  a.extraOffsets = carve<int>(p, k + 1);
  a.extras = carve<int>(p, k + 1);
  a.partials = carve<double>(p, segs * d);
  a.partialInertia = carve<double>(p, segs);
  iotaKernel<<<static_cast<unsigned>((maxRows + 255) / 256), 256>>>(a.rowIndex, maxRows);
}

void freeAccumulateScratch(AccumulateScratch& a) {
  if (a.sortTemp) cudaFree(a.sortTemp);
  a = AccumulateScratch{};
}

namespace {
long long residentSegments(std::int64_t rows, std::int64_t pairs) {
  return static_cast<long long>(rows / S + std::min<std::int64_t>(pairs, rows) + 1);
}
std::size_t residentTempBytes(std::int64_t rows, std::int64_t pairs) {
  std::size_t a = 0, b = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, a, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                  static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                  static_cast<int>(rows), 0, 32);
  cub::DeviceScan::ExclusiveSum(nullptr, b, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                static_cast<int>(pairs + 1));
  return std::max(a, b);
}
std::size_t residentLayoutBytes(std::int64_t rows, std::int64_t pairs, int d, std::size_t temp) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const std::size_t segs = static_cast<std::size_t>(residentSegments(rows, pairs));
  return up(temp) + 3 * up(rows * 4) + 4 * up((pairs + 1) * 4) + up(segs * d * 8) + up(segs * 8);
}
}  // namespace

std::size_t residentAccumulateBytes(std::int64_t rows, std::int64_t chunkRows, int d, int k) {
  const std::int64_t chunks = (rows + chunkRows - 1) / chunkRows, pairs = chunks * k;
  if (rows <= 0 || rows > INT32_MAX || pairs >= (std::int64_t{1} << 28)) return 0;
  return residentLayoutBytes(rows, pairs, d, residentTempBytes(rows, pairs));
}

void allocResidentAccumulate(ResidentAccumulateScratch& a, std::int64_t rows, std::int64_t chunkRows, int d, int k) {
  const std::int64_t chunks = (rows + chunkRows - 1) / chunkRows, pairs = chunks * k;
  const std::size_t temp = residentTempBytes(rows, pairs);
  void* base = nullptr;
  if (cudaMalloc(&base, residentLayoutBytes(rows, pairs, d, temp)) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  char* p = static_cast<char*>(base);
  a.rows = rows;
  a.chunkRows = chunkRows;
  a.chunks = static_cast<int>(chunks);
  a.maxSegments = residentSegments(rows, pairs);
  a.sortTemp = carve<char>(p, temp);
  a.sortTempBytes = temp;
  a.sortedLabels = carve<int>(p, rows);
  a.rowIndex = carve<int>(p, rows);
  a.sortedIndex = carve<int>(p, rows);
  a.counts = carve<int>(p, pairs + 1);
  a.starts = carve<int>(p, pairs + 1);
  a.segs = carve<int>(p, pairs + 1);
  a.segOff = carve<int>(p, pairs + 1);
  a.partials = carve<double>(p, static_cast<std::size_t>(a.maxSegments) * d);
  a.partialInertia = carve<double>(p, static_cast<std::size_t>(a.maxSegments));
  iotaKernel<<<static_cast<unsigned>((rows + 255) / 256), 256>>>(a.rowIndex, rows);
  cudaStreamSynchronize(0);  // the backend's streams don't wait for the legacy stream
}

void freeResidentAccumulate(ResidentAccumulateScratch& a) {
  if (a.sortTemp) cudaFree(a.sortTemp);
  a = ResidentAccumulateScratch{};
}

void accumulateResident(RowValues x, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                        double* dist, float* dist32, bool sums, ResidentAccumulateScratch& a, double* sumsOut,
                        long long* countsOut, double* inertiaOut, cudaStream_t s) {
  const std::int64_t n = a.rows;
  if (n <= 0) return;
  const int chunks = a.chunks, pairs = chunks * k;
  const bool fused = d <= kFusedMaxDims;
  if (!fused) rowDistances(x, n, d, cf, labels, cosine, dist, dist32, s);
  cudaMemsetAsync(a.counts, 0, (static_cast<std::size_t>(pairs) + 1) * sizeof(int), s);
  const bool shared = k <= kSharedHistBins;
  const long long perChunk = std::min<long long>((a.chunkRows + 4095) / 4096, 64);
  pairHistKernel<<<dim3(static_cast<unsigned>(perChunk), static_cast<unsigned>(chunks)), 1024,
                   shared ? static_cast<std::size_t>(k) * sizeof(int) : 0, s>>>(labels, n, a.chunkRows, chunks, k,
                                                                                 shared, a.counts);
  std::size_t tb = a.sortTempBytes;
  cub::DeviceRadixSort::SortPairs(a.sortTemp, tb, labels, a.sortedLabels, a.rowIndex, a.sortedIndex,
                                  static_cast<int>(n), 0, bitsFor(k), s);
  tb = a.sortTempBytes;
  cub::DeviceScan::ExclusiveSum(a.sortTemp, tb, a.counts, a.starts, pairs + 1, s);
  pairSegsKernel<<<static_cast<unsigned>((pairs + 1 + 255) / 256), 256, 0, s>>>(a.counts, pairs, a.segs);
  tb = a.sortTempBytes;
  cub::DeviceScan::ExclusiveSum(a.sortTemp, tb, a.segs, a.segOff, pairs + 1, s);
  const unsigned segBlocks = static_cast<unsigned>(a.maxSegments);
  withValueType(x.type, [&](auto inTag) {
    constexpr InType IN = decltype(inTag)::value;
    if (fused) {
      withFusedShape(x, d, [&](auto tTag, auto vTag) {
        constexpr int T = decltype(tTag)::value, V = decltype(vTag)::value;
        residentFusedSegmentKernel<T, V, IN><<<segBlocks, W * 32, 0, s>>>(
            x.p, d, cf, cosine ? 1 : 0, a.sortedIndex, a.counts, a.starts, a.segOff, pairs, chunks, sums, dist,
            dist32, a.partials, a.partialInertia);
      });
    } else {
      residentSegmentKernel<IN><<<segBlocks, d >= 256 ? 256 : 128, 0, s>>>(
          x.p, d, a.sortedIndex, dist, a.counts, a.starts, a.segOff, pairs, chunks, sums, a.partials,
          a.partialInertia);
    }
  });
  foldKernel<<<static_cast<unsigned>(k), 128, 0, s>>>(d, chunks, a.counts, a.segOff, sums, a.partials,
                                                      a.partialInertia, sumsOut, countsOut, inertiaOut);
}

namespace {
// A chunk's partials (accumulate() into zeroed buffers: 0 + v = v, v never −0 since every sum starts at +0) added
// into the totals exactly as accumulate() adds v: one addition per (cluster, dim) and per cluster's inertia, none
// for a cluster the chunk has no row of.
__global__ void foldPartialKernel(int d, bool sums, const double* ps, const long long* pc, const double* pi,
                                  double* sumsOut, long long* countsOut, double* inertiaOut) {
  const int c = blockIdx.x;
  if (pc[c] == 0) return;
  if (sums)
    for (int j = threadIdx.x; j < d; j += blockDim.x)
      sumsOut[static_cast<size_t>(c) * d + j] += ps[static_cast<size_t>(c) * d + j];
  if (threadIdx.x == 0) {
    inertiaOut[c] += pi[c];
    countsOut[c] += pc[c];
  }
}
}  // namespace

void foldPartial(int d, int k, bool sums, const double* ps, const long long* pc, const double* pi, double* sumsOut,
                 long long* countsOut, double* inertiaOut, cudaStream_t s) {
  foldPartialKernel<<<static_cast<unsigned>(k), 128, 0, s>>>(d, sums, ps, pc, pi, sumsOut, countsOut, inertiaOut);
}

void accumulate(RowValues x, std::int64_t n, int d, int k, const std::int32_t* labels, const float* cf, bool cosine,
                double* dist, float* dist32, bool sums, AccumulateScratch& a, double* sumsOut, long long* countsOut,
                double* inertiaOut, cudaStream_t s) {
  if (n <= 0) return;
  const bool fused = d <= kFusedMaxDims;
  if (!fused) rowDistances(x, n, d, cf, labels, cosine, dist, dist32, s);
  const int ni = static_cast<int>(n);
  cudaMemsetAsync(a.chunkCounts, 0, (k + 1) * sizeof(int), s);
  if (k <= kSharedHistBins) {
    const long long blocks = std::min<long long>((n + 1023) / 1024, 1024);
    sharedHistKernel<<<static_cast<unsigned>(blocks), 1024, static_cast<std::size_t>(k) * sizeof(int), s>>>(
        labels, n, k, a.chunkCounts);
  } else {
    histKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(labels, n, a.chunkCounts);
  }
  std::size_t tb = a.sortTempBytes;
  cub::DeviceRadixSort::SortPairs(a.sortTemp, tb, labels, a.sortedLabels, a.rowIndex, a.sortedIndex, ni, 0,
                                  bitsFor(k), s);
  tb = a.sortTempBytes;
  cub::DeviceScan::ExclusiveSum(a.sortTemp, tb, a.chunkCounts, a.starts, k, s);
  // extras → extraOffsets (exclusive scan over K+1 entries, the last is the total).
  extrasKernel<<<static_cast<unsigned>((k + 1 + 255) / 256), 256, 0, s>>>(a.chunkCounts, k, a.extras);
  tb = a.sortTempBytes;
  cub::DeviceScan::ExclusiveSum(a.sortTemp, tb, a.extras, a.extraOffsets, k + 1, s);
  const unsigned segBlocks = static_cast<unsigned>(n / S + 1);
  if (fused) {
    withValueType(x.type, [&](auto inTag) {
      constexpr InType IN = decltype(inTag)::value;
      withFusedShape(x, d, [&](auto tTag, auto vTag) {
        constexpr int T = decltype(tTag)::value, V = decltype(vTag)::value;
        fusedSegmentKernel<T, V, IN><<<segBlocks, W * 32, 0, s>>>(x.p, d, k, cf, cosine ? 1 : 0, a.sortedIndex,
                                                                  a.chunkCounts, a.starts, a.extraOffsets, sums, dist,
                                                                  dist32, a.partials, a.partialInertia);
        fusedClusterKernel<T, V, IN><<<static_cast<unsigned>(k), W * 32, 0, s>>>(
            x.p, d, cf, cosine ? 1 : 0, a.sortedIndex, a.chunkCounts, a.starts, a.extraOffsets, sums, dist, dist32,
            a.partials, a.partialInertia, sumsOut, countsOut, inertiaOut);
      });
    });
    return;
  }
  const int threads = d >= 256 ? 256 : 128;
  withValueType(x.type, [&](auto inTag) {
    constexpr InType IN = decltype(inTag)::value;
    segmentKernel<IN><<<segBlocks, threads, 0, s>>>(x.p, d, k, a.sortedIndex, dist, a.chunkCounts, a.starts,
                                                    a.extraOffsets, sums, a.partials, a.partialInertia);
    clusterKernel<IN><<<static_cast<unsigned>(k), threads, 0, s>>>(x.p, d, a.sortedIndex, dist, a.chunkCounts,
                                                                   a.starts, a.extraOffsets, sums, a.partials,
                                                                   a.partialInertia, sumsOut, countsOut, inertiaOut);
  });
}

bool distancesFromSums(int d) { return d <= kFusedMaxDims; }

void sumsDistances(RowValues x, std::int64_t n, int d, const float* cf, const std::int32_t* labels, bool cosine,
                   double* dist, float* dist32, cudaStream_t s) {
  if (n <= 0) return;
  if (!distancesFromSums(d)) {
    rowDistances(x, n, d, cf, labels, cosine, dist, dist32, s);
    return;
  }
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((n + 7) / 8, 132 * 16));
  withValueType(x.type, [&](auto inTag) {
    constexpr InType IN = decltype(inTag)::value;
    withFusedShape(x, d, [&](auto tTag, auto vTag) {
      constexpr int T = decltype(tTag)::value, V = decltype(vTag)::value;
      sumsDistancesKernel<T, V, IN><<<blocks, 256, 0, s>>>(x.p, n, d, cf, labels, cosine ? 1 : 0, dist, dist32);
    });
  });
}

}  // namespace cuda
}  // namespace kmfleet
