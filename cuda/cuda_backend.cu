// The CUDA Backend (native/src/backend.h): pinned host buffers, three streams, resident rows, the kernels.
//
// Streams and events per chunk i (slot = i % S; S = planner's slots: 2, or 4 when chunks stream on every pass):
//   copy     H2D host buffer → slot.raw            (waits slot.rawFree: chunk i−S finished reading it)
//   compute  prepare → assign (+ recheck) → distances → sums      (waits the copy)
//   d2h      labels (+ distances, farthest rows) → slot's pinned staging (waits compute)
// processChunk returns once its H2D is done (the engine may refill the host buffer) while compute of chunk i
// and the D2H of chunk i−1 are still in flight. The host copies a slot's staging into the engine's label
// array when the slot comes round again (or in finishPass).
// Resident rows: the first plan.residentRows rows (whole chunks), prepared once into device arrays and
// processed in later passes by processResident with the same chunk boundaries as when they were fed, so
// sums are added in the same order as a fully streamed run: bitwise-identical centroids. With two resident chunks
// or more (and the planner's scratch) they are assigned in pieces of ~2M rows and accumulated in one go
// (accumulateResident: the same additions). Their fp64 distances stay on the device, so the farthest rows — asked
// for only when a cluster came out empty (backend.h) — are found in finishPass, per chunk as they were fed.
// Rows of f16/bf16 data (l2) are kept as they are (no fp32 copy, kernels.h RowValues): a streamed chunk's values
// are its slot's raw rows, so the slot is released (rawFree) only after the chunk's kernels.
// Per pass on the host: the centroids go up through pinned staging in pieces (memcpy of piece i+1 overlaps the
// DMA of piece i); their statistics and operands are computed on the device (operands.cu prepareCentroidOps), and
// only scale and maxNorm come back (8 bytes) before the first assignment. Sums, counts and inertia come down
// through a ring of two pinned pieces (the DMA of piece i+1 overlaps the host's copy of piece i).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "centroid_update.h"
#include "cuda_bridge.h"
#include "exact_screen_policy.h"
#include "far_rows.h"
#include "label_changes.h"
#include "kernels.h"
#include "operands.h"
#include "planner.h"

namespace kmfleet {
namespace {

using namespace cuda;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    throw EngineError(ErrorCode::OutOfMemory, std::string("CUDA out of memory in ") + what);
  throw EngineError(ErrorCode::Device, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

template <typename T>
T* devAlloc(std::size_t count, const char* what) {
  void* p = nullptr;
  if (count == 0) count = 1;
  const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    throw EngineError(ErrorCode::OutOfMemory, std::string("CUDA: cannot allocate ") +
                                                  std::to_string(count * sizeof(T) >> 20) + " MiB for " + what +
                                                  " (" + std::to_string(fr >> 20) + " MiB free)");
  }
  return static_cast<T*>(p);
}

template <typename T>
T* hostAlloc(std::size_t count, const char* what) {
  void* p = nullptr;
  if (count == 0) count = 1;
  const cudaError_t e = cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw EngineError(ErrorCode::OutOfMemory, std::string("cannot allocate ") + std::to_string(count * sizeof(T) >> 20) +
                                                  " MiB of pinned host memory for " + what);
  }
  return static_cast<T*>(p);
}

InType inType(DType t) { return t == DType::F32 ? InType::F32 : t == DType::F16 ? InType::F16 : InType::BF16; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const EngineConfig& cfg) : cfg_(cfg) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (cfg.device < 0 || cfg.device >= count)
      throw EngineError(ErrorCode::InvalidArgument,
                        "CUDA device " + std::to_string(cfg.device) + " does not exist (" + std::to_string(count) +
                            " device(s))");
    check(cudaSetDevice(cfg.device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, cfg.device), "cudaGetDeviceProperties");
    std::size_t freeB = 0, totalB = 0;
    check(cudaMemGetInfo(&freeB, &totalB), "cudaMemGetInfo");
    mp_ = planMemory(cfg, freeB);
    n_ = cfg.rows;
    d_ = static_cast<int>(cfg.dims);
    k_ = static_cast<int>(cfg.k);
    dp_ = padDims(d_);
    screenPolicy_ = ExactScreenPolicy(dp_);
    kp_ = padCentroids(k_);
    rowBytes_ = static_cast<std::size_t>(d_) * dtypeBytes(cfg.dtype);
    cosine_ = cfg.metric == Metric::Cosine;
    rows16_ = keepsRows16(inType(cfg.dtype), cosine_);
    stats_ = std::getenv("KMFLEET_CUDA_STATS") != nullptr;
    perChunk_ = std::getenv("KMFLEET_CUDA_PER_CHUNK") != nullptr;
    noOverlap_ = std::getenv("KMFLEET_CUDA_NO_OVERLAP") != nullptr;
    hostCountsChanges_ = std::getenv("KMFLEET_CUDA_HOST_REASSIGNED") != nullptr;
    if (const char* v = std::getenv("KMFLEET_CUDA_AHEAD")) residentAhead_ = std::max(1, std::atoi(v));
    plan_.backend = BackendKind::Cuda;
    plan_.device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    plan_.precision = mp_.precision;
    plan_.chunkRows = mp_.chunkRows;
    plan_.buffers = mp_.buffers;
    plan_.residentRows = mp_.residentRows;
    plan_.rowBytes = rowBytes_;
    try {
      allocate();
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaBackend() override {
    cudaSetDevice(cfg_.device);
    cudaDeviceSynchronize();
    release();
  }

  const Plan& plan() const override { return plan_; }
  void* hostBuffer(int index) override { return host_.at(static_cast<std::size_t>(index)); }
  std::int64_t residentHeld() const override { return residentHeld_; }

  void beginPass(const PassSpec& spec) override {
    check(cudaSetDevice(cfg_.device), "cudaSetDevice");
    spec_ = spec;
    fit_ = spec.mode == PassMode::Fit;
    rowsSeen_ = 0;
    retainedThisPass_ = 0;
    overlap_ = false;
    partNext_ = 0;
    resStep_ = resSteps_ = 0;
    pendingFolds_.clear();
    far_.clear();
    // the engine's centroids are the `next` of our last updateOnDevice, still in cf_: nothing to take
    if (!(spec.centroidsFromUpdate && cfFromUpdate_)) uploadCentroids(spec.centroids);
    sumsKept_ = false;
    check(cudaMemsetAsync(sums_, 0, sizeof(double) * std::size_t(k_) * d_, compute_), "memset");
    check(cudaMemsetAsync(counts_, 0, sizeof(long long) * k_, compute_), "memset");
    check(cudaMemsetAsync(inertia_, 0, sizeof(double) * k_, compute_), "memset");
    check(cudaMemsetAsync(bad_, 0xff, 2 * sizeof(unsigned long long), compute_), "memset");
    check(cudaMemsetAsync(flaggedTotal_, 0, 2 * sizeof(unsigned long long), compute_), "memset");
    screenThisPass_ = mp_.op == OpKind::F16x3 && screenPolicy_.screen();
    centroidsReady_ = false;
    if (muReady_) prepareCentroidOps();
  }

  void processResident() override {
    check(cudaSetDevice(cfg_.device), "cudaSetDevice");
    residentRan_ = true;  // finishPass finds the farthest resident rows from their kept distances, if asked
    // Streamed chunks of this pass go on chunkStream_ into per-chunk partials, folded on compute_ after the resident
    // rows: their copies and kernels no longer wait for the resident compute (see processChunk).
    overlap_ = mp_.overlapPartials > 0 && !noOverlap_ && residentHeld_ < n_;
    if (overlap_) {
      centroidsForCompute();
      check(cudaEventRecord(passReady_, compute_), "cudaEventRecord");  // centroid operands, zeroed totals and flags
      // The resident work is queued a few chunks ahead of the device, not all at once: ~20 launches a chunk would
      // fill the launch queue and block this thread (and the streamed chunks' copies) until most of it has run.
      resWhole_ = !perChunk_ && racc_.rows > 0 && racc_.rows == residentHeld_;
      resChunks_ = (residentHeld_ + mp_.chunkRows - 1) / mp_.chunkRows;
      resSteps_ = resChunks_ + (resWhole_ ? 1 : 0);  // whole: a piece a chunk, then the one accumulate
      resStep_ = 0;
      pendingFolds_.clear();
      if (resWhole_) { centroidsForCompute(); stageMark(0); }
      return pumpResident(false);
    }
    if (!perChunk_ && racc_.rows > 0 && racc_.rows == residentHeld_) return processResidentWhole();
    for (std::int64_t first = 0; first < residentHeld_; first += mp_.chunkRows) {
      if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t rows = std::min(mp_.chunkRows, residentHeld_ - first);
      // Outputs of resident rows go to their own arrays (no host wait): the copies of streamed chunks
      // can start while these are computed.
      computeChunk(residentOps(first), first, rows, nullptr);
      residentPending_ = true;  // finishPass copies the resident arrays' labels
    }
  }

  void processChunk(int buffer, std::int64_t firstRow, std::int64_t rows) override {
    check(cudaSetDevice(cfg_.device), "cudaSetDevice");
    if (buffer < 0 || buffer >= mp_.buffers || rows <= 0 || rows > mp_.chunkRows)
      throw EngineError(ErrorCode::InvalidArgument, "processChunk: bad buffer or row count");
    Slot& slot = slots_[std::size_t(slotNext_)];
    slotNext_ = (slotNext_ + 1) % int(slots_.size());
    check(cudaStreamWaitEvent(copy_, slot.rawFree, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(slot.raw, host_[buffer], rows * rowBytes_, cudaMemcpyHostToDevice, copy_), "H2D");
    check(cudaEventRecord(slot.copied, copy_), "cudaEventRecord");
    // The slot's previous outputs go to the engine's arrays once the copy is queued: the copy engine is not kept
    // waiting for the host (a chunk's labels are ~0.5 MB to memcpy; streamed passes are bound by the copies).
    retire(slot);
    const cudaStream_t cs = overlap_ ? chunkStream_ : compute_;
    if (overlap_) check(cudaStreamWaitEvent(cs, passReady_, 0), "cudaStreamWaitEvent");
    check(cudaStreamWaitEvent(cs, slot.copied, 0), "cudaStreamWaitEvent");

    // Rows of [0, residentRows) not yet held are retained: prepared straight into the resident arrays.
    const bool retain = residentHeld_ == 0 && firstRow < mp_.residentRows && firstRow == retainedThisPass_ &&
                        firstRow + rows <= mp_.residentRows;
    RowOps ops = retain ? residentOps(firstRow) : streamOps_;
    const bool valuesInSlot = rows16_ && !retain;  // the 16-bit rows are read where they landed
    if (valuesInSlot) ops.x16 = slot.raw;
    if (!muReady_) establishMu(slot.raw, rows);
    prepareRows(slot.raw, inType(cfg_.dtype), rows, d_, mp_.op, cosine_, firstRow, mu_, ops, bad_, bad_ + 1, cs);
    check(cudaGetLastError(), "prepareRows");
    if (!valuesInSlot) check(cudaEventRecord(slot.rawFree, cs), "cudaEventRecord");
    computeChunk(ops, firstRow, rows, &slot, cs);
    if (valuesInSlot) check(cudaEventRecord(slot.rawFree, cs), "cudaEventRecord");
    if (retain) retainedThisPass_ += rows;
    // The engine may refill the host buffer once its copy is done.
    waitPumping(slot.copied, "H2D");
  }

  PassTotals finishPass() override {
    check(cudaSetDevice(cfg_.device), "cudaSetDevice");
    if (overlap_) pumpResident(true);  // the rest of the resident rows, then the streamed chunks' folds
    // Resident rows whose label changed since the previous pass that computed them (their labels are still on the
    // device): counted here instead of by the engine over the host arrays.
    const bool countChanges = residentRan_ && prevLabelsValid_ && !hostCountsChanges_;
    if (countChanges) {
      check(cudaMemsetAsync(changedCount_, 0, sizeof(unsigned long long), compute_), "memset");
      countLabelChanges(resLabels_, resPrevLabels_, residentHeld_, changedCount_, compute_);
      check(cudaGetLastError(), "countLabelChanges");
    }
    if (residentPending_) {
      // Resident labels (and distances) chunk by chunk as each chunk's D2H completes: the host's copies overlap
      // the device's work on the later chunks instead of following all of it.
      for (std::int64_t first = 0, ci = 0; first < residentHeld_; first += mp_.chunkRows, ++ci) {
        const std::size_t rows = std::size_t(std::min(mp_.chunkRows, residentHeld_ - first));
        check(cudaEventSynchronize(resChunkDone_[std::size_t(ci)]), "D2H");
        std::memcpy(spec_.labels + first, hResLabels_ + first, sizeof(int) * rows);
        if (spec_.distances) std::memcpy(spec_.distances + first, hResDist_ + first, sizeof(float) * rows);
      }
    }
    check(cudaStreamSynchronize(chunkStream_), "compute");
    check(cudaStreamSynchronize(compute_), "compute");
    check(cudaStreamSynchronize(d2h_), "D2H");
    for (Slot& s : slots_) drain(s);
    residentPending_ = false;
    check(cudaMemcpyAsync(hostFlags_, bad_, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaMemcpyAsync(hostFlags_ + 2, flaggedTotal_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_),
          "D2H");
    check(cudaMemcpyAsync(hostFlags_ + 4, flaggedTotal_ + 1, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_),
          "D2H");
    if (countChanges)
      check(cudaMemcpyAsync(hostFlags_ + 3, changedCount_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, compute_),
            "D2H");
    check(cudaStreamSynchronize(compute_), "D2H");
    const unsigned long long bad[2] = {hostFlags_[0], hostFlags_[1]};
    if (bad[0] != ~0ULL)
      throw EngineError(ErrorCode::NonFiniteInput, "non-finite value in row " + std::to_string(bad[0]),
                        static_cast<std::int64_t>(bad[0]));
    if (bad[1] != ~0ULL)
      throw EngineError(ErrorCode::InvalidArgument,
                        "row " + std::to_string(bad[1]) + " has zero norm (cosine needs non-zero rows)");
    PassTotals t;
    download(counts_, std::size_t(k_), t.counts);
    download(inertia_, std::size_t(k_), t.inertia);
    const bool anyEmpty = std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end();
    // the sums stay here for updateOnDevice unless the host must re-seed an empty cluster
    sumsKept_ = fit_ && spec_.keepSums && !anyEmpty;
    t.sumsKept = sumsKept_;
    if (fit_ && !sumsKept_) download(sums_, std::size_t(k_) * d_, t.sums);
    const unsigned long long flagged = hostFlags_[2];
    lastRecheckRows_ = static_cast<std::int64_t>(flagged);
    if (mp_.op == OpKind::F16x3) screenPolicy_.record(rowsSeen_, static_cast<std::int64_t>(hostFlags_[4]));
    // backend.h: the farthest rows only when a cluster came out empty (the engine reads them only then). Streamed
    // chunks offered theirs as they drained (their rows are gone now); the resident rows' come from the fp64
    // distances kept on the device, chunk by chunk as they were fed: the same candidates as computed eagerly.
    if (fit_ && spec_.farthest > 0 && (anyEmpty || perChunk_)) {
      if (residentRan_) residentFarthest();
      std::stable_sort(far_.begin(), far_.end(), [](const FarRow& a, const FarRow& b) {
        return a.distance > b.distance || (a.distance == b.distance && a.row < b.row);
      });
      if (far_.size() > std::size_t(spec_.farthest)) far_.resize(spec_.farthest);
      fillResidentValues();
      t.farthest = std::move(far_);
    }
    far_.clear();
    t.rowsSeen = rowsSeen_;
    if (countChanges) {
      t.changedRows = residentHeld_;
      t.changed = static_cast<std::int64_t>(hostFlags_[3]);
    }
    if (stats_) {
      float ms[3] = {0, 0, 0};
      for (std::size_t i = 0; i < stagesUsed_; ++i)
        for (int j = 0; j < 3; ++j) {
          float t = 0;
          check(cudaEventElapsedTime(&t, stageEv_[i][j], stageEv_[i][j + 1]), "cudaEventElapsedTime");
          ms[j] += t;
        }
      std::fprintf(stderr,
                   "[kmfleet cuda] pass rows=%lld resident=%lld chunks=%zu recheck=%llu (%.4f%%) screen=%s passed on=%.2f%% "
                   "device ms: assign+recheck=%.3f sums+distances=%.3f farthest=%.3f\n",
                   static_cast<long long>(rowsSeen_), static_cast<long long>(residentHeld_), stagesUsed_, flagged,
                   rowsSeen_ ? 100.0 * double(flagged) / double(rowsSeen_) : 0.0, screenThisPass_ ? "on" : "off",
                   rowsSeen_ ? 100.0 * double(hostFlags_[4]) / double(rowsSeen_) : 0.0, ms[0], ms[1], ms[2]);
    }
    stagesUsed_ = 0;
    // This pass's resident labels become the previous ones. A pass that fed the resident rows as streamed chunks
    // (or retained them) gave the engine labels the device does not hold: nothing to compare with next time.
    if (residentRan_) std::swap(resLabels_, resPrevLabels_);
    prevLabelsValid_ = residentRan_;
    residentRan_ = false;
    if (residentHeld_ == 0 && retainedThisPass_ == mp_.residentRows) residentHeld_ = mp_.residentRows;
    return t;
  }

  // The fit update where the totals are (centroid_update.cu: the engine's arithmetic, bit for bit). The next
  // centroids come down in one copy into the pinned upload staging and stay in cf_ for the next pass.
  bool updatesOnDevice() const override { return true; }
  DeviceUpdate updateOnDevice(bool dataVariance) override {
    check(cudaSetDevice(cfg_.device), "cudaSetDevice");
    if (!sumsKept_)
      throw EngineError(ErrorCode::InvalidArgument, "updateOnDevice needs a finished fit pass that kept its sums");
    sumsKept_ = false;
    ClusterUpdateArgs a;
    a.sums = sums_;
    a.counts = counts_;
    a.inertia = inertia_;
    a.centroids = cf_;
    a.k = k_;
    a.d = d_;
    a.cosine = cosine_;
    a.rows = static_cast<double>(rowsSeen_);
    a.mu = mu64_;
    a.scatter = dataVariance ? scatter_ : nullptr;
    a.next = cfNext_;
    a.shift = shift_;
    clusterUpdate(a, compute_);
    check(cudaGetLastError(), "clusterUpdate");
    check(cudaMemcpyAsync(hostCentroids_, cfNext_, sizeof(float) * std::size_t(k_) * d_, cudaMemcpyDeviceToHost,
                          compute_),
          "D2H");
    DeviceUpdate u;
    download(shift_, std::size_t(k_), u.shift);
    if (dataVariance) download(scatter_, std::size_t(k_), u.scatter);
    check(cudaStreamSynchronize(compute_), "clusterUpdate");
    std::swap(cf_, cfNext_);
    cfFromUpdate_ = true;
    u.next = hostCentroids_;
    return u;
  }

  void abortPass() noexcept override {
    cudaSetDevice(cfg_.device);
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(chunkStream_);
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(d2h_);
    cudaGetLastError();
    overlap_ = false;
    sumsKept_ = false;
    resStep_ = resSteps_ = 0;
    pendingFolds_.clear();
    for (Slot& s : slots_) s.pending = false;
    residentPending_ = false;
    residentRan_ = false;
    far_.clear();
    stagesUsed_ = 0;
    retainedThisPass_ = 0;  // resident rows are only held once a whole pass retained them all
  }

 private:
  struct Slot {
    void* raw = nullptr;
    int* labels = nullptr;
    float* dist32 = nullptr;
    double* topDist = nullptr;
    long long* topRow = nullptr;
    float* topValues = nullptr;
    int* hLabels = nullptr;
    float* hDist = nullptr;
    double* hTopDist = nullptr;
    long long* hTopRow = nullptr;
    float* hTopValues = nullptr;
    cudaEvent_t copied = nullptr, rawFree = nullptr, outDone = nullptr, computed = nullptr;
    bool pending = false;
    std::int64_t firstRow = 0, rows = 0;
    int far = 0;
    bool dist = false;
  };

  void allocate() {
    const std::size_t chunk = std::size_t(mp_.chunkRows);
    const int terms = opTerms(mp_.op);
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking), "cudaStreamCreate");
    {  // streamed chunks of a partly resident pass: ahead of the resident rows' pending blocks (their slots free sooner)
      int least = 0, greatest = 0;
      check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
      check(cudaStreamCreateWithPriority(&chunkStream_, cudaStreamNonBlocking, greatest), "cudaStreamCreate");
    }
    check(cudaEventCreateWithFlags(&passReady_, cudaEventDisableTiming), "cudaEventCreate");
    for (int b = 0; b < mp_.buffers; ++b) host_.push_back(hostAlloc<char>(chunk * rowBytes_, "host buffers"));
    hostCentroids_ = hostAlloc<float>(std::size_t(k_) * d_, "centroids");
    hostStats_ = hostAlloc<CentroidStats>(1, "centroid statistics");
    hostFlags_ = hostAlloc<unsigned long long>(5, "flags");
    for (int i = 0; i < 2; ++i) {
      ring_[i] = hostAlloc<char>(kRingBytes, "download staging");
      check(cudaEventCreateWithFlags(&ringDone_[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    check(cudaEventCreateWithFlags(&statsReady_, cudaEventDisableTiming), "cudaEventCreate");
    cstats_ = devAlloc<CentroidStatsDevice>(1, "centroid statistics");
    // centroids and totals
    cf_ = devAlloc<float>(std::size_t(k_) * d_, "centroids");
    cfNext_ = devAlloc<float>(std::size_t(k_) * d_, "centroids");
    mu64_ = devAlloc<double>(d_, "centroid update");
    scatter_ = devAlloc<double>(k_, "centroid update");
    shift_ = devAlloc<double>(k_, "centroid update");
    bhi_ = devAlloc<unsigned short>(std::size_t(kp_) * dp_, "centroid operands");
    blo_ = terms > 1 ? devAlloc<unsigned short>(std::size_t(kp_) * dp_, "centroid operands") : nullptr;
    cnorm_ = devAlloc<float>(kp_, "centroid norms");
    mu_ = devAlloc<float>(d_, "shift");
    sums_ = devAlloc<double>(std::size_t(k_) * d_, "sums");
    counts_ = devAlloc<long long>(k_, "counts");
    inertia_ = devAlloc<double>(k_, "inertia");
    bad_ = devAlloc<unsigned long long>(2, "flags");
    flaggedTotal_ = devAlloc<unsigned long long>(2, "flags");  // rows flagged, rows the screen passed on
    flaggedCount_ = devAlloc<unsigned>(2, "flags");  // flagged rows, screened rows (assignPiece)
    // streamed rows' scratch (one: only the compute stream uses it)
    streamOps_ = allocOps(chunk, "chunk scratch", true);
    flagged_ = devAlloc<int>(chunk, "chunk scratch");
    flaggedThr_ = devAlloc<float>(chunk, "chunk scratch");
    candCount_ = devAlloc<int>(chunk, "chunk scratch");
    cand_ = devAlloc<int>(chunk * kCandidates, "chunk scratch");
    dist_ = devAlloc<double>(chunk, "chunk scratch");
    farScratch_ = devAlloc<char>(farRowsScratchBytes(mp_.chunkRows), "chunk scratch");
    allocAccumulateScratch(acc_, mp_.chunkRows, d_, k_);  // throws std::bad_alloc
    if (mp_.overlapPartials > 0) {  // planned beside the budget (planner.cpp): the chunk stream's own scratch + partials
      allocAccumulateScratch(accS_, mp_.chunkRows, d_, k_);
      flagsS_.flagged = devAlloc<int>(chunk, "overlap scratch");
      flagsS_.thr = devAlloc<float>(chunk, "overlap scratch");
      flagsS_.candCount = devAlloc<int>(chunk, "overlap scratch");
      flagsS_.cand = devAlloc<int>(chunk * kCandidates, "overlap scratch");
      flaggedCountS_ = devAlloc<unsigned>(2, "overlap scratch");
      const std::size_t P = std::size_t(mp_.overlapPartials);
      partSums_ = devAlloc<double>(P * k_ * d_, "overlap partials");
      partCounts_ = devAlloc<long long>(P * k_, "overlap partials");
      partInertia_ = devAlloc<double>(P * k_, "overlap partials");
      resStepDone_.resize(std::size_t((mp_.residentRows + mp_.chunkRows - 1) / mp_.chunkRows) + 1, nullptr);
      for (cudaEvent_t& e : resStepDone_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      partReady_.resize(P, nullptr);
      partFolded_.resize(P, nullptr);
      for (auto* v : {&partReady_, &partFolded_})
        for (cudaEvent_t& e : *v) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    }
    // resident rows
    if (mp_.residentRows > 0) {
      const std::size_t r = std::size_t(mp_.residentRows);
      resident_ = allocOps(r, "resident rows", false);
      resLabels_ = devAlloc<int>(r, "resident rows");
      resPrevLabels_ = devAlloc<int>(r, "resident rows");
      changedCount_ = devAlloc<unsigned long long>(1, "flags");
      resDist_ = devAlloc<float>(r, "resident rows");
      hResLabels_ = hostAlloc<int>(r, "resident label staging");
      hResDist_ = hostAlloc<float>(r, "resident distance staging");
      resDist64_ = devAlloc<double>(r, "resident rows");
      if (mp_.residentAccBytes > 0) {  // planned within the budget: one accumulate over all resident rows
        allocResidentAccumulate(racc_, mp_.residentRows, mp_.chunkRows, d_, k_);  // throws std::bad_alloc
        const std::size_t piece = std::size_t(residentPieceRows(mp_.residentRows, mp_.chunkRows));
        if (mp_.op == OpKind::F16x3) {  // exact mode: flagged-row scratch for a piece of resident rows
          resFlag_.flagged = devAlloc<int>(piece, "resident rows");
          resFlag_.thr = devAlloc<float>(piece, "resident rows");
          resFlag_.candCount = devAlloc<int>(piece, "resident rows");
          resFlag_.cand = devAlloc<int>(piece * kCandidates, "resident rows");
        }
      }
    }
    check(cudaEventCreateWithFlags(&resComputed_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&resOutDone_, cudaEventDisableTiming), "cudaEventCreate");
    resChunkDone_.resize(std::size_t((mp_.residentRows + mp_.chunkRows - 1) / mp_.chunkRows), nullptr);
    for (cudaEvent_t& e : resChunkDone_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    slots_.resize(std::size_t(mp_.slots));
    for (Slot& s : slots_) {
      s.raw = devAlloc<char>(chunk * rowBytes_, "chunk slots");
      s.labels = devAlloc<int>(chunk, "chunk slots");
      s.dist32 = devAlloc<float>(chunk, "chunk slots");
      s.hLabels = hostAlloc<int>(chunk, "label staging");
      s.hDist = hostAlloc<float>(chunk, "distance staging");
      for (cudaEvent_t* e : {&s.copied, &s.rawFree, &s.outDone, &s.computed})
        check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
    }
  }

  // streamed: the scratch of streamed chunks (no values when the 16-bit rows are read in their slot).
  RowOps allocOps(std::size_t rows, const char* what, bool streamed) {
    RowOps o;
    o.x16Type = inType(cfg_.dtype);
    if (!rows16_) o.xf = devAlloc<float>(rows * d_, what);
    else if (!streamed) o.x16 = devAlloc<unsigned short>(rows * d_, what);
    o.ahi = devAlloc<unsigned short>(rows * dp_, what);
    o.alo = opTerms(mp_.op) > 1 ? devAlloc<unsigned short>(rows * dp_, what) : nullptr;
    o.rowScale = devAlloc<float>(rows, what);
    o.rowNorm = devAlloc<float>(rows, what);
    return o;
  }
  static void freeOps(RowOps& o) {
    for (void* p : {static_cast<void*>(o.xf), o.ahi, o.alo, static_cast<void*>(o.rowScale),
                    static_cast<void*>(o.rowNorm), o.x16})
      if (p) cudaFree(p);
    o = RowOps{};
  }

  void release() noexcept {
    for (Slot& s : slots_) {
      for (void* p : {s.raw, static_cast<void*>(s.labels), static_cast<void*>(s.dist32), static_cast<void*>(s.topDist),
                      static_cast<void*>(s.topRow), static_cast<void*>(s.topValues)})
        if (p) cudaFree(p);
      for (void* p : {static_cast<void*>(s.hLabels), static_cast<void*>(s.hDist), static_cast<void*>(s.hTopDist),
                      static_cast<void*>(s.hTopRow), static_cast<void*>(s.hTopValues)})
        if (p) cudaFreeHost(p);
      for (cudaEvent_t e : {s.copied, s.rawFree, s.outDone, s.computed})
        if (e) cudaEventDestroy(e);
      s = Slot{};
    }
    freeOps(streamOps_);
    freeOps(resident_);
    for (void* p : {static_cast<void*>(resFarDist_), static_cast<void*>(resFarRow_)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(hResFarDist_), static_cast<void*>(hResFarRow_)})
      if (p) cudaFreeHost(p);
    resFarDist_ = nullptr; resFarRow_ = nullptr; hResFarDist_ = nullptr; hResFarRow_ = nullptr; resFarCap_ = 0;
    for (void* p : {static_cast<void*>(gatherRows_), static_cast<void*>(gatherVals_)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(hGatherRows_), static_cast<void*>(hGatherVals_)})
      if (p) cudaFreeHost(p);
    gatherRows_ = nullptr; gatherVals_ = nullptr; hGatherRows_ = nullptr; hGatherVals_ = nullptr; gatherCap_ = 0;
    for (auto& ev : stageEv_)
      for (cudaEvent_t e : ev)
        if (e) cudaEventDestroy(e);
    stageEv_.clear();
    if (resLabels_) cudaFree(resLabels_);
    if (resPrevLabels_) cudaFree(resPrevLabels_);
    if (changedCount_) cudaFree(changedCount_);
    resPrevLabels_ = nullptr;
    changedCount_ = nullptr;
    prevLabelsValid_ = false;
    if (resDist_) cudaFree(resDist_);
    if (resDist64_) cudaFree(resDist64_);
    resDist64_ = nullptr;
    freeResidentAccumulate(racc_);
    for (void* p : {static_cast<void*>(resFlag_.flagged), static_cast<void*>(resFlag_.thr),
                    static_cast<void*>(resFlag_.candCount), static_cast<void*>(resFlag_.cand)})
      if (p) cudaFree(p);
    resFlag_ = FlagScratch{};
    if (hResLabels_) cudaFreeHost(hResLabels_);
    if (hResDist_) cudaFreeHost(hResDist_);
    resLabels_ = nullptr; resDist_ = nullptr; hResLabels_ = nullptr; hResDist_ = nullptr;
    for (cudaEvent_t e : {resComputed_, resOutDone_})
      if (e) cudaEventDestroy(e);
    resComputed_ = resOutDone_ = nullptr;
    for (cudaEvent_t e : resChunkDone_)
      if (e) cudaEventDestroy(e);
    resChunkDone_.clear();
    freeAccumulateScratch(acc_);
    freeAccumulateScratch(accS_);
    for (void* p : {static_cast<void*>(flagsS_.flagged), static_cast<void*>(flagsS_.thr),
                    static_cast<void*>(flagsS_.candCount), static_cast<void*>(flagsS_.cand),
                    static_cast<void*>(flaggedCountS_), static_cast<void*>(partSums_), static_cast<void*>(partCounts_),
                    static_cast<void*>(partInertia_)})
      if (p) cudaFree(p);
    flagsS_ = FlagScratch{};
    flaggedCountS_ = nullptr; partSums_ = nullptr; partCounts_ = nullptr; partInertia_ = nullptr;
    for (auto* v : {&partReady_, &partFolded_, &resStepDone_}) {
      for (cudaEvent_t e : *v)
        if (e) cudaEventDestroy(e);
      v->clear();
    }
    if (passReady_) cudaEventDestroy(passReady_);
    passReady_ = nullptr;
    for (void* p : {static_cast<void*>(cf_), static_cast<void*>(cfNext_), static_cast<void*>(mu64_),
                    static_cast<void*>(scatter_), static_cast<void*>(shift_), static_cast<void*>(bhi_), static_cast<void*>(blo_),
                    static_cast<void*>(cnorm_), static_cast<void*>(mu_), static_cast<void*>(sums_),
                    static_cast<void*>(counts_), static_cast<void*>(inertia_), static_cast<void*>(bad_),
                    static_cast<void*>(flaggedTotal_), static_cast<void*>(flaggedCount_), static_cast<void*>(flagged_), static_cast<void*>(flaggedThr_), static_cast<void*>(candCount_),
                    static_cast<void*>(cand_),
                    static_cast<void*>(dist_), static_cast<void*>(farScratch_)})
      if (p) cudaFree(p);
    for (void* p : host_) cudaFreeHost(p);
    host_.clear();
    if (hostCentroids_) cudaFreeHost(hostCentroids_);
    hostCentroids_ = nullptr;
    for (void* p : {static_cast<void*>(hostStats_), static_cast<void*>(hostFlags_), static_cast<void*>(ring_[0]),
                    static_cast<void*>(ring_[1])})
      if (p) cudaFreeHost(p);
    hostStats_ = nullptr; hostFlags_ = nullptr; ring_[0] = ring_[1] = nullptr;
    for (cudaEvent_t e : {ringDone_[0], ringDone_[1], statsReady_})
      if (e) cudaEventDestroy(e);
    ringDone_[0] = ringDone_[1] = statsReady_ = nullptr;
    if (cstats_) cudaFree(cstats_);
    cstats_ = nullptr;
    for (cudaStream_t s : {copy_, compute_, d2h_, chunkStream_})
      if (s) cudaStreamDestroy(s);
    copy_ = compute_ = d2h_ = chunkStream_ = nullptr;
    cudaGetLastError();
  }

  RowOps residentOps(std::int64_t firstRow) const {
    RowOps o = resident_;
    const std::size_t r = std::size_t(firstRow);
    if (o.xf) o.xf += r * d_;
    if (o.x16) o.x16 = static_cast<unsigned short*>(o.x16) + r * d_;
    o.ahi = static_cast<unsigned short*>(o.ahi) + r * dp_;
    if (o.alo) o.alo = static_cast<unsigned short*>(o.alo) + r * dp_;
    o.rowScale += r;
    o.rowNorm += r;
    return o;
  }

  // μ: the mean of the first rows of the first chunk ever fed (deterministic: the engine feeds in row order).
  void establishMu(void* raw, std::int64_t rows) {
    RowOps ops = streamOps_;
    if (rows16_) ops.x16 = raw;
    prepareRows(raw, inType(cfg_.dtype), rows, d_, mp_.op, cosine_, 0, nullptr, ops, bad_, bad_ + 1, compute_);
    rowMean(rowValues(ops), rows, d_, mu_, compute_);
    hostMu_.resize(d_);
    check(cudaMemcpyAsync(hostMu_.data(), mu_, sizeof(float) * d_, cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaStreamSynchronize(compute_), "mean");
    // a non-finite first chunk leaves μ non-finite: fall back to μ = 0 (the pass fails with NonFiniteInput anyway)
    for (float& v : hostMu_)
      if (!std::isfinite(v)) v = 0.f;
    check(cudaMemcpyAsync(mu_, hostMu_.data(), sizeof(float) * d_, cudaMemcpyHostToDevice, compute_), "H2D");
    check(cudaStreamSynchronize(compute_), "mean");
    muReady_ = true;
    prepareCentroidOps();
  }

  // Statistics and operands on the device; scale and maxNorm come back for the launch arguments (awaited by the
  // first computeChunk of the pass).
  void prepareCentroidOps() {
    cuda::prepareCentroidOps(cf_, mu_, k_, d_, mp_.op, cstats_, bhi_, blo_, cnorm_, compute_);
    check(cudaGetLastError(), "prepareCentroidOps");
    check(cudaMemcpyAsync(hostStats_, &cstats_->out, sizeof(CentroidStats), cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaEventRecord(statsReady_, compute_), "cudaEventRecord");
    cops_.bhi = bhi_;
    cops_.blo = blo_;
    cops_.cnorm = cnorm_;
    cops_.cf = cf_;
    cops_.shifted = true;
    statsPending_ = true;
    centroidsReady_ = true;
  }

  // The pass's centroids up through the pinned staging, in pieces: the DMA of a piece overlaps the copy of the next.
  void uploadCentroids(const float* c) {
    cfFromUpdate_ = false;
    const std::size_t total = sizeof(float) * std::size_t(k_) * d_;
    char* h = reinterpret_cast<char*>(hostCentroids_);
    for (std::size_t off = 0; off < total; off += kRingBytes) {
      const std::size_t n = std::min(kRingBytes, total - off);
      std::memcpy(h + off, reinterpret_cast<const char*>(c) + off, n);
      check(cudaMemcpyAsync(reinterpret_cast<char*>(cf_) + off, h + off, n, cudaMemcpyHostToDevice, compute_),
            "centroid upload");
    }
  }

  // count values of src (device) appended to out through the two pinned ring pieces (compute stream).
  template <typename T, typename U>
  void download(const T* src, std::size_t count, std::vector<U>& out) {
    static_assert(sizeof(T) == sizeof(U), "same representation");
    out.clear();
    out.reserve(count);
    const std::size_t per = kRingBytes / sizeof(T), pieces = (count + per - 1) / per;
    auto enqueue = [&](std::size_t i) {
      const std::size_t n = std::min(per, count - i * per);
      check(cudaMemcpyAsync(ring_[i % 2], src + i * per, n * sizeof(T), cudaMemcpyDeviceToHost, compute_), "D2H");
      check(cudaEventRecord(ringDone_[i % 2], compute_), "cudaEventRecord");
    };
    if (pieces > 0) enqueue(0);
    for (std::size_t i = 0; i < pieces; ++i) {
      if (i + 1 < pieces) enqueue(i + 1);  // into the other piece, whose data the host took in step i − 1
      check(cudaEventSynchronize(ringDone_[i % 2]), "D2H");
      const U* p = reinterpret_cast<const U*>(ring_[i % 2]);
      out.insert(out.end(), p, p + std::min(per, count - i * per));
    }
  }

  // All resident rows' sums in one go once their labels are final (same additions as chunk by chunk), then their
  // distances down when the pass wants them.
  void accumulateResidentRows(bool wantDist) {
    stageMark(1);
    accumulateResident(rowValues(resident_), d_, k_, resLabels_, cf_, cosine_, resDist64_, wantDist ? resDist_ : nullptr,
                       fit_, racc_, sums_, counts_, inertia_, compute_);
    check(cudaGetLastError(), "accumulateResident");
    stageMark(2);
    stageMark(3);
    if (wantDist) downloadResident(0, (residentHeld_ + mp_.chunkRows - 1) / mp_.chunkRows, true);
  }

  // Before a slot's outputs are overwritten: wait for their D2H (keeping resident work queued) and copy them out.
  void retire(Slot& s) {
    if (s.pending && overlap_) waitPumping(s.outDone, "D2H");
    drain(s);
  }

  // ---- overlap: resident work queued a few chunks ahead (processResident, processChunk, finishPass) ----
  // resident steps queued beyond the last one seen done (KMFLEET_CUDA_AHEAD for A/B), each ~one chunk's compute
  std::int64_t residentAhead_ = 2;
  bool eventDone(cudaEvent_t e) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) { cudaGetLastError(); return false; }
    check(r, "compute");
    return true;
  }
  // Queue resident steps while fewer than kResidentAhead are outstanding (all: every one left). Once the last is
  // queued, the streamed chunks' folds waiting for it are queued after it, in chunk order.
  void pumpResident(bool all) {
    while (resStep_ < resSteps_) {
      if (!all && resStep_ >= residentAhead_ && !eventDone(resStepDone_[std::size_t(resStep_ - residentAhead_)])) break;
      if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      residentStep(resStep_);
      check(cudaEventRecord(resStepDone_[std::size_t(resStep_)], compute_), "cudaEventRecord");
      ++resStep_;
    }
    if (resStep_ == resSteps_) {
      for (std::size_t b : pendingFolds_) enqueueFold(b);
      pendingFolds_.clear();
    }
  }
  void residentStep(std::int64_t i) {
    const std::int64_t R = residentHeld_, C = mp_.chunkRows, first = i * C;
    if (!resWhole_) {
      computeChunk(residentOps(first), first, std::min(C, R - first), nullptr);
      residentPending_ = true;
      return;
    }
    const bool wantDist = spec_.distances != nullptr;
    if (i < resChunks_) {  // processResidentWhole's pieces, one chunk each
      const std::int64_t rows = std::min(C, R - first);
      assignPiece(residentOps(first), rows, resLabels_ + first, mp_.op == OpKind::F16x3 ? resFlag_ : chunkFlags());
      if (!wantDist) downloadResident(i, i + 1, false);
      return;
    }
    accumulateResidentRows(wantDist);
    rowsSeen_ += R;
    residentPending_ = true;
  }
  // Host waits of a partly resident pass keep the resident work queued meanwhile.
  void waitPumping(cudaEvent_t e, const char* what) {
    if (!overlap_) return check(cudaEventSynchronize(e), what);
    while (!eventDone(e)) {
      const std::int64_t before = resStep_;
      pumpResident(false);
      // yield, not sleep: a sleep lasts ≥ ~60 µs (timer slack), and every copy noticed late delays the next one
      if (resStep_ == before) std::this_thread::yield();
    }
  }
  void enqueueFold(std::size_t b) {
    check(cudaStreamWaitEvent(compute_, partReady_[b], 0), "cudaStreamWaitEvent");
    foldPartial(d_, k_, fit_, partSums_ + b * k_ * d_, partCounts_ + b * k_, partInertia_ + b * k_, sums_, counts_,
                inertia_, compute_);
    check(cudaEventRecord(partFolded_[b], compute_), "cudaEventRecord");
  }

  // Copy a slot's finished outputs into the engine's arrays.
  void drain(Slot& s) {
    if (!s.pending) return;
    check(cudaEventSynchronize(s.outDone), "D2H");
    std::memcpy(spec_.labels + s.firstRow, s.hLabels, sizeof(int) * std::size_t(s.rows));
    if (s.dist && spec_.distances) std::memcpy(spec_.distances + s.firstRow, s.hDist, sizeof(float) * std::size_t(s.rows));
    for (int i = 0; i < s.far; ++i) offerFar(s.hTopDist[i], s.hTopRow[i], s.hTopValues + std::size_t(i) * d_);
    s.pending = false;
  }

  // The pass's farthest rows so far: a heap of at most `farthest` rows whose front is the worst kept
  // ((distance desc, row asc) order); a candidate that can't enter costs one comparison, no copy.
  static bool fartherThan(double da, long long ra, double db, long long rb) {
    return da > db || (da == db && ra < rb);
  }
  void offerFar(double dist, long long row, const float* values) {
    const auto worse = [](const FarRow& a, const FarRow& b) { return fartherThan(a.distance, a.row, b.distance, b.row); };
    const std::size_t cap = std::size_t(spec_.farthest);
    if (far_.size() >= cap) {
      if (!fartherThan(dist, row, far_.front().distance, far_.front().row)) return;
      std::pop_heap(far_.begin(), far_.end(), worse);
      far_.pop_back();
    }
    FarRow f;
    f.row = row;
    f.distance = dist;
    f.label = spec_.labels[row];
    if (values) f.values.assign(values, values + d_);  // resident rows: gathered in finishPass if they stay
    far_.push_back(std::move(f));
    std::push_heap(far_.begin(), far_.end(), worse);
  }

  void ensureFarBuffers(Slot& s, int f) {
    if (f <= farCapacity_ && s.topDist) return;
    const int cap = std::max(f, farCapacity_);
    for (Slot& t : slots_) drain(t);  // their staging is about to be replaced
    for (Slot& t : slots_) {
      if (t.topDist) { cudaFree(t.topDist); cudaFree(t.topRow); cudaFree(t.topValues); }
      if (t.hTopDist) { cudaFreeHost(t.hTopDist); cudaFreeHost(t.hTopRow); cudaFreeHost(t.hTopValues); }
      t.topDist = devAlloc<double>(cap, "farthest rows");
      t.topRow = devAlloc<long long>(cap, "farthest rows");
      t.topValues = devAlloc<float>(std::size_t(cap) * d_, "farthest rows");
      t.hTopDist = hostAlloc<double>(cap, "farthest rows");
      t.hTopRow = hostAlloc<long long>(cap, "farthest rows");
      t.hTopValues = hostAlloc<float>(std::size_t(cap) * d_, "farthest rows");
    }
    farCapacity_ = cap;
  }

  // Farthest candidates of resident chunks: (distance, row) per chunk, device + pinned host.
  void ensureResidentFar(int f) {
    if (f <= resFarCap_) return;
    check(cudaStreamSynchronize(d2h_), "D2H");
    for (void* p : {static_cast<void*>(resFarDist_), static_cast<void*>(resFarRow_)})
      if (p) cudaFree(p);
    for (void* p : {static_cast<void*>(hResFarDist_), static_cast<void*>(hResFarRow_)})
      if (p) cudaFreeHost(p);
    const std::size_t chunks = std::size_t((mp_.residentRows + mp_.chunkRows - 1) / mp_.chunkRows);
    resFarCap_ = f;
    resFarDist_ = devAlloc<double>(chunks * f, "farthest rows");
    resFarRow_ = devAlloc<long long>(chunks * f, "farthest rows");
    hResFarDist_ = hostAlloc<double>(chunks * f, "farthest rows");
    hResFarRow_ = hostAlloc<long long>(chunks * f, "farthest rows");
  }

  // The winners that came from resident chunks have no values yet: gather them from the resident rows.
  void fillResidentValues() {
    std::vector<long long> rows;
    for (const FarRow& f : far_)
      if (f.values.empty()) rows.push_back(f.row);
    if (rows.empty()) return;
    const int m = static_cast<int>(rows.size());
    if (m > gatherCap_) {  // kept across passes: no allocation (and no implicit sync of cudaFree) per pass
      for (void* p : {static_cast<void*>(gatherRows_), static_cast<void*>(gatherVals_)})
        if (p) cudaFree(p);
      for (void* p : {static_cast<void*>(hGatherRows_), static_cast<void*>(hGatherVals_)})
        if (p) cudaFreeHost(p);
      gatherRows_ = nullptr; gatherVals_ = nullptr; hGatherRows_ = nullptr; hGatherVals_ = nullptr; gatherCap_ = 0;
      gatherRows_ = devAlloc<long long>(m, "farthest rows");
      gatherVals_ = devAlloc<float>(std::size_t(m) * d_, "farthest rows");
      hGatherRows_ = hostAlloc<long long>(m, "farthest rows");
      hGatherVals_ = hostAlloc<float>(std::size_t(m) * d_, "farthest rows");
      gatherCap_ = m;
    }
    std::memcpy(hGatherRows_, rows.data(), sizeof(long long) * m);
    check(cudaMemcpyAsync(gatherRows_, hGatherRows_, sizeof(long long) * m, cudaMemcpyHostToDevice, compute_), "H2D");
    gatherRows(rowValues(resident_), d_, gatherRows_, 0, m, gatherVals_, compute_);
    check(cudaMemcpyAsync(hGatherVals_, gatherVals_, sizeof(float) * std::size_t(m) * d_, cudaMemcpyDeviceToHost,
                          compute_), "D2H");
    check(cudaStreamSynchronize(compute_), "farthest rows");
    int i = 0;
    for (FarRow& f : far_)
      if (f.values.empty()) {
        f.values.assign(hGatherVals_ + std::size_t(i) * d_, hGatherVals_ + std::size_t(i + 1) * d_);
        ++i;
      }
  }

  // The pass's centroid operands, and their scale and maxNorm for the launch arguments.
  void centroidsForCompute() {
    if (!centroidsReady_) prepareCentroidOps();
    if (statsPending_) {
      check(cudaEventSynchronize(statsReady_), "centroid statistics");
      cops_.scale = hostStats_->scale;
      cops_.maxNorm = hostStats_->maxNorm;
      statsPending_ = false;
    }
  }

  // Labels of `rows` rows (exact mode: margin test, candidates, fp64 recheck, with flagged-row scratch for at
  // least `rows` rows: a chunk's, or resFlag_ for a piece of resident rows).
  struct FlagScratch {
    int* flagged = nullptr;
    float* thr = nullptr;
    int* candCount = nullptr;
    int* cand = nullptr;
  };
  FlagScratch chunkFlags() const { return {flagged_, flaggedThr_, candCount_, cand_}; }
  // On stream s with its own flagged-row counter (compute_: flaggedCount_; chunkStream_: flaggedCountS_).
  void assignPiece(const RowOps& ops, std::int64_t rows, std::int32_t* labels, const FlagScratch& f,
                   cudaStream_t s = nullptr, unsigned* count = nullptr) {
    if (!s) s = compute_;
    if (!count) count = flaggedCount_;
    check(cudaMemsetAsync(count, 0, 2 * sizeof(unsigned), s), "memset");
    // exact mode: candCount (candidateRows fills it later on this stream) holds the screened rows until then
    assignRows(ops, rows, d_, cops_, k_, mp_.op, labels, f.flagged, count, f.thr, screenThisPass_ ? f.candCount : nullptr,
               count + 1, s);
    check(cudaGetLastError(), "assignRows");
    if (mp_.op == OpKind::F16x3) {
      candidateRows(ops, rows, d_, cops_, k_, f.flagged, count, f.thr, f.candCount, f.cand, s);
      recheckRows(rowValues(ops), d_, cf_, k_, f.flagged, count, rows, f.candCount, f.cand, labels, s);
      addFlagged(s, count);
    }
  }

  // Resident chunks [c0, c1) — labels (+ distances) — down to the pinned staging after what compute has queued.
  void downloadResident(std::int64_t c0, std::int64_t c1, bool dist) {
    check(cudaEventRecord(resComputed_, compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(d2h_, resComputed_, 0), "cudaStreamWaitEvent");
    for (std::int64_t ci = c0; ci < c1; ++ci) {
      const std::int64_t first = ci * mp_.chunkRows;
      const std::size_t rows = std::size_t(std::min(mp_.chunkRows, residentHeld_ - first));
      check(cudaMemcpyAsync(hResLabels_ + first, resLabels_ + first, sizeof(int) * rows, cudaMemcpyDeviceToHost, d2h_),
            "D2H");
      if (dist)
        check(cudaMemcpyAsync(hResDist_ + first, resDist_ + first, sizeof(float) * rows, cudaMemcpyDeviceToHost, d2h_),
              "D2H");
      check(cudaEventRecord(resChunkDone_[std::size_t(ci)], d2h_), "cudaEventRecord");
    }
  }

  // All resident rows at once: the assignment over pieces of whole chunks (no per-chunk launches outside exact
  // mode), then one accumulate (kernels.h accumulateResident: the per-chunk path's sums, bit for bit).
  void processResidentWhole() {
    const std::int64_t R = residentHeld_, C = mp_.chunkRows;
    const bool wantDist = spec_.distances != nullptr;
    centroidsForCompute();
    stageMark(0);
    // whole chunks (planner.h); one chunk a piece while streamed chunks overlap: the resident assignment (a persistent
    // kernel) then yields the SMs to a landed chunk within ~one chunk's compute, so the two slots keep cycling
    const std::int64_t piece = overlap_ ? std::min(R, C) : residentPieceRows(R, C);
    for (std::int64_t first = 0; first < R; first += piece) {
      if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
      const std::int64_t rows = std::min(piece, R - first);
      assignPiece(residentOps(first), rows, resLabels_ + first,
                  mp_.op == OpKind::F16x3 ? resFlag_ : chunkFlags());
      // labels are final here: their copies overlap the rest (with distances, they go down after the sums)
      if (!wantDist) downloadResident(first / C, (first + rows + C - 1) / C, false);
    }
    accumulateResidentRows(wantDist);
    rowsSeen_ += R;
    residentPending_ = true;
  }

  // The farthest-row candidates of the resident rows, from the fp64 distances of this pass, chunk by chunk with
  // the chunk boundaries they were fed with (far_rows.cu), offered to the pass's heap (values gathered later).
  void residentFarthest() {
    const int f = spec_.farthest;
    const std::int64_t R = residentHeld_, C = mp_.chunkRows, chunks = (R + C - 1) / C;
    ensureResidentFar(farCandidates(f, C));  // candidates per chunk
    stageMark(0);
    stageMark(1);
    stageMark(2);
    for (std::int64_t ci = 0; ci < chunks; ++ci)
      farTop(resDist64_ + ci * C, std::min(C, R - ci * C), ci * C, f, farScratch_, resFarDist_ + ci * resFarCap_,
             resFarRow_ + ci * resFarCap_, compute_);
    check(cudaGetLastError(), "farthest rows");
    stageMark(3);
    check(cudaMemcpyAsync(hResFarDist_, resFarDist_, sizeof(double) * std::size_t(chunks * resFarCap_),
                          cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaMemcpyAsync(hResFarRow_, resFarRow_, sizeof(long long) * std::size_t(chunks * resFarCap_),
                          cudaMemcpyDeviceToHost, compute_), "D2H");
    check(cudaStreamSynchronize(compute_), "farthest rows");
    for (std::int64_t ci = 0; ci < chunks; ++ci) {
      const int m = farCandidates(f, std::min(C, R - ci * C));
      for (int i = 0; i < m; ++i) offerFar(hResFarDist_[ci * resFarCap_ + i], hResFarRow_[ci * resFarCap_ + i], nullptr);
    }
  }

  // slot == nullptr: a resident chunk whose outputs go to the resident arrays.
  // s: the stream of a streamed chunk (chunkStream_ when it overlaps the resident rows: its sums go to a partial).
  void computeChunk(const RowOps& ops, std::int64_t firstRow, std::int64_t rows, Slot* slotp,
                    cudaStream_t s = nullptr) {
    if (!s) s = compute_;
    const bool part = slotp && s == chunkStream_;
    centroidsForCompute();
    const RowValues values = rowValues(ops);
    // farthest candidates of streamed chunks now (their rows leave the device); resident rows' in finishPass
    const int far = slotp && fit_ && spec_.farthest > 0 ? farCandidates(spec_.farthest, rows) : 0;
    Slot dummy;
    Slot& slot = slotp ? *slotp : dummy;
    if (!slotp) {
      slot.labels = resLabels_ + firstRow;
      slot.dist32 = resDist_ + firstRow;
      slot.hLabels = hResLabels_ + firstRow;
      slot.hDist = hResDist_ + firstRow;
      slot.computed = resComputed_;
      slot.outDone = resChunkDone_[std::size_t(firstRow / mp_.chunkRows)];  // finishPass copies the chunk after it
    }
    if (far > 0) ensureFarBuffers(slot, far);
    stageMark(0, s);
    // compute must not overwrite this slot's outputs before the previous D2H from them is done (drained).
    if (part) assignPiece(ops, rows, slot.labels, flagsS_, s, flaggedCountS_);
    else assignPiece(ops, rows, slot.labels, chunkFlags());
    const bool wantDist = spec_.distances != nullptr;
    stageMark(1, s);
    // resident rows keep their fp64 distances for the farthest rows (finishPass)
    double* dist = slotp ? dist_ : resDist64_ + firstRow;
    if (part) {
      // Into partial b (a ring: wait until compute_ folded the chunk that used it before), then folded on compute_
      // after everything queued there — the resident rows, the earlier chunks' folds: the totals get the same
      // additions in the same order as from accumulate() into them directly.
      const std::size_t b = std::size_t(partNext_++ % mp_.overlapPartials);
      // the ring came round before the resident rows were all queued: queue them (and the folds) now
      if (partNext_ > mp_.overlapPartials && resStep_ < resSteps_) pumpResident(true);
      double* ps = partSums_ + b * k_ * d_;
      long long* pc = partCounts_ + b * k_;
      double* pi = partInertia_ + b * k_;
      check(cudaStreamWaitEvent(s, partFolded_[b], 0), "cudaStreamWaitEvent");
      if (fit_) check(cudaMemsetAsync(ps, 0, sizeof(double) * std::size_t(k_) * d_, s), "memset");
      check(cudaMemsetAsync(pc, 0, sizeof(long long) * k_, s), "memset");
      check(cudaMemsetAsync(pi, 0, sizeof(double) * k_, s), "memset");
      accumulate(values, rows, d_, k_, slot.labels, cf_, cosine_, dist, wantDist ? slot.dist32 : nullptr, fit_, accS_,
                 ps, pc, pi, s);
      check(cudaEventRecord(partReady_[b], s), "cudaEventRecord");
      if (resStep_ < resSteps_) pendingFolds_.push_back(b);  // after the resident rows, once they are queued
      else enqueueFold(b);
    } else {
      accumulate(values, rows, d_, k_, slot.labels, cf_, cosine_, dist, wantDist ? slot.dist32 : nullptr, fit_, acc_,
                 sums_, counts_, inertia_, compute_);
    }
    stageMark(2, s);
    if (far > 0)
      farRows(dist_, values, rows, d_, firstRow, spec_.farthest, farScratch_, slot.topDist, slot.topRow, slot.topValues,
              s);
    check(cudaGetLastError(), "chunk kernels");
    stageMark(3, s);
    check(cudaEventRecord(slot.computed, s), "cudaEventRecord");
    check(cudaStreamWaitEvent(d2h_, slot.computed, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(slot.hLabels, slot.labels, sizeof(int) * rows, cudaMemcpyDeviceToHost, d2h_), "D2H");
    if (wantDist)
      check(cudaMemcpyAsync(slot.hDist, slot.dist32, sizeof(float) * rows, cudaMemcpyDeviceToHost, d2h_), "D2H");
    if (far > 0) {
      check(cudaMemcpyAsync(slot.hTopDist, slot.topDist, sizeof(double) * far, cudaMemcpyDeviceToHost, d2h_), "D2H");
      check(cudaMemcpyAsync(slot.hTopRow, slot.topRow, sizeof(long long) * far, cudaMemcpyDeviceToHost, d2h_), "D2H");
      check(cudaMemcpyAsync(slot.hTopValues, slot.topValues, sizeof(float) * std::size_t(far) * d_,
                            cudaMemcpyDeviceToHost, d2h_),
            "D2H");
    }
    check(cudaEventRecord(slot.outDone, d2h_), "cudaEventRecord");
    rowsSeen_ += rows;
    if (!slotp) return;  // finishPass copies the resident outputs after the final sync
    // The next compute into this slot's labels must wait for this D2H: drain() on the host waits for it
    // before the slot is reused.
    slot.pending = true;
    slot.firstRow = firstRow;
    slot.rows = rows;
    slot.far = far;
    slot.dist = wantDist;
  }

  void addFlagged(cudaStream_t s, const unsigned* count);

  // KMFLEET_CUDA_STATS: CUDA events around each chunk's stages (assign + recheck, sums + distances, farthest),
  // summed and printed by finishPass. Nothing recorded otherwise.
  void stageMark(int i, cudaStream_t s = nullptr) {
    if (!stats_) return;
    if (!s) s = compute_;
    if (i == 0 && stagesUsed_ == stageEv_.size()) {
      stageEv_.emplace_back();
      for (cudaEvent_t& e : stageEv_.back()) check(cudaEventCreate(&e), "cudaEventCreate");
    }
    check(cudaEventRecord(stageEv_[stagesUsed_][i], s), "cudaEventRecord");
    if (i == 3) ++stagesUsed_;
  }

  EngineConfig cfg_;
  MemoryPlan mp_;
  Plan plan_;
  std::int64_t n_ = 0;
  int d_ = 0, k_ = 0;
  std::int64_t dp_ = 0, kp_ = 0;
  std::size_t rowBytes_ = 0;
  bool cosine_ = false;
  bool rows16_ = false;  // 16-bit rows kept as they are (kernels.h keepsRows16)

  cudaStream_t copy_ = nullptr, compute_ = nullptr, d2h_ = nullptr;
  std::vector<void*> host_;
  float* hostCentroids_ = nullptr;
  static constexpr std::size_t kRingBytes = std::size_t(1) << 20;  // pieces of the centroid upload and downloads
  char* ring_[2] = {nullptr, nullptr};
  cudaEvent_t ringDone_[2] = {nullptr, nullptr};
  unsigned long long* hostFlags_ = nullptr;  // pinned: bad row, zero row, flagged total, changed resident rows, screened total
  CentroidStats* hostStats_ = nullptr;       // pinned: scale and maxNorm of the pass's centroids
  CentroidStatsDevice* cstats_ = nullptr;
  cudaEvent_t statsReady_ = nullptr;
  bool statsPending_ = false;
  std::vector<Slot> slots_;  // planner.h MemoryPlan::slots
  int slotNext_ = 0;

  float* cf_ = nullptr;
  // updateOnDevice: the next centroids (swapped with cf_), fp64 data mean, per-cluster shift and scatter
  float* cfNext_ = nullptr;
  double* mu64_ = nullptr;
  double* scatter_ = nullptr;
  double* shift_ = nullptr;
  bool cfFromUpdate_ = false;  // cf_ holds the last updateOnDevice's `next` (nothing uploaded since)
  bool sumsKept_ = false;      // the last finishPass kept its sums for updateOnDevice
  unsigned short* bhi_ = nullptr;
  unsigned short* blo_ = nullptr;
  float* cnorm_ = nullptr;
  float* mu_ = nullptr;
  std::vector<float> hostMu_;
  bool muReady_ = false, centroidsReady_ = false;
  CentroidOps cops_;
  double* sums_ = nullptr;
  long long* counts_ = nullptr;
  double* inertia_ = nullptr;
  unsigned long long* bad_ = nullptr;
  unsigned long long* flaggedTotal_ = nullptr;
  unsigned* flaggedCount_ = nullptr;

  RowOps streamOps_;
  int* flagged_ = nullptr;
  float* flaggedThr_ = nullptr;
  int* candCount_ = nullptr;
  int* cand_ = nullptr;
  double* dist_ = nullptr;
  char* farScratch_ = nullptr;
  int farCapacity_ = 0;
  AccumulateScratch acc_;

  RowOps resident_;
  int* resLabels_ = nullptr;
  // The resident rows' labels of the previous pass that computed them (swapped with resLabels_ after each such
  // pass), valid when that pass was the engine's last completed one: finishPass counts the changed rows.
  int* resPrevLabels_ = nullptr;
  bool prevLabelsValid_ = false;
  bool hostCountsChanges_ = false;  // KMFLEET_CUDA_HOST_REASSIGNED=1 (A/B only): leave the count to the engine
  unsigned long long* changedCount_ = nullptr;
  float* resDist_ = nullptr;
  double* resDist64_ = nullptr;  // this pass's fp64 distance of each resident row (farthest rows, finishPass)
  ResidentAccumulateScratch racc_;  // rows > 0: processResidentWhole
  FlagScratch resFlag_;             // exact mode, processResidentWhole: flagged rows of a piece
  bool residentRan_ = false;        // processResident ran in this pass
  int* hResLabels_ = nullptr;
  float* hResDist_ = nullptr;
  cudaEvent_t resComputed_ = nullptr, resOutDone_ = nullptr;
  std::vector<cudaEvent_t> resChunkDone_;  // per resident chunk: its labels/distances are in the pinned staging
  bool residentPending_ = false;
  double* resFarDist_ = nullptr;
  long long* resFarRow_ = nullptr;
  double* hResFarDist_ = nullptr;
  long long* hResFarRow_ = nullptr;
  int resFarCap_ = 0;
  long long* gatherRows_ = nullptr;   // fillResidentValues: rows to gather, their values (device, pinned)
  float* gatherVals_ = nullptr;
  long long* hGatherRows_ = nullptr;
  float* hGatherVals_ = nullptr;
  int gatherCap_ = 0;
  bool stats_ = false;
  // KMFLEET_CUDA_PER_CHUNK (A/B only): resident rows chunk by chunk and the farthest rows on every fit pass, the
  // device work of the path before accumulateResident and the lazy farthest rows
  bool perChunk_ = false;
  // Overlap of a partly resident pass (planner.h overlapPartials): streamed chunks on chunkStream_ (high priority)
  // with their own scratch, sums into a ring of per-chunk partials folded on compute_ in chunk order.
  // KMFLEET_CUDA_NO_OVERLAP=1 keeps the old path (streamed chunks behind the resident rows on compute_) for A/B.
  bool noOverlap_ = false, overlap_ = false;
  cudaStream_t chunkStream_ = nullptr;
  cudaEvent_t passReady_ = nullptr;
  AccumulateScratch accS_;
  FlagScratch flagsS_;
  unsigned* flaggedCountS_ = nullptr;
  double* partSums_ = nullptr;
  long long* partCounts_ = nullptr;
  double* partInertia_ = nullptr;
  std::vector<cudaEvent_t> partReady_, partFolded_;
  std::int64_t partNext_ = 0;
  bool resWhole_ = false;                      // resident steps: pieces + accumulateResident (else chunk by chunk)
  std::int64_t resChunks_ = 0, resSteps_ = 0, resStep_ = 0;
  std::vector<cudaEvent_t> resStepDone_;      // per resident step, on compute_
  std::vector<std::size_t> pendingFolds_;     // partials waiting for the last resident step to be queued
  std::vector<std::array<cudaEvent_t, 4>> stageEv_;
  std::size_t stagesUsed_ = 0;
  std::int64_t residentHeld_ = 0;
  std::int64_t retainedThisPass_ = 0;

  PassSpec spec_;
  bool fit_ = true;
  std::int64_t rowsSeen_ = 0;
  std::vector<FarRow> far_;
  std::int64_t lastRecheckRows_ = 0;
  ExactScreenPolicy screenPolicy_;  // exact mode: screen by one product first? (decided per pass from the last ones)
  bool screenThisPass_ = false;
};

// atomic: the compute stream and the chunk stream may add at the same time
__global__ void addFlaggedKernel(unsigned long long* total, const unsigned* count) {
  atomicAdd(total, static_cast<unsigned long long>(count[0]));      // flagged for the recheck
  atomicAdd(total + 1, static_cast<unsigned long long>(count[1]));  // passed on by the screen
}

void CudaBackend::addFlagged(cudaStream_t s, const unsigned* count) {
  addFlaggedKernel<<<1, 1, 0, s>>>(flaggedTotal_, count);
}

}  // namespace

std::unique_ptr<Backend> makeCudaBackend(const EngineConfig& config) {
  try {
    return std::make_unique<CudaBackend>(config);
  } catch (const EngineError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw EngineError(ErrorCode::OutOfMemory, "CUDA: out of memory while allocating the backend's buffers");
  }
}

}  // namespace kmfleet
