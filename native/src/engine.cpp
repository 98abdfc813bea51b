#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <sched.h>

#include "cpu/cpu_backend.h"
#include "cpu/kernels.h"
#include "file_rows.h"
#include "host_memory.h"
#include "row_math.h"
#ifdef KMFLEET_WITH_CUDA
#include "cost_model.h"
#include "cuda_bridge.h"
#endif

namespace kmfleet {

namespace {

[[noreturn]] void invalid(const std::string& msg) { throw EngineError(ErrorCode::InvalidArgument, msg); }

// Whatever a backend throws becomes an EngineError (bad_alloc → OutOfMemory, anything else → Device).
EngineError asEngineError(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const EngineError& e) {
    return e;
  } catch (const std::bad_alloc&) {
    return EngineError(ErrorCode::OutOfMemory, "out of host memory");
  } catch (const std::exception& e) {
    return EngineError(ErrorCode::Device, std::string("internal error: ") + e.what());
  } catch (...) {
    return EngineError(ErrorCode::Device, "internal error");
  }
}

int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

std::string str(std::int64_t v) { return std::to_string(v); }

void validate(const EngineConfig& c) {
  if (c.rows < 1) invalid("rows must be >= 1, got " + str(c.rows));
  if (c.dims < 1) invalid("dims must be >= 1, got " + str(c.dims));
  if (c.k < 1) invalid("k must be >= 1, got " + str(c.k));
  if (c.k > c.rows) invalid("k must be <= rows, got k=" + str(c.k) + " with rows=" + str(c.rows));
  if (c.k > std::numeric_limits<std::int32_t>::max()) invalid("k must fit in int32, got " + str(c.k));
  if (c.dims > (std::int64_t{1} << 24)) invalid("dims must be <= 16777216, got " + str(c.dims));
  if (c.rows > (std::int64_t{1} << 40)) invalid("rows must be <= 2^40, got " + str(c.rows));
  if (c.chunkRows < 0) invalid("chunkRows must be >= 1, got " + str(c.chunkRows));
  if (c.chunkRows > std::numeric_limits<std::int32_t>::max())
    invalid("chunkRows must be < 2^31, got " + str(c.chunkRows));
  if (c.buffers < 0 || c.buffers > 64) invalid("buffers must be in 1..64, got " + str(c.buffers));
  if (c.threads < 0 || c.threads > 1024) invalid("threads must be in 1..1024, got " + str(c.threads));
  if (c.memoryBudget < -1) invalid("memoryBudget must be >= 0, got " + str(c.memoryBudget));
  if (c.deviceMemoryLimit < -1) invalid("deviceMemory must be >= 0, got " + str(c.deviceMemoryLimit));
  if (c.hostMemoryBudget < -1) invalid("hostMemoryBudget must be >= 0, got " + str(c.hostMemoryBudget));
  if (c.device < 0) invalid("device must be >= 0, got " + str(c.device));
}

#ifdef KMFLEET_WITH_CUDA
// backend 'auto': the GPU only where the cost model says it finishes sooner than this engine's CPU threads.
bool preferCudaFor(const EngineConfig& cfg) {
  const std::int64_t rowBytes = cfg.dims * static_cast<std::int64_t>(dtypeBytes(cfg.dtype));
  return costmodel::preferCuda(cfg.rows, cfg.dims, cfg.k, rowBytes, cfg.threads);
}
#endif

std::unique_ptr<Backend> makeBackend(const EngineConfig& cfg, ThreadPool& pool) {
  if (cfg.backend == BackendKind::Cpu) return makeCpuBackend(cfg, pool);
#ifdef KMFLEET_WITH_CUDA
  if (cfg.backend == BackendKind::Cuda) return makeCudaBackend(cfg, &pool);
  // several devices asked for: the GPUs, whatever the cost model says of one
  if ((preferCudaFor(cfg) || cfg.devices.size() > 1) && queryCudaDevices().available) {
    try {
      return makeCudaBackend(cfg, &pool);
    } catch (const EngineError& e) {
      if (e.code() != ErrorCode::Device) throw;  // auto: a device that fails to start → the CPU
    }
  }
  return makeCpuBackend(cfg, pool);
#else
  if (cfg.backend == BackendKind::Cuda)
    throw EngineError(ErrorCode::Device, "backend 'cuda' requested but this addon was built without CUDA");
  return makeCpuBackend(cfg, pool);
#endif
}

}  // namespace

Engine::Engine(const EngineConfig& config) : cfg_(config) {
  validate(cfg_);
  if (cfg_.threads == 0) cfg_.threads = usableCores();  // the cores this process may run on (cpusets included)
  pool_ = std::make_unique<ThreadPool>(cfg_.threads);
  EngineConfig kept = cfg_;  // the backend sees the rows as the engine keeps them
  kept.dtype = RowNarrowing::keptType(cfg_);
  backend_ = makeBackend(kept, *pool_);
  plan_ = backend_->plan();
  plan_.storedRowBytes = plan_.rowBytes;
  plan_.keptDtype = kept.dtype;
  if (kept.dtype != cfg_.dtype) {
    narrowing_ = RowNarrowing(kept.dtype, cfg_.dims);
    plan_.rowBytes = static_cast<std::size_t>(cfg_.dims) * dtypeBytes(cfg_.dtype);
    callerBuffers_.resize(static_cast<std::size_t>(plan_.buffers));
    for (auto& b : callerBuffers_) b.allocate(static_cast<std::size_t>(plan_.chunkRows * cfg_.dims), "a host buffer");
  }
  // the host tier: the rows after the resident ones, as many whole chunks as the budget holds (all of them if it can)
  const std::int64_t budget = cfg_.hostMemoryBudget >= 0 ? cfg_.hostMemoryBudget : defaultHostTierBudget();
  const std::int64_t after = cfg_.rows - plan_.residentRows;
  const std::int64_t rowBytes = static_cast<std::int64_t>(plan_.storedRowBytes);
  plan_.hostRows = after <= budget / rowBytes ? after
                                              : std::min(after, budget / (plan_.chunkRows * rowBytes) * plan_.chunkRows);
  tier_ = HostTier(plan_.residentRows, plan_.hostRows, plan_.chunkRows, plan_.storedRowBytes);
  inFlight_.assign(static_cast<std::size_t>(plan().buffers), false);
  labels_.allocate(static_cast<std::size_t>(cfg_.rows), "labels");
  next_.allocate(static_cast<std::size_t>(cfg_.rows), "labels");
  std::fill(labels_.data(), labels_.data() + cfg_.rows, -1);
}

Engine::~Engine() = default;

void* Engine::hostBuffer(int index) {
  if (index < 0 || index >= plan().buffers)
    invalid("buffer index must be in 0.." + str(plan().buffers - 1) + ", got " + str(index));
  return narrowing_.active() ? static_cast<void*>(callerBuffers_[static_cast<std::size_t>(index)].data())
                             : backend_->hostBuffer(index);
}

std::size_t Engine::bufferBytes() const { return static_cast<std::size_t>(plan().chunkRows) * plan().rowBytes; }

void Engine::setCentroids(const float* c, std::size_t count) {
  const std::int64_t K = cfg_.k, D = cfg_.dims;
  if (passOpen_) invalid("cannot set centroids while a pass is running (call finishPass first)");
  if (static_cast<std::int64_t>(count) != K * D)
    invalid("centroids must have k*dims = " + str(K * D) + " values (k=" + str(K) + ", dims=" + str(D) + "), got " +
            str(static_cast<std::int64_t>(count)));
  std::vector<float> v(c, c + count);
  for (std::int64_t k = 0; k < K; ++k) {
    float* ck = v.data() + k * D;
    for (std::int64_t d = 0; d < D; ++d)
      if (!std::isfinite(ck[d]))
        invalid("centroid " + str(k) + " has a non-finite value at feature " + str(d));
    if (cfg_.metric == Metric::Cosine) {
      const double n2 = sqNorm64(ck, D);
      if (n2 == 0) invalid("centroid " + str(k) + " has zero norm: cosine distance is undefined for it");
      const double inv = 1.0 / std::sqrt(n2);
      for (std::int64_t d = 0; d < D; ++d) ck[d] = static_cast<float>(ck[d] * inv);
    }
  }
  chained_ = false;  // a pass the engine began itself started from the old centroids: the next beginPass replaces it
  std::lock_guard<std::mutex> lock(mu_);
  centroids_ = std::move(v);
  centroidsFromUpdate_ = false;
  centroidsOnDevice_ = false;
}

void Engine::copyCentroids(float* dst) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (centroids_.empty()) invalid("no centroids yet: call setCentroids or initKmeansPlusPlus first");
  copyCentroidsLocked(dst);
}

// Straight from the backend while the last device update's centroids are not on the host: a read between passes
// (the driver's checkpoint) costs one copy, and centroids_ stays as it is, so a pass may be open meanwhile.
void Engine::copyCentroidsLocked(float* dst) const {
  if (centroidsOnDevice_) backend_->copyUpdatedCentroids(dst);
  else pool_->copy(dst, centroids_.data(), centroids_.size());
}

void Engine::hostCentroidsLocked() {
  if (!centroidsOnDevice_) return;
  backend_->copyUpdatedCentroids(centroids_.data());
  centroidsOnDevice_ = false;
}

void Engine::admitReadCentroids() const {
  if (!hasCentroids()) invalid("no centroids yet: call setCentroids or initKmeansPlusPlus first");
  if (passOpen_ && finishing_)
    invalid("readCentroids while finishPass is pending: read before finishPass (the pass's own centroids) or after it "
            "settles (the updated ones)");
}

bool Engine::hasCentroids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !centroids_.empty();
}

std::uint64_t Engine::admitBegin(PassMode mode, bool distances, bool dataVariance, std::int64_t firstRow,
                                 bool& adopted) {
  adopted = false;
  if (!hasCentroids()) invalid("beginPass needs centroids: call setCentroids or initKmeansPlusPlus first");
  if (distances && mode != PassMode::Assign) invalid("distances are only available on assign passes");
  if (chained_) {  // the engine began the next fit pass itself: take it over if it is this one, else it is replaced
    chained_ = false;
    if (mode == PassMode::Fit && !distances && !dataVariance && firstRow == chainedFirstRow_ && !passOpen_) {
      adopted = true;
      passOpen_ = true;
      finishing_ = false;
      jsMode_ = mode;
      jsDistances_ = false;
      distancesReady_ = false;
      return gen_;
    }
  }
  // A pass left open (cancelled, failed or abandoned) is replaced: its queued work runs first and is discarded.
  passOpen_ = true;
  finishing_ = false;
  jsMode_ = mode;
  jsDistances_ = distances;
  distancesReady_ = false;
  return ++gen_;
}

std::uint64_t Engine::admitFeed(int buffer, std::int64_t firstRow, std::int64_t rowCount) {
  if (!passOpen_ || finishing_) invalid("feed outside a pass: call beginPass first");
  if (buffer < 0 || buffer >= plan().buffers)
    invalid("buffer index must be in 0.." + str(plan().buffers - 1) + ", got " + str(buffer));
  if (inFlight_[static_cast<std::size_t>(buffer)])
    invalid("buffer " + str(buffer) + " is still being fed: await its feed before refilling it");
  checkFeedRange(firstRow, rowCount);
  inFlight_[static_cast<std::size_t>(buffer)] = true;
  return gen_;
}

std::uint64_t Engine::admitFeedFile(std::int64_t firstRow, std::int64_t rowCount) {
  if (!passOpen_ || finishing_) invalid("feedFile outside a pass: call beginPass first");
  checkFeedRange(firstRow, rowCount);
  return gen_;
}

void Engine::checkFeedRange(std::int64_t firstRow, std::int64_t rowCount) const {
  if (rowCount < 1 || rowCount > plan().chunkRows)
    invalid("rowCount must be in 1.." + str(plan().chunkRows) + " (chunkRows), got " + str(rowCount));
  if (firstRow < 0 || firstRow + rowCount > cfg_.rows)
    invalid("rows [" + str(firstRow) + ", " + str(firstRow + rowCount) + ") are out of range: the dataset has " +
            str(cfg_.rows) + " rows");
}

std::uint64_t Engine::admitFinish() {
  if (!passOpen_ || finishing_) invalid("finishPass without a pass: call beginPass first");
  finishing_ = true;
  return gen_;
}

std::uint64_t Engine::admitInit() {
  if (passOpen_) invalid("cannot initialise centroids while a pass is running (call finishPass first)");
  chained_ = false;  // a pass the engine began itself is abandoned (runInit)
  return ++gen_;
}

std::uint64_t Engine::admitLoad(std::int64_t firstRow, std::int64_t rowCount) {
  if (!backend_->loadsRows())
    invalid("loadRows is not supported by the " + std::string(plan().backend == BackendKind::Cuda ? "cuda" : "cpu") +
            " backend (engine.loadsRows is false): feed the rows in the first pass");
  if (passOpen_) invalid("cannot load rows while a pass is running (call finishPass first)");
  chained_ = false;  // a pass the engine began itself is abandoned (runLoad)
  if (rowCount < 1) invalid("rowCount must be >= 1, got " + str(rowCount));
  if (firstRow < 0 || firstRow + rowCount > cfg_.rows)
    invalid("rows [" + str(firstRow) + ", " + str(firstRow + rowCount) + ") are out of range: the dataset has " +
            str(cfg_.rows) + " rows");
  return ++gen_;
}

std::int64_t Engine::runLoad(std::uint64_t gen, const void* rows, std::int64_t firstRow, std::int64_t rowCount) {
  // checked once, before anything is retained: a load is short (a block of a download), and one that rejects must
  // have retained nothing, so that the caller's count of rows held stays exact
  if (gen <= cancelGen_.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
  if (passRunning_ && passChained_) abortPass();  // begun by the engine itself, not taken over (admitLoad)
  if (passRunning_) invalid("cannot load rows while a pass is running");
  if (narrowing_.active()) {
    Array<std::uint16_t> kept(static_cast<std::size_t>(rowCount * cfg_.dims), "rows loaded ahead of a pass");
    try {
      narrowing_.narrow(*pool_, static_cast<const float*>(rows), kept.data(), firstRow, rowCount);
    } catch (const EngineError& e) {
      // as for a row the backend's input check refuses: the rows before it are loaded, and the pass reports it
      if (e.code() != ErrorCode::NonFiniteInput) throw;
      rowCount = e.row() - firstRow;
    }
    if (rowCount > 0) backend_->loadRows(kept.data(), firstRow, rowCount);
    return heldRows();
  }
  backend_->loadRows(rows, firstRow, rowCount);
  return heldRows();
}

void Engine::feedSettled(int buffer) {
  if (buffer >= 0 && buffer < static_cast<int>(inFlight_.size())) inFlight_[static_cast<std::size_t>(buffer)] = false;
}

void Engine::finishSettled(bool ok, const PassResult* result) {
  distancesReady_ = ok && jsMode_ == PassMode::Assign && jsDistances_;
  passOpen_ = false;
  finishing_ = false;
  chained_ = ok && result && result->chained;
  chainedFirstRow_ = chained_ ? result->chainedFirstRow : -1;
}

void Engine::cancel() {
  cancelGen_.store(gen_);
  cancelFlag_.store(true);
  chained_ = false;  // a pass the engine began itself is cancelled with the rest: the next beginPass starts afresh
}

void Engine::checkGen(std::uint64_t gen) {
  if (gen <= cancelGen_.load()) {
    if (passRunning_ && passGen_ == gen) abortPass();
    throw EngineError(ErrorCode::Cancelled, "cancelled");
  }
  if (gen != passGen_) throw EngineError(ErrorCode::Cancelled, "cancelled: the pass was replaced by a newer one");
  if (passError_) throw *passError_;
  if (!passRunning_) throw EngineError(ErrorCode::InvalidArgument, "no pass is running");
}

void Engine::abortPass() {
  if (passRunning_) backend_->abortPass();
  passRunning_ = false;
  heldPending_ = false;
}

std::int64_t Engine::heldRows() const {
  const std::int64_t resident = backend_->residentHeld();
  return resident < plan_.residentRows ? resident : tier_.heldEnd();
}

void Engine::runBegin(std::uint64_t gen, PassMode mode, bool distances, bool dataVariance, std::int64_t firstRow,
                      const PassChain& chain) {
  abortPass();  // a pass left open is abandoned
  passGen_ = gen;
  passChained_ = false;
  chain_ = mode == PassMode::Fit ? chain : PassChain();
  passError_.reset();
  if (gen <= cancelGen_.load()) {
    passError_ = std::make_unique<EngineError>(ErrorCode::Cancelled, "cancelled");
    return;
  }
  cancelFlag_.store(false);
  const double t0 = nowMs();
  try {
    bool fromUpdate = false;
    const float* centroidsForPass = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fromUpdate = centroidsFromUpdate_;
      // The pass's centroids. centroids_ cannot change while a pass is open (setCentroids and init refuse, the
      // update comes after the backend's finishPass), so a backend that keeps the update's centroids on its device
      // reads none of them (nullptr while they have not come to the host: centroidsOnDevice_) and the 4 MB-per-
      // K×D=1M copy is made only if a host update needs it (passCentroids()).
      passCentroidsCopied_ = !(fromUpdate && backend_->updatesOnDevice());
      if (passCentroidsCopied_) {  // never while centroidsOnDevice_ (that implies fromUpdate on a device-update backend)
        passCentroids_.resize(centroids_.size());
        pool_->copy(passCentroids_.data(), centroids_.data(), centroids_.size());
        centroidsForPass = passCentroids_.data();
      } else {
        centroidsForPass = centroidsOnDevice_ ? nullptr : centroids_.data();  // PassSpec.centroidsFromUpdate
      }
      if (distances) distances_.allocate(static_cast<std::size_t>(cfg_.rows), "distances");
    }
    mode_ = mode;
    wantDistances_ = distances;
    wantVariance_ = dataVariance;
    const std::int64_t K = cfg_.k, D = cfg_.dims;
    std::int64_t far = 0;
    if (mode == PassMode::Fit) {
      // Enough farthest rows to re-seed every empty cluster in the usual case, within ~64 MiB of copies. Backends
      // report them only when a cluster came out empty (backend.h PassTotals.farthest), the only time applyFit reads them.
      const std::int64_t cap = std::max<std::int64_t>(64, (std::int64_t{64} << 20) / (D * 4 * pool_->size()));
      far = std::min({K - 1, cfg_.rows, cap, std::int64_t{1} << 30});
    }
    PassSpec spec;
    spec.mode = mode;
    spec.centroids = centroidsForPass;
    spec.labels = next_.data();
    spec.previousLabels = labels_.data();
    // labels_ stays the last completed pass's until this one finishes, so changes can be applied to it in place
    spec.labelsAsChanges = true;
    spec.distances = distances ? distances_.data() : nullptr;
    spec.farthest = static_cast<int>(far);
    spec.cancel = &cancelFlag_;
    // the update where the totals are (backend.h DeviceUpdate); EngineConfig.hostUpdate keeps it on the host (tests)
    spec.keepSums = mode == PassMode::Fit && !cfg_.hostUpdate && backend_->updatesOnDevice();
    spec.centroidsFromUpdate = fromUpdate;
    const double t1 = nowMs();
    backend_->beginPass(spec);
    passRunning_ = true;
    cursor_ = 0;
    residentUsed_ = hostUsed_ = fed_ = 0;
    const std::int64_t held = heldRows();
    heldPending_ = held > 0;
    passStartMs_ = nowMs();
    if (heldPending_ && firstRow == 0) heldPending_ = false;  // every row streamed: the held copies not needed
    if (heldPending_ && firstRow == held) processHeldIfNeeded(held);
    stat_[0] = t1 - t0;
    stat_[1] = passStartMs_ - t1;
    stat_[2] = t0;
  } catch (...) {
    passError_ = std::make_unique<EngineError>(asEngineError(std::current_exception()));
    abortPass();
  }
}

void Engine::processHeldIfNeeded(std::int64_t upTo) {
  if (!heldPending_) return;
  heldPending_ = false;
  const std::int64_t resident = backend_->residentHeld();
  if (resident > 0) backend_->processResident();
  cursor_ = residentUsed_ = resident;
  if (resident < plan_.residentRows) return;  // the host tier's rows follow a complete set of resident rows only
  const std::int64_t reached = backend_->processHostTier(tier_, cursor_, upTo, cancelFlag_);
  hostUsed_ += reached - cursor_;
  cursor_ = reached;
}

void Engine::runFeed(std::uint64_t gen, int buffer, std::int64_t firstRow, std::int64_t rowCount) {
  feedInOrder(gen, firstRow, rowCount, [&] {
    void* rows = backend_->hostBuffer(buffer);
    if (narrowing_.active())
      narrowing_.narrow(*pool_, callerBuffers_[static_cast<std::size_t>(buffer)].data(), rows, firstRow, rowCount);
    tier_.keep(*backend_, *pool_, rows, firstRow, rowCount);
    backend_->processChunk(rows, firstRow, rowCount);
  });
}

void Engine::runFeedFile(std::uint64_t gen, int fd, std::int64_t offset, std::int64_t firstRow,
                         std::int64_t rowCount) {
  feedInOrder(gen, firstRow, rowCount, [&] {
    const FileRows file(fd, offset, plan_.rowBytes, narrowing_, cfg_.dims, firstRow, rowCount);
    // rows past the host tier go up in pieces; rows the tier keeps are read whole, for it to copy them
    if (backend_->takesPieces() && firstRow >= tier_.firstRow() + tier_.plannedRows()) {
      backend_->processChunkInPieces(file, firstRow, rowCount);
      return;
    }
    if (!fileChunk_.data()) {
      std::string slower;  // pageable instead of page-locked: slower, still right
      fileChunk_ = backend_->allocateHostRows(static_cast<std::size_t>(plan_.chunkRows) * plan_.storedRowBytes, slower);
    }
    file.readAll(*pool_, fileChunk_.data());
    tier_.keep(*backend_, *pool_, fileChunk_.data(), firstRow, rowCount);
    backend_->processChunk(fileChunk_.data(), firstRow, rowCount);
  });
}

void Engine::feedInOrder(std::uint64_t gen, std::int64_t firstRow, std::int64_t rowCount,
                         const std::function<void()>& take) {
  checkGen(gen);
  try {
    if (heldPending_) {
      if (firstRow == 0) {
        heldPending_ = false;  // the caller streams every row this pass: the held copies are not needed
      } else {
        processHeldIfNeeded(firstRow);
      }
    }
    if (firstRow != cursor_)
      invalid("feed out of sequence: expected firstRow " + str(cursor_) + ", got " + str(firstRow) +
              (cursor_ > 0 && cursor_ == heldRows() ? " (the engine holds rows [0, " + str(cursor_) + "))"
                                                    : std::string()));
    if (gen <= cancelGen_.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    take();
    cursor_ += rowCount;
    fed_ += rowCount;
  } catch (...) {
    // A misordered feed leaves the pass intact; anything else (bad data, cancel, memory, device) ends it.
    EngineError e = asEngineError(std::current_exception());
    if (e.code() == ErrorCode::InvalidArgument && std::string(e.what()).rfind("feed out of sequence", 0) == 0) throw e;
    passError_ = std::make_unique<EngineError>(e);
    abortPass();
    throw e;
  }
}

PassResult Engine::runFinish(std::uint64_t gen) {
  checkGen(gen);
  PassTotals totals;
  const double tf0 = nowMs();
  try {
    processHeldIfNeeded(cfg_.rows);
    totals = backend_->finishPass();
  } catch (...) {
    EngineError e = asEngineError(std::current_exception());
    passError_ = std::make_unique<EngineError>(e);
    abortPass();
    throw e;
  }
  passRunning_ = false;
  const double tf1 = nowMs();
  const std::int64_t N = cfg_.rows, seen = cursor_;
  PassResult r;
  r.mode = mode_;
  // Labels: rows of this pass vs the previous one; unseen rows keep their previous label. Rows the backend already
  // compared (PassTotals.changedRows: the CUDA backend's, on the device and as chunks came down) are not compared
  // again. A backend that reported its labels as changes wrote none: they are applied to labels_ at the end.
  const bool asChanges = totals.labelsAsChanges;
  if (asChanges && (totals.changedRows != seen || totals.changed != static_cast<std::int64_t>(totals.labelChanges.size())))
    throw EngineError(ErrorCode::Device, "the backend reported " + str(totals.labelChanges.size()) +
                                             " label changes for " + str(totals.changedRows) + " compared rows, " +
                                             str(seen) + " seen: expected every seen row compared");
  if (seen < N && !asChanges)
    std::memcpy(next_.data() + seen, labels_.data() + seen, static_cast<std::size_t>(N - seen) * 4);
  const std::int64_t compared = totals.changedRows > 0 && totals.changedRows <= seen ? totals.changedRows : 0;
  if (compared > 0) r.reassigned = totals.changed;
  std::vector<std::int64_t> changed(static_cast<std::size_t>(pool_->size()), 0);
  auto compare = [&](int tid, int nt) {
    std::int64_t b, e, c = 0;
    ThreadPool::range(seen - compared, tid, nt, 1, b, e);
    for (std::int64_t i = compared + b; i < compared + e; ++i)
      c += next_[static_cast<std::size_t>(i)] != labels_[static_cast<std::size_t>(i)];
    changed[static_cast<std::size_t>(tid)] = c;
  };
  // waking the pool costs ~0.3 ms on a 16-core host: not for nothing (every row compared on the device) or a few rows
  if (seen - compared >= (std::int64_t{1} << 20)) pool_->run(compare);
  else if (seen > compared) compare(0, 1);
  for (auto c : changed) r.reassigned += c;
  for (double v : totals.inertia) r.inertia += v;
  const double tf2 = nowMs();
  r.counts.assign(totals.counts.begin(), totals.counts.end());
  double tf3 = tf2;
  const bool variance = wantVariance_ && seen == N;
  if (mode_ == PassMode::Fit && totals.sumsKept) {
    applyDeviceFit(totals, r, variance);  // the data variance and the update in one go (stats: under "update")
  } else {
    r.dataVariance = variance ? dataVariance(totals) : std::numeric_limits<double>::quiet_NaN();
    tf3 = nowMs();
    if (mode_ == PassMode::Fit) applyFit(totals, r);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (asChanges) {
      // a row is listed once, so shares apply in any order; a random write costs ~10 ns on one core, and a list of
      // a few percent of 10^7 rows takes milliseconds there: the pool's cores take large lists together
      const std::vector<LabelChange>& list = totals.labelChanges;
      auto apply = [&](int tid, int nt) {
        std::int64_t b, e;
        ThreadPool::range(static_cast<std::int64_t>(list.size()), tid, nt, 1, b, e);
        for (std::int64_t i = b; i < e; ++i) {
          const LabelChange& c = list[static_cast<std::size_t>(i)];
          labels_[c.row] = c.label;
        }
      };
      if (list.size() >= (std::size_t{1} << 16)) pool_->run(apply);
      else apply(0, 1);
    } else {
      std::swap(labels_, next_);
    }
  }
  const double tf4 = nowMs();
  r.ms = tf4 - passStartMs_;
  if (cfg_.stats)
    std::fprintf(stderr,
                 "[kmfleet engine] pass ms: copy centroids %.3f, backend begin %.3f, rows %.3f, backend finish %.3f, "
                 "labels diff %.3f, data variance %.3f, update %.3f; monotonic: begin %.3f, finish task %.3f, end %.3f\n",
                 stat_[0], stat_[1], tf0 - passStartMs_, tf1 - tf0, tf2 - tf1, tf3 - tf2, tf4 - tf3, stat_[2], tf0, tf4);
  r.begunByEngine = passChained_;
  // where the backend kept the rows it processed itself (backend.h PassTotals.rowsFromHost)
  r.residentRowsUsed = residentUsed_ + totals.fedRowsSkipped - totals.rowsFromHost;
  r.hostRowsUsed = hostUsed_ + totals.rowsFromHost;
  r.fedRows = fed_ - totals.fedRowsSkipped;
  r.rowsSettled = totals.rowsSettled;
  r.labelsAsChanges = asChanges;
  r.heldRows = heldRows();
  r.hostRowsHeld = std::max<std::int64_t>(0, r.heldRows - plan_.residentRows) + totals.hostRowsHeld;
  r.hostTierWarning = tier_.warning();
  chainNext(gen, r, seen == N);  // after the stats: the next pass's begin overwrites them
  return r;
}

void Engine::chainNext(std::uint64_t gen, PassResult& r, bool sawEveryRow) {
  const PassChain c = chain_;
  chain_ = PassChain();
  if (!c.enabled || mode_ != PassMode::Fit || !sawEveryRow || gen <= cancelGen_.load()) return;
  const double variance = std::isnan(c.variance) ? r.dataVariance : c.variance;
  // the caller's rule (stopping.ts), in its order and arithmetic: it stops when any of these holds
  if (static_cast<double>(r.reassigned) / static_cast<double>(cfg_.rows) <= c.tolReassign) return;
  if (r.shift <= c.tol * variance) return;
  if (c.passesLeft <= 0) return;
  PassChain next = c;
  next.variance = variance;
  next.passesLeft = c.passesLeft - 1;
  const std::int64_t firstRow = heldRows();
  runBegin(gen, PassMode::Fit, false, false, firstRow, next);
  if (passError_ || !passRunning_) return;  // it failed to begin: the caller begins the next pass as usual
  passChained_ = true;
  r.chained = true;
  r.chainedFirstRow = firstRow;
}

void Engine::runInit(std::uint64_t gen, const void* sample, DType dtype, std::int64_t sampleRows, std::uint64_t seed) {
  if (passRunning_ && passChained_) abortPass();  // begun by the engine itself, not taken over (admitInit)
  if (gen <= cancelGen_.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
  cancelFlag_.store(false);
  const std::int64_t D = cfg_.dims, K = cfg_.k;
  if (sampleRows < K)
    invalid("initKmeansPlusPlus needs at least k=" + str(K) + " sample rows, got " + str(sampleRows));
  Array<float> x(static_cast<std::size_t>(sampleRows * D), "the k-means++ sample");
  const cpu::KernelTable& kt = cpu::selectKernels();
  Array<std::uint16_t> kept;  // the sample as the job keeps its rows: the draws see what the passes see
  if (narrowing_.active() && dtype == DType::F32) {
    kept.allocate(static_cast<std::size_t>(sampleRows * D), "the k-means++ sample");
    try {
      narrowing_.narrow(*pool_, static_cast<const float*>(sample), kept.data(), 0, sampleRows);
    } catch (const EngineError& e) {
      if (e.code() != ErrorCode::NonFiniteInput) throw;
      throw EngineError(ErrorCode::NonFiniteInput, std::string("sample ") + e.what(), e.row());
    }
    sample = kept.data();
    dtype = narrowing_.type();
  }
  for (std::int64_t r = 0; r < sampleRows; ++r) {
    float* xr = x.data() + r * D;
    if (dtype == DType::F32) {
      std::memcpy(xr, static_cast<const float*>(sample) + r * D, static_cast<std::size_t>(D) * 4);
    } else if (dtype == DType::F16) {
      kt.f16ToF32(static_cast<const std::uint16_t*>(sample) + r * D, xr, D);
    } else {
      const std::uint16_t* in = static_cast<const std::uint16_t*>(sample) + r * D;
      for (std::int64_t d = 0; d < D; ++d) {
        const std::uint32_t bits = static_cast<std::uint32_t>(in[d]) << 16;
        std::memcpy(xr + d, &bits, 4);
      }
    }
    const double n2 = sqNorm64(xr, D);
    if (!std::isfinite(n2))
      throw EngineError(ErrorCode::NonFiniteInput,
                        "sample row " + str(r) + " has a non-finite value (NaN or Inf)", r);
    if (cfg_.metric == Metric::Cosine) {
      if (n2 == 0) invalid("sample row " + str(r) + " has zero norm: cosine distance is undefined for it");
      const double inv = 1.0 / std::sqrt(n2);
      for (std::int64_t d = 0; d < D; ++d) xr[d] = static_cast<float>(xr[d] * inv);
    }
  }
#ifdef KMFLEET_WITH_CUDA
  // the engine's device does the distances when the backend is CUDA (same draws, same algorithm)
  std::vector<float> c = plan().backend == BackendKind::Cuda
                             ? cudaKmeansPlusPlus(x.data(), sampleRows, D, K, seed, cfg_.device, &cancelFlag_)
                             : kmeansPlusPlus(x.data(), sampleRows, D, K, seed, *pool_, &cancelFlag_);
#else
  std::vector<float> c = kmeansPlusPlus(x.data(), sampleRows, D, K, seed, *pool_, &cancelFlag_);
#endif
  if (gen <= cancelGen_.load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
  std::lock_guard<std::mutex> lock(mu_);
  centroids_ = std::move(c);
  centroidsFromUpdate_ = false;
  centroidsOnDevice_ = false;
}

std::vector<std::int32_t> Engine::labels(std::int64_t firstRow, std::int64_t count) const {
  if (firstRow < 0 || count < 0 || firstRow + count > cfg_.rows)
    invalid("labels(" + str(firstRow) + ", " + str(count) + ") is out of range: the dataset has " + str(cfg_.rows) +
            " rows");
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::int32_t>(labels_.data() + firstRow, labels_.data() + firstRow + count);
}

std::vector<float> Engine::distances(std::int64_t firstRow, std::int64_t count) const {
  if (!distancesReady_)
    invalid("distances are available only after an assign pass with { distances: true }");
  if (firstRow < 0 || count < 0 || firstRow + count > cfg_.rows)
    invalid("distances(" + str(firstRow) + ", " + str(count) + ") is out of range: the dataset has " +
            str(cfg_.rows) + " rows");
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<float>(distances_.data() + firstRow, distances_.data() + firstRow + count);
}

}  // namespace kmfleet
