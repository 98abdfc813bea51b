// Deterministic accumulation (DESIGN.md "Numerics"): each task owns a range of whole clusters and walks the chunk in
// row order adding its rows into fp64 sums. For any cluster the additions thus happen in global row order — the same
// bits for one chunk or a thousand, one thread or sixteen, whichever thread takes which task.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "../row_math.h"
#include "cpu_internal.h"

namespace kmfleet {
namespace cpu {

namespace {
// (dist desc, row asc): a total order, so "the top E" is one set whatever the order rows are offered in.
inline bool better(double da, std::int64_t ra, double db, std::int64_t rb) { return da > db || (da == db && ra < rb); }
}  // namespace

void Accumulator::reset(const KernelTable& kt, std::int64_t K, std::int64_t D, Metric metric, int threads,
                        int farthest, std::int64_t chunkRows) {
  kt_ = &kt;
  K_ = K;
  D_ = D;
  metric_ = metric;
  threads_ = threads;
  farthest_ = farthest;
  rowsSeen_ = 0;
  try {
    sums_.assign(static_cast<std::size_t>(K * D), 0.0);
    inertia_.assign(static_cast<std::size_t>(K), 0.0);
    counts_.assign(static_cast<std::size_t>(K), 0);
    heaps_.resize(static_cast<std::size_t>(threads));
  } catch (const std::bad_alloc&) {
    throw EngineError(ErrorCode::OutOfMemory, "cannot allocate " + std::to_string(K * D * 8) +
                                                  " bytes for the per-cluster fp64 sums (k=" + std::to_string(K) +
                                                  ", dims=" + std::to_string(D) + ")");
  }
  order_.resize(static_cast<std::size_t>(threads));
  dist_.resize(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    order_[static_cast<std::size_t>(t)].allocate(static_cast<std::size_t>(chunkRows + 1), "the per-thread row lists");
    dist_[static_cast<std::size_t>(t)].allocate(static_cast<std::size_t>(chunkRows + 1), "the per-thread row lists");
  }
  for (auto& h : heaps_) {
    h.h.clear();
    h.h.reserve(static_cast<std::size_t>(farthest));
    h.values.allocate(static_cast<std::size_t>(farthest) * static_cast<std::size_t>(D), "the re-seeding candidates");
  }
}

void Accumulator::offer(Heap& heap, double dist, std::int64_t row, std::int32_t label, const float* x) {
  // heap.h is a heap whose front is the WORST kept candidate.
  auto cmp = [](const Entry& a, const Entry& b) { return better(a.dist, a.row, b.dist, b.row); };
  std::int32_t slot;
  if (static_cast<int>(heap.h.size()) < farthest_) {
    slot = static_cast<std::int32_t>(heap.h.size());
    heap.h.push_back({dist, row, label, slot});
  } else {
    const Entry& worst = heap.h.front();
    if (!better(dist, row, worst.dist, worst.row)) return;
    std::pop_heap(heap.h.begin(), heap.h.end(), cmp);
    slot = heap.h.back().slot;
    heap.h.back() = {dist, row, label, slot};
  }
  std::memcpy(heap.values.data() + static_cast<std::size_t>(slot) * D_, x, static_cast<std::size_t>(D_) * 4);
  std::push_heap(heap.h.begin(), heap.h.end(), cmp);
}

namespace {

// One row into its cluster: s += x (fp64) and the row's distance. Elementwise fp64 work plus 8 interleaved partial
// sums combined in a fixed tree (row_math.h): vectorizing it (the clones below) changes no bit, because nothing is
// reassociated and -ffp-contract=off keeps products and sums apart.
template <bool L2>
__attribute__((always_inline)) inline double addRow(double* __restrict s, const float* __restrict x,
                                                    const float* __restrict c, std::int64_t D) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    for (int j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[d + j]), w = static_cast<double>(c[d + j]);
      s[d + j] += v;
      if (L2) {
        const double t = v - w;
        acc[j] += t * t;
      } else {
        acc[j] += v * w;
      }
    }
  for (int j = 0; d + j < D; ++j) {
    const double v = static_cast<double>(x[d + j]), w = static_cast<double>(c[d + j]);
    s[d + j] += v;
    if (L2) {
      const double t = v - w;
      acc[j] += t * t;
    } else {
      acc[j] += v * w;
    }
  }
  return combine8(acc);
}

// The rows `mine[0..m)` (in row order) into their clusters' sums; out[j] = Σ(x − c)² (L2) or x·c (cosine).
__attribute__((target_clones("avx512f", "avx2", "default"))) void addRows(
    bool l2, const std::int32_t* mine, std::int64_t m, const std::int32_t* labels, const float* x, const float* cents,
    double* sums, std::int64_t D, double* out) {
  for (std::int64_t j = 0; j < m; ++j) {
    const std::int64_t r = mine[j];
    // the rows come from L3 (the piece outgrows L2, and the other thread assigned half of them): every line of the
    // row 8 ahead (the prefetcher sees no stream in a cluster's scattered rows)
    if (j + 8 < m) {
      const char* ahead = reinterpret_cast<const char*>(x + static_cast<std::int64_t>(mine[j + 8]) * D);
      for (std::int64_t b = 0; b < D * 4 && b < 512; b += 64) __builtin_prefetch(ahead + b);
    }
    const std::int64_t k = labels[r];
    out[j] = l2 ? addRow<true>(sums + k * D, x + r * D, cents + k * D, D)
                : addRow<false>(sums + k * D, x + r * D, cents + k * D, D);
  }
}

}  // namespace

int Accumulator::tasks() const { return static_cast<int>(std::min<std::int64_t>(K_, 4 * threads_)); }

void Accumulator::addTask(int task, int tid, const CentroidPack& pack, const float* x, const double* norm2,
                          std::int64_t n, std::int64_t firstRow, const std::int32_t* labels, float* distances) {
  const std::int64_t K = K_, D = D_, R = tasks();
  const std::int64_t k0 = K * task / R, k1 = K * (task + 1) / R;
  if (k0 >= k1) return;
  // this task's rows, in order (a branch-free compaction; the buffer has one spare slot for the last write)
  std::int32_t* mine = order_[static_cast<std::size_t>(tid)].data();
  double* md = dist_[static_cast<std::size_t>(tid)].data();
  std::int64_t m = 0;
  const std::uint32_t span = static_cast<std::uint32_t>(k1 - k0);
  for (std::int64_t r = 0; r < n; ++r) {
    mine[m] = static_cast<std::int32_t>(r);
    m += static_cast<std::uint32_t>(labels[r] - k0) < span;
  }
  const bool l2 = metric_ == Metric::L2;
  if (l2 && kt_->addRowsL2) kt_->addRowsL2(mine, m, labels, x, pack.c, sums_.data(), D, md);
  else addRows(l2, mine, m, labels, x, pack.c, sums_.data(), D, md);
  Heap& heap = heaps_[static_cast<std::size_t>(tid)];
  for (std::int64_t j = 0; j < m; ++j) {
    const std::int64_t r = mine[j], k = labels[r];
    double dd = md[j];
    if (!l2) {
      const double denom = std::sqrt(norm2[r] * pack.cc64[k]);
      dd = denom > 0 ? 1.0 - dd / denom : 1.0;
      dd = dd < 0 ? 0 : (dd > 2 ? 2 : dd);
    }
    inertia_[static_cast<std::size_t>(k)] += dd;
    ++counts_[static_cast<std::size_t>(k)];
    if (distances) distances[r] = static_cast<float>(dd);
    // most rows are nearer than the farthest kept so far: test before the call
    if (farthest_ > 0 && (static_cast<int>(heap.h.size()) < farthest_ || dd >= heap.h.front().dist))
      offer(heap, dd, firstRow + r, static_cast<std::int32_t>(k), x + r * D);
  }
}

void Accumulator::addChunk(ThreadPool& pool, const CentroidPack& pack, const float* x, const double* norm2,
                           std::int64_t n, std::int64_t firstRow, const std::int32_t* labels, float* distances) {
  std::atomic<int> next{0};
  pool.run([&](int tid, int) {
    for (int t = next.fetch_add(1); t < tasks(); t = next.fetch_add(1))
      addTask(t, tid, pack, x, norm2, n, firstRow, labels, distances);
  });
  addRowsSeen(n);
}

PassTotals Accumulator::finish() {
  PassTotals out;
  out.sums = std::move(sums_);
  out.counts = std::move(counts_);
  out.inertia = std::move(inertia_);
  out.rowsSeen = rowsSeen_;
  // backend.h: the farthest rows only when a cluster came out empty (the heaps fill as rows pass by: the
  // streamed rows are gone by now)
  const bool anyEmpty = std::find(out.counts.begin(), out.counts.end(), 0) != out.counts.end();
  std::vector<std::pair<const Entry*, const Heap*>> all;
  if (anyEmpty)
    for (const auto& h : heaps_)
    for (const auto& e : h.h) all.push_back({&e, &h});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return better(a.first->dist, a.first->row, b.first->dist, b.first->row);
  });
  if (static_cast<int>(all.size()) > farthest_) all.resize(static_cast<std::size_t>(farthest_));
  for (const auto& [e, h] : all) {
    FarRow f;
    f.row = e->row;
    f.distance = e->dist;
    f.label = e->label;
    const float* v = h->values.data() + static_cast<std::size_t>(e->slot) * D_;
    f.values.assign(v, v + D_);
    out.farthest.push_back(std::move(f));
  }
  sums_.clear();
  inertia_.clear();
  counts_.clear();
  for (auto& h : heaps_) h.h.clear();
  return out;
}

}  // namespace cpu
}  // namespace kmfleet
