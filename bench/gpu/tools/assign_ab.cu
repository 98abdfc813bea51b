// assign_ab: the Hopper assignment kernel (assign_wgmma.cu) against the portable one (assign.cu) and a
// float64 reference, then both timed on the same operands.
//
//   assign_ab check        awkward shapes: labels vs fp64 (sampled rows) and vs the portable kernel
//   assign_ab bench [N D K ...]   ms and TFLOP/s of each kernel (default: the shapes of bench/RESULTS.md)
//
// Operands are drawn directly as 16-bit values (rows and centroids with a per-row power-of-two scale of 1), so the
// compared quantity is d' = ½‖c‖² − x·c with ‖c‖² in fp32 — what both kernels see in the engine.
// A label differing from the fp64 argmin is accepted only when its fp64 d' is within the fp32-accumulation
// tolerance of the best (a near tie); anything else is a failure. Build: scripts/gpu-pack.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/assign.cuh"
#include "kernels/assign_wgmma.cuh"
#include "cuda_check.h"

using namespace kmfleet::cuda;


namespace {

float toF(unsigned short v) {
  return __half2float(__ushort_as_half(v));
}

struct Case {
  long long n;
  int d, k;
  int blobs;  // 0: normal random rows; else rows near `blobs` centroids (many near ties avoided, realistic)
};

__device__ float hashNormal(unsigned long long i, unsigned seed) {  // Box-Muller over a splitmix64 hash
  unsigned long long z = i * 0x9e3779b97f4a7c15ULL + seed * 0xbf58476d1ce4e5b9ULL + 0x94d049bb133111ebULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const float u1 = ((z >> 40) + 1) * (1.0f / 16777217.0f), u2 = ((z >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
__device__ unsigned short dFromF(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
__device__ float dToF(unsigned short v) {
  return __half2float(__ushort_as_half(v));
}
// centroids: N(0,1) values, zero padding; cnorm = fp32(fp64 ‖c‖²), +inf for the padding centroids
__global__ void fillCentroids(unsigned short* b, float* cnorm, int k, int kp, int d, int dp, unsigned seed) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= kp) return;
  double s = 0;
  for (int t = 0; t < dp; ++t) {
    unsigned short v = 0;
    if (j < k && t < d) v = dFromF(hashNormal(static_cast<unsigned long long>(j) * dp + t, seed));
    b[static_cast<size_t>(j) * dp + t] = v;
    const double f = dToF(v);
    s += f * f;
  }
  cnorm[j] = j < k ? static_cast<float>(s) : INFINITY;
}
// rows: N(0,1), or a centroid plus 0.3·N(0,1) when blobs (the centroid drawn by hash); scale 1
__global__ void fillRows(unsigned short* a, const unsigned short* b, float* scale, long long n, int d, int dp, int k,
                         int blobs, unsigned seed) {
  const long long r = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const int near = blobs ? static_cast<int>((r * 2654435761ULL + seed) % static_cast<unsigned long long>(k)) : -1;
  for (int t = 0; t < dp; ++t) {
    unsigned short v = 0;
    if (t < d) {
      const float noise = hashNormal(static_cast<unsigned long long>(r) * dp + t, seed);
      v = near >= 0 ? dFromF(dToF(b[static_cast<size_t>(near) * dp + t]) + 0.3f * noise) : dFromF(noise);
    }
    a[static_cast<size_t>(r) * dp + t] = v;
  }
  scale[r] = 1.f;
}

struct Operands {
  long long n = 0;
  int d = 0, k = 0, dp = 0, kp = 0;
  std::vector<unsigned short> a, b;  // n×dp, kp×dp
  std::vector<float> cnorm;          // kp
  unsigned short *da = nullptr, *db = nullptr;
  float *dcn = nullptr, *dscale = nullptr;
  int *labH = nullptr, *labM = nullptr;

  void make(const Case& c, unsigned seed, bool keepHost) {
    n = c.n; d = c.d; k = c.k;
    dp = static_cast<int>(padDims(d));
    kp = static_cast<int>(padCentroids(k));
    CK(cudaMalloc(&da, static_cast<size_t>(n) * dp * 2));
    CK(cudaMalloc(&db, static_cast<size_t>(kp) * dp * 2));
    CK(cudaMalloc(&dcn, sizeof(float) * kp));
    CK(cudaMalloc(&dscale, sizeof(float) * n));
    CK(cudaMalloc(&labH, sizeof(int) * n));
    CK(cudaMalloc(&labM, sizeof(int) * n));
    fillCentroids<<<(kp + 127) / 128, 128>>>(db, dcn, k, kp, d, dp, seed);
    fillRows<<<static_cast<unsigned>((n + 127) / 128), 128>>>(da, db, dscale, n, d, dp, k, c.blobs, seed + 1);
    CK(cudaGetLastError());
    CK(cudaMemset(labH, 0xff, sizeof(int) * n));  // poisoned: every row must be written
    CK(cudaMemset(labM, 0xff, sizeof(int) * n));
    CK(cudaDeviceSynchronize());
    cnorm.resize(kp);
    CK(cudaMemcpy(cnorm.data(), dcn, sizeof(float) * kp, cudaMemcpyDeviceToHost));
    if (keepHost) {
      a.resize(static_cast<size_t>(n) * dp);
      b.resize(static_cast<size_t>(kp) * dp);
      CK(cudaMemcpy(a.data(), da, a.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), db, b.size() * 2, cudaMemcpyDeviceToHost));
    }
  }
  RowOps rows() const {
    RowOps r;
    r.ahi = da;
    r.rowScale = dscale;
    return r;
  }
  CentroidOps cents() const {
    CentroidOps c;
    c.bhi = db;
    c.cnorm = dcn;
    c.scale = 1.f;
    return c;
  }
  OpKind op() const { return OpKind::F16x1; }
  bool runHopper() {
    return assignRowsHopper(rows(), n, d, cents(), k, op(), labH, nullptr, nullptr, nullptr, ExactBound{}, ExactScreen{}, 0);
  }
  void runPortable() {
    assignRows(AssignKernel{true, 0}, rows(), n, d, cents(), k, op(), labM, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  }
  // fp64 d' of row r to centroid j
  double dprime(long long r, int j) const {
    double dot = 0;
    for (int t = 0; t < d; ++t)
      dot += static_cast<double>(toF(a[static_cast<size_t>(r) * dp + t])) * toF(b[static_cast<size_t>(j) * dp + t]);
    return 0.5 * cnorm[j] - dot;
  }
  double tolerance(long long r) const {  // fp32 accumulation of d products of magnitude ≤ |x||c|, plus ‖c‖² rounding
    double xn = 0;
    for (int t = 0; t < d; ++t) {
      const double f = toF(a[static_cast<size_t>(r) * dp + t]);
      xn += f * f;
    }
    double cmax = 0;
    for (int j = 0; j < k; ++j) cmax = std::fmax(cmax, cnorm[j]);
    return (d / 16.0 + 4) * std::ldexp(1.0, -22) * (std::sqrt(xn * cmax) + cmax);
  }
  void release() {
    cudaFree(da); cudaFree(db); cudaFree(dcn); cudaFree(dscale); cudaFree(labH); cudaFree(labM);
  }
};

int checkCase(const Case& c) {
  Operands o;
  o.make(c, 1234u + static_cast<unsigned>(c.n * 31 + c.d * 7 + c.k), true);
  if (!o.runHopper()) {
    std::printf("check n=%lld d=%d k=%d: Hopper path declined\n", c.n, c.d, c.k);
    o.release();
    return 1;
  }
  CK(cudaGetLastError());
  o.runPortable();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<int> h(c.n), m(c.n);
  CK(cudaMemcpy(h.data(), o.labH, sizeof(int) * c.n, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(m.data(), o.labM, sizeof(int) * c.n, cudaMemcpyDeviceToHost));
  long long bad = 0, diffPortable = 0, nearTies = 0, checked = 0;
  const long long step = std::max(1LL, c.n * static_cast<long long>(c.k) / 20000000);  // ≤ ~2e7 fp64 distances
  for (long long r = 0; r < c.n; ++r) {
    if (h[r] < 0 || h[r] >= c.k) { ++bad; continue; }  // unwritten or out of range
    const bool differs = h[r] != m[r];
    diffPortable += differs;
    if (!differs && r % step != 0) continue;
    ++checked;
    int best = 0;
    double bd = o.dprime(r, 0);
    for (int j = 1; j < c.k; ++j) {
      const double v = o.dprime(r, j);
      if (v < bd) bd = v, best = j;
    }
    if (h[r] != best) {
      const double gap = o.dprime(r, h[r]) - bd;
      if (gap <= o.tolerance(r)) ++nearTies;
      else ++bad;
    }
  }
  std::printf("check n=%lld d=%d k=%d%s: %s (checked %lld rows vs fp64, %lld near ties, %lld differ from portable)\n",
              c.n, c.d, c.k, c.blobs ? " blobs" : "", bad ? "FAIL" : "ok", checked, nearTies,
              diffPortable);
  o.release();
  return bad ? 1 : 0;
}

float timeMs(const std::function<void()>& f, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  f();  // warm-up
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaGetLastError());
  return ms / reps;
}

void benchCase(const Case& c) {
  Operands o;
  o.make(c, 99u, false);
  const float h = timeMs([&] { o.runHopper(); }, 10);
  const float m = timeMs([&] { o.runPortable(); }, 10);
  const double flop = 2.0 * c.n * c.k * c.d;
  std::printf("RESULT assign n=%lld d=%d k=%d fp16 hopper_ms=%.3f (%.0f TFLOP/s) portable_ms=%.3f (%.0f TFLOP/s) speedup=%.2fx\n",
              c.n, c.d, c.k, h, flop / h / 1e9, m, flop / m / 1e9, m / h);
  std::fflush(stdout);
  o.release();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") {
    const Case cases[] = {{3001, 1, 7, 0},      {5003, 3, 129, 0},   {4099, 17, 1, 0},
                          {10007, 64, 1000, 8}, {20011, 100, 7, 0},   {6007, 128, 1000, 0},
                          {70001, 128, 1024, 16}, {50021, 192, 300, 0}, {30011, 256, 4096, 0},
                          {1031, 256, 129, 0},   {257, 128, 257, 0},  {65537, 8, 65536, 0}};
    int fails = 0;
    for (const Case& c : cases) fails += checkCase(c);
    std::printf("assign_ab check: %d failure(s)\n", fails);
    return fails ? 1 : 0;
  }
  if (mode == "bench") {
    if (argc >= 5) {
      for (int i = 2; i + 2 < argc; i += 3)
        benchCase({std::atoll(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), 0});
      return 0;
    }
    benchCase({10000000, 128, 1024, 0});
    benchCase({8000000, 128, 1024, 0});
    benchCase({1000000, 256, 4096, 0});
    return 0;
  }
  std::fprintf(stderr, "usage: assign_ab check | bench [N D K ...]\n");
  return 2;
}
