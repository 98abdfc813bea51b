#include "row_narrowing.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace kmfleet {

namespace {

// fp32 → bf16, to nearest, ties to even, NaN kept quiet: one portable loop (AVX-512 BF16's conversion flushes
// subnormals, which would make the bits depend on the CPU).
void f32ToBf16(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t x;
    std::memcpy(&x, in + i, 4);
    out[i] = (x & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((x >> 16) | 0x40u)
                                              : static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
}

bool isInf16(std::uint16_t h, DType t) { return (h & 0x7fffu) == (t == DType::F16 ? 0x7c00u : 0x7f80u); }

}  // namespace

DType RowNarrowing::keptType(const EngineConfig& cfg) {
  if (cfg.dtype != DType::F32) return cfg.dtype;
  if (cfg.precision == Precision::FP16) return DType::F16;
  if (cfg.precision == Precision::BF16) return DType::BF16;
  return DType::F32;
}

RowNarrowing::RowNarrowing(DType to, std::int64_t dims) : to_(to), dims_(dims), kt_(&cpu::selectKernels()) {}

std::int64_t RowNarrowing::narrowRows(const float* src, std::uint16_t* dst, std::int64_t count) const {
  const std::int64_t n = count * dims_;
  if (to_ == DType::F16) kt_->f32ToF16(src, dst, n);
  else f32ToBf16(src, dst, n);
  // a branch-free look for any infinity first (it vectorizes); the rows seldom have one
  const std::uint16_t inf = to_ == DType::F16 ? 0x7c00u : 0x7f80u;
  unsigned any = 0;
  for (std::int64_t i = 0; i < n; ++i) any |= static_cast<unsigned>((dst[i] & 0x7fffu) == inf);
  if (!any) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (isInf16(dst[i], to_) && !std::isinf(src[i])) return i;
  return -1;
}

void RowNarrowing::narrow(ThreadPool& pool, const float* src, void* dst, std::int64_t firstRow,
                          std::int64_t count) const {
  auto* out = static_cast<std::uint16_t*>(dst);
  std::int64_t bad = -1;  // the first value the type cannot hold, as an index into src
  // below ~1 MiB of rows one thread is quicker than waking the pool
  if (count * dims_ < (std::int64_t{1} << 18) || pool.size() == 1) {
    bad = narrowRows(src, out, count);
  } else {
    std::vector<std::int64_t> firstBad(static_cast<std::size_t>(pool.size()), -1);
    pool.run([&](int tid, int nt) {
      std::int64_t b, e;
      ThreadPool::range(count, tid, nt, 1, b, e);
      if (e <= b) return;
      const std::int64_t i = narrowRows(src + b * dims_, out + b * dims_, e - b);
      if (i >= 0) firstBad[static_cast<std::size_t>(tid)] = b * dims_ + i;
    });
    for (std::int64_t i : firstBad)
      if (i >= 0) {
        bad = i;
        break;  // the threads' ranges are in row order
      }
  }
  if (bad >= 0) beyondRange(src, bad, firstRow);
}

void RowNarrowing::narrowHere(const float* src, void* dst, std::int64_t firstRow, std::int64_t count) const {
  const std::int64_t bad = narrowRows(src, static_cast<std::uint16_t*>(dst), count);
  if (bad >= 0) beyondRange(src, bad, firstRow);
}

void RowNarrowing::beyondRange(const float* src, std::int64_t bad, std::int64_t firstRow) const {
  const std::int64_t row = firstRow + bad / dims_;
  const bool f16 = to_ == DType::F16;
  char value[32];
  std::snprintf(value, sizeof value, "%.9g", static_cast<double>(src[bad]));
  throw EngineError(ErrorCode::NonFiniteInput,
                    "row " + std::to_string(row) + " feature " + std::to_string(bad % dims_) + ": " + value + " is beyond the range of " + (f16 ? "fp16 (±65504)" : "bf16") +
                        ", the type a job in precision " + (f16 ? "fp16" : "bf16") +
                        " keeps its rows in: use precision " + (f16 ? "bf16 or fp32" : "fp32"),
                    row);
}

}  // namespace kmfleet
