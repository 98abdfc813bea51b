// Owns the search for a pass's farthest rows (backend.h PassTotals.farthest), asked for only when a fit pass left a
// cluster empty: a heap over the candidates of streamed chunks (offered as their slots drain) and of the resident rows
// (from this pass's fp64 distances, found in finishPass per chunk as the rows were fed), the device and pinned buffers
// of the resident candidates, and those that gather the resident winners' values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend.h"
#include "backend_shape.h"
#include "stage_timer.h"
#include "kernels/types.h"

namespace kmfleet {
namespace cuda_backend {

class FarthestRows {
 public:
  explicit FarthestRows(const BackendShape& shape) : shape_(shape) {}

  void release() noexcept;

  // A pass begins: at most `wanted` rows (PassSpec.farthest), labelled from the engine's `labels` as they are offered.
  void begin(int wanted, const std::int32_t* labels) {
    wanted_ = wanted;
    labels_ = labels;
    heap_.clear();
  }
  // A candidate: row at fp64 distance dist, its D values (null for a resident row: gathered by take()).
  void offer(double dist, long long row, const float* values);
  // The candidates of `rows` resident rows (values, labels, the pass's fp64 distances dist64, computed first when
  // computeDistances), chunk by chunk with the chunk boundaries they were fed with (far_rows.cu), on compute.
  void offerResident(cuda::RowValues values, const std::int32_t* labels, double* dist64, std::int64_t rows,
                     bool computeDistances, const float* centroids, char* farScratch, StageTimer& stages,
                     cudaStream_t compute, cudaStream_t d2h);
  // The pass's farthest rows in (distance desc, row asc) order, the resident winners' values gathered from
  // residentValues on compute.
  std::vector<FarRow> take(cuda::RowValues residentValues, cudaStream_t compute);
  void clear() { heap_.clear(); }

 private:
  void ensureResidentCandidates(int f, cudaStream_t d2h);
  void gatherResidentValues(cuda::RowValues residentValues, cudaStream_t compute);

  const BackendShape& shape_;
  int wanted_ = 0;
  const std::int32_t* labels_ = nullptr;
  // a heap of at most wanted_ rows whose front is the worst kept: a candidate that can't enter costs one comparison
  std::vector<FarRow> heap_;
  // resident candidates per chunk: (distance, row), device and pinned, room for candidateCap_ a chunk
  double* candDist_ = nullptr;
  long long* candRow_ = nullptr;
  double* hostCandDist_ = nullptr;
  long long* hostCandRow_ = nullptr;
  int candidateCap_ = 0;
  // resident winners: rows to gather and their values, device and pinned, room for gatherCap_ rows
  long long* gatherRows_ = nullptr;
  float* gatherValues_ = nullptr;
  long long* hostGatherRows_ = nullptr;
  float* hostGatherValues_ = nullptr;
  int gatherCap_ = 0;
};

}  // namespace cuda_backend
}  // namespace kmfleet
