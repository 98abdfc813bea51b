// A pass's statistics (cpu_internal.h Accumulator): exact integer statistics, so neither the order in which rows
// arrive nor which thread adds them changes a bit (DESIGN.md "Numerics"), and the resident rows' persist, moved only
// by the rows whose label changed.
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
}  // namespace

void Accumulator::beginPass(ThreadPool& pool, std::int64_t K, std::int64_t D, Metric metric, int farthest,
                            std::int64_t rows, std::int64_t residentRows) {
  const int threads = pool.size();
  const bool squares = metric == Metric::L2;
  if (!resident_.allocated()) {
    K_ = K;
    D_ = D;
    metric_ = metric;
    residentRows_ = residentRows;
    resident_.allocate(K, D, squares);
    if (residentRows < rows) streamed_.allocate(K, D, squares);
    inStats_.allocate(static_cast<std::size_t>(residentRows), "the resident rows' clusters in the statistics");
    threads_ = threads;
    tasks_ = static_cast<int>(std::min<std::int64_t>(K, 4 * threads));
    moves_.resize(static_cast<std::size_t>(threads * tasks_));
    heaps_.resize(static_cast<std::size_t>(threads));
    std::fill(inStats_.data(), inStats_.data() + residentRows, -1);
  }
  // The resident statistics survive a pass that fails: a piece's moves all run or none do (its tasks start once its
  // whole assignment succeeded, and cannot fail), and inStats_ changes with them. The next pass moves the rows from
  // wherever they are.
  if (streamedUsed_) streamed_.zero(pool);
  streamedUsed_ = false;
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

void Accumulator::collect(int tid, bool resident, std::int64_t first, std::int64_t b, std::int64_t e,
                          const std::int32_t* labels) {
  std::vector<Move>* mine = moves_.data() + tid * tasks_;
  const std::int32_t* held = resident ? inStats_.data() + first : nullptr;
  for (std::int64_t r = b; r < e; ++r) {
    const std::int32_t to = labels[r], from = held ? held[r] : -1;
    if (to == from) continue;
    if (from >= 0) mine[std::int64_t{from} * tasks_ / K_].push_back({static_cast<std::int32_t>(r), from, true});
    mine[std::int64_t{to} * tasks_ / K_].push_back({static_cast<std::int32_t>(r), to, false});
  }
}

void Accumulator::moveTask(int task, bool resident, std::int64_t first, const float* x) {
  ExactStatistics& stats = resident ? resident_ : streamed_;
  std::int32_t* held = resident ? inStats_.data() + first : nullptr;
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
        stats.subtract(m.cluster, row);
      } else {
        stats.add(m.cluster, row);
        if (held) held[m.row] = m.cluster;
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
  for (std::int64_t r = b; r < e; ++r) {
    const std::int64_t k = labels[r];
    const float* xr = x + r * D_;
    double dd;
    if (l2) {
      dd = sqDist64(xr, pack.c + k * D_, D_);
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

PassTotals Accumulator::finish(ThreadPool& pool, const CentroidPack& pack, const float* resident,
                               const double* residentNorm2, std::int64_t residentHeld, const std::int32_t* labels) {
  PassTotals out;
  // the streamed rows' statistics are this pass's alone: the resident ones go into them, not the other way round
  ExactStatistics& stats = streamedUsed_ ? streamed_ : resident_;
  if (streamedUsed_) streamed_.addFrom(resident_, pool);
  stats.finish(pack.c, metric_, pool, out.sums, out.counts, out.inertia);
  std::int64_t held = 0;
  for (auto c : out.counts) held += c;
  if (held != rowsSeen_)
    throw std::logic_error("the pass's statistics hold " + std::to_string(held) + " rows but it saw " +
                           std::to_string(rowsSeen_));
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
