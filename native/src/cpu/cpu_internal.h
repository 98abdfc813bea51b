// Pieces of the CPU backend shared by its units: the centroid pack, the exact assignment, the deterministic
// accumulation. Baseline code only (no ISA flags): the ISA-specific work happens behind KernelTable pointers.
#pragma once

#include <cstdint>
#include <vector>

#include "../backend.h"
#include "../memory.h"
#include "../thread_pool.h"
#include "kernels.h"

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

  void build(const float* centroids, std::int64_t K, std::int64_t D, const KernelTable& kt);
};

// Per-thread scratch of the assignment.
struct AssignScratch {
  Array<float> kernel;  // scratchFloats(D)
  Array<float> row;     // kpad, for the recheck
};

// Exact labels for n rows: fp32 kernel, margin test, fp64 recheck of the rows too close to call.
// best/d1/d2 are n-long work arrays; labels receives the result. Returns the number of rows rechecked.
std::int64_t assignRows(const KernelTable& kt, ThreadPool& pool, std::vector<AssignScratch>& scratch,
                        const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n,
                        std::int32_t* best, float* d1, float* d2, std::int32_t* labels);

// Per-cluster fp64 sums, counts and inertia, each cluster's rows added in global row order (each thread owns whole
// clusters and walks the chunk in row order), and the farthest rows for re-seeding.
class Accumulator {
 public:
  void reset(std::int64_t K, std::int64_t D, Metric metric, int threads, int farthest, std::int64_t chunkRows);
  // x: n rows (fp32, normalized for cosine), norm2: their ‖x‖² in fp64, labels: their labels.
  // distances: n-long output or nullptr.
  void addChunk(ThreadPool& pool, const CentroidPack& pack, const float* x, const double* norm2, std::int64_t n,
                std::int64_t firstRow, const std::int32_t* labels, float* distances);
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

  std::int64_t K_ = 0, D_ = 0, rowsSeen_ = 0;
  Metric metric_ = Metric::L2;
  int threads_ = 1, farthest_ = 0;
  std::vector<double> sums_, inertia_;
  std::vector<std::int64_t> counts_;
  Array<std::int64_t> cstart_;  // K + 1
  Array<std::int32_t> order_;   // chunkRows + threads: each thread's rows, in order
  Array<double> dist_;          // chunkRows + threads: their distances (or dot products)
  std::vector<Heap> heaps_;     // one per thread
};

}  // namespace cpu
}  // namespace kmfleet
