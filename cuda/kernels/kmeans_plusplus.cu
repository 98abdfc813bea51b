// Greedy k-means++ on the GPU: the CPU version's algorithm (native/src/kmeans_plusplus.cpp, scikit-learn's
// _kmeans_plusplus) and its seeded draws (kmeans_plusplus_rng.h), for an engine whose backend is CUDA.
//
// Per center, three kernels on one stream and no host wait:
//   draw       one block per candidate: v = u·pot, the row where the cumulative D² first reaches v (the blocked
//              prefix of the potential picks the 128-row block, a block scan the row) → ids[t]
//   distances  every row's Σ(x − c_t)² to each candidate, folded with D² (min), written per candidate, and the
//              partial potential of every 128-row block in a fixed order
//   choose     one block: each candidate's potential (fixed-order sums of the partials), the first minimum wins;
//              its partials become the blocked prefix of the next draw, its distances the next D²
// The host only queues kernels and uploads the uniforms in batches (the same stream the CPU draws, in the same
// order); it waits for the batch before last, which bounds how far it runs ahead and so how late a cancel lands.
//
// Numerics: distances Σ(x − c)² directly (not ‖x‖² − 2x·c + ‖c‖²), fp32 inside a 32-column tile, fp64 across tiles
// and in every potential; a duplicate of a chosen row has D² exactly 0 and is never drawn again. Data with
// |x| ≥ 2^60 (where a tile of squares could overflow fp32) takes the same kernel in fp64. No float atomics: the
// same seed gives bitwise the same centers run to run. The CPU's products differ in the last bits, so the two
// versions draw the same first center and then the same sequence until a draw lands within rounding of a
// boundary between rows; both are k-means++ with the same quality.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda_bridge.h"
#include "kmeans_plusplus_rng.h"

namespace kmfleet {
namespace {

constexpr int kRows = 128;            // rows per distance block = rows per partial potential = rows per draw step
constexpr int kCols = 32;             // columns per shared-memory tile
constexpr int kChooseThreads = 512;   // the one block of the choose kernel
constexpr int kBatch = 64;            // centers per upload of uniforms
constexpr int kMaxTrials = 24;        // 2 + floor(ln k) for any k < 2^31

struct MinOp {
  __device__ int operator()(int a, int b) const { return b < a ? b : a; }
};

__device__ inline float fmaT(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline double fmaT(double a, double b, double c) { return fma(a, b, c); }

// max |x| over the sample (exact: max is order-independent, so the atomic keeps the result deterministic)
__global__ void maxAbsKernel(const float* x, long long count, unsigned* out) {
  float m = 0;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(x[i]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(out, __float_as_uint(m));  // non-negative floats order as their bits
}

// cp.async (sm_80+): 4 bytes global → shared without a register; src-size 0 writes a zero and reads nothing.
__device__ inline void copyAsync4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(valid ? 4 : 0));
}
__device__ inline void copyCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ inline void copyWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory"); }

// D² of every row to `count` candidates (rows ids[0..count)), folded with the current D² (cand + best·n) when
// best is given. Row i is read and written by one thread only, so the candidates' distances may overwrite the
// previous D² in place. blockSums[t·nb + b]: Σ over block b's rows, in a fixed order.
// Tiles of 32 columns (rows and candidates) are double-buffered in shared memory with cp.async: the next tile is
// in flight while the current one is computed, so a block waits for memory once, not once per tile.
template <int MaxT, typename Acc>
__global__ void __launch_bounds__(kRows, MaxT > 16 ? 2 : 4)
    distanceKernel(const float* __restrict__ x, long long n, int D, const long long* __restrict__ ids, int count,
                   const int* best, double* cand, double* blockSums, int nb) {
  __shared__ float xs[2][kRows][kCols + 1];
  __shared__ __align__(16) float cs[2][kCols][MaxT];
  __shared__ long long sid[MaxT];
  __shared__ double ws[kRows / 32][MaxT];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const long long r0 = static_cast<long long>(blockIdx.x) * kRows, i = r0 + tid;
  if (tid < MaxT) sid[tid] = tid < count ? ids[tid] : 0;
  __syncthreads();
  // this thread copies rows warp + 4j of the tile at column lane, and candidate values tid + 128j
  auto issue = [&](int buf, int d0) {
    const bool colOk = d0 + lane < D;
#pragma unroll 1
    for (int j = 0; j < kRows / 4; ++j) {
      const long long gi = r0 + warp + 4 * j;
      const bool ok = colOk && gi < n;
      copyAsync4(&xs[buf][warp + 4 * j][lane], ok ? x + gi * D + d0 + lane : x, ok);
    }
#pragma unroll 1
    for (int e = tid; e < kCols * MaxT; e += kRows) {
      const int t = e / kCols, c = e % kCols;
      const bool ok = t < count && d0 + c < D;
      copyAsync4(&cs[buf][c][t], ok ? x + sid[t] * D + d0 + c : x, ok);
    }
    copyCommit();
  };
  double tot[MaxT];
#pragma unroll
  for (int t = 0; t < MaxT; ++t) tot[t] = 0;

  issue(0, 0);
  int buf = 0;
  for (int d0 = 0; d0 < D; d0 += kCols, buf ^= 1) {
    if (d0 + kCols < D) {
      issue(buf ^ 1, d0 + kCols);  // that buffer was last read before the previous iteration's closing barrier
      copyWait<1>();
    } else {
      copyWait<0>();
    }
    __syncthreads();  // every thread's copies of this tile have landed
    Acc part[MaxT];
#pragma unroll
    for (int t = 0; t < MaxT; ++t) part[t] = 0;
#pragma unroll 4
    for (int c = 0; c < kCols; ++c) {  // padding columns are 0 in both: they add nothing
      const Acc xv = xs[buf][tid][c];
#pragma unroll
      for (int t = 0; t < MaxT; ++t) {
        const Acc diff = xv - static_cast<Acc>(cs[buf][c][t]);
        part[t] = fmaT(diff, diff, part[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < MaxT; ++t) tot[t] += static_cast<double>(part[t]);
    __syncthreads();  // done reading this buffer before the next iteration's copies overwrite it
  }

  const double closest = best && i < n ? cand[static_cast<long long>(*best) * n + i] : 0.0;
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    double d = tot[t];
    if (best && closest < d) d = closest;
    if (i >= n || t >= count) d = 0;
    else cand[t * n + i] = d;
    tot[t] = d;
  }
  // block partials: a fixed shuffle tree per warp, then the warps in order
#pragma unroll
  for (int t = 0; t < MaxT; ++t) {
    double s = tot[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) ws[warp][t] = s;
  }
  __syncthreads();
  if (tid < count) {
    double s = ws[0][tid];
    for (int w = 1; w < kRows / 32; ++w) s += ws[w][tid];
    blockSums[static_cast<long long>(tid) * nb + blockIdx.x] = s;
  }
}

// One block per candidate t: v = u[t]·pot and the first row whose cumulative D² reaches v (numpy.searchsorted,
// side left, over the blocked prefix), n − 1 when rounding leaves none.
__global__ void __launch_bounds__(kRows) drawKernel(const double* u, const double* prefix, int nb, const double* cand,
                                                    const int* best, long long n, long long* ids) {
  using IntReduce = cub::BlockReduce<int, kRows>;
  using Scan = cub::BlockScan<double, kRows>;
  __shared__ union {
    typename IntReduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ int shared;
  const int tid = threadIdx.x;
  const double v = u[blockIdx.x] * prefix[nb - 1];
  int below = 0;  // blocks whose inclusive prefix is < v: the prefix is non-decreasing, so this is the first block ≥ v
  for (int b = tid; b < nb; b += kRows) below += prefix[b] < v;
  below = IntReduce(tmp.reduce).Sum(below);
  if (tid == 0) shared = below;
  __syncthreads();
  const double* closest = cand + static_cast<long long>(*best) * n;
  long long found = n - 1;
  for (int b = shared; b < nb; ++b) {
    __syncthreads();  // tmp and shared reused
    const long long i = static_cast<long long>(b) * kRows + tid;
    double a = i < n ? closest[i] : 0.0;
    Scan(tmp.scan).InclusiveSum(a, a);
    a += b ? prefix[b - 1] : 0.0;
    __syncthreads();
    const int first = IntReduce(tmp.reduce).Reduce(i < n && a >= v ? tid : kRows, MinOp());
    if (tid == 0) shared = first;
    __syncthreads();
    if (shared < kRows) {
      found = static_cast<long long>(b) * kRows + shared;
      break;
    }
  }
  if (tid == 0) ids[blockIdx.x] = found;
}

// The candidates' potentials (one warp per candidate: lanes add strided partials in order, then a fixed shuffle
// tree), the first minimum, and the inclusive prefix of its partials for the next draw. chosen[0] = the winner's row.
__global__ void __launch_bounds__(kChooseThreads) chooseKernel(const double* blockSums, int nb, int count,
                                                               const long long* ids, int* best, long long* chosen,
                                                               double* prefix) {
  using Scan = cub::BlockScan<double, kChooseThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ double pot[kMaxTrials];
  __shared__ int bestT;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int t = warp; t < count; t += kChooseThreads / 32) {
    const double* bs = blockSums + static_cast<long long>(t) * nb;
    double s = 0;
    for (int b = lane; b < nb; b += 32) s += bs[b];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) pot[t] = s;
  }
  __syncthreads();
  if (tid == 0) {
    int bt = 0;
    for (int t = 1; t < count; ++t)
      if (pot[t] < pot[bt]) bt = t;
    bestT = bt;
  }
  __syncthreads();
  const double* bs = blockSums + static_cast<long long>(bestT) * nb;
  const int seg = (nb + kChooseThreads - 1) / kChooseThreads;
  const int b0 = min(nb, tid * seg), b1 = min(nb, b0 + seg);
  double local = 0;
  for (int b = b0; b < b1; ++b) local += bs[b];
  double a;
  Scan(scan).ExclusiveSum(local, a);
  for (int b = b0; b < b1; ++b) {
    a += bs[b];
    prefix[b] = a;
  }
  if (tid == 0) {
    *best = bestT;
    chosen[0] = ids[bestT];
  }
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    throw EngineError(ErrorCode::OutOfMemory, std::string("CUDA out of memory in k-means++ (") + what + ")");
  throw EngineError(ErrorCode::Device, std::string("CUDA error in k-means++ (") + what + "): " + cudaGetErrorString(e));
}

// Device and pinned memory, the stream and events of one run; the destructor waits for the stream first, so a
// throw (cancel, error) never frees memory a queued kernel still uses.
class Resources {
 public:
  Resources() { check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Resources() {
    cudaStreamSynchronize(stream);
    for (void* p : device_) cudaFree(p);
    for (void* p : pinned_) cudaFreeHost(p);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
    cudaGetLastError();
  }
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  template <typename T>
  T* device(std::size_t count, const char* what) {
    void* p = nullptr;
    const std::size_t bytes = (count ? count : 1) * sizeof(T);
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      std::size_t freeB = 0, totalB = 0;
      cudaMemGetInfo(&freeB, &totalB);
      throw EngineError(ErrorCode::OutOfMemory, "CUDA: cannot allocate " + std::to_string(bytes >> 20) + " MiB for " +
                                                    what + " (" + std::to_string(freeB >> 20) + " MiB free of " +
                                                    std::to_string(totalB >> 20) + ")");
    }
    device_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* pinned(std::size_t count, const char* what) {
    void* p = nullptr;
    const std::size_t bytes = (count ? count : 1) * sizeof(T);
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      throw EngineError(ErrorCode::OutOfMemory, "cannot allocate " + std::to_string(bytes) +
                                                    " bytes of pinned host memory for " + what);
    }
    pinned_.push_back(p);
    return static_cast<T*>(p);
  }
  cudaEvent_t event() {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    events_.push_back(e);
    return e;
  }

  cudaStream_t stream = nullptr;

 private:
  std::vector<void*> device_, pinned_;
  std::vector<cudaEvent_t> events_;
};

template <int MaxT>
void launchDistances(bool fp64, const float* x, long long n, int D, const long long* ids, int count, const int* best,
                     double* cand, double* blockSums, int nb, cudaStream_t s) {
  if (fp64)
    distanceKernel<MaxT, double><<<nb, kRows, 0, s>>>(x, n, D, ids, count, best, cand, blockSums, nb);
  else
    distanceKernel<MaxT, float><<<nb, kRows, 0, s>>>(x, n, D, ids, count, best, cand, blockSums, nb);
}

void distances(bool fp64, const float* x, long long n, int D, const long long* ids, int count, const int* best,
               double* cand, double* blockSums, int nb, cudaStream_t s) {
  if (count <= 4) launchDistances<4>(fp64, x, n, D, ids, count, best, cand, blockSums, nb, s);
  else if (count <= 8) launchDistances<8>(fp64, x, n, D, ids, count, best, cand, blockSums, nb, s);
  else if (count <= 16) launchDistances<16>(fp64, x, n, D, ids, count, best, cand, blockSums, nb, s);
  else launchDistances<kMaxTrials>(fp64, x, n, D, ids, count, best, cand, blockSums, nb, s);
}

}  // namespace

std::vector<float> cudaKmeansPlusPlus(const float* sample, std::int64_t n, std::int64_t D, std::int64_t K,
                                      std::uint64_t seed, int device, const std::atomic<bool>* cancel) {
  auto cancelled = [&] { return cancel && cancel->load(); };
  if (cancelled()) throw EngineError(ErrorCode::Cancelled, "cancelled");
  KmeansPlusPlusRng rng(seed);
  const int trials = kmeansPlusPlusTrials(K);
  const std::int64_t first = kmeansPlusPlusFirst(rng, n);
  std::vector<float> centers(static_cast<std::size_t>(K * D));
  std::memcpy(centers.data(), sample + first * D, static_cast<std::size_t>(D) * 4);
  if (K == 1) return centers;  // the first center is the host's draw: nothing for the device to do
  if (trials > kMaxTrials || D > (1 << 24) || (n + kRows - 1) / kRows > 0x7fffffff)
    throw EngineError(ErrorCode::InvalidArgument, "k-means++ on the GPU: k, dims or sample rows out of range");
  const int nb = static_cast<int>((n + kRows - 1) / kRows), d = static_cast<int>(D);

  check(cudaSetDevice(device), "cudaSetDevice");
  Resources res;
  const cudaStream_t s = res.stream;
  float* x = res.device<float>(static_cast<std::size_t>(n * D), "the k-means++ sample");
  double* cand = res.device<double>(static_cast<std::size_t>(n) * trials, "the k-means++ candidate distances");
  double* blockSums = res.device<double>(static_cast<std::size_t>(nb) * trials, "the k-means++ block potentials");
  double* prefix = res.device<double>(static_cast<std::size_t>(nb), "the k-means++ prefix");
  long long* chosen = res.device<long long>(static_cast<std::size_t>(K), "the k-means++ centers");
  long long* ids = res.device<long long>(kMaxTrials, "the k-means++ candidates");
  int* best = res.device<int>(1, "the k-means++ choice");
  unsigned* maxAbs = res.device<unsigned>(1, "the k-means++ range");
  double* uDev = res.device<double>(2 * kBatch * static_cast<std::size_t>(trials), "the k-means++ draws");
  double* uHost = res.pinned<double>(2 * kBatch * static_cast<std::size_t>(trials), "the k-means++ draws");
  long long* firstHost = res.pinned<long long>(1, "the k-means++ first center");
  unsigned* maxAbsHost = res.pinned<unsigned>(1, "the k-means++ range");
  const cudaEvent_t batchDone[2] = {res.event(), res.event()};

  check(cudaMemcpyAsync(x, sample, sizeof(float) * static_cast<std::size_t>(n * D), cudaMemcpyHostToDevice, s), "H2D");
  check(cudaMemsetAsync(maxAbs, 0, sizeof(unsigned), s), "memset");
  maxAbsKernel<<<static_cast<unsigned>(std::min<long long>(1024, (n * D + 255) / 256)), 256, 0, s>>>(x, n * D, maxAbs);
  check(cudaGetLastError(), "max |x|");
  check(cudaMemcpyAsync(maxAbsHost, maxAbs, sizeof(unsigned), cudaMemcpyDeviceToHost, s), "D2H");
  *firstHost = first;
  check(cudaMemcpyAsync(ids, firstHost, sizeof(long long), cudaMemcpyHostToDevice, s), "H2D");
  check(cudaStreamSynchronize(s), "the k-means++ sample upload");
  float m;
  std::memcpy(&m, maxAbsHost, sizeof m);
  const bool fp64 = !(m < 0x1p60f);  // below 2^60 a tile of 32 squared fp32 differences stays under FLT_MAX

  // the first center: D² of every row to it, no fold
  distances(fp64, x, n, d, ids, 1, nullptr, cand, blockSums, nb, s);
  chooseKernel<<<1, kChooseThreads, 0, s>>>(blockSums, nb, 1, ids, best, chosen, prefix);
  check(cudaGetLastError(), "k-means++ first center");

  for (std::int64_t c = 1; c < K; ++c) {
    const std::int64_t batch = (c - 1) / kBatch, round = (c - 1) % kBatch;
    const int half = static_cast<int>(batch % 2);
    double* uh = uHost + static_cast<std::size_t>(half) * kBatch * trials;
    double* ud = uDev + static_cast<std::size_t>(half) * kBatch * trials;
    if (round == 0) {
      // this half was last read by batch − 2: wait for it (also bounds how far the host runs ahead)
      if (batch >= 2) check(cudaEventSynchronize(batchDone[half]), "k-means++");
      if (cancelled()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t rounds = std::min<std::int64_t>(kBatch, K - c);
      for (std::int64_t j = 0; j < rounds * trials; ++j) uh[j] = rng.uniform();
      check(cudaMemcpyAsync(ud, uh, sizeof(double) * static_cast<std::size_t>(rounds * trials), cudaMemcpyHostToDevice,
                            s), "H2D");
    }
    if (cancelled()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    drawKernel<<<trials, kRows, 0, s>>>(ud + round * trials, prefix, nb, cand, best, n, ids);
    distances(fp64, x, n, d, ids, trials, best, cand, blockSums, nb, s);
    chooseKernel<<<1, kChooseThreads, 0, s>>>(blockSums, nb, trials, ids, best, chosen + c, prefix);
    check(cudaGetLastError(), "k-means++ kernels");
    if (round == kBatch - 1 || c == K - 1) check(cudaEventRecord(batchDone[half], s), "cudaEventRecord");
  }
  std::vector<long long> rows(static_cast<std::size_t>(K));
  check(cudaMemcpyAsync(rows.data(), chosen, sizeof(long long) * static_cast<std::size_t>(K), cudaMemcpyDeviceToHost, s),
        "D2H");
  check(cudaStreamSynchronize(s), "k-means++");
  if (cancelled()) throw EngineError(ErrorCode::Cancelled, "cancelled");
  for (std::int64_t c = 1; c < K; ++c) {
    const long long r = rows[static_cast<std::size_t>(c)];
    if (r < 0 || r >= n) throw EngineError(ErrorCode::Device, "k-means++ on the GPU chose row " + std::to_string(r));
    std::memcpy(centers.data() + c * D, sample + r * D, static_cast<std::size_t>(D) * 4);
  }
  return centers;
}

}  // namespace kmfleet
