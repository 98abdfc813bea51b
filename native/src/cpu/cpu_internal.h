// Pieces of the CPU backend shared by its units: the centroid pack, the exact assignment, the exact statistics of
// a pass. Baseline code only (no ISA flags): the ISA-specific work happens behind KernelTable pointers.
#pragma once

#include <cstdint>
#include <vector>

#include "../backend.h"
#include "../memory.h"
#include "../thread_pool.h"
#include "exact_statistics.h"
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

// A pass's per-cluster statistics (exact_statistics.h: sums, counts and inertia, exact) and the farthest rows for
// re-seeding. The statistics persist across passes, each row in them under the label it had when a pass last saw it:
// a pass moves only the rows whose label changed (subtracted from their old cluster, added to their new one), whether
// they are resident or streamed. A pass runs in pieces of rows: collect (any thread, the rows it assigned: each change
// noted for the task that owns its cluster) → barrier → moveTask (each task a set of whole clusters, one thread each,
// so no cluster's words move between cores) → barrier. The rows' distances are computed only where they are asked for
// (PassSpec.distances) or needed (the farthest rows: the streamed ones as they pass in a fit pass, the resident ones
// once a cluster came out empty).
class Accumulator {
 public:
  // Before each pass. K, D, the metric and the rows are fixed for an engine.
  void beginPass(ThreadPool& pool, std::int64_t K, std::int64_t D, Metric metric, int farthest, std::int64_t rows);

  // At the start of each piece, by every thread.
  void startPiece(int tid);
  // Rows [b, e) of the piece that begins at global row `first` (labels: the piece's), just assigned: notes the rows
  // whose cluster in the statistics is not their label.
  void collect(int tid, std::int64_t first, std::int64_t b, std::int64_t e, const std::int32_t* labels);
  // After every collect of the piece: tasks() tasks, each once, by any thread. x: the piece's rows.
  int tasks() const { return tasks_; }
  void moveTask(int task, std::int64_t first, const float* x);
  // Rows [b, e) of a chunk (x, norm2: the chunk's; first: its global row): their distances to their centroid into
  // out (when not null) and, with `farthest`, into this thread's candidates for re-seeding.
  void distances(int tid, const CentroidPack& pack, const float* x, const double* norm2, std::int64_t first,
                 std::int64_t b, std::int64_t e, const std::int32_t* labels, float* out, bool farthest);
  void addRowsSeen(std::int64_t n) { rowsSeen_ += n; }
  bool farthestWanted() const { return farthest_ > 0; }

  // After the pass's last chunk. The resident rows held (x, norm2, labels from row 0) give their distances when a
  // cluster came out empty.
  PassTotals finish(ThreadPool& pool, const CentroidPack& pack, const float* resident, const double* residentNorm2,
                    std::int64_t residentHeld, const std::int32_t* labels);

 private:
  struct Move {
    std::int32_t row;      // in its piece
    std::int32_t cluster;  // where it goes in (add) or out of (subtract)
    bool subtract;
  };
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

  std::int64_t K_ = 0, D_ = 0, rows_ = 0, rowsSeen_ = 0;
  Metric metric_ = Metric::L2;
  int farthest_ = 0, tasks_ = 1, threads_ = 1;
  ExactStatistics stats_;
  Array<std::int32_t> inStats_; // per row, the cluster stats_ holds it in (−1: none)
  std::vector<std::vector<Move>> moves_;  // [thread · tasks_ + task]: this piece's moves
  std::vector<Heap> heaps_;     // per thread
};

}  // namespace cpu
}  // namespace kmfleet
