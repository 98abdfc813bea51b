// The CPU backend: host buffers, resident rows (host memory, so `kmfleet fit` does not re-read the file on later
// passes; retained by the first pass or loaded ahead of it, backend.h loadRows), input conversion and checks, then
// the exact assignment (assign.cpp) and the exact statistics (accumulate.cpp) on the engine's thread pool.
#include "cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "../row_math.h"
#include "cpu_internal.h"
#include "pass_sync.h"
#include "row_ranges.h"

namespace kmfleet {

std::string cpuDeviceName(int threads, const char* isa) {
#if defined(__x86_64__)
  const char* arch = "x86_64";
#elif defined(__aarch64__)
  const char* arch = "aarch64";
#else
  const char* arch = "unknown";
#endif
  return std::string("cpu ") + arch + " " + isa + " (" + std::to_string(threads) + " threads)";
}

namespace cpu {
namespace {

std::int64_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<std::int64_t>(pages) * size : (std::int64_t{4} << 30);
}

float bf16ToF32(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const EngineConfig& cfg, ThreadPool& pool)
      // the screen keeps all of a 32-row block's values (32·K floats a thread): not for very large K; below D = 48 its
      // per-row work (the transpose, the bound, the candidates) cost what the halved products saved (bench/cpu/phases.sh)
      : cfg_(cfg), pool_(pool), kt_(selectKernels()),
        screen_(cfg.k <= (1 << 16) && cfg.dims >= 48 ? selectScreen() : nullptr) {
    const std::int64_t D = cfg.dims;
    plan_.backend = BackendKind::Cpu;
    plan_.device = cpuDeviceName(pool.size(), screen_ ? screen_->isa : kt_.isa);
    plan_.precision = Precision::FP32;  // the CPU always computes exact fp32, whatever was asked
    plan_.rowBytes = static_cast<std::size_t>(D) * dtypeBytes(cfg.dtype);
    const std::int64_t autoRows = std::max<std::int64_t>(1, (std::int64_t{16} << 20) / static_cast<std::int64_t>(plan_.rowBytes));
    plan_.chunkRows = std::min(cfg.rows, cfg.chunkRows > 0 ? cfg.chunkRows : autoRows);
    plan_.buffers = cfg.buffers > 0 ? cfg.buffers : 2;
    const std::int64_t residentRowBytes = D * 4 + 8;  // fp32 row + its fp64 norm
    const std::int64_t budget = cfg.memoryBudget >= 0 ? cfg.memoryBudget
                                                      : std::min(cfg.rows * residentRowBytes, physicalMemory() / 4);
    plan_.residentRows = std::min(cfg.rows, budget / residentRowBytes);

    const std::size_t chunk = static_cast<std::size_t>(plan_.chunkRows);
    buffers_.resize(static_cast<std::size_t>(plan_.buffers));
    for (auto& b : buffers_) b.allocate(chunk * plan_.rowBytes, "a host buffer");
    if (cfg.dtype != DType::F32 || cfg.metric == Metric::Cosine)
      work_.allocate(chunk * static_cast<std::size_t>(D), "the fp32 working rows");
    norm2_.allocate(chunk, "the row norms");
    assignWork_.allocate(plan_.chunkRows, screen_ != nullptr);
    scratch_.resize(static_cast<std::size_t>(pool.size()));
    debug_ = std::getenv("KMFLEET_DEBUG") != nullptr;
  }

  const Plan& plan() const override { return plan_; }
  void* hostBuffer(int index) override { return buffers_.at(static_cast<std::size_t>(index)).data(); }
  // Rows held from row 0, complete or not (backend.h loadRows): a pass processes them and the engine streams the rest.
  // Rows once held stay held (they passed the input checks); only a pass that sees all of them completes the set.
  std::int64_t residentHeld() const override { return plan_.residentRows > 0 ? held_.prefix() : 0; }

  void beginPass(const PassSpec& spec) override {
    spec_ = spec;
    pack_.build(spec.centroids, cfg_.k, cfg_.dims, kt_, screen_, pool_);
    for (auto& s : scratch_) {
      s.kernel.allocate(static_cast<std::size_t>(std::max(scratchFloats(cfg_.dims), screenScratchFloats(cfg_.dims, pack_.kpad))),
                        "kernel scratch");
      s.row.allocate(static_cast<std::size_t>(pack_.kpad), "kernel scratch");
    }
    acc_.beginPass(pool_, cfg_.k, cfg_.dims, cfg_.metric, spec.farthest, cfg_.rows);
    if (cfg_.rowBounds) bounds_.beginPass(pool_, spec.centroids, cfg_.k, cfg_.dims, cfg_.rows);
    counts_ = AssignCounts();
  }

  void processResident() override {
    const std::int64_t D = cfg_.dims, R = residentHeld();
    for (std::int64_t r0 = 0; r0 < R; r0 += plan_.chunkRows) {
      if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t n = std::min(plan_.chunkRows, R - r0);
      compute(resident_.data() + r0 * D, residentNorm2_.data() + r0, r0, n, true);
    }
  }

  void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) override {
    const float* x = prepare(data, firstRow, rows);
    retain(x, norm2_.data(), firstRow, rows);
    // the rows it retained are resident from now on: their distances can be computed later; the rest's only now
    const std::int64_t resident = std::clamp<std::int64_t>(plan_.residentRows - firstRow, 0, rows);
    if (resident > 0) compute(x, norm2_.data(), firstRow, resident, true);
    if (resident < rows)
      compute(x + resident * cfg_.dims, norm2_.data() + resident, firstRow + resident, rows - resident, false);
  }

  PassTotals finishPass() override {
    if (debug_)
      std::fprintf(stderr,
                   "kmfleet cpu: %s pass, %lld rows: %lld settled by their bounds, %lld decided by the bf16 screen, %lld "
                   "among its candidates in fp64, %lld through fp32 (%lld of them rechecked in fp64)\n",
                   spec_.mode == PassMode::Fit ? "fit" : "assign", static_cast<long long>(rowsSeen_),
                   static_cast<long long>(counts_.skipped),
                   static_cast<long long>(counts_.screened), static_cast<long long>(counts_.pairs),
                   static_cast<long long>(counts_.fp32), static_cast<long long>(counts_.rechecked));
    rowsSeen_ = 0;
    PassTotals t = acc_.finish(pool_, pack_, resident_.data(), residentNorm2_.data(), residentHeld(), spec_.labels);
    t.rowsSettled = counts_.skipped;
    return t;
  }

  void abortPass() noexcept override { rowsSeen_ = 0; }

  bool loadsRows() const override { return true; }

  // Converts straight into the resident rows (no host buffer, no pass), on half of the engine's threads: a load runs
  // while a download is in flight, whose server and client need cores too, and one thread converts slower than a
  // local S3 server delivers, which would hold up k-means++ queued behind the loads on the engine thread. A 2-core
  // host keeps one thread.
  void loadRows(const void* rows, std::int64_t firstRow, std::int64_t count) override {
    const std::int64_t R = plan_.residentRows, end = std::min(firstRow + count, R);
    if (firstRow >= end) return;
    allocateResident();
    const std::int64_t D = cfg_.dims;
    const std::size_t rowBytes = plan_.rowBytes;
    const int loaders = std::max(1, pool_.size() / 2);
    const std::int64_t none = std::numeric_limits<std::int64_t>::max();
    std::vector<std::pair<std::int64_t, std::int64_t>> missing;
    held_.forEachMissing(firstRow, end, [&](std::int64_t b, std::int64_t e) { missing.emplace_back(b, e); });
    for (const auto& [b, e] : missing) {
      // each loader converts a contiguous share and notes its first bad row; the rows before the first bad row of
      // all are held, the rest is left to the pass that streams it (the same error, the same row)
      std::vector<std::int64_t> bad(static_cast<std::size_t>(loaders), none);
      auto convert = [&](int tid) {
        std::int64_t r0, r1;
        ThreadPool::range(e - b, tid, loaders, 1, r0, r1);
        for (std::int64_t r = b + r0; r < b + r1; ++r) {
          const void* in = static_cast<const std::uint8_t*>(rows) + static_cast<std::size_t>(r - firstRow) * rowBytes;
          if (prepareRow(in, resident_.data() + r * D, true, residentNorm2_[static_cast<std::size_t>(r)]) != RowCheck::Ok) {
            bad[static_cast<std::size_t>(tid)] = r;
            return;
          }
        }
      };
      if (loaders == 1) {
        convert(0);
      } else {
        pool_.run([&](int tid, int) {
          if (tid < loaders) convert(tid);
        });
      }
      const std::int64_t firstBad = std::min(e, *std::min_element(bad.begin(), bad.end()));
      held_.add(b, firstBad);
      if (firstBad < e) return;
    }
  }

 private:
  // Converts the buffer's rows to fp32 (normalized for cosine) and computes ‖x‖² in fp64; rejects non-finite
  // values and (cosine) zero rows, naming the first bad global row, before anything is accumulated.
  const float* prepare(const void* buf, std::int64_t firstRow, std::int64_t n) {
    const std::int64_t D = cfg_.dims;
    const bool direct = cfg_.dtype == DType::F32 && cfg_.metric == Metric::L2;
    float* out = direct ? static_cast<float*>(const_cast<void*>(buf)) : work_.data();
    double* norm2 = norm2_.data();
    const std::int64_t none = std::numeric_limits<std::int64_t>::max();
    std::vector<std::int64_t> badNonFinite(static_cast<std::size_t>(pool_.size()), none);
    std::vector<std::int64_t> badZero(static_cast<std::size_t>(pool_.size()), none);
    pool_.run([&](int tid, int nt) {
      std::int64_t b, e;
      ThreadPool::range(n, tid, nt, 1, b, e);
      for (std::int64_t r = b; r < e; ++r) {
        const RowCheck c = prepareRow(static_cast<const std::uint8_t*>(buf) + static_cast<std::size_t>(r) * plan_.rowBytes,
                                      out + r * D, !direct, norm2[r]);
        if (c == RowCheck::NonFinite) {
          badNonFinite[static_cast<std::size_t>(tid)] = r;
          return;
        }
        if (c == RowCheck::ZeroNorm) {
          badZero[static_cast<std::size_t>(tid)] = r;
          return;
        }
      }
    });
    const std::int64_t nf = *std::min_element(badNonFinite.begin(), badNonFinite.end());
    const std::int64_t zr = *std::min_element(badZero.begin(), badZero.end());
    if (nf != none && nf <= zr) {
      const std::int64_t row = firstRow + nf;
      throw EngineError(ErrorCode::NonFiniteInput,
                        "row " + std::to_string(row) + " has a non-finite value (NaN or Inf)", row);
    }
    if (zr != none)
      throw EngineError(ErrorCode::InvalidArgument, "row " + std::to_string(firstRow + zr) +
                                                        " has zero norm: cosine distance is undefined for it");
    return out;
  }

  enum class RowCheck { Ok, NonFinite, ZeroNorm };

  // One input row → fp32 (unit length for cosine) at xr, and its ‖x‖² in fp64. The one conversion of both a pass
  // (prepare) and a load (loadRows), so a loaded row is bit for bit the row a pass would have retained. f32 rows are
  // copied only when `copy` (a pass on f32 L2 rows computes in place, in the host buffer).
  RowCheck prepareRow(const void* in, float* xr, bool copy, double& norm2) const {
    const std::int64_t D = cfg_.dims;
    if (cfg_.dtype == DType::F16) {
      kt_.f16ToF32(static_cast<const std::uint16_t*>(in), xr, D);
    } else if (cfg_.dtype == DType::BF16) {
      const std::uint16_t* h = static_cast<const std::uint16_t*>(in);
      for (std::int64_t d = 0; d < D; ++d) xr[d] = bf16ToF32(h[d]);
    } else if (copy) {
      std::memcpy(xr, in, static_cast<std::size_t>(D) * 4);
    }
    double n2 = sqNorm64(xr, D);
    if (!std::isfinite(n2)) return RowCheck::NonFinite;
    if (cfg_.metric == Metric::Cosine) {
      if (n2 == 0) return RowCheck::ZeroNorm;
      const double inv = 1.0 / std::sqrt(n2);
      for (std::int64_t d = 0; d < D; ++d) xr[d] = static_cast<float>(static_cast<double>(xr[d]) * inv);
      n2 = sqNorm64(xr, D);
    }
    norm2 = n2;
    return RowCheck::Ok;
  }

  void allocateResident() {
    if (resident_.data()) return;
    resident_.allocate(static_cast<std::size_t>(plan_.residentRows * cfg_.dims), "resident rows");
    residentNorm2_.allocate(static_cast<std::size_t>(plan_.residentRows), "resident rows");
  }

  // Keeps the chunk's rows of [0, residentRows) that are not held yet (a load may have brought some already).
  void retain(const float* x, const double* norm2, std::int64_t firstRow, std::int64_t n) {
    const std::int64_t end = std::min(firstRow + n, plan_.residentRows);
    if (firstRow >= end) return;
    allocateResident();
    const std::int64_t D = cfg_.dims;
    held_.forEachMissing(firstRow, end, [&](std::int64_t from, std::int64_t to) {
      const std::int64_t m = to - from, off = from - firstRow;
      pool_.run([&](int tid, int nt) {
        std::int64_t b, e;
        ThreadPool::range(m, tid, nt, 1, b, e);
        if (b < e)
          std::memcpy(resident_.data() + (from + b) * D, x + (off + b) * D, static_cast<std::size_t>((e - b) * D) * 4);
      });
      std::memcpy(residentNorm2_.data() + from, norm2 + off, static_cast<std::size_t>(m) * 8);
    });
    held_.add(firstRow, end);
  }

  // Pieces of ~1 MiB of rows, so that the statistics find the moved rows in cache, in whole kernel blocks of 32.
  std::int64_t pieceRows() const {
    const std::int64_t piece = std::max<std::int64_t>(32 * pool_.size(), (std::int64_t{1} << 20) / (cfg_.dims * 4));
    return (piece + 31) / 32 * 32;
  }

  // Assignment then the statistics, piece by piece, all in one pool.run: the threads take blocks of rows (assigning
  // them, noting the rows the statistics must take in and, where asked, their distances), then the clusters' tasks
  // (moving the noted rows), meeting at barriers (pass_sync.h: a short spin, then sleep). `resident`: rows of the
  // resident range (their re-seeding distances can wait for an empty cluster); else streamed rows.
  void compute(const float* x, const double* norm2, std::int64_t firstRow, std::int64_t n, bool resident) {
    const std::int64_t D = cfg_.dims, piece = pieceRows();
    // blocks of rows (whole kernel blocks of 32): ~2M multiply-adds each, but at least 4 per thread and piece
    const std::int64_t units = std::max<std::int64_t>(1, (std::int64_t{1} << 21) / (32 * D * pack_.kpad));
    const std::int64_t block = 32 * std::max<std::int64_t>(1, std::min(units, piece / (4 * 32 * pool_.size())));
    const std::int64_t pieces = (n + piece - 1) / piece;
    const int tasks = acc_.tasks();
    RowBounds* bounds = cfg_.rowBounds && bounds_.usable() ? &bounds_ : nullptr;
    // distances: those asked for, and the streamed rows' in a fit pass (re-seeding candidates: they are gone later)
    const bool farthest = !resident && acc_.farthestWanted();
    const bool distances = spec_.distances != nullptr || farthest;
    PassSync sync(pool_.size());
    std::vector<AssignCounts> part(static_cast<std::size_t>(pool_.size()));
    pool_.run([&](int tid, int) {
      AssignScratch& s = scratch_[static_cast<std::size_t>(tid)];
      try {
        for (std::int64_t p = 0; p < pieces; ++p) {
          const std::int64_t p0 = p * piece, m = std::min(piece, n - p0), row = firstRow + p0;
          const int a = 2 * static_cast<int>(p & 1), b = a + 1;  // this piece's task counters
          std::int32_t* labels = spec_.labels + row;
          const float* xp = x + p0 * D;
          acc_.startPiece(tid);
          for (std::int64_t t = sync.take(a); t * block < m; t = sync.take(a)) {
            const std::int64_t r0 = t * block, r1 = std::min(m, (t + 1) * block);
            assignRange(kt_, screen_, s, pack_, xp, norm2 + p0, r0, r1, assignWork_, labels,
                        part[static_cast<std::size_t>(tid)], bounds, row);
            acc_.collect(tid, row, r0, r1, labels);
            if (distances)
              acc_.distances(tid, pack_, xp, norm2 + p0, row, r0, r1, labels,
                             spec_.distances ? spec_.distances + row : nullptr, farthest);
          }
          if (!sync.barrier()) return;
          if (tid == 0) sync.reset(a);
          for (std::int64_t t = sync.take(b); t < tasks; t = sync.take(b))
            acc_.moveTask(static_cast<int>(t), row, xp);
          if (!sync.barrier()) return;
          if (tid == 0) sync.reset(b);
        }
      } catch (...) {
        sync.fail();
        throw;
      }
    });
    for (const auto& c : part) counts_.add(c);
    acc_.addRowsSeen(n);
    rowsSeen_ += n;
  }

  EngineConfig cfg_;
  ThreadPool& pool_;
  const KernelTable& kt_;
  const ScreenKernel* screen_;  // nullptr: the fp32 kernel for every row
  Plan plan_;
  PassSpec spec_;
  CentroidPack pack_;
  Accumulator acc_;
  std::vector<Array<std::uint8_t>> buffers_;
  Array<float> work_;
  Array<double> norm2_;
  AssignWork assignWork_;
  std::vector<AssignScratch> scratch_;
  Array<float> resident_;
  Array<double> residentNorm2_;
  RowRanges held_;  // resident rows in place (retained by a pass or loaded)
  RowBounds bounds_;  // EngineConfig.rowBounds
  std::int64_t rowsSeen_ = 0;
  AssignCounts counts_;
  bool debug_ = false;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> makeCpuBackend(const EngineConfig& config, ThreadPool& pool) {
  return std::make_unique<cpu::CpuBackend>(config, pool);
}

}  // namespace kmfleet
