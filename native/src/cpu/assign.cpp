// Exact assignment on the CPU: a fast fp32 kernel for every row, and an fp64 recheck for the rows whose two best
// fp32 values are too close to trust (DESIGN.md "Numerics": fp32 is exact).
//
// Error bound. The kernel computes f_k = fl(ĉ_k − 2·s_k) where ĉ_k = fl32(‖c_k‖²) and s_k = Σ_d x_d·c_kd is summed
// sequentially in fp32 (one FMA, or a product and a sum, per step). With u = 2^-24 and γ_D = D·u/(1 − D·u):
//   |s_k − x·c_k| ≤ γ_D Σ_d |x_d c_kd| ≤ γ_D ‖x‖ ‖c_k‖                     (recursive summation; Cauchy–Schwarz)
//   |ĉ_k − ‖c_k‖²| ≤ u ‖c_k‖²                                             (‖c‖² is summed in fp64, then rounded)
//   |f_k − (ĉ_k − 2 s_k)| ≤ u |ĉ_k − 2 s_k| ≤ u (1+u)(‖c_k‖² + 2(1+γ_D)‖x‖‖c_k‖)   (the last subtraction)
// so with g_k = ‖c_k‖² − 2 x·c_k (the exact distance minus ‖x‖², which does not change the argmin)
//   |f_k − g_k| ≤ (2γ_D + 3u)(‖c‖²max + 2‖x‖‖c‖max) · (1 + O(u)) =: ε,
// and 2γ_D + 3u ≤ (D+4)·u for D·u ≤ 1/4 up to the (D·u)² term that the 1.01 factor covers (D ≤ 10^5); we take
// the larger of the two forms. If the fp32 runner-up f2 exceeds the fp32 best f1 by more than 2ε, then for every
// other k: g_k ≥ f_k − ε ≥ f2 − ε > f1 + ε ≥ g_best, i.e. the fp32 label is the exact argmin. Otherwise the row is
// rechecked: its fp32 values are recomputed (same bound), every centroid with f_k ≤ f1 + 2ε is a candidate (the
// others are provably worse), and the candidates are compared by Σ(x − c)² in fp64 (row_math.h, fixed order),
// the lowest index winning ties. Rows whose values could overflow fp32 (|x|, |c| ~ 1e19) are decided in fp64 among
// all centroids; an absolute term covers gradual underflow (|x|, |c| ~ 1e-20). Labels therefore equal the exact-arithmetic argmin up to fp64 rounding (~1e-15
// relative), far inside DESIGN.md's 1e-6, and do not depend on the CPU's instruction set.
#include <cmath>
#include <limits>

#include "../row_math.h"
#include "cpu_internal.h"

namespace kmfleet {
namespace cpu {

void CentroidPack::build(const float* centroids, std::int64_t k, std::int64_t d, const KernelTable& kt) {
  c = centroids;
  K = k;
  D = d;
  kpad = (K + kt.nr - 1) / kt.nr * kt.nr;
  panels.allocate(static_cast<std::size_t>(kpad * D), "the packed centroids");
  cnorm.allocate(static_cast<std::size_t>(kpad), "the centroid norms");
  cc64.allocate(static_cast<std::size_t>(K), "the centroid norms");
  cnMax = 0;
  for (std::int64_t p = 0; p < kpad / kt.nr; ++p) {
    float* panel = panels.data() + p * D * kt.nr;
    for (int j = 0; j < kt.nr; ++j) {
      const std::int64_t kk = p * kt.nr + j;
      if (kk < K) {
        const float* ck = c + kk * D;
        for (std::int64_t dd = 0; dd < D; ++dd) panel[dd * kt.nr + j] = ck[dd];
        const double n2 = sqNorm64(ck, D);
        cc64[kk] = n2;
        cnorm[kk] = static_cast<float>(n2);
        if (n2 > cnMax) cnMax = n2;
      } else {
        for (std::int64_t dd = 0; dd < D; ++dd) panel[dd * kt.nr + j] = 0.0f;
        cnorm[kk] = std::numeric_limits<float>::infinity();
      }
    }
  }
  cMax = std::sqrt(cnMax);
}

namespace {

double epsilonFactor(std::int64_t D) {
  const double u = std::ldexp(1.0, -24);
  const double Du = static_cast<double>(D) * u;
  const double gamma = Du < 0.5 ? Du / (1.0 - Du) : 1.0;
  const double a = (static_cast<double>(D) + 4.0) * u, b = 2.0 * gamma + 3.0 * u;
  return (a > b ? a : b) * 1.01;
}

// inRange: the row's fp32 values cannot overflow (see assignRows); otherwise fp64 decides among all centroids.
std::int32_t recheck(const KernelTable& kt, const CentroidPack& pack, const float* x, double eps, bool inRange,
                     float* tmp) {
  double f1 = std::numeric_limits<double>::infinity();
  if (inRange) {
    kt.rowDistances(x, pack.D, pack.panels.data(), pack.cnorm.data(), pack.kpad, tmp);
    for (std::int64_t k = 0; k < pack.K; ++k)
      if (tmp[k] < f1) f1 = tmp[k];
  }
  const bool all = !std::isfinite(f1);
  const double limit = f1 + 2.0 * eps;
  double best = std::numeric_limits<double>::infinity();
  std::int32_t label = 0;
  for (std::int64_t k = 0; k < pack.K; ++k) {
    if (!all && !(static_cast<double>(tmp[k]) <= limit)) continue;
    const double g = sqDist64(x, pack.c + k * pack.D, pack.D);
    if (g < best) {
      best = g;
      label = static_cast<std::int32_t>(k);
    }
  }
  return label;
}

}  // namespace

std::int64_t assignRows(const KernelTable& kt, ThreadPool& pool, std::vector<AssignScratch>& scratch,
                        const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n,
                        std::int32_t* best, float* d1, float* d2, std::int32_t* labels) {
  const double factor = epsilonFactor(pack.D);
  const double tiny = std::ldexp(static_cast<double>(pack.D + 4), -146);
  std::vector<std::int64_t> rechecked(static_cast<std::size_t>(pool.size()), 0);
  pool.run([&](int tid, int nt) {
    std::int64_t b, e;
    ThreadPool::range(n, tid, nt, kt.mr, b, e);
    if (b >= e) return;
    AssignTask task;
    task.x = x + b * pack.D;
    task.ld = pack.D;
    task.n = e - b;
    task.D = pack.D;
    task.panels = pack.panels.data();
    task.cnorm = pack.cnorm.data();
    task.kpad = pack.kpad;
    task.scratch = scratch[tid].kernel.data();
    task.best = best + b;
    task.d1 = d1 + b;
    task.d2 = d2 + b;
    kt.assign(task);
    std::int64_t count = 0;
    for (std::int64_t r = b; r < e; ++r) {
      // + an absolute term for gradual underflow (each fp32 operation may also lose up to 2^-150 absolutely)
      const double eps = factor * (pack.cnMax + 2.0 * std::sqrt(norm2[r]) * pack.cMax) + tiny;
      const double gap = static_cast<double>(d2[r]) - static_cast<double>(d1[r]);
      // The bound assumes no fp32 overflow: every |value| ≤ ‖c‖²max + 2‖x‖‖c‖max must stay well below FLT_MAX.
      const bool inRange = pack.cnMax + 2.0 * std::sqrt(norm2[r]) * pack.cMax < 0x1p126;
      if (inRange && best[r] >= 0 && std::isfinite(d1[r]) && gap > 2.0 * eps) {
        labels[r] = best[r];
      } else {
        labels[r] = recheck(kt, pack, x + r * pack.D, eps, inRange, scratch[tid].row.data());
        ++count;
      }
    }
    rechecked[static_cast<std::size_t>(tid)] = count;
  });
  std::int64_t total = 0;
  for (auto c : rechecked) total += c;
  return total;
}

}  // namespace cpu
}  // namespace kmfleet
