// The overlap partials of a partly resident pass (overlap_partials.h).
#include "overlap_partials.h"

#include "device_memory.h"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

void OverlapPartials::allocate() {
  check(cudaEventCreateWithFlags(&passReady_, cudaEventDisableTiming), "cudaEventCreate");
  if (shape_.memory.overlapPartials <= 0) return;
  // planned beside the budget (planner.cpp): the chunk stream's own scratch + partials
  const std::size_t chunk = std::size_t(shape_.memory.chunkRows);
  allocAccumulateScratch(scratch_, shape_.memory.chunkRows, shape_.d, shape_.k);
  allocFlagScratch(flags_, chunk, "overlap scratch");
  flaggedCount_ = devAlloc<unsigned>(2, "overlap scratch");
  const std::size_t P = std::size_t(shape_.memory.overlapPartials);
  sums_ = devAlloc<double>(P * shape_.k * shape_.d, "overlap partials");
  counts_ = devAlloc<long long>(P * shape_.k, "overlap partials");
  inertia_ = devAlloc<double>(P * shape_.k, "overlap partials");
  ready_.resize(P, nullptr);
  folded_.resize(P, nullptr);
  for (auto* v : {&ready_, &folded_})
    for (cudaEvent_t& e : *v) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
}

void OverlapPartials::release() noexcept {
  freeAccumulateScratch(scratch_);
  freeFlagScratch(flags_);
  for (void* p : {static_cast<void*>(flaggedCount_), static_cast<void*>(sums_), static_cast<void*>(counts_),
                  static_cast<void*>(inertia_)})
    if (p) cudaFree(p);
  flaggedCount_ = nullptr;
  sums_ = nullptr;
  counts_ = nullptr;
  inertia_ = nullptr;
  for (auto* v : {&ready_, &folded_}) {
    for (cudaEvent_t e : *v)
      if (e) cudaEventDestroy(e);
    v->clear();
  }
  if (passReady_) cudaEventDestroy(passReady_);
  passReady_ = nullptr;
}

void OverlapPartials::start(cudaStream_t compute) {
  active_ = true;
  check(cudaEventRecord(passReady_, compute), "cudaEventRecord");
}

void OverlapPartials::zero(std::size_t b, bool fit, cudaStream_t s) {
  check(cudaStreamWaitEvent(s, folded_[b], 0), "cudaStreamWaitEvent");
  if (fit) check(cudaMemsetAsync(sums(b), 0, sizeof(double) * std::size_t(shape_.k) * shape_.d, s), "memset");
  check(cudaMemsetAsync(counts(b), 0, sizeof(long long) * shape_.k, s), "memset");
  check(cudaMemsetAsync(inertia(b), 0, sizeof(double) * shape_.k, s), "memset");
}

void OverlapPartials::markReady(std::size_t b, cudaStream_t s) {
  check(cudaEventRecord(ready_[b], s), "cudaEventRecord");
}

void OverlapPartials::fold(std::size_t b, DeviceTotals& totals, bool fit, cudaStream_t compute) {
  check(cudaStreamWaitEvent(compute, ready_[b], 0), "cudaStreamWaitEvent");
  foldPartial(shape_.d, shape_.k, fit, sums(b), counts(b), inertia(b), totals.sums, totals.counts, totals.inertia,
              compute);
  check(cudaEventRecord(folded_[b], compute), "cudaEventRecord");
}

void OverlapPartials::foldDeferred(DeviceTotals& totals, bool fit, cudaStream_t compute) {
  for (std::size_t b : deferred_) fold(b, totals, fit, compute);
  deferred_.clear();
}

}  // namespace cuda_backend
}  // namespace kmfleet
