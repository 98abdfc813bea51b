// Greedy k-means++ as scikit-learn's _kmeans_plusplus: the first center uniformly at random, then for every next
// one 2 + floor(ln k) candidates drawn with probability ∝ D² (the squared distance to the nearest chosen center),
// keeping the candidate that minimizes the potential Σ D². Seeded (splitmix64 → xoshiro256**), multithreaded,
// and the same result for any thread count: potentials are summed per fixed block of rows, blocks in order.
// The distances are small GEMMs (kernels.h dots32x8) on the sample stored once in transposed 32-row blocks.
// Products are fp32 (the kernel's), distances and potentials fp64: the same seed gives the same centers on a
// given instruction set; another CPU may differ in the last bits of a distance and so, rarely, in a choice.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/kernels.h"
#include "engine.h"
#include "kmeans_plusplus_rng.h"
#include "row_math.h"

namespace kmfleet {

namespace {

constexpr std::int64_t kBlock = 4096;

}  // namespace

std::vector<float> kmeansPlusPlus(const float* x, std::int64_t n, std::int64_t D, std::int64_t K, std::uint64_t seed,
                                  ThreadPool& pool, const std::atomic<bool>* cancel) {
  const cpu::KernelTable& kt = cpu::selectKernels();
  const int trials = kmeansPlusPlusTrials(K);
  const std::int64_t nblocks = (n + kBlock - 1) / kBlock;
  std::vector<float> centers(static_cast<std::size_t>(K * D));
  Array<double> xx(static_cast<std::size_t>(n), "the k-means++ sample norms");
  Array<double> closest(static_cast<std::size_t>(n), "the k-means++ distances");
  Array<double> cand(static_cast<std::size_t>(n) * trials, "the k-means++ candidate distances");
  std::vector<double> blockSum(static_cast<std::size_t>(nblocks)), candBlock(static_cast<std::size_t>(nblocks) * trials);
  std::vector<float> candRows(static_cast<std::size_t>(trials * D));
  std::vector<double> candNorm(static_cast<std::size_t>(trials));
  KmeansPlusPlusRng rng(seed);

  auto blocksOf = [&](int tid, int nt, std::int64_t& b0, std::int64_t& b1) { ThreadPool::range(nblocks, tid, nt, 1, b0, b1); };
  // the sample, transposed in blocks of 32 rows (kBlock is a multiple of 32)
  const std::int64_t n32 = (n + 31) / 32;
  Array<float> xT(static_cast<std::size_t>(n32 * 32 * D), "the k-means++ sample (transposed)");
  pool.run([&](int tid, int nt) {
    std::int64_t b0, b1;
    blocksOf(tid, nt, b0, b1);
    for (std::int64_t i = b0 * kBlock; i < std::min(n, b1 * kBlock); ++i) xx[i] = sqNorm64(x + i * D, D);
    for (std::int64_t q = b0 * kBlock / 32; q < std::min(n32, b1 * kBlock / 32); ++q)
      kt.transpose32(x + q * 32 * D, D, static_cast<int>(std::min<std::int64_t>(32, n - q * 32)), D, xT.data() + q * 32 * D);
  });

  // fp32 products are safe unless |x|·|c| approaches FLT_MAX (values ~1e19): then the dots are taken in fp64.
  double maxNorm2 = 0;
  for (std::int64_t i = 0; i < n; ++i) maxNorm2 = std::max(maxNorm2, xx[i]);
  const bool fp32Safe = maxNorm2 < 0x1p124;

  // Distances of every row to `count` candidate rows (packed in groups of 8 in c8), folded with the current closest.
  std::vector<float> c8(static_cast<std::size_t>(((trials + 7) / 8) * 8 * D));
  auto evaluate = [&](int count, double* out, double* blocks, bool fold) {
    const int groups = (count + 7) / 8;
    std::fill(c8.begin(), c8.end(), 0.0f);
    for (int t = 0; t < count; ++t)
      for (std::int64_t d = 0; d < D; ++d) c8[(t / 8) * 8 * D + d * 8 + t % 8] = candRows[t * D + d];
    pool.run([&](int tid, int nt) {
      std::int64_t b0, b1;
      blocksOf(tid, nt, b0, b1);
      alignas(64) float dots[8 * 32];
      double dots64[8 * 32];
      for (std::int64_t b = b0; b < b1; ++b) {
        for (int t = 0; t < count; ++t) blocks[t * nblocks + b] = 0;
        const std::int64_t end = std::min(n, (b + 1) * kBlock);
        for (std::int64_t q0 = b * kBlock; q0 < end; q0 += 32) {
          const int rows = static_cast<int>(std::min<std::int64_t>(32, end - q0));
          for (int g = 0; g < groups; ++g) {
            const int cols = std::min(8, count - g * 8);
            if (fp32Safe) {
              kt.dots32x8(xT.data() + (q0 / 32) * 32 * D, D, c8.data() + g * 8 * D, dots);
            } else {
              for (int j = 0; j < cols; ++j)
                for (int r = 0; r < rows; ++r)
                  dots64[j * 32 + r] = dot64(x + (q0 + r) * D, candRows.data() + (g * 8 + j) * D, D);
            }
            // rows outer, candidates inner: the candidates' running sums are independent chains (each still
            // adds its rows in row order), so the fp64 additions overlap instead of waiting on each other
            double sum[8];
            for (int j = 0; j < cols; ++j) sum[j] = blocks[(g * 8 + j) * nblocks + b];
            for (int r = 0; r < rows; ++r) {
              const std::int64_t i = q0 + r;
              for (int j = 0; j < cols; ++j) {
                const int t = g * 8 + j;
                const double dot = fp32Safe ? static_cast<double>(dots[j * 32 + r]) : dots64[j * 32 + r];
                double d = xx[i] + candNorm[t] - 2.0 * dot;
                if (d < 0) d = 0;
                if (fold && closest[i] < d) d = closest[i];
                out[static_cast<std::size_t>(t) * n + i] = d;
                sum[j] += d;
              }
            }
            for (int j = 0; j < cols; ++j) blocks[(g * 8 + j) * nblocks + b] = sum[j];
          }
        }
      }
    });
  };
  auto setCandidate = [&](int t, std::int64_t row) {
    std::memcpy(candRows.data() + t * D, x + row * D, static_cast<std::size_t>(D) * 4);
    candNorm[t] = xx[row];
  };
  // numpy.searchsorted(cumsum(closest), v) (side left) over the blocked cumulative sum, clipped to n − 1
  auto search = [&](double v) -> std::int64_t {
    double acc = 0;
    for (std::int64_t b = 0; b < nblocks; ++b) {
      if (acc + blockSum[b] >= v) {
        double a = acc;
        for (std::int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
          a += closest[i];
          if (a >= v) return i;
        }
      }
      acc += blockSum[b];
    }
    return n - 1;
  };

  const std::int64_t first = kmeansPlusPlusFirst(rng, n);
  std::memcpy(centers.data(), x + first * D, static_cast<std::size_t>(D) * 4);
  setCandidate(0, first);
  evaluate(1, closest.data(), blockSum.data(), false);
  double pot = 0;
  for (double s : blockSum) pot += s;

  std::vector<std::int64_t> ids(static_cast<std::size_t>(trials));
  std::vector<double> candPot(static_cast<std::size_t>(trials));
  for (std::int64_t c = 1; c < K; ++c) {
    if (cancel && cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    for (int t = 0; t < trials; ++t) {
      ids[t] = search(rng.uniform() * pot);
      setCandidate(t, ids[t]);
    }
    evaluate(trials, cand.data(), candBlock.data(), true);
    int best = 0;
    for (int t = 0; t < trials; ++t) {
      double s = 0;
      for (std::int64_t b = 0; b < nblocks; ++b) s += candBlock[t * nblocks + b];
      candPot[t] = s;
      if (s < candPot[best]) best = t;
    }
    pot = candPot[best];
    std::memcpy(closest.data(), cand.data() + static_cast<std::size_t>(best) * n, static_cast<std::size_t>(n) * 8);
    for (std::int64_t b = 0; b < nblocks; ++b) blockSum[b] = candBlock[best * nblocks + b];
    std::memcpy(centers.data() + c * D, x + ids[best] * D, static_cast<std::size_t>(D) * 4);
  }
  return centers;
}

}  // namespace kmfleet
