// A job in fp16 or bf16 precision over fp32 rows keeps its rows in that type: the engine rounds each row (to nearest,
// ties to even) as it takes it, and from then on the job is the same as one over a dataset stored in that type. Every
// tier holds and streams half the bytes of the fp32 rows, and a pass gives the same bits whichever tier its rows came
// from (DESIGN.md "Numerics": the statistics are of the rounded rows).
#pragma once

#include <cstdint>

#include "backend.h"
#include "cpu/kernels.h"
#include "thread_pool.h"

namespace kmfleet {

class RowNarrowing {
 public:
  RowNarrowing() = default;
  // The type the engine keeps the rows of this job in: F16/BF16 for an fp16/bf16 job over fp32 rows, else the input's.
  static DType keptType(const EngineConfig& cfg);
  RowNarrowing(DType to, std::int64_t dims);

  bool active() const { return to_ != DType::F32; }
  DType type() const { return to_; }

  // Rows [firstRow, firstRow + count) of fp32 `src` into `dst` in the kept type, on the pool's threads. A finite value
  // the type cannot hold (fp16: beyond ±65504) is a NonFiniteInput error naming the row, the feature and the value;
  // NaN and Inf stay what they are for the backend's own input check to report.
  void narrow(ThreadPool& pool, const float* src, void* dst, std::int64_t firstRow, std::int64_t count) const;
  // The same on the calling thread (a pool thread's piece of a chunk).
  void narrowHere(const float* src, void* dst, std::int64_t firstRow, std::int64_t count) const;

 private:
  // count rows; returns the index in src of the first finite value the type cannot hold, or -1
  std::int64_t narrowRows(const float* src, std::uint16_t* dst, std::int64_t count) const;
  // throws the error for value `bad` (an index into src) of rows from firstRow
  [[noreturn]] void beyondRange(const float* src, std::int64_t bad, std::int64_t firstRow) const;

  DType to_ = DType::F32;
  std::int64_t dims_ = 0;
  const cpu::KernelTable* kt_ = nullptr;
};

}  // namespace kmfleet
