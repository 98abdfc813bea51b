// sums_fixed_ab: an experiment, not part of the backend — how fast are per-cluster column sums of fp16 rows as
// 64-bit fixed-point integers (exact, so any order gives the same bits), read in the rows' own order, against the
// shipped path (a sort by label, then gathered rows: `kmbench bench fp16` prints its sums_ms in the same call)?
//
// An fp16 value is an integer multiple of 2⁻²⁴ below 2⁴⁰ of them, so a cluster's column sum is exact in an int64
// while rows × max|x| < 2³⁹. Blocks own 16 columns (a 32-byte piece of each row) of a range of rows; the 8 blocks of
// one range are adjacent in launch order, so a row's 256 bytes pass through L2 once. Each block keeps K × 16 int64
// sums in shared memory (128 KB at K = 1024), adds with shared-memory atomics and folds into the global sums with
// global atomics at the end. Counts and inertia are not computed here.
//
//   sums_fixed_ab [N D K]   (default 10,000,000 128 1024): checks the sums against int64 sums on the host, then times
//   build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 [-DSUMS_SPLIT32=1] cuda/tools/sums_fixed_ab.cu
// Measured on the H200 (2026-11-25), 10M×128×1024: 17.2 ms with 64-bit shared atomics, 3.0 ms with two 32-bit ones,
// against 1.23 ms for the shipped sums in the same call: the shared-memory atomics bound it. Not kept (cuda/NOTES.md).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace {

constexpr int kSliceCols = 16;  // columns a block owns: 32 bytes of each fp16 row
constexpr int kThreads = 512;

// the value of fp16 bits h in units of 2⁻²⁴ (exact)
__host__ __device__ inline long long fixedOf(unsigned short h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const long long m = e == 0 ? f : (static_cast<long long>(1024 | f) << (e - 1));
  return (h & 0x8000) ? -m : m;
}

__global__ void __launch_bounds__(kThreads, 1)
    fixedSumsKernel(const unsigned short* __restrict__ x, long long n, int d, int k, const int* __restrict__ labels,
                    long long rowsPerBlock, unsigned long long* __restrict__ sums) {
  extern __shared__ unsigned long long acc[];  // k × kSliceCols
  const int slice = blockIdx.x;
  for (int i = threadIdx.x; i < k * kSliceCols; i += kThreads) acc[i] = 0;
  __syncthreads();
  const long long r0 = blockIdx.y * rowsPerBlock, r1 = min(n, r0 + rowsPerBlock);
  const int half = threadIdx.x & 1;  // two threads a row, 8 columns (16 bytes) each
#pragma unroll 4
  for (long long r = r0 + (threadIdx.x >> 1); r < r1; r += kThreads / 2) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + r * d + slice * kSliceCols + half * 8));
    const int c = __ldg(labels + r);
    unsigned long long* a = acc + c * kSliceCols + half * 8;
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const unsigned long long f =
          static_cast<unsigned long long>(fixedOf(static_cast<unsigned short>(w[q >> 1] >> (16 * (q & 1)))));
#if SUMS_SPLIT32
      // two 32-bit shared atomics (native) instead of one 64-bit (a CAS loop): the low word's carry goes up with the
      // high word, so the 64-bit total is exact
      unsigned* a32 = reinterpret_cast<unsigned*>(a + q);
      const unsigned lo = static_cast<unsigned>(f), old = atomicAdd(a32, lo);
      const unsigned hi = static_cast<unsigned>(f >> 32) + (old + lo < old ? 1u : 0u);
      if (hi) atomicAdd(a32 + 1, hi);
#else
      atomicAdd(a + q, f);
#endif
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < k * kSliceCols; i += kThreads) {
    const unsigned long long s = acc[i];
    if (s) atomicAdd(sums + static_cast<long long>(i / kSliceCols) * d + slice * kSliceCols + i % kSliceCols, s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long long n = argc > 1 ? std::atoll(argv[1]) : 10000000;
  const int d = argc > 2 ? std::atoi(argv[2]) : 128;
  const int k = argc > 3 ? std::atoi(argv[3]) : 1024;
  if (d % kSliceCols != 0) {
    std::fprintf(stderr, "D must be a multiple of %d here\n", kSliceCols);
    return 2;
  }
  // random finite fp16 values of magnitude 2⁻¹⁰ … 2⁵, both signs (the add's speed does not depend on them)
  std::mt19937_64 rng(7);
  std::vector<unsigned short> hx(static_cast<size_t>(n) * d);
  std::vector<int> hl(n);
  for (size_t i = 0; i < hx.size(); i += 4) {
    const unsigned long long b = rng();
    for (size_t q = 0; q < 4 && i + q < hx.size(); ++q) {
      const unsigned v = static_cast<unsigned>(b >> (16 * q)) & 0xffff;
      hx[i + q] = static_cast<unsigned short>((v & 0x83ff) | ((5 + (v >> 10) % 16) << 10));
    }
  }
  for (auto& l : hl) l = static_cast<int>(rng() % k);
  unsigned short* dx;
  int* dl;
  unsigned long long* ds;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dl, n * 4));
  CK(cudaMalloc(&ds, static_cast<size_t>(k) * d * 8));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dl, hl.data(), n * 4, cudaMemcpyHostToDevice));
  const size_t smem = static_cast<size_t>(k) * kSliceCols * 8;
  CK(cudaFuncSetAttribute(fixedSumsKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int slices = d / kSliceCols;
  const int rowBlocks = std::max(1, sms / slices);
  const long long rowsPerBlock = (n + rowBlocks - 1) / rowBlocks;
  const dim3 grid(slices, rowBlocks);
  auto run = [&] {
    CK(cudaMemsetAsync(ds, 0, static_cast<size_t>(k) * d * 8));
    fixedSumsKernel<<<grid, kThreads, smem>>>(dx, n, d, k, dl, rowsPerBlock, ds);
  };
  run();
  CK(cudaDeviceSynchronize());
  // check: the same sums as int64 on the host, bit for bit
  std::vector<long long> want(static_cast<size_t>(k) * d, 0), got(want.size());
  for (long long r = 0; r < n; ++r)
    for (int j = 0; j < d; ++j) want[static_cast<size_t>(hl[r]) * d + j] += fixedOf(hx[static_cast<size_t>(r) * d + j]);
  CK(cudaMemcpy(got.data(), ds, got.size() * 8, cudaMemcpyDeviceToHost));
  long long bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += want[i] != got[i];
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) run();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  std::printf("RESULT sums_fixed n=%lld d=%d k=%d grid=%dx%d ms=%.3f (%.0f GB/s of rows) mismatches=%lld\n", n, d, k,
              slices, rowBlocks, ms / 10, n * d * 2.0 / (ms / 10 * 1e-3) / 1e9, bad);
  return bad ? 1 : 0;
}
