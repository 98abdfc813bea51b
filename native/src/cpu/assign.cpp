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
//
// With the bf16 screen (kernels.h ScreenTask, CPUs with AVX-512 BF16) the fp32 kernel is the second stage: the screen
// computes every value from bf16-rounded rows and centroids at twice the fp32 rate, bounds its error from the actual
// rounding residuals (screenBound below), and keeps the centroids within 2E of its minimum. One candidate is the label;
// up to 16 are compared by the same fp64 Σ(x − c)² as the recheck (on random data at D=256, K=1024 about half the
// rows have 2+ candidates, nearly all ≤ 16); more, or rows out of range, go through the fp32 path above. The labels are
// the same: the fp64 argmin among a set that provably holds every centroid that could be the nearest.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../row_math.h"
#include "cpu_internal.h"

namespace kmfleet {
namespace cpu {

namespace {

// fp32 → bf16 (the high 16 bits), rounded to nearest even, a subnormal result flushed to zero: what the screen kernel
// does to the rows (kernels_avx512bf16.cpp roundBf16), here for the centroids.
std::uint32_t bf16Bits(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  const std::uint32_t h = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  return (h & 0x7f800000u) ? h : 0u;
}

float bf16Value(std::uint32_t h) {
  float f;
  std::memcpy(&f, &h, 4);
  return f;
}

}  // namespace

void CentroidPack::build(const float* centroids, std::int64_t k, std::int64_t d, const KernelTable& kt,
                         const ScreenKernel* screen, ThreadPool& pool) {
  c = centroids;
  K = k;
  D = d;
  kpad = (K + kt.nr - 1) / kt.nr * kt.nr;
  const std::int64_t Dp = (D + 1) / 2;
  panels.allocate(static_cast<std::size_t>(kpad * D), "the packed centroids");
  cnorm.allocate(static_cast<std::size_t>(kpad), "the centroid norms");
  cc64.allocate(static_cast<std::size_t>(K), "the centroid norms");
  if (screen) pairs.allocate(static_cast<std::size_t>(kpad * Dp), "the packed centroids");
  std::vector<double> chat(static_cast<std::size_t>(kpad), 0.0), cres(static_cast<std::size_t>(kpad), 0.0);
  const std::int64_t panelCount = kpad / kt.nr;
  // the screen packs in groups of 8 (kernels.h): a table with nr = 8 shares its panel index
  pool.run([&](int tid, int nt) {
    std::int64_t p0, p1;
    ThreadPool::range(panelCount, tid, nt, 1, p0, p1);
    for (std::int64_t p = p0; p < p1; ++p) {
      float* panel = panels.data() + p * D * kt.nr;
      for (int j = 0; j < kt.nr; ++j) {
        const std::int64_t kk = p * kt.nr + j;
        if (kk < K) {
          const float* ck = c + kk * D;
          for (std::int64_t dd = 0; dd < D; ++dd) panel[dd * kt.nr + j] = ck[dd];
          const double n2 = sqNorm64(ck, D);
          cc64[kk] = n2;
          cnorm[kk] = static_cast<float>(n2);
        } else {
          for (std::int64_t dd = 0; dd < D; ++dd) panel[dd * kt.nr + j] = 0.0f;
          cnorm[kk] = std::numeric_limits<float>::infinity();
        }
        if (!screen) continue;
        std::uint32_t* pp = pairs.data() + (kk / 8) * Dp * 8 + kk % 8;
        double h2 = 0, r2 = 0;
        for (std::int64_t q = 0; q < Dp; ++q) {
          const float lo = kk < K ? c[kk * D + 2 * q] : 0.0f;
          const float hi = kk < K && 2 * q + 1 < D ? c[kk * D + 2 * q + 1] : 0.0f;
          const std::uint32_t bl = bf16Bits(lo), bh = bf16Bits(hi);
          pp[q * 8] = bh | (bl >> 16);
          const double vl = bf16Value(bl), vh = bf16Value(bh);
          h2 += vl * vl + vh * vh;
          r2 += (lo - vl) * (lo - vl) + (hi - vh) * (hi - vh);
        }
        chat[static_cast<std::size_t>(kk)] = h2;
        cres[static_cast<std::size_t>(kk)] = r2;
      }
    }
  });
  cnMax = 0;
  for (std::int64_t kk = 0; kk < K; ++kk) cnMax = std::max(cnMax, cc64[kk]);
  cMax = std::sqrt(cnMax);
  chMax = crMax = 0;
  for (std::int64_t kk = 0; kk < K; ++kk) {
    chMax = std::max(chMax, chat[static_cast<std::size_t>(kk)]);
    crMax = std::max(crMax, cres[static_cast<std::size_t>(kk)]);
  }
  // fp64 sums of squares of fp32-exact values: a relative 1e-15 at most, covered by the bound's 1.001
  chMax = std::sqrt(chMax);
  crMax = std::sqrt(crMax);
}

void AssignWork::allocate(std::int64_t n, bool screen) {
  if (screen) return;  // the screen keeps its work in the threads' scratch
  const std::size_t m = static_cast<std::size_t>(n);
  i1.allocate(m, "the assignment");
  d1.allocate(m, "the assignment");
  d2.allocate(m, "the assignment");
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
// gUpper/gLower: the row's bounds for row_bounds.h from its fp32 values (gUpper = +inf: none, out of range).
std::int32_t recheck(const KernelTable& kt, const CentroidPack& pack, const float* x, double eps, bool inRange,
                     float* tmp, double& gUpper, double& gLower) {
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
  gUpper = all ? std::numeric_limits<double>::infinity() : static_cast<double>(tmp[label]) + eps;
  gLower = f1 - eps;  // every value is at least the minimum
  return label;
}

}  // namespace

namespace {

// The screen's error bound (kernels.h ScreenTask), from the header's analysis with bf16 rounding: with x̂, ĉ the bf16
// values and s̃ the fp32 sum of their exact products (in any order; VDPBF16PS's roundings taken as 2u to be safe),
//   |x·c − x̂·ĉ| = |(x − x̂)·c + x̂·(c − ĉ)| ≤ ‖x − x̂‖‖c‖max + ‖x̂‖‖c − ĉ‖max    (the actual residuals, not 2^-8 bounds)
//   |s̃ − x̂·ĉ| ≤ γ'_D ‖x̂‖‖ĉ‖max,  γ'_D = D·2^-23 / (1 − D·2^-23),   ‖x̂‖ ≤ ‖x‖ + ‖x − x̂‖
// and, as for the fp32 kernel, u‖c‖² for ĉnorm and u(‖c‖² + 2|s̃|) for the last rounding; an absolute term covers
// products and sums flushed to zero (the instruction's FTZ/DAZ: 2^-126 each). ‖x − x̂‖² is summed in fp32 by the
// kernel: relative γ_{D+1} at most, plus each square's gradual underflow (2^-149). The 1.001 covers the fp64
// evaluation of all this.
void screenBound(const CentroidPack& pack, ScreenTask& t) {
  const double u = std::ldexp(1.0, -24), D = static_cast<double>(pack.D);
  const double Du = D * 2 * u, gamma = Du < 0.5 ? Du / (1 - Du) : 1.0;
  t.er = 1 + 2 * (D + 2) * u;
  t.era = (D + 1) * std::ldexp(1.0, -148);
  t.ea = 1.001 * 2 * pack.cMax;
  t.eb = 1.001 * (2 * pack.crMax + 2 * gamma * pack.chMax + 2 * u * pack.chMax * (1 + gamma));
  t.ec = 1.001 * u * pack.cnMax * (2 + u) + (4 * D + 8) * std::ldexp(1.0, -126);
}

}  // namespace

namespace {

// Exact labels of m contiguous rows xs (‖x‖² in norms) into lab; with gU/gL (m each), each row's bounds for
// row_bounds.h. i1/d1/d2: m-long work of the fp32 path without a screen.
void assignBlock(const KernelTable& kt, const ScreenKernel* screen, AssignScratch& s, const CentroidPack& pack,
                 const float* xs, const double* norms, std::int64_t m, std::int32_t* i1, float* d1, float* d2,
                 std::int32_t* lab, double* gU, double* gL, AssignCounts& c) {
  const std::int64_t D = pack.D;
  const double factor = epsilonFactor(D);
  const double tiny = std::ldexp(static_cast<double>(D + 4), -146);
  // The fp32 path for rows [0, n) of rows (contiguous), whose ‖x‖² is normOf(j): the label goes to out(j, label,
  // gUpper, gLower).
  auto fp32Rows = [&](const float* rows, std::int64_t n, std::int32_t* best, float* v1, float* v2, auto&& normOf,
                      auto&& out) {
    AssignTask task;
    task.x = rows;
    task.ld = D;
    task.n = n;
    task.D = D;
    task.panels = pack.panels.data();
    task.cnorm = pack.cnorm.data();
    task.kpad = pack.kpad;
    task.scratch = s.kernel.data();
    task.best = best;
    task.d1 = v1;
    task.d2 = v2;
    kt.assign(task);
    for (std::int64_t j = 0; j < n; ++j) {
      const double nx = normOf(j);
      // + an absolute term for gradual underflow (each fp32 operation may also lose up to 2^-150 absolutely)
      const double eps = factor * (pack.cnMax + 2.0 * std::sqrt(nx) * pack.cMax) + tiny;
      const double gap = static_cast<double>(v2[j]) - static_cast<double>(v1[j]);
      // The bound assumes no fp32 overflow: every |value| ≤ ‖c‖²max + 2‖x‖‖c‖max must stay well below FLT_MAX.
      const bool inRange = pack.cnMax + 2.0 * std::sqrt(nx) * pack.cMax < 0x1p126;
      if (inRange && best[j] >= 0 && std::isfinite(v1[j]) && gap > 2.0 * eps) {
        out(j, best[j], static_cast<double>(v1[j]) + eps, static_cast<double>(v2[j]) - eps);
      } else {
        double gUpper, gLower;
        const std::int32_t l = recheck(kt, pack, rows + j * D, eps, inRange, s.row.data(), gUpper, gLower);
        out(j, l, gUpper, gLower);
        ++c.rechecked;
      }
    }
    c.fp32 += n;
  };
  auto set = [&](std::int64_t j, std::int32_t l, double u, double lo) {
    lab[j] = l;
    if (gU) {
      gU[j] = u;
      gL[j] = lo;
    }
  };
  if (!screen) {
    fp32Rows(xs, m, i1, d1, d2, [&](std::int64_t j) { return norms[j]; }, set);
    return;
  }
  ScreenTask task;
  task.x = xs;
  task.ld = D;
  task.n = m;
  task.D = D;
  task.norm2 = norms;
  task.panels = pack.pairs.data();
  task.cnorm = pack.cnorm.data();
  task.kpad = pack.kpad;
  task.c = pack.c;
  screenBound(pack, task);
  task.scratch = s.kernel.data();
  task.labels = lab;
  task.gUpper = gU;
  task.gLower = gL;
  // centroids far from fp32's range limits (no bf16 rounding overflows): otherwise every row takes the fp32 path
  if (pack.cMax < 0x1p60) {
    screen->screen(task);
  } else {
    for (std::int64_t r = 0; r < m; ++r) lab[r] = -1;
  }
  c.screened += task.screened;
  c.pairs += task.decided64;
  s.open.clear();
  for (std::int64_t r = 0; r < m; ++r)
    if (lab[r] < 0) s.open.push_back(static_cast<std::int32_t>(r));
  const std::int64_t n = static_cast<std::int64_t>(s.open.size());
  if (n == 0) return;
  if (static_cast<std::int64_t>(s.rows.size()) < n * D) s.rows.allocate(static_cast<std::size_t>(n * D), "the open rows");
  if (static_cast<std::int64_t>(s.best.size()) < n) {
    s.best.allocate(static_cast<std::size_t>(n), "the open rows");
    s.d1.allocate(static_cast<std::size_t>(n), "the open rows");
    s.d2.allocate(static_cast<std::size_t>(n), "the open rows");
  }
  for (std::int64_t j = 0; j < n; ++j)
    std::memcpy(s.rows.data() + j * D, xs + static_cast<std::int64_t>(s.open[j]) * D, static_cast<std::size_t>(D) * 4);
  fp32Rows(s.rows.data(), n, s.best.data(), s.d1.data(), s.d2.data(), [&](std::int64_t j) { return norms[s.open[j]]; },
           [&](std::int64_t j, std::int32_t l, double u, double lo) { set(s.open[j], l, u, lo); });
}

template <typename T>
T* atLeast(Array<T>& a, std::int64_t n, const char* what) {
  if (static_cast<std::int64_t>(a.size()) < n) a.allocate(static_cast<std::size_t>(n), what);
  return a.data();
}

}  // namespace

void assignRange(const KernelTable& kt, const ScreenKernel* screen, AssignScratch& s, const CentroidPack& pack,
                 const float* x, const double* norm2, std::int64_t b, std::int64_t e, AssignWork& work,
                 std::int32_t* labels, AssignCounts& c, RowBounds* bounds, std::int64_t firstRow) {
  if (b >= e) return;
  const std::int64_t D = pack.D, n = e - b;
  // the fp32 path's work from row b (unallocated with a screen, which keeps its own)
  auto from = [b](auto& a) { return a.data() ? a.data() + b : nullptr; };
  if (!bounds) {
    assignBlock(kt, screen, s, pack, x + b * D, norm2 + b, n, from(work.i1), from(work.d1), from(work.d2), labels + b,
                nullptr, nullptr, c);
    return;
  }
  s.active.clear();
  const std::int64_t settled = bounds->settle(firstRow, b, e, labels, s.active);
  const std::int64_t m = n - settled;
  if (m == 0) {
    c.skipped += settled;
    return;
  }
  double* gU = atLeast(s.gUpper, n, "the rows' bounds");
  double* gL = atLeast(s.gLower, n, "the rows' bounds");
  if (settled * 4 < n) {
    // few settled: the whole range in place, cheaper than gathering the rest (a settled row gets its label again)
    assignBlock(kt, screen, s, pack, x + b * D, norm2 + b, n, from(work.i1), from(work.d1), from(work.d2), labels + b,
                gU, gL, c);
    for (std::int64_t j = 0; j < n; ++j) bounds->record(firstRow + b + j, labels[b + j], norm2[b + j], gU[j], gL[j]);
    return;
  }
  c.skipped += settled;
  float* rows = atLeast(s.gathered, m * D, "the rows to assign");
  double* norms = atLeast(s.gatheredNorm2, m, "the rows to assign");
  std::int32_t* lab = atLeast(s.gatheredLabels, m, "the rows to assign");
  std::int32_t* gi1 = atLeast(s.gatheredI1, m, "the rows to assign");
  float* gd1 = atLeast(s.gatheredD1, m, "the rows to assign");
  float* gd2 = atLeast(s.gatheredD2, m, "the rows to assign");
  for (std::int64_t j = 0; j < m; ++j) {
    const std::int64_t r = s.active[static_cast<std::size_t>(j)];
    std::memcpy(rows + j * D, x + r * D, static_cast<std::size_t>(D) * 4);
    norms[j] = norm2[r];
  }
  assignBlock(kt, screen, s, pack, rows, norms, m, gi1, gd1, gd2, lab, gU, gL, c);
  for (std::int64_t j = 0; j < m; ++j) {
    const std::int64_t r = s.active[static_cast<std::size_t>(j)];
    labels[r] = lab[j];
    bounds->record(firstRow + r, lab[j], norms[j], gU[j], gL[j]);
  }
}

void assignRows(const KernelTable& kt, const ScreenKernel* screen, ThreadPool& pool, std::vector<AssignScratch>& scratch,
                const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n, AssignWork& work,
                std::int32_t* labels, AssignCounts& counts) {  // (no bounds: tools and tests of the assignment alone)
  std::vector<AssignCounts> part(static_cast<std::size_t>(pool.size()));
  pool.run([&](int tid, int nt) {
    std::int64_t b, e;
    ThreadPool::range(n, tid, nt, kt.mr, b, e);
    assignRange(kt, screen, scratch[static_cast<std::size_t>(tid)], pack, x, norm2, b, e, work, labels,
                part[static_cast<std::size_t>(tid)]);
  });
  for (const auto& p : part) counts.add(p);
}

}  // namespace cpu
}  // namespace kmfleet
