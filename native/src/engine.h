// The Engine: what every backend shares (backend.h). It validates, keeps the pass state machine, owns labels
// (double-buffered, for the reassigned count, or changed in place where a backend reports changes), distances and
// centroids, turns a backend's fp64 totals into new centroids (empty clusters re-seeded with the farthest rows), and
// runs k-means++ on a sample.
//
// Threads: methods marked [js] are called on the JS thread; [engine] ones on the engine thread (one at a time,
// in submission order). Shared state between the two is guarded (centroids, labels) or atomic (cancel).
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "host_tier.h"
#include "memory.h"
#include "row_narrowing.h"
#include "thread_pool.h"

namespace kmfleet {

struct PassResult {
  PassMode mode = PassMode::Fit;
  double inertia = 0;
  std::int64_t reassigned = 0;
  double shift = 0;
  std::int64_t emptyReseeded = 0;
  std::vector<double> counts;
  double dataVariance = 0;  // NaN when the pass did not see every row
  double ms = 0;
  bool updatedOnDevice = false;  // fit passes: the backend's updateOnDevice computed the update
  // the engine began the next fit pass itself (PassChain said another iteration follows), its feeds starting at
  // chainedFirstRow: the caller's next compatible beginPass takes it over
  bool chained = false;
  std::int64_t chainedFirstRow = -1;
  bool begunByEngine = false;  // this pass was begun by the engine (a chained one) and taken over by the caller
  // Where the rows of this pass came from: the backend's resident rows, the engine's host tier, the caller's feeds.
  std::int64_t residentRowsUsed = 0, hostRowsUsed = 0, fedRows = 0;
  std::int64_t rowsSettled = 0;  // rows the backend's bounds settled without a distance (PassTotals.rowsSettled)
  bool labelsAsChanges = false;  // the backend reported only the changed rows' labels (PassTotals.labelsAsChanges)
  // After it: rows the engine holds from row 0 (the resident rows, then the host tier's), where the next pass's feeds
  // start; of them, the host tier's; and why the host tier is not what was planned, if it is not (host_tier.h).
  std::int64_t heldRows = 0, hostRowsHeld = 0;
  std::string hostTierWarning;
};

// The caller's stopping rule for a chain of fit passes (core/kmeans/stopping.ts): after a fit pass that saw every row,
// another follows unless reassigned/rows <= tolReassign, shift <= tol × variance, or passesLeft <= 0. When one follows,
// the engine begins it at once (fit, feeds from the resident rows' end, no data variance), chained with the same rule
// and one pass fewer, so the device need not wait for the caller's round trip between passes.
struct PassChain {
  bool enabled = false;
  double tol = 0, tolReassign = 0;
  double variance = 0;        // NaN: this pass's own data variance (it must compute it then)
  std::int64_t passesLeft = 0;
};

class Engine {
 public:
  // Validates the config (InvalidArgument naming the values) and creates the backend (Auto: CUDA when built with
  // it and a device is present, else CPU). Heavy (allocates the host buffers): call it off the JS thread.
  explicit Engine(const EngineConfig& config);
  ~Engine();

  const EngineConfig& config() const { return cfg_; }
  const Plan& plan() const { return plan_; }  // the backend's, with the host tier's rows
  void* hostBuffer(int index);                   // [js] InvalidArgument when out of range
  std::size_t bufferBytes() const;

  void setCentroids(const float* c, std::size_t count);  // [js] not while a pass is running
  void copyCentroids(float* dst) const;                  // [js or engine] the K×D centroids into dst
  bool hasCentroids() const;
  // [js] A read queued on the engine thread (readCentroids): refused once finishPass was called and has not settled,
  // when the queued read would land after the pass's update; before finishPass it reads the pass's own centroids.
  void admitReadCentroids() const;

  // [js] The pass state machine. Each returns the generation the submitted work belongs to.
  // adopted: the engine already began this pass itself (PassResult.chained) and no runBegin is to be submitted; it
  // is adopted when it is what was asked (a fit pass, no distances, no data variance, feeds from its firstRow)
  std::uint64_t admitBegin(PassMode mode, bool distances, bool dataVariance, std::int64_t firstRow, bool& adopted);
  std::uint64_t admitFeed(int buffer, std::int64_t firstRow, std::int64_t rowCount);
  std::uint64_t admitFeedFile(std::int64_t firstRow, std::int64_t rowCount);
  std::uint64_t admitFinish();
  std::uint64_t admitInit();
  void feedSettled(int buffer);  // [js] the feed's promise settled: the buffer may be fed again
  void finishSettled(bool ok, const PassResult* result);  // [js] the finishPass promise settled (result if ok)
  void cancel();                 // [js] work of the current generation stops at the next chunk boundary

  // Rows loaded ahead of a pass (backend.h loadRows): kept as resident rows, no labels, nothing accumulated. Not while a
  // pass is open; any order. Each load is its own generation, so cancel() also drops the loads queued before it.
  bool loadsRows() const { return backend_->loadsRows(); }
  std::uint64_t admitLoad(std::int64_t firstRow, std::int64_t rowCount);  // [js]
  // [engine] Returns the rows held from row 0 afterwards (where the next pass's streamed rows start). A load that
  // throws (Cancelled before it starts, OutOfMemory) retained nothing.
  std::int64_t runLoad(std::uint64_t gen, const void* rows, std::int64_t firstRow, std::int64_t rowCount);

  // [engine] Execution. Throw EngineError; a Cancelled/failed pass is aborted and later work of it rejected.
  // dataVariance: compute the data's per-feature variance (PassResult.dataVariance) when the pass sees every row; it
  // does not change between passes, so a caller that has it asks once (on the device it is most of the update's
  // kernels at K×D = 1M; on the host a K×D walk of the sums)
  // firstRow: where the caller's feeds start (-1: not said, the first feed tells). At the resident rows' end, they are
  // processed right away, so the device computes while the engine thread takes the tasks queued behind; at row 0 the
  // caller streams every row.
  void runBegin(std::uint64_t gen, PassMode mode, bool distances, bool dataVariance = true, std::int64_t firstRow = -1,
                const PassChain& chain = PassChain());
  void runFeed(std::uint64_t gen, int buffer, std::int64_t firstRow, std::int64_t rowCount);
  // A feed read by the engine itself from the open file `fd`, whose bytes from `offset` are rows [firstRow,
  // firstRow + rowCount) in the caller's dtype (file_rows.h): the rows of a pass that no tier holds.
  void runFeedFile(std::uint64_t gen, int fd, std::int64_t offset, std::int64_t firstRow, std::int64_t rowCount);
  PassResult runFinish(std::uint64_t gen);
  void runInit(std::uint64_t gen, const void* sample, DType dtype, std::int64_t sampleRows, std::uint64_t seed);

  std::vector<std::int32_t> labels(std::int64_t firstRow, std::int64_t count) const;  // [js]
  std::vector<float> distances(std::int64_t firstRow, std::int64_t count) const;      // [js]

 private:
  void checkGen(std::uint64_t gen);
  void checkFeedRange(std::int64_t firstRow, std::int64_t rowCount) const;
  // runFeed and runFeedFile around what each does with the chunk: the held rows before it, its order, the errors
  void feedInOrder(std::uint64_t gen, std::int64_t firstRow, std::int64_t rowCount, const std::function<void()>& take);
  void abortPass();
  // Rows the engine holds from row 0: the backend's resident rows, then — once those are complete — the host tier's.
  std::int64_t heldRows() const;
  // The held rows before `upTo` (the first fed row, or rows at the finish), once per pass: the resident rows, then the
  // host tier's chunks.
  void processHeldIfNeeded(std::int64_t upTo);
  // [engine] End of a fit pass: begins the next one itself when its chain rule says one follows (PassChain)
  void chainNext(std::uint64_t gen, PassResult& r, bool sawEveryRow);
  void applyFit(const PassTotals& t, PassResult& r);
  void applyDeviceFit(const PassTotals& t, PassResult& r, bool dataVariance);
  double dataVariance(const PassTotals& t);

  EngineConfig cfg_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Backend> backend_;
  Plan plan_;
  HostTier tier_;
  // An fp16/bf16 job over fp32 rows: the caller fills these fp32 buffers, and each feed is rounded into the backend's
  // buffer of the same index (row_narrowing.h). Empty otherwise: the caller fills the backend's buffers.
  RowNarrowing narrowing_;
  std::vector<Array<float>> callerBuffers_;
  // the chunk a file feed is read into for a backend that takes no pieces, or for rows the host tier keeps
  HostBlock fileChunk_;

  // JS-thread state
  std::uint64_t gen_ = 0;
  bool passOpen_ = false, finishing_ = false;
  PassMode jsMode_ = PassMode::Fit;
  std::vector<bool> inFlight_;
  bool jsDistances_ = false, distancesReady_ = false;
  bool chained_ = false;              // the last fit pass's result said the engine began the next one (gen_ is it)
  std::int64_t chainedFirstRow_ = -1;

  // shared
  std::atomic<std::uint64_t> cancelGen_{0};
  std::atomic<bool> cancelFlag_{false};
  mutable std::mutex mu_;        // centroids_, labels swap, distances
  std::vector<float> centroids_; // K×D, empty until set
  bool centroidsFromUpdate_ = false;  // centroids_ is the backend's last updateOnDevice result (PassSpec)
  // centroids_ is out of date: the backend's last updateOnDevice holds them and they come to the host only when read
  // (hostCentroidsLocked, copyCentroidsLocked); K×D floats a pass nobody reads stay on the device.
  bool centroidsOnDevice_ = false;
  void hostCentroidsLocked();                          // mu_ held: centroids_ up to date
  void copyCentroidsLocked(float* dst) const;          // mu_ held: the centroids into dst, centroids_ left as it is
  Array<std::int32_t> labels_, next_;
  Array<float> distances_;

  // engine-thread state
  std::uint64_t passGen_ = 0;
  bool passRunning_ = false;      // a pass of passGen_ is open on the backend
  bool passChained_ = false;      // ... begun by the engine itself (chain_ of the pass before): abandoned by a load/init
  PassChain chain_;               // the running pass's chain rule
  bool heldPending_ = false;      // held rows (resident, host tier) still to be processed in this pass
  std::int64_t residentUsed_ = 0, hostUsed_ = 0, fed_ = 0;  // PassResult's rows by where they came from
  std::unique_ptr<EngineError> passError_;
  PassMode mode_ = PassMode::Fit;
  bool wantDistances_ = false;
  bool wantVariance_ = true;
  std::int64_t cursor_ = 0;       // next row expected
  std::vector<float> passCentroids_;  // the pass's centroids for the host update; see passCentroids()
  bool passCentroidsCopied_ = true;   // false: not copied at the pass's start (centroids_ still holds them)
  const std::vector<float>& passCentroids();
  std::vector<float> nextCentroids_;  // applyFit's result, swapped into centroids_ (no K×D allocation a pass)
  double passStartMs_ = 0;
  // EngineConfig.stats (KMFLEET_ENGINE_STATS): each pass's host time per step on stderr (copy of the centroids, the
  // backend's begin, rows, the backend's finish, the label diff, the data variance, the update), and when the engine
  // thread began and ended it on the monotonic clock (process.hrtime's: a caller can time the hops to and from the
  // engine thread). Nothing measured is changed by it.
  double stat_[3] = {0, 0, 0};
};

// Greedy k-means++ (scikit-learn's _kmeans_plusplus) over n fp32 rows (already normalized for cosine). An engine
// on the CUDA backend runs cudaKmeansPlusPlus (cuda_bridge.h) instead: the same draws, distances on the device.
std::vector<float> kmeansPlusPlus(const float* x, std::int64_t n, std::int64_t D, std::int64_t K, std::uint64_t seed,
                                  ThreadPool& pool, const std::atomic<bool>* cancel);

}  // namespace kmfleet
