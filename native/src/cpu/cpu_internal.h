// Pieces of the CPU backend shared by its units: the centroid pack, the exact assignment, the deterministic
// accumulation. Baseline code only (no ISA flags): the ISA-specific work happens behind KernelTable pointers.
#pragma once

#include <cstdint>
#include <vector>

#include "../backend.h"
#include "../memory.h"
#include "../thread_pool.h"
#include "kernels.h"
#include "row_bounds.h"

namespace kmfleet {
namespace cpu {

// The pass's centroids as the kernels want them, plus the norms the error bound needs.
struct CentroidPack {
  const float* c = nullptr;  // K×D row-major fp32 (the engine's array, fixed during the pass)
  std::int64_t K = 0, D = 0, kpad = 0;
  Array<float> panels;       // kpad/nr panels of D×nr
  Array<float> cnorm;        // kpad: ‖c‖² rounded to fp32, +inf padding
  Array<double> cc64;        // K: ‖c‖² in fp64
  double cnMax = 0, cMax = 0;
  // With a bf16 screen (kernels.h ScreenTask): the centroids rounded to bf16 in pairs, max ‖ĉ‖ and max ‖c − ĉ‖.
  Array<std::uint32_t> pairs;
  double chMax = 0, crMax = 0;

  void build(const float* centroids, std::int64_t K, std::int64_t D, const KernelTable& kt, const ScreenKernel* screen,
             ThreadPool& pool);
};

// Per-thread scratch of the assignment.
struct AssignScratch {
  Array<float> kernel;  // max(scratchFloats(D), screenScratchFloats(D, kpad))
  Array<float> row;     // kpad, for the recheck
  // rows the screen left open (their indices, the rows themselves, the fp32 kernel's results for them)
  std::vector<std::int32_t> open;
  Array<float> rows, d1, d2;
  Array<std::int32_t> best;
  // with bounds (row_bounds.h): the rows they leave to assign, gathered, and every assigned row's bounds
  std::vector<std::int32_t> active;
  Array<float> gathered, gatheredD1, gatheredD2;
  Array<double> gatheredNorm2, gUpper, gLower;
  Array<std::int32_t> gatheredLabels, gatheredI1;
};

// The assignment's n-long work arrays (one chunk).
struct AssignWork {
  Array<std::int32_t> i1;
  Array<float> d1, d2;
  void allocate(std::int64_t n, bool screen);
};

// What assignRows did, for KMFLEET_DEBUG.
struct AssignCounts {
  std::int64_t screened = 0;  // decided by the bf16 screen alone
  std::int64_t pairs = 0;     // decided in fp64 among the screen's candidates
  std::int64_t fp32 = 0;      // through the fp32 kernel (no screen, or the screen left them open)
  std::int64_t rechecked = 0; // of those, decided in fp64 among the fp32 candidates
  std::int64_t skipped = 0;   // settled by their bounds: no distance computed
  void add(const AssignCounts& o) {
    skipped += o.skipped;
    screened += o.screened;
    pairs += o.pairs;
    fp32 += o.fp32;
    rechecked += o.rechecked;
  }
};

// Exact labels for n rows: with a screen, the bf16 kernel and its error bound decide most rows, fp64 the rows with
// two candidates, and the fp32 path below the rest; without one (or for those rows) the fp32 kernel, its margin test,
// and an fp64 recheck of the rows too close to call. labels receives the result.
// Rows [b, e) on the calling thread (s: its scratch), the same way. With bounds (x[0] being row firstRow), the rows they
// settle keep their label without a distance computed, and the others' bounds are recorded.
void assignRange(const KernelTable& kt, const ScreenKernel* screen, AssignScratch& s, const CentroidPack& pack,
                 const float* x, const double* norm2, std::int64_t b, std::int64_t e, AssignWork& work,
                 std::int32_t* labels, AssignCounts& counts, RowBounds* bounds = nullptr, std::int64_t firstRow = 0);
// Rows [0, n) split over the pool.
void assignRows(const KernelTable& kt, const ScreenKernel* screen, ThreadPool& pool, std::vector<AssignScratch>& scratch,
                const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n, AssignWork& work,
                std::int32_t* labels, AssignCounts& counts);

// Per-cluster fp64 sums, counts and inertia, each cluster's rows added in global row order (each thread owns whole
// clusters and walks the chunk in row order), and the farthest rows for re-seeding.
class Accumulator {
 public:
  void reset(const KernelTable& kt, std::int64_t K, std::int64_t D, Metric metric, int threads, int farthest,
             std::int64_t chunkRows);
  // x: n rows (fp32, normalized for cosine), norm2: their ‖x‖² in fp64, labels: their labels.
  // distances: n-long output or nullptr.
  void addChunk(ThreadPool& pool, const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n,
                std::int64_t firstRow, const std::int32_t* labels, float* distances);
  // The same in tasks (0 ≤ task < tasks(), each a range of clusters), run by any thread (tid: its index) in any
  // order, each task once per chunk, all of a chunk's tasks before any of the next's; then addRowsSeen(n) once.
  int tasks() const;
  void addTask(int task, int tid, const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n,
               std::int64_t firstRow, const std::int32_t* labels, float* distances);
  void addRowsSeen(std::int64_t n) { rowsSeen_ += n; }
  PassTotals finish();

 private:
  struct Entry {
    double dist;
    std::int64_t row;
    std::int32_t label;
    std::int32_t slot;
  };
  struct Heap {
    std::vector<Entry> h;
    Array<float> values;
  };
  void offer(Heap& heap, double dist, std::int64_t row, std::int32_t label, const float* x);

  const KernelTable* kt_ = nullptr;
  std::int64_t K_ = 0, D_ = 0, rowsSeen_ = 0;
  Metric metric_ = Metric::L2;
  int threads_ = 1, farthest_ = 0;
  std::vector<double> sums_, inertia_;
  std::vector<std::int64_t> counts_;
  std::vector<Array<std::int32_t>> order_;  // per thread, chunkRows + 1: a task's rows, in order
  std::vector<Array<double>> dist_;         // per thread: their distances (or dot products)
  std::vector<Heap> heaps_;     // one per thread
};

}  // namespace cpu
}  // namespace kmfleet
