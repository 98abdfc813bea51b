// One job on several GPUs of this process (EngineConfig.devices): a Backend whose rows are split into contiguous
// shares, one per device, each a CudaBackend (a lane) that keeps its share's rows on its device and, past what the
// device holds, in its own page-locked host tier. Every pass runs the lanes at once, each on its own host link; the
// passes' exact integer statistics of the lanes are added on the first lane's device, so the totals, the
// centroids and the labels are the same bits as on one GPU (cuda/NOTES.md "Several devices").
//
// To the engine it is a backend that holds every row it keeps from row 0 (plan.residentRows = rows): the lanes' host
// tiers are its own, so the engine's host tier stays empty. A share that neither its device nor its host tier can hold
// is fed by the engine every pass, as with one device.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "host_tier.h"
#include "thread_pool.h"

namespace kmfleet {

namespace cuda_backend {

class CudaBackend;

class MultiDeviceBackend final : public Backend {
 public:
  MultiDeviceBackend(const EngineConfig& cfg, ThreadPool* pool);
  ~MultiDeviceBackend() override;

  const Plan& plan() const override { return plan_; }
  void* hostBuffer(int index) override;
  std::int64_t residentHeld() const override;

  void beginPass(const PassSpec& spec) override;
  void processResident() override;
  void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) override;
  HostBlock allocateHostRows(std::size_t bytes, std::string& warning) override;
  PassTotals finishPass() override;
  void abortPass() noexcept override;
  bool updatesOnDevice() const override { return true; }
  DeviceUpdate updateOnDevice(bool dataVariance) override;
  void copyUpdatedCentroids(float* dst) override;

 private:
  struct Lane {
    std::unique_ptr<CudaBackend> backend;
    std::int64_t first = 0, rows = 0;  // the share: global rows [first, first + rows)
    HostTier tier;                      // the share's rows after the device's, by local row
    int numaNode = -1;                  // its device's NUMA node (numa_placement.h), -1: one node or unknown
    std::unique_ptr<ThreadPool> pool;   // lanes but the first: their own, for their finish beside the first lane's
    // this pass: the local rows its held rows cover (processed by the lane's thread, so not fed again), the thread
    std::int64_t heldEnd = 0;
    std::int64_t rowsFromHost = 0, fedRowsSkipped = 0;  // this pass: backend.h PassTotals
    std::thread worker;
    double heldMs = 0, finishMs = 0;  // EngineConfig.stats: its thread's time on the held rows, its finish (host)
    std::exception_ptr error;
  };
  Lane& laneOf(std::int64_t row);
  std::int64_t heldBy(const Lane& lane) const;  // local rows the lane holds from its row 0 (device, then host tier)
  void runHeld(Lane& lane);                     // the lane's held rows through its backend (on its thread)
  void join(Lane& lane);                        // wait for the lane's thread; rethrows its error
  void joinAll();

  EngineConfig cfg_;
  ThreadPool* pool_ = nullptr;
  Plan plan_;
  std::vector<Lane> lanes_;
  PassSpec spec_;
  bool passOpen_ = false;
  double broadcastMs_ = 0;  // EngineConfig.stats: the host time beginPass took to hand the updated centroids over
};

}  // namespace cuda_backend
}  // namespace kmfleet
