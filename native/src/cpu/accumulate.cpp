// A pass's statistics (cpu_internal.h Accumulator): exact integer statistics, so neither the order in which rows
// arrive nor which thread adds them changes a bit (DESIGN.md "Numerics"), persisting across passes, moved only by the
// rows whose label changed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../row_math.h"
#include "cpu_internal.h"

namespace kmfleet {
namespace cpu {

namespace {
// (dist desc, row asc): a total order, so "the top E" is one set whatever the order rows are offered in.
inline bool better(double da, std::int64_t ra, double db, std::int64_t rb) { return da > db || (da == db && ra < rb); }

// out[r − b] = Σ(x_r − c_label)² for rows [b, e), with row_math.h's 8 partial sums and tree: the clones keep each
// partial sum in a lane (a product and a sum, never fused), so every one gives the portable loop's bits.
__attribute__((target_clones("avx512f", "avx2", "default"))) void sqDistances(
    const float* x, const float* c, const std::int32_t* labels, std::int64_t b, std::int64_t e, std::int64_t D,
    double* out) {
  for (std::int64_t r = b; r < e; ++r) out[r - b] = sqDist64(x + r * D, c + static_cast<std::int64_t>(labels[r]) * D, D);
}
}  // namespace

void Accumulator::beginPass(ThreadPool& pool, std::int64_t K, std::int64_t D, Metric metric, int farthest,
                            std::int64_t rows) {
  const int threads = pool.size();
  const bool squares = metric == Metric::L2;
  if (!stats_.allocated()) {
    K_ = K;
    rows_ = rows;
    D_ = D;
    metric_ = metric;
    stats_.allocate(K, D, squares);
    inStats_.allocate(static_cast<std::size_t>(rows), "the rows' clusters in the statistics");
    threads_ = threads;
    tasks_ = static_cast<int>(std::min<std::int64_t>(K, 4 * threads));
    moves_.resize(static_cast<std::size_t>(threads * tasks_));
    heaps_.resize(static_cast<std::size_t>(threads));
    std::fill(inStats_.data(), inStats_.data() + rows, -1);
  }
  // The statistics survive a pass that fails: a piece's moves all run or none do (its tasks start once its whole
  // assignment succeeded, and cannot fail), and inStats_ changes with them. The next pass moves the rows from wherever
  // they are.
  farthest_ = farthest;
  rowsSeen_ = 0;
  for (auto& h : heaps_) {
    h.h.clear();
    h.h.reserve(static_cast<std::size_t>(farthest));
    h.values.allocate(static_cast<std::size_t>(farthest) * static_cast<std::size_t>(D), "the re-seeding candidates");
  }
}

void Accumulator::startPiece(int tid) {
  for (int t = 0; t < tasks_; ++t) moves_[static_cast<std::size_t>(tid * tasks_ + t)].clear();
}

void Accumulator::collect(int tid, std::int64_t first, std::int64_t b, std::int64_t e, const std::int32_t* labels) {
  std::vector<Move>* mine = moves_.data() + tid * tasks_;
  const std::int32_t* held = inStats_.data() + first;
  for (std::int64_t r = b; r < e; ++r) {
    const std::int32_t to = labels[r], from = held[r];
    if (to == from) continue;
    if (from >= 0) mine[std::int64_t{from} * tasks_ / K_].push_back({static_cast<std::int32_t>(r), from, true});
    mine[std::int64_t{to} * tasks_ / K_].push_back({static_cast<std::int32_t>(r), to, false});
  }
}

void Accumulator::moveTask(int task, std::int64_t first, const float* x) {
  std::int32_t* held = inStats_.data() + first;
  for (int t = 0; t < threads_; ++t) {
    const std::vector<Move>& list = moves_[static_cast<std::size_t>(t * tasks_ + task)];
    for (std::size_t i = 0; i < list.size(); ++i) {
      // the rows come from memory in no order the prefetcher sees: every line of the row 4 moves ahead
      if (i + 4 < list.size()) {
        const char* ahead = reinterpret_cast<const char*>(x + static_cast<std::int64_t>(list[i + 4].row) * D_);
        for (std::int64_t b = 0; b < D_ * 4 && b < 1024; b += 64) __builtin_prefetch(ahead + b);
      }
      const Move& m = list[i];
      const float* row = x + static_cast<std::int64_t>(m.row) * D_;
      if (m.subtract) {
        stats_.subtract(m.cluster, row);
      } else {
        stats_.add(m.cluster, row);
        held[m.row] = m.cluster;
      }
    }
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

void Accumulator::distances(int tid, const CentroidPack& pack, const float* x, const double* norm2, std::int64_t first,
                            std::int64_t b, std::int64_t e, const std::int32_t* labels, float* out, bool farthest) {
  Heap& heap = heaps_[static_cast<std::size_t>(tid)];
  const bool l2 = metric_ == Metric::L2;
  double dist[256];
  for (std::int64_t r0 = b; r0 < e; r0 += 256) {
    const std::int64_t r1 = std::min(e, r0 + 256);
    if (l2) sqDistances(x, pack.c, labels, r0, r1, D_, dist);
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t k = labels[r];
      const float* xr = x + r * D_;
      double dd;
      if (l2) {
        dd = dist[r - r0];
      } else {
        const double denom = std::sqrt(norm2[r] * pack.cc64[k]);
        dd = denom > 0 ? 1.0 - dot64(xr, pack.c + k * D_, D_) / denom : 1.0;
        dd = dd < 0 ? 0 : (dd > 2 ? 2 : dd);
      }
      if (out) out[r] = static_cast<float>(dd);
      // most rows are nearer than the farthest kept so far: test before the call
      if (farthest && farthest_ > 0 && (static_cast<int>(heap.h.size()) < farthest_ || dd >= heap.h.front().dist))
        offer(heap, dd, first + r, static_cast<std::int32_t>(k), xr);
    }
  }
}

PassTotals Accumulator::finish(ThreadPool& pool, const CentroidPack& pack, const float* resident,
                               const double* residentNorm2, std::int64_t residentHeld, const std::int32_t* labels) {
  PassTotals out;
  stats_.finish(pack.c, metric_, pool, out.sums, out.counts, out.inertia);
  // every row the pass saw is in them once; rows earlier passes saw and this one did not, under their last label
  std::int64_t held = 0;
  for (auto c : out.counts) held += c;
  if (held < rowsSeen_ || held > rows_)
    throw std::logic_error("the statistics hold " + std::to_string(held) + " rows after a pass that saw " +
                           std::to_string(rowsSeen_) + " of " + std::to_string(rows_));
  out.rowsSeen = rowsSeen_;
  // backend.h: the farthest rows only when a cluster came out empty; the resident rows' distances only then
  const bool anyEmpty = std::find(out.counts.begin(), out.counts.end(), 0) != out.counts.end();
  if (!anyEmpty || farthest_ == 0) return out;
  pool.run([&](int tid, int nt) {
    std::int64_t b, e;
    ThreadPool::range(residentHeld, tid, nt, 1, b, e);
    distances(tid, pack, resident, residentNorm2, 0, b, e, labels, nullptr, true);
  });
  std::vector<std::pair<const Entry*, const Heap*>> all;
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
  return out;
}

}  // namespace cpu
}  // namespace kmfleet
