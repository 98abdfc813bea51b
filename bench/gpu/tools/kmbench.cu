// kmbench: standalone check + benchmark of the CUDA kernels (no Node, no engine).
//   kmbench check            awkward shapes × every operand kind, against a float64 CPU reference
//   kmbench bench [quick|10m|fp16] ms/iter of a full Lloyd iteration with the data resident (the shapes of bench/RESULTS.md)
//   kmbench ooc [N D K]      out of core through the Backend: all / half / no rows resident
//   kmbench pass [N D K f16|f32] ms/pass through the Backend, all rows resident, with the host side per stage
//   kmbench h2d [all]        the host link's pinned copy bandwidth (of every device at once)
//   kmbench gather [N B]     a share of N scattered B-byte rows read by a kernel straight from pinned host memory,
//                            against one copy of every row (the cost of streaming only the rows bounds leave open)
// KMBENCH_FARTHEST=F, KMBENCH_CHUNK=R (pass, ooc): farthest rows asked per pass, chunkRows (A/B runs);
// KMBENCH_SMEM_LIMIT=B: the portable kernel plans for B bytes of shared memory per block (assign.cuh AssignKernel:
// 166912 an A100's layout, 101376 an A10G's or L4's).
// KMBENCH_HOST_UPDATE=1 (bench, pass, ooc): the fit update on the host, as the engine's update: 'host' option.
// Build: scripts/build-cuda-tools (nvcc with the kernels of cuda/kernels/, the backend's cuda/*.cu, cuda/planner.cpp and this file).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "exact_screen_policy.h"
#include "kernels/accumulate.cuh"
#include "kernels/assign.cuh"
#include "kernels/centroid_update.cuh"
#include "kernels/exact_sums.cuh"
#include "kernels/label_changes.cuh"
#include "kernels/operands.cuh"
#include "kernels/recheck.cuh"
#include "kernels/types.h"
#include "planner.h"
#include "cuda_bridge.h"
#include "thread_pool.h"
#include "cuda_check.h"

using namespace kmfleet::cuda;

// The assignment kernel's settings for every launch of this tool (KMBENCH_SMEM_LIMIT).
static AssignKernel assignKernel() {
  const char* v = std::getenv("KMBENCH_SMEM_LIMIT");
  return AssignKernel{false, v ? std::atoi(v) : 0};
}


__host__ __device__ __forceinline__ unsigned long long mix(unsigned long long z) {  // splitmix64
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float normal(unsigned long long seed, unsigned long long i) {
  const unsigned long long h = mix(seed * 0x100000001b3ULL + i);
  const float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f);
  const float u2 = ((h & 0xffffff) + 0.5f) * (1.0f / 16777216.0f);
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
// blobs > 0: x = center[(row hash) % blobs] (spread 8) + N(0,1); else N(0,1) (+ offset).
__global__ void genKernel(float* x, long long n, int d, int blobs, unsigned long long seed, float offset) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * d) return;
  const long long r = i / d;
  const int j = static_cast<int>(i % d);
  float v = normal(seed, i) + offset;
  if (blobs > 0) {
    const int b = static_cast<int>(mix(seed ^ (r * 7919ULL)) % blobs);
    v += 8.f * normal(seed + 17, static_cast<unsigned long long>(b) * d + j);
  }
  x[i] = v;
}
__global__ void toHalf(const float* x, __half* y, long long m) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < m) y[i] = __float2half_rn(x[i]);
}
__global__ void toBf16(const float* x, __nv_bfloat16* y, long long m) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < m) y[i] = __float2bfloat16_rn(x[i]);
}

// c[q] = x[q·n/k] (rows spread over the data)
__global__ void spreadRows(const float* x, long long n, int d, int k, float* c) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(k) * d) return;
  const long long q = i / d;
  c[i] = x[(q * n / k) * d + i % d];
}

static const char* opName(OpKind op) {
  return op == OpKind::F16x1 ? "one-product" : "exact";
}

// Device state of one problem.
// An A/B switch of this tool: set, non-empty and not "0".
static bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && *v != '0';
}

// The engine's thread pool (one thread per core by default): the backend copies its outputs with it, and the engine
// copies the device update's centroids with it (engine.cpp), so the benchmarks do too.
static kmfleet::ThreadPool& hostPool() {
  static kmfleet::ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

struct Problem {
  long long n = 0;
  int d = 0, k = 0;
  OpKind op = OpKind::F16x3;
  InType in = InType::F32;
  void* raw = nullptr;
  RowOps rows{};
  float* cf = nullptr;
  void* bhi = nullptr;
  void* blo = nullptr;
  float* cnorm = nullptr;
  int* labels = nullptr;
  int* flagged = nullptr;
  float* flaggedThr = nullptr;
  int* candCount = nullptr;
  int* cand = nullptr;
  unsigned* flaggedCount = nullptr;
  double* dist = nullptr;
  double* sums = nullptr;
  long long* counts = nullptr;
  double* inertia = nullptr;
  unsigned long long* bad = nullptr;
  float* mu = nullptr;
  AccumulateScratch acc{};
  CentroidOps cops{};
  std::vector<float> hc;  // host centroids
  std::vector<float> hmu;
  bool keepDist = true;          // checks compare the rows' distances; benchmarks don't keep them (as the Backend)
  RowValues vals{};              // what the fp64 kernels read: xf, or the 16-bit rows as the backend keeps them
  CentroidStatsDevice* cstats = nullptr;
  CentroidStats* hstats = nullptr;  // pinned
  float* hcPinned = nullptr;        // pinned staging of the centroids
  // the device update (centroid_update.cu, as the backend's updateOnDevice): next centroids, fp64 μ, shift, scatter
  float* cfNext = nullptr;
  double* mu64 = nullptr;
  double* shift = nullptr;
  double* scatter = nullptr;
  double* hK = nullptr;  // pinned: shift and scatter, K each
  bool onDevice = false;  // cf holds the last device update's centroids
  bool hcBehind = false;  // … and hc is not their copy yet: they come down behind the update (hostCentroids())
  cudaStream_t down = nullptr;                  // as the backend's d2h stream
  cudaEvent_t updated = nullptr, centroidsDown = nullptr;
  cudaEvent_t statsReady = nullptr;  // hstats of the operands queued last (queueCentroidOps)
  bool opsQueued = false;            // cf's operands are queued since cf last changed
  unsigned* hScreened = nullptr;     // pinned: the pass's flagged and screened-out totals, down with counts and inertia
  // The fit pass's statistics as the backend keeps them for resident rows (exact_sums.cuh; the planner's
  // MemoryPlan::exactSums): moved by the rows whose label changed when the last pass changed at most 30 % of them,
  // else added afresh. Benchmarks only (updateExact).
  bool exactSums = false;
  ExactStats stats{};
  ExactScratch exactScratch{};
  int* prevLabels = nullptr;
  bool statsHoldPrev = false;             // stats are those of prevLabels
  double lastChangedShare = 1.0;
  unsigned long long* changed = nullptr;  // device: rows whose label changed this pass
  unsigned long long* hChanged = nullptr; // pinned

  void alloc(long long n_, int d_, int k_, OpKind op_, InType in_) {
    screen = ExactScreenPolicy(padDims(d_));
    n = n_; d = d_; k = k_; op = op_; in = in_;
    const long long dp = padDims(d), kp = padCentroids(k);
    CK(cudaMalloc(&rows.xf, n * d * 4));
    raw = in == InType::F32 ? static_cast<void*>(rows.xf) : nullptr;  // f32 input: prepared in place
    if (!raw) CK(cudaMalloc(&raw, n * d * 2));
    CK(cudaMalloc(&rows.ahi, n * dp * 2));
    if (op == OpKind::F16x3) CK(cudaMalloc(&rows.alo, n * dp * 2));
    CK(cudaMalloc(&rows.rowScale, n * 4));
    CK(cudaMalloc(&rows.rowNorm, n * 4));
    if (op == OpKind::F16x3) CK(cudaMalloc(&rows.rowNormLo, n * 4));
    if (op == OpKind::F16x3) {  // the screen's per-row best, for the next pass (finite from the start)
      CK(cudaMalloc(&rows.screenRef, n * 4));
      CK(cudaMemset(rows.screenRef, 0, n * 4));
    }
    CK(cudaMalloc(&cf, static_cast<size_t>(k) * d * 4));
    CK(cudaMalloc(&bhi, kp * dp * 2));
    CK(cudaMalloc(&blo, kp * dp * 2));
    CK(cudaMalloc(&cnorm, kp * 4));
    CK(cudaMalloc(&labels, n * 4));
    CK(cudaMalloc(&flagged, n * 4));
    CK(cudaMalloc(&flaggedThr, n * 4));
    CK(cudaMalloc(&candCount, n * 4));
    CK(cudaMalloc(&cand, n * 4 * kCandidates));
    CK(cudaMalloc(&flaggedCount, 8));  // flagged rows, screened rows
    CK(cudaMalloc(&dist, n * 8));
    CK(cudaMalloc(&sums, static_cast<size_t>(k) * d * 8));
    CK(cudaMalloc(&counts, static_cast<size_t>(k) * 8));
    CK(cudaMalloc(&inertia, static_cast<size_t>(k) * 8));
    CK(cudaMalloc(&bad, 16));
    CK(cudaMalloc(&mu, static_cast<size_t>(d) * 4));
    CK(cudaMalloc(&cstats, sizeof(CentroidStatsDevice)));
    CK(cudaHostAlloc(&hstats, sizeof(CentroidStats), cudaHostAllocPortable));
    CK(cudaHostAlloc(&hcPinned, static_cast<size_t>(k) * d * 4, cudaHostAllocPortable));
    allocAccumulateScratch(acc, n, d, k);
    CK(cudaMalloc(&cfNext, static_cast<size_t>(k) * d * 4));
    CK(cudaMalloc(&mu64, static_cast<size_t>(d) * 8));
    CK(cudaMalloc(&shift, static_cast<size_t>(k) * 8));
    CK(cudaMalloc(&scatter, static_cast<size_t>(k) * 8));
    CK(cudaHostAlloc(&hK, static_cast<size_t>(k) * 16, cudaHostAllocPortable));
    CK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&updated, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&centroidsDown, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&statsReady, cudaEventDisableTiming));
    CK(cudaHostAlloc(&hScreened, 8, cudaHostAllocPortable));
  }
  void allocExact() {
    exactSums = exactSumsFits(n, d, k);
    if (!exactSums) return;
    allocExactStats(stats, k, d);
    allocExactScratch(exactScratch, n, k);
    CK(cudaMalloc(&prevLabels, n * 4));
    CK(cudaMalloc(&changed, 8));
    CK(cudaHostAlloc(&hChanged, 8, cudaHostAllocPortable));
  }
  void release() {
    if (raw != rows.xf) cudaFree(raw);
    for (void* p : {(void*)rows.xf, rows.ahi, rows.alo, (void*)rows.rowScale, (void*)rows.rowNorm, (void*)rows.rowNormLo, (void*)rows.screenRef, (void*)cf, bhi, blo,
                    (void*)cnorm, (void*)labels, (void*)flagged, (void*)flaggedThr, (void*)candCount, (void*)cand, (void*)flaggedCount, (void*)dist, (void*)sums,
                    (void*)counts, (void*)inertia, (void*)bad, (void*)mu, (void*)cstats, (void*)cfNext, (void*)mu64,
                    (void*)shift, (void*)scatter})
      if (p) cudaFree(p);
    cudaFreeHost(hK);
    if (exactSums) {
      freeExactStats(stats);
      freeExactScratch(exactScratch);
      cudaFree(prevLabels);
      cudaFree(changed);
      cudaFreeHost(hChanged);
    }
    cudaFreeHost(hstats);
    cudaFreeHost(hcPinned);
    cudaStreamSynchronize(down);
    cudaStreamDestroy(down);
    cudaEventDestroy(updated);
    cudaEventDestroy(centroidsDown);
    cudaEventDestroy(statsReady);
    cudaFreeHost(hScreened);
    freeAccumulateScratch(acc);
    *this = Problem{};
  }
  void generate(int blobs, unsigned long long seed, float offset, bool cosine) {
    float* tmp = rows.xf;
    genKernel<<<static_cast<unsigned>((n * d + 255) / 256), 256>>>(tmp, n, d, blobs, seed, offset);
    if (in == InType::F16) toHalf<<<static_cast<unsigned>((n * d + 255) / 256), 256>>>(tmp, static_cast<__half*>(raw), n * d);
    if (in == InType::BF16)
      toBf16<<<static_cast<unsigned>((n * d + 255) / 256), 256>>>(tmp, static_cast<__nv_bfloat16*>(raw), n * d);
    CK(cudaMemset(bad, 0xff, 16));
    // μ from the first rows (as the backend does with its first chunk): needs xf, so prepare twice
    prepareRows(raw, in, n, d, op, cosine, 0, nullptr, rows, RowFlags{bad, bad + 1, nullptr}, 0);
    rowMean(RowValues{rows.xf, InType::F32}, n, d, mu, 0);
    hmu.resize(d);
    CK(cudaMemcpy(hmu.data(), mu, d * 4, cudaMemcpyDeviceToHost));
    if (in != InType::F32) prepareRows(raw, in, n, d, op, cosine, 0, mu, rows, RowFlags{bad, bad + 1, nullptr}, 0);
    else prepareRows(rows.xf, InType::F32, n, d, op, false, 0, mu, rows, RowFlags{bad, bad + 1, nullptr}, 0);
    CK(cudaGetLastError());
    // as the backend reads them (xf stays for the CPU reference)
    vals = keepsRows16(in, cosine) ? RowValues{raw, in} : RowValues{rows.xf, InType::F32};
    // initial centroids: rows spread over the data
    hc.resize(static_cast<size_t>(k) * d);
    spreadRows<<<static_cast<unsigned>((static_cast<long long>(k) * d + 255) / 256), 256>>>(rows.xf, n, d, k, cf);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hc.data(), cf, hc.size() * 4, cudaMemcpyDeviceToHost));
  }
  void setCentroids() {  // hc → device operands, as the backend's beginPass does
    if (onDevice) {  // cf holds the last device update's centroids, their operands queued behind it
      if (!opsQueued) queueCentroidOps();
      CK(cudaEventSynchronize(statsReady));
    } else {
      CK(cudaEventSynchronize(centroidsDown));  // the staging may still be in a copy down
      const size_t total = hc.size() * 4, piece = size_t(1) << 20;
      for (size_t off = 0; off < total; off += piece) {
        const size_t m = std::min(piece, total - off);
        std::memcpy(reinterpret_cast<char*>(hcPinned) + off, reinterpret_cast<const char*>(hc.data()) + off, m);
        CK(cudaMemcpyAsync(reinterpret_cast<char*>(cf) + off, reinterpret_cast<char*>(hcPinned) + off, m,
                           cudaMemcpyHostToDevice, 0));
      }
      prepareCentroidOps(cf, mu, k, d, op, cstats, bhi, blo, cnorm, 0);
      CK(cudaMemcpyAsync(hstats, &cstats->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, 0));
      CK(cudaStreamSynchronize(0));
    }
    opsQueued = false;
    cops.bhi = bhi; cops.blo = blo; cops.cnorm = cnorm; cops.cf = cf; cops.scale = hstats->scale;
    cops.maxNorm = hstats->maxNorm;
    cops.hiNorm = hstats->hiNorm;
    cops.loNorm = hstats->loNorm;
    cops.shifted = true;
  }
  // The operands and statistics of cf queued, as the backend's prepareCentroidOps (right after its device update: they
  // run while the host takes the update's results, so the next pass's assignment need not wait for them)
  void queueCentroidOps() {
    prepareCentroidOps(cf, mu, k, d, op, cstats, bhi, blo, cnorm, 0);
    CK(cudaMemcpyAsync(hstats, &cstats->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, 0));
    CK(cudaEventRecord(statsReady, 0));
    opsQueued = true;
  }
  void assign() { assign(vals); }
  void assign(RowValues v) {
    CK(cudaMemsetAsync(flaggedCount, 0, 8, 0));
    // a screened pass leaves each row's best for the next one's screen (as the backend's resident rows), which keys
    // on them when the policy says so
    const bool screened = op == OpKind::F16x3 && screen.screen();
    rows.screenRelative = refsWritten && (screen.relative() || forceRelative) && !neverRelative;
    usedRelative = screened && rows.screenRelative;
    assignRows(assignKernel(), rows, n, d, cops, k, op, labels, flagged, flaggedCount, flaggedThr,
               screen.screen() ? candCount : nullptr, flaggedCount + 1, 0);
    refsWritten = refsWritten || screened;
    if (op == OpKind::F16x3) {
      candidateRows(assignKernel(), rows, n, d, cops, k, flagged, flaggedCount, flaggedThr, candCount, cand, 0);
      recheckRows(v, d, cf, k, flagged, flaggedCount, n, candCount, cand, labels, 0);
    }
  }
  void update(bool cosine) { update(cosine, vals); }
  void update(bool cosine, RowValues v) {
    CK(cudaMemsetAsync(sums, 0, static_cast<size_t>(k) * d * 8, 0));
    CK(cudaMemsetAsync(counts, 0, static_cast<size_t>(k) * 8, 0));
    CK(cudaMemsetAsync(inertia, 0, static_cast<size_t>(k) * 8, 0));
    accumulate(v, n, d, k, labels, cf, cosine, keepDist || !distancesFromSums(d) ? dist : nullptr, nullptr, true, acc,
               sums, counts, inertia, 0);
  }
  // The backend's fit pass with exact statistics (cuda_backend.cu beginPass / chunk_stream.cu / pass_finish.cu):
  // sums, counts and the inertia from the statistics; this pass's labels become the previous ones.
  void updateExact() {
    const bool move = statsHoldPrev && lastChangedShare <= 0.3;
    if (move) {
      exactMoveRows(vals, n, d, prevLabels, labels, true, exactScratch, stats, 0);
    } else {
      zeroExactStats(stats, 0);
      exactAddRows(vals, n, d, labels, true, exactScratch, stats, 0);
    }
    *hChanged = 0;  // no previous labels: no share to go by, so the next pass moves (as finishPass counts none)
    if (statsHoldPrev) {
      CK(cudaMemsetAsync(changed, 0, 8, 0));
      countLabelChanges(labels, prevLabels, n, changed, 0);
      CK(cudaMemcpyAsync(hChanged, changed, 8, cudaMemcpyDeviceToHost, 0));
    }
    exactFinish(stats, cf, false, sums, counts, inertia, 0);
    std::swap(labels, prevLabels);
    statsHoldPrev = true;
  }
  // after the pass's wait: the share of rows it changed, which picks the next pass's way
  void noteChanged() { lastChangedShare = static_cast<double>(*hChanged) / static_cast<double>(n); }
  // l2, every row; the data variance asked on the first update only, as the job's driver asks the engine for it once
  ClusterUpdateArgs updateArgs() const {
    ClusterUpdateArgs a;
    a.sums = sums; a.counts = counts; a.inertia = inertia; a.centroids = cf;
    a.k = k; a.d = d; a.rows = static_cast<double>(n);
    a.mu = mu64; a.scatter = varianceKnown ? nullptr : scatter; a.next = cfNext; a.shift = shift;
    return a;
  }
  bool varianceKnown = false;  // an update computed the data variance already
  // The backend's updateOnDevice: the next centroids, shift and data-variance terms computed where the sums are;
  // shift and scatter (K each) come down under the one wait, the centroids behind them on the side stream without a
  // wait (the engine fetches them only when its caller reads them: hostCentroids()). cf ↔ cfNext.
  void updateOnDevice(double* hShift, double* hScatter) {
    CK(cudaStreamWaitEvent(0, centroidsDown, 0));  // cfNext and hcPinned: the copy down of two updates ago is done
    clusterUpdate(updateArgs(), 0);
    CK(cudaGetLastError());
    CK(cudaEventRecord(updated, 0));
    CK(cudaMemcpyAsync(hShift, shift, static_cast<size_t>(k) * 8, cudaMemcpyDeviceToHost, 0));
    if (!varianceKnown) CK(cudaMemcpyAsync(hScatter, scatter, static_cast<size_t>(k) * 8, cudaMemcpyDeviceToHost, 0));
    varianceKnown = true;
    CK(cudaStreamWaitEvent(down, updated, 0));
    CK(cudaMemcpyAsync(hcPinned, cfNext, hc.size() * 4, cudaMemcpyDeviceToHost, down));
    CK(cudaEventRecord(centroidsDown, down));
    CK(cudaStreamSynchronize(0));
    std::swap(cf, cfNext);
    onDevice = true;
    hcBehind = true;
    queueCentroidOps();
  }
  // hc up to date (the backend's copyUpdatedCentroids): before the host reads or changes it
  void hostCentroids() {
    if (!hcBehind) return;
    CK(cudaEventSynchronize(centroidsDown));
    hostPool().copy(hc.data(), hcPinned, hc.size());
    hcBehind = false;
  }
  unsigned flaggedNow() {
    unsigned f = 0;
    CK(cudaMemcpy(&f, flaggedCount, 4, cudaMemcpyDeviceToHost));
    return f;
  }
  ExactScreenPolicy screen;  // exact mode: screen by one product first (the backend's policy)
  bool refsWritten = false;   // a screen wrote rows.screenRef
  bool usedRelative = false;  // the last assignment's screen keyed on them (kScreenRef)
  bool forceRelative = false; // checks: key on them whenever they are there
  bool neverRelative = false; // checks: never key on them
  unsigned screenedNow() {  // exact mode on Hopper: rows the one-product screen passed to the three products
    unsigned f = 0;
    CK(cudaMemcpy(&f, flaggedCount + 1, 4, cudaMemcpyDeviceToHost));
    return f;
  }
};

// ---------------------------------------------------------------- check
// The device statistics (prepareCentroidOps) against centroidStats on the host, bit for bit, and the operands they
// give against the operands from the host's scale (prepareCentroids), bit for bit.
static bool sameBytes(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }
static double halfToFloat(unsigned short bits) {
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}
template <typename T>
static std::vector<T> toHost(const void* dev, size_t count) {
  std::vector<T> v(count);
  CK(cudaMemcpy(v.data(), dev, count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
static bool centroidOpsMatch(const float* cfDev, const float* muDev, const std::vector<float>& hc,
                             const std::vector<float>& hmu, int k, int d, OpKind op) {
  const size_t kp = padCentroids(k), dp = padDims(d);
  void *b1, *l1, *b2, *l2;
  float *n1, *n2;
  CentroidStatsDevice* st;
  CK(cudaMalloc(&b1, kp * dp * 2)); CK(cudaMalloc(&l1, kp * dp * 2)); CK(cudaMalloc(&n1, kp * 4));
  CK(cudaMalloc(&b2, kp * dp * 2)); CK(cudaMalloc(&l2, kp * dp * 2)); CK(cudaMalloc(&n2, kp * 4));
  CK(cudaMalloc(&st, sizeof(CentroidStatsDevice)));
  CK(cudaMemset(l1, 0, kp * dp * 2)); CK(cudaMemset(l2, 0, kp * dp * 2));
  const CentroidStats h = centroidStats(hc.data(), hmu.empty() ? nullptr : hmu.data(), k, d);
  prepareCentroids(cfDev, muDev, k, d, op, h.scale, b1, l1, n1, 0);
  prepareCentroidOps(cfDev, muDev, k, d, op, st, b2, l2, n2, 0);
  CK(cudaDeviceSynchronize());
  CentroidStats g{};
  CK(cudaMemcpy(&g, &st->out, sizeof g, cudaMemcpyDeviceToHost));
  bool ok = sameBytes(&g.scale, &h.scale, 4) && sameBytes(&g.maxNorm, &h.maxNorm, 4);
  if (op == OpKind::F16x3) {  // max ‖ch‖, ‖cl‖ of the operands: bounds (never below the fp64 norms), and tight ones
    const auto bh = toHost<unsigned short>(b2, kp * dp), bl = toHost<unsigned short>(l2, kp * dp);
    double mh = 0, ml = 0;
    for (size_t c = 0; c < static_cast<size_t>(k); ++c) {
      double sh = 0, sl = 0;
      for (size_t j = 0; j < dp; ++j) {
        const double a = halfToFloat(bh[c * dp + j]), b = halfToFloat(bl[c * dp + j]);
        sh += a * a;
        sl += b * b;
      }
      mh = std::max(mh, std::sqrt(sh));
      ml = std::max(ml, std::sqrt(sl));
    }
    const bool bound = g.hiNorm >= mh && g.loNorm >= ml && g.hiNorm <= mh * (1 + 1e-6) + 1e-30 &&
                       g.loNorm <= ml * (1 + 1e-6) + 1e-30;
    if (!bound) std::printf("  operand norms: device hi=%a lo=%a, fp64 hi=%a lo=%a\n", g.hiNorm, g.loNorm, mh, ml);
    ok &= bound;
  }
  ok &= sameBytes(toHost<unsigned short>(b1, kp * dp).data(), toHost<unsigned short>(b2, kp * dp).data(), kp * dp * 2);
  ok &= sameBytes(toHost<unsigned short>(l1, kp * dp).data(), toHost<unsigned short>(l2, kp * dp).data(), kp * dp * 2);
  ok &= sameBytes(toHost<float>(n1, kp).data(), toHost<float>(n2, kp).data(), kp * 4);
  if (!ok)
    std::printf("  centroid statistics: host scale=%a maxNorm=%a, device scale=%a maxNorm=%a\n", h.scale, h.maxNorm,
                g.scale, g.maxNorm);
  for (void* p : {b1, l1, b2, l2, (void*)n1, (void*)n2, (void*)st}) cudaFree(p);
  return ok;
}

// Synthetic centroid sets for the statistics: magnitudes from subnormal to huge, all zero, D = 1 … 4096.
static int checkCentroidStats() {
  struct C { int k, d; float mag; bool withMu; };
  const C cases[] = {{1, 1, 1.f, false},    {7, 3, 1e-3f, true},  {1000, 17, 1e30f, true}, {3, 4096, 1.f, true},
                     {129, 100, 1e-41f, false}, {64, 64, 0.f, true},  {4096, 256, 3.f, true},  {100000, 8, 1e5f, true}};
  int fails = 0;
  for (const C& c : cases) {
    std::vector<float> hc(static_cast<size_t>(c.k) * c.d), hmu;
    unsigned long long z = 99 + c.k * 31 + c.d;
    for (float& v : hc) {
      z = z * 6364136223846793005ULL + 1442695040888963407ULL;
      v = c.mag * (static_cast<float>((z >> 40) & 0xffffff) / 8388608.f - 1.f);
    }
    if (c.withMu) {
      hmu.resize(c.d);
      for (int j = 0; j < c.d; ++j) hmu[j] = hc[j] * 0.5f + c.mag * 0.25f;
    }
    float *cf, *mu = nullptr;
    CK(cudaMalloc(&cf, hc.size() * 4));
    CK(cudaMemcpy(cf, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
    if (c.withMu) {
      CK(cudaMalloc(&mu, c.d * 4));
      CK(cudaMemcpy(mu, hmu.data(), c.d * 4, cudaMemcpyHostToDevice));
    }
    bool ok = true;
    for (OpKind op : {OpKind::F16x3, OpKind::F16x1}) ok &= centroidOpsMatch(cf, mu, hc, hmu, c.k, c.d, op);
    std::printf("%-4s centroid statistics k=%d d=%d magnitude=%g mu=%d (device = host, bit for bit)\n", ok ? "ok" : "FAIL",
                c.k, c.d, c.mag, c.withMu ? 1 : 0);
    fails += ok ? 0 : 1;
    cudaFree(cf);
    if (mu) cudaFree(mu);
  }
  return fails;
}

struct CheckResult { long long checked = 0, wrong = 0, ties = 0; double inertia = 0, best = 0; };

static CheckResult reference(const std::vector<float>& x, const std::vector<float>& c, const std::vector<int>& lab,
                             long long n, int d, int k, long long step) {
  const int T = std::max(1u, std::thread::hardware_concurrency());
  std::vector<CheckResult> part(T);
  std::vector<std::thread> th;
  for (int t = 0; t < T; ++t)
    th.emplace_back([&, t] {
      CheckResult& R = part[t];
      for (long long r = t * step; r < n; r += step * T) {
        double b1 = INFINITY, b2 = INFINITY, dl = 0;
        for (int q = 0; q < k; ++q) {
          double s = 0;
          for (int j = 0; j < d; ++j) {
            const double u = static_cast<double>(x[r * d + j]) - c[static_cast<size_t>(q) * d + j];
            s += u * u;
          }
          if (q == lab[r]) dl = s;
          if (s < b1) { b2 = b1; b1 = s; } else if (s < b2) b2 = s;
        }
        R.checked++;
        R.inertia += dl;
        R.best += b1;
        if (dl > b1) {
          if (dl - b1 <= 1e-6 * std::max(b1, 1e-300)) R.ties++;
          else R.wrong++;
        }
      }
    });
  for (auto& t : th) t.join();
  CheckResult R;
  for (auto& p : part) { R.checked += p.checked; R.wrong += p.wrong; R.ties += p.ties; R.inertia += p.inertia; R.best += p.best; }
  return R;
}

// Each of k rows of d values scaled to unit length (fp64 norm), as cosine centroids are.
static void normalizeRows(std::vector<float>& v, int k, int d) {
  for (int c = 0; c < k; ++c) {
    double s = 0;
    for (int j = 0; j < d; ++j) s += static_cast<double>(v[c * d + j]) * v[c * d + j];
    for (int j = 0; j < d; ++j) v[c * d + j] = static_cast<float>(v[c * d + j] / std::sqrt(s));
  }
}

static int checkOne(long long n, int d, int k, OpKind op, InType in, int blobs, float offset, bool cosine) {
  Problem P;
  P.alloc(n, d, k, op, in);
  P.generate(blobs, 1234 + d * 31 + k, offset, cosine);
  // perturb centroids a little so they are not data rows
  for (size_t i = 0; i < P.hc.size(); ++i) P.hc[i] += 0.01f * std::sin(static_cast<float>(i));
  if (cosine) normalizeRows(P.hc, k, d);
  P.setCentroids();
  const bool statsOk = centroidOpsMatch(P.cf, P.mu, P.hc, P.hmu, k, d, op);
  P.assign();
  CK(cudaGetLastError());
  P.update(cosine);
  CK(cudaDeviceSynchronize());
  const unsigned flagged = P.flaggedNow(), screened = P.screenedNow();
  // the distances computed again for a pass that did not keep them (sumsDistances): the bits accumulate wrote
  bool distOk = true;
  {
    double* again = nullptr;
    CK(cudaMalloc(&again, n * 8));
    sumsDistances(P.vals, n, d, P.cf, P.labels, cosine, again, nullptr, 0);
    CK(cudaDeviceSynchronize());
    distOk = sameBytes(toHost<double>(P.dist, n).data(), toHost<double>(again, n).data(), n * 8);
    CK(cudaFree(again));
  }
  // 16-bit rows read as they are: labels (recheck), sums, counts, inertia and distances bit for bit as from xf
  int rows16 = -1;  // not applicable
  if (P.vals.type != InType::F32) {
    const size_t kd = static_cast<size_t>(k) * d;
    const auto l1 = toHost<int>(P.labels, n);
    const auto s1 = toHost<double>(P.sums, kd), d1 = toHost<double>(P.dist, n), i1 = toHost<double>(P.inertia, k);
    const auto c1 = toHost<long long>(P.counts, k);
    const RowValues xf{P.rows.xf, InType::F32};
    P.assign(xf);
    P.update(cosine, xf);
    CK(cudaDeviceSynchronize());
    rows16 = sameBytes(l1.data(), toHost<int>(P.labels, n).data(), n * 4) &&
             sameBytes(s1.data(), toHost<double>(P.sums, kd).data(), kd * 8) &&
             sameBytes(d1.data(), toHost<double>(P.dist, n).data(), n * 8) &&
             sameBytes(i1.data(), toHost<double>(P.inertia, k).data(), k * 8) &&
             sameBytes(c1.data(), toHost<long long>(P.counts, k).data(), k * 8);
  }
  std::vector<float> x(n * d);
  std::vector<int> lab(n);
  CK(cudaMemcpy(x.data(), P.rows.xf, x.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lab.data(), P.labels, n * 4, cudaMemcpyDeviceToHost));
  bool labelsInRange = true;
  for (long long r = 0; r < n; ++r) labelsInRange &= lab[r] >= 0 && lab[r] < k;
  const double work = static_cast<double>(n) * k * d;
  const long long step = std::max<long long>(1, static_cast<long long>(work / 4e8));
  CheckResult R = reference(x, P.hc, lab, n, d, k, step);
  // sums/counts against the CPU, from the GPU's labels
  std::vector<double> sums(static_cast<size_t>(k) * d), ref(static_cast<size_t>(k) * d, 0.0);
  std::vector<long long> cnt(k), rc(k, 0);
  CK(cudaMemcpy(sums.data(), P.sums, sums.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(cnt.data(), P.counts, k * 8, cudaMemcpyDeviceToHost));
  for (long long r = 0; r < n; ++r) {
    rc[lab[r]]++;
    for (int j = 0; j < d; ++j) ref[static_cast<size_t>(lab[r]) * d + j] += x[r * d + j];
  }
  double sumErr = 0;
  bool countsOk = true;
  for (int c = 0; c < k; ++c) {
    countsOk &= cnt[c] == rc[c];
    for (int j = 0; j < d; ++j) {
      const double a = sums[static_cast<size_t>(c) * d + j], b = ref[static_cast<size_t>(c) * d + j];
      sumErr = std::max(sumErr, std::fabs(a - b) / std::max(1.0, std::fabs(b)));
    }
  }
  // determinism: the same pass again gives the same bits
  std::vector<double> sums2(sums.size());
  P.assign();
  P.update(cosine);
  CK(cudaMemcpy(sums2.data(), P.sums, sums2.size() * 8, cudaMemcpyDeviceToHost));
  const bool deterministic = std::memcmp(sums.data(), sums2.data(), sums.size() * 8) == 0;
  const double rel = R.best > 0 ? R.inertia / R.best - 1 : 0;
  bool ok = labelsInRange && countsOk && sumErr < 1e-9 && deterministic && statsOk && rows16 != 0 && distOk;
  // exact mode: one more pass after the centroids moved a little, screened relative to the last pass's per-row best
  // (kScreenRef on Hopper), against the fp64 reference for the moved centroids
  long long refWrong = -1;
  double refScreened = 0;
  if (op == OpKind::F16x3) {
    P.hostCentroids();
    for (size_t i = 0; i < P.hc.size(); ++i) P.hc[i] += 0.003f * std::cos(static_cast<float>(i) * 0.7f);
    if (cosine) normalizeRows(P.hc, k, d);
    P.onDevice = false;
    P.setCentroids();
    P.forceRelative = true;
    P.assign();
    CK(cudaDeviceSynchronize());
    refScreened = 100.0 * P.screenedNow() / n;
    CK(cudaMemcpy(lab.data(), P.labels, n * 4, cudaMemcpyDeviceToHost));
    refWrong = reference(x, P.hc, lab, n, d, k, step).wrong;
    ok &= refWrong == 0;
  }
  // Low-precision modes: labels may differ; their inertia is reported (the 0.1% criterion applies after
  // Lloyd iterations, test/gpu), here only gross errors fail (centroids sitting on data rows make the
  // relative inertia of a pass meaningless).
  if (op == OpKind::F16x3) ok &= R.wrong == 0;
  else ok &= rel <= 5e-2 || R.best < 1e-2 * R.checked;
  std::printf("%-4s %-10s %-4s %s n=%-7lld d=%-5d k=%-6d checked=%-7lld wrong=%-5lld ties=%-4lld inertia+%.2e "
              "flagged=%.4f%% screened=%.2f%% sumErr=%.1e det=%d stats=%d rows16=%d dist=%d moved_wrong=%lld moved_screened=%.2f%%\n",
              ok ? "ok" : "FAIL", opName(op), in == InType::F32 ? "f32" : in == InType::F16 ? "f16" : "bf16",
              blobs ? (cosine ? "blobs-cos" : "blobs    ") : (cosine ? "rand-cos " : "random   "), n, d, k, R.checked,
              R.wrong, R.ties, rel, 100.0 * flagged / n, 100.0 * screened / n, sumErr, deterministic ? 1 : 0, statsOk ? 1 : 0, rows16,
              distOk ? 1 : 0, refWrong, refScreened);
  P.release();
  return ok ? 0 : 1;
}

// The exact screen's policy (exact_screen_policy.h): two plain screens before the first relative one; a relative
// pass that passed on clearly more than the last plain one sends it back to plain screens for 2, then 4 passes,
// without turning the screen off; a plain pass over the break-even share turns the screen off for 2 passes.
static int checkScreenPolicy() {
  bool ok = true;
  ExactScreenPolicy p(128);
  ok &= p.screen() && !p.relative();
  p.record(1000, 100);                 // plain, 10 %
  ok &= p.screen() && !p.relative();
  p.record(1000, 100);                 // plain, 10 %
  ok &= p.screen() && p.relative();
  p.record(1000, 140, true);           // relative, 14 % ≤ 1.5·10 % + 2 %: stays
  ok &= p.screen() && p.relative();
  p.record(1000, 300, true);           // relative, 30 %: stale guesses → plain for 2 passes, the screen stays on
  ok &= p.screen() && !p.relative();
  p.record(1000, 100);
  ok &= p.screen() && !p.relative();
  p.record(1000, 100);
  ok &= p.screen() && p.relative();
  p.record(1000, 300, true);           // again: plain for 4 passes now
  for (int i = 0; i < 4; ++i) {
    ok &= p.screen() && !p.relative();
    p.record(1000, 100);
  }
  ok &= p.relative();
  p.record(1000, 400);                 // a plain pass over the break-even share (0.35): the screen off for 2 passes
  ok &= !p.screen() && !p.relative();
  p.record(1000, 0);
  p.record(1000, 0);
  ok &= p.screen();
  ExactScreenPolicy wide(256);         // Dp = 256: relative after two plain screens too
  for (int i = 0; i < 2; ++i) wide.record(1000, 100);
  ok &= wide.screen() && wide.relative();
  ExactScreenPolicy wider(512);        // Dp > 256 (never measured): never relative
  for (int i = 0; i < 4; ++i) wider.record(1000, 100);
  ok &= wider.screen() && !wider.relative();
  std::printf("%-4s exact screen policy (plain, relative, off)\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

// The screen really decides rows: its labels alone (assign.cuh screenRows) differ from the exact ones in a few rows.
// On the Hopper kernel relative keys really change them too: the screen alone keyed on the last pass's per-row best,
// after the centroids moved, against the plain screen. Else the tests that compare screened and unscreened passes
// bit for bit (test/gpu/cuda-exact-screen.test.ts) would prove nothing.
static int checkScreenRuns() {
  const long long n = 100003;
  const int d = 64, k = 512;
  Problem P;
  P.alloc(n, d, k, OpKind::F16x3, InType::F32);
  P.generate(0, 311, 0.f, false);
  for (size_t i = 0; i < P.hc.size(); ++i) P.hc[i] += 0.01f * std::sin(static_cast<float>(i));
  P.setCentroids();
  const auto differing = [&](const std::vector<int>& a, const std::vector<int>& b) {
    long long c = 0;
    for (long long r = 0; r < n; ++r) c += a[r] != b[r] ? 1 : 0;
    return c;
  };
  const auto screenAlone = [&](bool relative) {
    P.rows.screenRelative = relative;
    screenRows(assignKernel(), P.rows, n, d, P.cops, k, P.labels, P.candCount, P.flaggedCount + 1, 0);
    CK(cudaDeviceSynchronize());
    P.rows.screenRelative = false;
    return toHost<int>(P.labels, n);
  };
  P.assign();  // exact, screened (the policy's first pass); it leaves each row's best for a relative screen
  CK(cudaDeviceSynchronize());
  const std::vector<int> exact = toHost<int>(P.labels, n);
  const long long screenDiffer = differing(exact, screenAlone(false));
  bool ok = screenDiffer > 0 && screenDiffer < n / 20;  // one fp16 product is close: few rows differ
  long long relativeDiffer = -1;  // not applicable: the portable kernel screens on plain keys only
  if (std::strcmp(assignKernelName(assignKernel(), d), "wgmma") == 0) {
    P.hostCentroids();
    for (size_t i = 0; i < P.hc.size(); ++i) P.hc[i] += 0.003f * std::cos(static_cast<float>(i) * 0.7f);
    P.onDevice = false;
    P.setCentroids();
    const std::vector<int> relative = screenAlone(true);  // first: each screen writes the rows' best anew
    relativeDiffer = differing(relative, screenAlone(false));
    ok &= relativeDiffer > 0 && relativeDiffer < n / 20;
  }
  std::printf("%-4s the screen decides rows: screen alone vs exact %lld rows differ, relative vs plain keys %lld\n",
              ok ? "ok" : "FAIL", screenDiffer, relativeDiffer);
  P.release();
  return ok ? 0 : 1;
}

static int runCheck() {
  int fails = checkCentroidStats() + checkScreenPolicy() + checkScreenRuns();
  const OpKind ops[] = {OpKind::F16x3, OpKind::F16x1};
  struct S { long long n; int d, k; };
  const S shapes[] = {{3001, 1, 7},    {5003, 3, 7},     {4099, 17, 1},   {10007, 17, 1000}, {20011, 100, 7},
                      {6007, 128, 1000}, {3001, 1000, 7}, {2003, 4096, 7}, {1031, 4096, 129}, {65537, 8, 65536},
                      {50021, 128, 1024}};
  for (OpKind op : ops)
    for (const S& s : shapes) {
      fails += checkOne(s.n, s.d, s.k, op, InType::F32, 0, 0.f, false);
      fails += checkOne(s.n, s.d, s.k, op, InType::F32, 16, 0.f, false);
    }
  // data far from the origin (cancellation in ‖x‖² − 2x·c + ‖c‖²), cosine, half inputs
  fails += checkOne(20011, 64, 256, OpKind::F16x3, InType::F32, 0, 100.f, false);
  fails += checkOne(20011, 64, 256, OpKind::F16x3, InType::F32, 32, 1000.f, false);
  fails += checkOne(20011, 96, 300, OpKind::F16x3, InType::F32, 0, 0.f, true);
  fails += checkOne(20011, 96, 300, OpKind::F16x3, InType::F32, 32, 0.f, true);
  fails += checkOne(20011, 128, 1000, OpKind::F16x1, InType::F16, 16, 0.f, false);
  fails += checkOne(20011, 128, 1000, OpKind::F16x3, InType::F16, 16, 0.f, false);
  fails += checkOne(20011, 128, 1000, OpKind::F16x3, InType::BF16, 16, 0.f, false);
  // exact mode with 128 < Dp ≤ 256: the Hopper kernel's 128-row blocks (per-chunk stage release)
  fails += checkOne(20011, 200, 300, OpKind::F16x3, InType::F32, 0, 0.f, false);
  fails += checkOne(30011, 256, 1000, OpKind::F16x3, InType::F32, 16, 0.f, false);
  fails += checkOne(20011, 160, 129, OpKind::F16x3, InType::F32, 32, 1000.f, false);
  fails += checkOne(20011, 300, 77, OpKind::F16x3, InType::F16, 8, 0.f, false);  // D > 256: segment sums, distances
  fails += checkOne(20011, 300, 77, OpKind::F16x3, InType::BF16, 0, 0.f, false);
  fails += checkOne(20011, 64, 256, OpKind::F16x3, InType::F16, 0, 0.f, true);   // cosine f16: the fp32 copy
  // K = 10^6 (the largest K the design targets), sampled reference rows
  fails += checkOne(1000003, 4, 1000000, OpKind::F16x3, InType::F32, 0, 0.f, false);
  fails += checkOne(1000003, 4, 1000000, OpKind::F16x1, InType::F32, 0, 0.f, false);
  std::printf("check: %d failure(s)\n", fails);
  return fails ? 1 : 0;
}

// ---------------------------------------------------------------- bench
// One Lloyd iteration as the engine runs it with resident data, with the backend's waits: statistics and operands of
// the centroids (queued behind the last device update), assign (+ recheck), distances, deterministic sums; counts,
// inertia and the screen's totals down under one wait; then the update on the device (the backend's updateOnDevice:
// next centroids and shift, the data-variance terms in the first update only, as the job's driver asks for them once;
// the centroids come down behind it without a wait, and the next operands are queued). KMBENCH_HOST_UPDATE=1: the
// update on the host (sums down, division on the host, centroids up) for same-run A/B; an iteration that leaves a
// cluster empty takes that path too (the engine re-seeds on the host). Host-side stages: prep (until
// the statistics are back: an upload, or the wait for operands queued after the last update), down (the sums on the
// host path), div (the update: device kernels and the shift's wait, or the host division).
struct HostStages { double prep = 0, down = 0, div = 0; };
static double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
static double iterate(Problem& P, int iters, double* hs, long long* hcnt, unsigned* flagged, HostStages* st) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t kd = static_cast<size_t>(P.k) * P.d;
  const bool hostUpdate = envFlag("KMBENCH_HOST_UPDATE");
  const bool trace = envFlag("KMBENCH_TRACE");  // per iteration on stderr: wall ms, the exact screen's share and kind
  for (int it = 0; it < iters; ++it) {
    const auto ti = std::chrono::steady_clock::now();
    const bool screenOn = P.op == OpKind::F16x3 && P.screen.screen();
    auto t = ti;
    P.setCentroids();
    if (st) st->prep += msSince(t);
    P.assign();
    if (P.exactSums) P.updateExact();
    else P.update(false);
    // counts, inertia and the screen's totals down behind the sums, under one wait (as the backend's finishPass)
    CK(cudaMemcpyAsync(hcnt, P.counts, static_cast<size_t>(P.k) * 8, cudaMemcpyDeviceToHost, 0));
    CK(cudaMemcpyAsync(hs, P.inertia, static_cast<size_t>(P.k) * 8, cudaMemcpyDeviceToHost, 0));
    CK(cudaMemcpyAsync(P.hScreened, P.flaggedCount, 8, cudaMemcpyDeviceToHost, 0));
    CK(cudaStreamSynchronize(0));
    if (P.op == OpKind::F16x3) P.screen.record(P.n, P.hScreened[1], P.usedRelative);
    if (P.exactSums) P.noteChanged();
    t = std::chrono::steady_clock::now();
    const bool empty = std::find(hcnt, hcnt + P.k, 0LL) != hcnt + P.k;
    if (hostUpdate || empty) {
      CK(cudaMemcpyAsync(hs, P.sums, kd * 8, cudaMemcpyDeviceToHost, 0));
      CK(cudaStreamSynchronize(0));
    }
    if (st) st->down += msSince(t);
    if (flagged) *flagged = P.hScreened[0];
    t = std::chrono::steady_clock::now();
    if (hostUpdate || empty) {
      P.hostCentroids();  // an empty cluster keeps its centroid
      for (int c = 0; c < P.k; ++c)
        if (hcnt[c] > 0)
          for (int j = 0; j < P.d; ++j) P.hc[static_cast<size_t>(c) * P.d + j] = static_cast<float>(hs[static_cast<size_t>(c) * P.d + j] / hcnt[c]);
      P.onDevice = false;
    } else {
      P.updateOnDevice(P.hK, P.hK + P.k);
    }
    if (st) st->div += msSince(t);
    if (trace)
      std::fprintf(stderr, "  iteration %.3f ms, screen %s%s, passed on %.2f%%\n", msSince(ti), screenOn ? "on" : "off",
                   screenOn && P.usedRelative ? " (relative)" : "", 100.0 * P.hScreened[1] / P.n);
  }
  CK(cudaGetLastError());
  return msSince(t0);
}

static void benchOne(long long n, int d, int k, OpKind op, InType in, int blobs) {
  Problem P;
  P.keepDist = false;
  P.alloc(n, d, k, op, in);
  P.allocExact();  // the iterations sum as the backend's fit pass does
  P.generate(blobs, 42, 0.f, false);
  // the sums' destination: pinned, as the backend's download ring
  double* hs = nullptr;
  long long* hcnt = nullptr;
  CK(cudaHostAlloc(&hs, static_cast<size_t>(k) * d * 8, cudaHostAllocPortable));
  CK(cudaHostAlloc(&hcnt, static_cast<size_t>(k) * 8, cudaHostAllocPortable));
  unsigned f0 = 0, f1 = 0;
  // Iterations 1–4 warm up (module load, first touch, the exact screen's policy settling: a pass whose cost differs
  // from the later ones must not be subtracted out); 5–14 are timed, not a long run minus a short one, which the
  // policy's first passes bias when they cost more than the later ones.
  iterate(P, 1, hs, hcnt, &f0, nullptr);
  const int W = 3, L = 10;
  const double tw = iterate(P, W, hs, hcnt, nullptr, nullptr);
  HostStages hsL;
  const double tl = iterate(P, L, hs, hcnt, &f1, &hsL);
  const unsigned screenedLast = P.screenedNow();
  const double ms = tl / L;
  const double prepMs = hsL.prep / L, downMs = hsL.down / L, divMs = hsL.div / L;
  cudaFreeHost(hs);
  cudaFreeHost(hcnt);
  // assignment alone, for the split
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 5; ++i) P.assign();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float am = 0;
  CK(cudaEventElapsedTime(&am, e0, e1));
  am /= 5;
  // split of one iteration: assignment without recheck, recheck, distances, sums
  auto timeIt = [&](auto&& f) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 5; ++i) f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    return t / 5;
  };
  const float mmaMs = timeIt([&] {
    CK(cudaMemsetAsync(P.flaggedCount, 0, 8, 0));
    assignRows(assignKernel(), P.rows, n, d, P.cops, k, op, P.labels, P.flagged, P.flaggedCount, P.flaggedThr,
               P.screen.screen() ? P.candCount : nullptr, P.flaggedCount + 1, 0);
  });
  // exact mode: the one-product screen alone (assign.cuh screenRows; 0 when the policy has it off)
  float screenMs = 0.f;
  if (op == OpKind::F16x3 && P.screen.screen()) {
    screenMs = timeIt([&] {
      CK(cudaMemsetAsync(P.flaggedCount, 0, 8, 0));
      screenRows(assignKernel(), P.rows, n, d, P.cops, k, P.labels, P.candCount, P.flaggedCount + 1, 0);
    });
  }
  const float distMs = 0.f;  // fused into the sums for D ≤ 256
  // the statistics: with exact sums, the next pass's move (the assignments above labelled the rows for the updated
  // centroids) and its way back, halved, plus exactFinish; else accumulate() over every row
  const double changedLast = P.exactSums ? 100.0 * P.lastChangedShare : 0.0;
  const float sumMs = P.exactSums ? timeIt([&] {
    exactMoveRows(P.vals, n, d, P.prevLabels, P.labels, true, P.exactScratch, P.stats, 0);
    exactMoveRows(P.vals, n, d, P.labels, P.prevLabels, true, P.exactScratch, P.stats, 0);
    exactFinish(P.stats, P.cf, false, P.sums, P.counts, P.inertia, 0);
  }) / 2 : timeIt([&] { P.update(false); });
  // the centroid side on the device alone (statistics + operands)
  const float cprepMs = timeIt([&] { prepareCentroidOps(P.cf, P.mu, k, d, op, P.cstats, P.bhi, P.blo, P.cnorm, 0); });
  // the device update's kernels alone (centroid_update.cu: next centroids, shift, data-variance terms)
  const float updMs = timeIt([&] { clusterUpdate(P.updateArgs(), 0); });
  const double tflop = 2.0 * n * k * d / (ms * 1e-3) / 1e12;
  std::printf("RESULT kernel=%s in=%s data=%s n=%lld d=%d k=%d ms_per_iter=%.3f iters_2_4_ms=%.3f relative=%d assign_ms=%.3f tflops=%.1f "
              "recheck_first=%.5f%% recheck_last=%.5f%% screened_last=%.2f%% screen_now=%d screen_ms=%.3f mma_ms=%.3f recheck_ms=%.3f dist_ms=%.3f sums_ms=%.3f "
              "host_prep_ms=%.3f host_down_ms=%.3f host_div_ms=%.3f centroid_kernels_ms=%.3f update_kernels_ms=%.3f rows=%s sums=%s "
              "changed_last=%.2f%%\n",
              opName(op), in == InType::F32 ? "f32" : in == InType::F16 ? "f16" : "bf16", blobs ? "blobs" : "random", n,
              d, k, ms, tw / W, P.usedRelative ? 1 : 0, am, tflop, 100.0 * f0 / n, 100.0 * f1 / n, 100.0 * screenedLast / n, P.screen.screen() ? 1 : 0, screenMs, mmaMs, am - mmaMs, distMs, sumMs, prepMs, downMs,
              divMs, cprepMs, updMs, P.vals.type == InType::F32 ? "f32" : "16bit", P.exactSums ? "exact" : "accumulate",
              changedLast);
  std::fflush(stdout);
  P.release();
}

static int runBench(int argc, char** argv) {
  const bool quick = argc > 2 && std::string(argv[2]) == "quick";
  if (argc > 2 && std::string(argv[2]) == "10m") {  // the two headline rows only (A/B runs)
    benchOne(10000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
    benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "exact") {  // exact fp32: random rows and blobs (the screen's two regimes)
    benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
    benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 64);
    benchOne(1000000, 256, 4096, OpKind::F16x3, InType::F32, 0);
    benchOne(1000000, 256, 4096, OpKind::F16x3, InType::F32, 64);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "exact-random") {  // exact fp32 on random rows: the screen's A/B runs
    benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
    benchOne(1000000, 256, 4096, OpKind::F16x3, InType::F32, 0);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "fp16") {  // the two fp16 targets (update-path A/B runs)
    benchOne(10000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
    benchOne(1000000, 256, 4096, OpKind::F16x1, InType::F16, 0);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "targets") {  // the issue's three in-core targets (A/B runs)
    benchOne(10000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
    benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
    benchOne(1000000, 256, 4096, OpKind::F16x1, InType::F16, 0);
    return 0;
  }
  if (quick) {
    benchOne(1000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
    benchOne(1000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
    return 0;
  }
  benchOne(10000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
  benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 0);
  benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F32, 64);
  benchOne(10000000, 128, 1024, OpKind::F16x3, InType::F16, 0);
  benchOne(8000000, 128, 1024, OpKind::F16x1, InType::F16, 0);
  benchOne(1000000, 256, 4096, OpKind::F16x1, InType::F16, 0);
  benchOne(1000000, 256, 4096, OpKind::F16x3, InType::F32, 0);
  return 0;
}

// ---------------------------------------------------------------- out of core, through the Backend
// The engine's loop without the engine: host buffers filled once with normal data (as if the rows were
// already in pinned memory), then passes feeding every non-resident
// chunk. Reports ms/pass for all-resident (compute), half resident and none resident, and the H2D bandwidth.
// `parties` threads (one per device) start their timed copies together
static double h2dBandwidth(int device = 0, std::atomic<int>* ready = nullptr, int parties = 1) {
  CK(cudaSetDevice(device));
  const size_t bytes = size_t(1) << 30;
  void* h = nullptr;
  void* dptr = nullptr;
  CK(cudaHostAlloc(&h, bytes, cudaHostAllocPortable));
  CK(cudaMalloc(&dptr, bytes));
  std::memset(h, 1, bytes);
  CK(cudaMemcpy(dptr, h, bytes, cudaMemcpyHostToDevice));
  if (ready) {
    ready->fetch_add(1);
    while (ready->load() < parties) std::this_thread::yield();
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) CK(cudaMemcpy(dptr, h, bytes, cudaMemcpyHostToDevice));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaFreeHost(h);
  cudaFree(dptr);
  return 4.0 * bytes / s / 1e9;
}

// Host wall time per stage of a pass through the Backend (averaged over 3 extra passes): begin (beginPass:
// centroids up, statistics), resident (processResident: launches, and the wait for the statistics), gpu (until
// the device is idle), finish (finishPass after that: labels, sums/counts down, farthest rows), update (the
// engine's division, as done here).
struct PassStages { double begin = 0, resident = 0, gpu = 0, finish = 0, update = 0; int passes = 0; };

// chunkRows, slots: the plan's unless > 0 (KMBENCH_CHUNK also sets the chunk rows)
static double oocRun(long long n, int d, int k, kmfleet::Precision prec, long long budget, long long* residentOut,
                     long long* chunkOut, kmfleet::DType dtype = kmfleet::DType::F32, PassStages* stages = nullptr,
                     long long chunkRows = 0, int slots = 0) {
  using namespace kmfleet;
  EngineConfig cfg;
  cfg.rows = n; cfg.dims = d; cfg.k = k; cfg.dtype = dtype; cfg.backend = BackendKind::Cuda;
  cfg.precision = prec; cfg.memoryBudget = budget;
  cfg.chunkRows = chunkRows;
  if (const char* cr = std::getenv("KMBENCH_CHUNK")) cfg.chunkRows = std::atoll(cr);  // A/B of the chunk size
  cfg.cuda.slots = slots;
  cfg.cuda.sharedMemoryLimit = assignKernel().sharedMemoryLimit;
  std::unique_ptr<Backend> b = makeCudaBackend(cfg, &hostPool());
  const Plan& pl = b->plan();
  *residentOut = pl.residentRows;
  *chunkOut = pl.chunkRows;
  std::vector<float> c(static_cast<size_t>(k) * d);
  // Chunk `ci`'s rows (normal values, seeded by the chunk) into host buffer `buf`. The buffers are filled once with
  // chunks 0, 1, …; when every row is resident the first pass also fills each later chunk with its own rows (all N
  // distinct, as the Engine's and kmbench bench's). When some rows stream, each streamed chunk keeps its buffer's
  // rows on every pass (data already in pinned memory: no generation inside the timed passes).
  auto fillChunk = [&](int buf, long long ci) {
    std::vector<float> h(static_cast<size_t>(pl.chunkRows) * d);
    // the chunk's own stream: seeds 12345 + ci straight into the LCG gave neighbouring chunks correlated rows
    unsigned long long z = mix(12345 + static_cast<unsigned long long>(ci));
    for (long long j = 0; j < pl.chunkRows * d; j += 2) {
      z = z * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u1 = ((z >> 11) + 1.0) / 9007199254740993.0;
      z = z * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u2 = (z >> 11) / 9007199254740992.0;
      const double r = std::sqrt(-2 * std::log(u1));
      h[j] = float(r * std::cos(6.283185307179586 * u2));
      if (j + 1 < pl.chunkRows * d) h[j + 1] = float(r * std::sin(6.283185307179586 * u2));
    }
    if (dtype == DType::F32) {
      std::memcpy(b->hostBuffer(buf), h.data(), h.size() * 4);
    } else {
      unsigned short* o = static_cast<unsigned short*>(b->hostBuffer(buf));
      for (size_t j = 0; j < h.size(); ++j) {
        if (dtype == DType::F16) {
          const __half v = __float2half_rn(h[j]);
          o[j] = __half_as_ushort(v);
          h[j] = __half2float(v);
        } else {
          const __nv_bfloat16 v = __float2bfloat16_rn(h[j]);
          o[j] = __bfloat16_as_ushort(v);
          h[j] = __bfloat162float(v);
        }
      }
    }
    if (ci == 0) std::memcpy(c.data(), h.data(), c.size() * 4);  // K <= chunkRows here
  };
  for (int i = 0; i < pl.buffers; ++i) fillChunk(i, i);
  const bool distinctRows = pl.residentRows >= n;
  bool firstPass = true;
  std::vector<int> labels(n);
  bool timing = false;
  // the update as the engine runs it: on the device when the pass kept its sums (KMBENCH_HOST_UPDATE=1: on the host)
  const bool hostUpdate = envFlag("KMBENCH_HOST_UPDATE");
  bool fromUpdate = false, cBehind = false;
  auto pass = [&]() {
    using clk = std::chrono::steady_clock;
    PassSpec spec;
    spec.mode = PassMode::Fit;
    spec.centroids = c.data();
    spec.labels = labels.data();
    spec.farthest = std::min(k - 1, 1024);  // as the engine asks (found only when a cluster comes out empty)
    spec.keepSums = !hostUpdate;
    spec.centroidsFromUpdate = fromUpdate;
    if (const char* f = std::getenv("KMBENCH_FARTHEST")) spec.farthest = std::atoi(f);  // A/B: 0 = none
    auto t = clk::now();
    b->beginPass(spec);
    const double tBegin = msSince(t);
    t = clk::now();
    const long long held = b->residentHeld();
    if (held > 0) b->processResident();
    long long i = 0;
    for (long long first = held; first < n; first += pl.chunkRows, ++i) {
      // the buffer's previous chunk is up (processChunk returns once its H2D is done)
      if (firstPass && distinctRows && i >= pl.buffers) fillChunk(static_cast<int>(i % pl.buffers), i);
      b->processChunk(b->hostBuffer(static_cast<int>(i % pl.buffers)), first, std::min<long long>(pl.chunkRows, n - first));
    }
    firstPass = false;
    const double tRes = msSince(t);
    t = clk::now();
    if (timing) CK(cudaDeviceSynchronize());  // stage passes only: splits the device's time from the host's
    const double tGpu = msSince(t);
    t = clk::now();
    PassTotals tot = b->finishPass();
    const double tFin = msSince(t);
    t = clk::now();
    if (tot.sumsKept) {
      b->updateOnDevice(false);  // the next centroids stay on the device (the engine reads them only when asked)
    } else {
      if (cBehind) b->copyUpdatedCentroids(c.data());  // an empty cluster keeps its centroid
      for (int q = 0; q < k; ++q)
        if (tot.counts[q] > 0)
          for (int j = 0; j < d; ++j) c[size_t(q) * d + j] = float(tot.sums[size_t(q) * d + j] / double(tot.counts[q]));
    }
    cBehind = fromUpdate = tot.sumsKept;
    if (stages && timing) {
      stages->begin += tBegin; stages->resident += tRes; stages->gpu += tGpu; stages->finish += tFin;
      stages->update += msSince(t);
      stages->passes++;
    }
  };
  pass();  // first pass: feeds everything, retains the resident rows
  pass();  // and one more before timing (the first pass that reads the resident rows)
  // The median of 8 passes, each timed alone (finishPass returns once the pass's device work is done): a long run
  // minus a short one comes out shorter than the device's own time per pass, the two runs' passes not costing the
  // same.
  std::vector<double> times;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  if (stages) {  // extra passes for the split (the sync before finishPass takes away its overlap with the device)
    timing = true;
    for (int i = 0; i < 3; ++i) pass();
  }
  return (times[3] + times[4]) / 2;
}

// All rows resident, through the Backend: ms/pass and where the host's time goes.
static int runPass(int argc, char** argv) {
  const long long n = argc > 2 ? std::atoll(argv[2]) : 10000000;
  const int d = argc > 3 ? std::atoi(argv[3]) : 128;
  const int k = argc > 4 ? std::atoi(argv[4]) : 1024;
  const bool f32 = argc > 5 && std::string(argv[5]) == "f32";
  const kmfleet::DType dt = f32 ? kmfleet::DType::F32 : kmfleet::DType::F16;
  const kmfleet::Precision prec = f32 ? kmfleet::Precision::FP32 : kmfleet::Precision::FP16;
  long long res = 0, chunk = 0;
  PassStages st;
  const double ms = oocRun(n, d, k, prec, -1, &res, &chunk, dt, &st);
  const double m = st.passes > 0 ? st.passes : 1;
  std::printf("RESULT_PASS kernel=%s in=%s n=%lld d=%d k=%d chunk=%lld resident=%lld ms_per_pass=%.3f begin_ms=%.3f "
              "resident_ms=%.3f gpu_wait_ms=%.3f finish_ms=%.3f update_ms=%.3f\n",
              f32 ? "fp32-exact" : "fp16", f32 ? "f32" : "f16", n, d, k, chunk, res, ms, st.begin / m, st.resident / m,
              st.gpu / m, st.finish / m, st.update / m);
  std::fflush(stdout);
  return 0;
}

static int runOoc(int argc, char** argv) {
  const long long n = argc > 2 ? std::atoll(argv[2]) : 16800000;
  const int d = argc > 3 ? std::atoi(argv[3]) : 128;
  const int k = argc > 4 ? std::atoi(argv[4]) : 4096;
  const double bw = h2dBandwidth();
  std::printf("RESULT_H2D gbps=%.1f\n", bw);
  for (kmfleet::Precision prec : {kmfleet::Precision::FP32, kmfleet::Precision::FP16}) {
    const char* pn = prec == kmfleet::Precision::FP32 ? "fp32-exact" : "fp16";
    const size_t rrb = kmfleet::cuda::residentRowBytes(d, kmfleet::cuda::opFor(prec), kmfleet::DType::F32,
                                                       kmfleet::Metric::L2);
    long long res = 0, chunk = 0;
    double compute = 0;
    // Variants timed in the same run: the shipped plan (128 MiB chunks when rows stream on every pass, 4 slots), its
    // 64 MiB chunks, and 64 MiB chunks with 2 slots.
    struct Variant { int frac; const char* path; long long chunkRows; int slots; };
    const std::vector<Variant> variants = {
        {100, "", 0, 0},
        {50, "", 0, 0},
        {50, " path=chunk-64MiB", 131072, 0},
        {50, " path=chunk-64MiB-2-slots", 131072, 2},
        {0, "", 0, 0},
        {0, " path=chunk-64MiB-2-slots", 131072, 2},
    };
    for (const Variant& v : variants) {
      const int frac = v.frac;
      const long long budget = frac == 100 ? -1 : static_cast<long long>(rrb * size_t(n) * frac / 100);
      double ms = 0;
      try {
        ms = oocRun(n, d, k, prec, budget, &res, &chunk, kmfleet::DType::F32, nullptr, v.chunkRows, v.slots);
      } catch (const kmfleet::EngineError& e) {
        std::printf("RESULT_OOC kernel=%s%s n=%lld d=%d k=%d error=\"%s\"\n", pn, v.path, n, d, k, e.what());
        continue;
      }
      if (frac == 100) compute = ms;
      const double streamed = double(n - res) * d * 4;
      const double ioMs = streamed / (bw * 1e9) * 1e3;
      const double bound = std::max(compute, ioMs);
      std::printf("RESULT_OOC kernel=%s%s n=%lld d=%d k=%d chunk=%lld resident=%lld streamed_gb=%.2f ms_per_pass=%.1f "
                  "compute_ms=%.1f io_ms=%.1f ratio_to_bound=%.2f\n",
                  pn, v.path, n, d, k, chunk, res, streamed / 1e9, ms, compute, ioMs,
                  bound > 0 ? ms / bound : 0.0);
      std::fflush(stdout);
    }
  }
  return 0;
}

// ---------------------------------------------------------------- scattered rows from pinned host memory
// One warp a row, 16 bytes a lane, reading the mapped page-locked block directly (no staging copy).
__global__ void gatherHostRows(const int4* __restrict__ host, const int* __restrict__ rows, int n, int rowVec,
                               int4* __restrict__ out) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  const int warps = (gridDim.x * blockDim.x) >> 5;
  for (int i = warp; i < n; i += warps) {
    const long long r = rows[i];
    for (int v = lane; v < rowVec; v += 32) out[(long long)i * rowVec + v] = host[r * rowVec + v];
  }
}

// Rows chosen independently with probability p (as the rows a pass's bounds leave open), for several p: the gather's
// time against one cudaMemcpy of every row, and its bandwidth in bytes of the rows it read.
static int runGather(int argc, char** argv) {
  const long long n = argc > 2 ? std::atoll(argv[2]) : (1LL << 23);
  const int rowBytes = argc > 3 ? std::atoi(argv[3]) : 512;
  if (n < 1 || n > (1LL << 30) || rowBytes < 16 || rowBytes % 16 != 0) {
    std::fprintf(stderr, "kmbench gather [N B]: 1 <= N <= 2^30 rows of B bytes, B a multiple of 16\n");
    return 2;
  }
  const int rowVec = rowBytes / 16;
  const size_t bytes = size_t(n) * rowBytes;
  void* host = nullptr;
  void* dev = nullptr;
  int* dRows = nullptr;
  CK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  std::memset(host, 1, bytes);
  CK(cudaMalloc(&dev, bytes));
  CK(cudaMalloc(&dRows, size_t(n) * sizeof(int)));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  float ms = 0;
  CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  CK(cudaEventRecord(a));
  for (int i = 0; i < 3; ++i) CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice));
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  CK(cudaEventElapsedTime(&ms, a, b));
  const double full = ms / 3;
  std::printf("copy of every row: %.2f ms (%.1f GB/s)\n", full, bytes / full / 1e6);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (double p : {0.01, 0.035, 0.115, 0.25, 0.45, 1.0}) {
    std::vector<int> rows;
    const auto below = static_cast<unsigned long long>(p * 0x1p53);
    for (long long r = 0; r < n; ++r)
      if ((mix(7 * 0x100000001b3ULL + r) >> 11) < below || p >= 1) rows.push_back(int(r));
    const int m = int(rows.size());
    CK(cudaMemcpy(dRows, rows.data(), size_t(m) * sizeof(int), cudaMemcpyHostToDevice));
    const int grid = sms * 4;
    gatherHostRows<<<grid, 256>>>(static_cast<const int4*>(host), dRows, m, rowVec, static_cast<int4*>(dev));
    CK(cudaGetLastError());
    CK(cudaEventRecord(a));
    for (int i = 0; i < 3; ++i)
      gatherHostRows<<<grid, 256>>>(static_cast<const int4*>(host), dRows, m, rowVec, static_cast<int4*>(dev));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
    const double g = ms / 3;
    std::printf("RESULT_GATHER p=%.3f rows=%d ms=%.2f of_copy=%.3f gbps=%.1f\n", p, m, g, g / full,
                double(m) * rowBytes / g / 1e6);
  }
  CK(cudaFreeHost(host));
  CK(cudaFree(dev));
  CK(cudaFree(dRows));
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", p.name, p.major, p.minor, p.multiProcessorCount);
  if (mode == "check") return runCheck();
  if (mode == "bench") return runBench(argc, argv);
  if (mode == "ooc") return runOoc(argc, argv);
  if (mode == "pass") return runPass(argc, argv);
  if (mode == "h2d" && argc > 2 && std::string(argv[2]) == "all") {
    // every device's link at once, one host thread each: the bound of a job on all of them that streams its rows from
    // page-locked host memory (and whether the host's memory keeps up with the links together)
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    std::vector<double> each(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] { each[static_cast<std::size_t>(i)] = h2dBandwidth(i, &ready, n); });
    for (auto& t : threads) t.join();
    double sum = 0;
    for (int i = 0; i < n; ++i) std::printf("device %d: %.1f GB/s\n", i, each[static_cast<std::size_t>(i)]), sum += each[static_cast<std::size_t>(i)];
    std::printf("RESULT_H2D_ALL devices=%d gbps=%.1f\n", n, sum);
    return 0;
  }
  if (mode == "gather") return runGather(argc, argv);
  if (mode == "h2d") {  // the link alone: the bound of a pass that streams rows from pinned host memory
    std::printf("RESULT_H2D gbps=%.1f\n", h2dBandwidth());
    return 0;
  }
  std::fprintf(stderr, "usage: kmbench check | bench [quick|10m|fp16] | ooc [N D K] | pass [N D K f16|f32] | h2d [all] | gather [N B]\n");
  return 2;
}
