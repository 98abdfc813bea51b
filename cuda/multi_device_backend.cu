// One job on several GPUs (multi_device_backend.h): the shares, the lanes' threads, the merge of their totals.
#include "multi_device_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "cuda_backend.h"
#include "device_memory.h"
#include "host_memory.h"
#include "kernels/exact_sums.cuh"
#include "numa_placement.h"
#include "planner.h"
#include "thread_pool.h"

namespace kmfleet {
namespace cuda_backend {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// Threads of each lane but the first for the copies of its resident labels into the engine's arrays (the first lane
// has the engine's pool).
constexpr int kLaneCopyThreads = 8;

// The chunk rows every lane streams with: the caller's, else the planner's for one share on the first device. The
// shares are whole multiples of it, so that a feed of the engine's grid never straddles two lanes.
std::int64_t laneChunkRows(const EngineConfig& cfg, std::int64_t shareRows) {
  if (cfg.chunkRows > 0) return cfg.chunkRows;
  DeviceScope on(cfg.devices.front());
  std::size_t freeB = 0, totalB = 0;
  check(cudaMemGetInfo(&freeB, &totalB), "cudaMemGetInfo");
  EngineConfig probe = cfg;
  probe.rows = shareRows;
  probe.device = cfg.devices.front();
  return planMemory(probe, freeB).chunkRows;
}

}  // namespace

MultiDeviceBackend::MultiDeviceBackend(const EngineConfig& cfg, ThreadPool* pool) : cfg_(cfg), pool_(pool) {
  const auto& devices = cfg.devices;
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  for (int d : devices)
    if (d < 0 || d >= count)
      throw EngineError(ErrorCode::InvalidArgument,
                        "CUDA device " + std::to_string(d) + " does not exist (" + std::to_string(count) + " device(s))");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    throw EngineError(ErrorCode::InvalidArgument, "devices: each CUDA device may be named once");
  // The lanes' totals add up to one GPU's bits only as exact integer statistics (kernels/exact_sums.cuh).
  if (!cuda::exactSumsFits(cfg.rows, static_cast<int>(cfg.dims), static_cast<int>(cfg.k)))
    throw EngineError(ErrorCode::InvalidArgument,
                      "a job on several GPUs needs k × dims ≤ 2^26 and fewer than 2^31 rows (k=" + str(cfg.k) +
                          ", dims=" + str(cfg.dims) + ", rows=" + str(cfg.rows) + "): run it on one GPU");
  const std::int64_t g = static_cast<std::int64_t>(devices.size());
  const std::int64_t even = (cfg.rows + g - 1) / g;
  const std::int64_t planned = std::min(laneChunkRows(cfg, even), even);
  // A planned chunk is trimmed so that whole chunks split the rows evenly: a share rounded up to the planned size
  // could hold a chunk more than the others, and every pass waits for the lane with the most rows.
  const std::int64_t chunksPerShare = (even + planned - 1) / planned;
  const std::int64_t chunk = cfg.chunkRows > 0 ? planned : (even + chunksPerShare - 1) / chunksPerShare;
  const std::int64_t share = (even + chunk - 1) / chunk * chunk;
  const std::int64_t hostBudget =
      (cfg.hostMemoryBudget >= 0 ? cfg.hostMemoryBudget : defaultHostTierBudget()) / g;
  const std::int64_t rowBytes = cfg.dims * static_cast<std::int64_t>(dtypeBytes(cfg.dtype));
  for (std::int64_t first = 0, i = 0; first < cfg.rows; first += share, ++i) {
    EngineConfig lc = cfg;
    lc.devices.clear();
    lc.device = devices[static_cast<std::size_t>(i)];
    lc.hostMemoryBudget = 0;  // the lane's host tier is this backend's (Lane::tier), never an engine's
    lc.rows = std::min(share, cfg.rows - first);
    lc.chunkRows = chunk;
    Lane lane;
    lane.first = first;
    lane.rows = lc.rows;
    lane.numaNode = deviceNumaNode(lc.device);
    // the other lanes finish beside the first: their resident outputs' copies on threads of their own
    if (i > 0) lane.pool = std::make_unique<ThreadPool>(kLaneCopyThreads);
    {
      DeviceScope on(lc.device);
      PreferNumaNode near(lane.numaNode);  // its pinned buffers and staging beside its device
      lane.backend = std::make_unique<CudaBackend>(lc, i > 0 ? lane.pool.get() : pool, first);
    }
    if (i > 0) lane.backend->deferFarthestRows();
    const std::int64_t onDevice = lane.backend->plan().residentRows, after = lane.rows - onDevice;
    const std::int64_t tierRows =
        after <= hostBudget / rowBytes ? after : std::min(after, hostBudget / (chunk * rowBytes) * chunk);
    lane.tier = HostTier(onDevice, tierRows, chunk, static_cast<std::size_t>(rowBytes));
    lanes_.push_back(std::move(lane));
  }
  const Plan& first = lanes_.front().backend->plan();
  plan_ = first;
  plan_.device = std::to_string(lanes_.size()) + " × " + first.device;
  plan_.residentRows = cfg.rows;
  plan_.hostRows = 0;
  plan_.deviceRows = 0;
  for (const Lane& lane : lanes_) {
    plan_.deviceRows += lane.backend->plan().residentRows;
    plan_.backendHostRows += lane.tier.plannedRows();
  }
}

MultiDeviceBackend::~MultiDeviceBackend() {
  for (Lane& lane : lanes_)
    if (lane.worker.joinable()) lane.worker.join();
}

void* MultiDeviceBackend::hostBuffer(int index) { return lanes_.front().backend->hostBuffer(index); }

HostBlock MultiDeviceBackend::allocateHostRows(std::size_t bytes, std::string& warning) {
  return lanes_.front().backend->allocateHostRows(bytes, warning);
}

std::int64_t MultiDeviceBackend::heldBy(const Lane& lane) const {
  const std::int64_t onDevice = lane.backend->residentHeld();
  return onDevice < lane.backend->plan().residentRows ? onDevice : lane.tier.heldEnd();
}

std::int64_t MultiDeviceBackend::residentHeld() const {
  for (const Lane& lane : lanes_) {
    const std::int64_t held = heldBy(lane);
    if (held < lane.rows) return lane.first + held;
  }
  return cfg_.rows;
}

MultiDeviceBackend::Lane& MultiDeviceBackend::laneOf(std::int64_t row) {
  for (Lane& lane : lanes_)
    if (row < lane.first + lane.rows) return lane;
  throw EngineError(ErrorCode::InvalidArgument, "row " + str(row) + " is past the job's " + str(cfg_.rows) + " rows");
}

void MultiDeviceBackend::beginPass(const PassSpec& spec) {
  spec_ = spec;
  // The other lanes take the first lane's updated centroids device to device, queued behind its update: no lane waits
  // for them on the host.
  const bool broadcast = spec.centroidsFromUpdate && lanes_.size() > 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    PassSpec s = spec;
    s.labels = spec.labels + lane.first;
    s.previousLabels = spec.previousLabels ? spec.previousLabels + lane.first : nullptr;
    s.distances = spec.distances ? spec.distances + lane.first : nullptr;
    s.labelsAsChanges = false;  // a lane's changes would need its offset and a merge: every lane writes its labels
    if (i > 0) {
      if (broadcast) lane.backend->takeCentroidsFrom(*lanes_.front().backend);
      s.centroidsFromUpdate = false;
      s.keepSums = true;  // its statistics go to the first lane; its own sums never come down
    }
    lane.heldEnd = 0;
    lane.rowsFromHost = lane.fedRowsSkipped = 0;
    lane.error = nullptr;
    lane.backend->beginPass(s);
  }
  broadcastMs_ = broadcast ? std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() : 0;
  passOpen_ = true;
}

// Each lane's held rows on a thread of its own, so that the devices and their host links work at once.
void MultiDeviceBackend::processResident() {
  for (Lane& lane : lanes_) {
    lane.heldEnd = heldBy(lane);
    if (lane.heldEnd == 0) continue;
    lane.worker = std::thread([this, &lane] {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        runHeld(lane);
        lane.heldMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      } catch (...) {
        lane.error = std::current_exception();
      }
    });
  }
}

void MultiDeviceBackend::runHeld(Lane& lane) {
  CudaBackend& b = *lane.backend;
  if (b.residentHeld() > 0) b.processResident();
  for (std::int64_t r = lane.tier.firstRow(); r < lane.heldEnd;) {
    if (spec_.cancel && spec_.cancel->load()) throw EngineError(ErrorCode::Cancelled, "cancelled");
    std::int64_t count = 0;
    const void* block = lane.tier.chunkAt(r, count);
    b.processChunk(block, r, count);
    lane.rowsFromHost += count;
    r += count;
  }
}

void MultiDeviceBackend::join(Lane& lane) {
  if (lane.worker.joinable()) lane.worker.join();
  if (lane.error) {
    std::exception_ptr e = lane.error;
    lane.error = nullptr;
    std::rethrow_exception(e);
  }
}

void MultiDeviceBackend::joinAll() {
  for (Lane& lane : lanes_)
    if (lane.worker.joinable()) lane.worker.join();
  for (Lane& lane : lanes_) join(lane);  // the first lane's error: the lowest rows
}

void MultiDeviceBackend::processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) {
  Lane& lane = laneOf(firstRow);
  const std::int64_t local = firstRow - lane.first;
  if (local + rows > lane.rows)
    throw EngineError(ErrorCode::InvalidArgument, "rows [" + str(firstRow) + ", " + str(firstRow + rows) +
                                                      ") straddle two devices' shares: feed whole chunks of " +
                                                      str(plan_.chunkRows) + " rows");
  join(lane);
  if (local + rows <= lane.heldEnd) {  // its held run did these rows
    lane.fedRowsSkipped += rows;
    return;
  }
  if (local < lane.heldEnd)
    throw EngineError(ErrorCode::InvalidArgument, "rows [" + str(firstRow) + ", " + str(firstRow + rows) +
                                                      ") are partly held by their device's lane");
  // Every lane shifts its operands by the first rows of the job (the first lane's μ), as one device would.
  CudaBackend& b = *lane.backend;
  if (&lane != &lanes_.front() && !b.muReady()) {
    CudaBackend& first = *lanes_.front().backend;
    if (!first.muReady())
      throw EngineError(ErrorCode::InvalidArgument, "the first pass must feed row 0 before the other devices' rows");
    b.adoptMu(first.mu());
  }
  if (local >= b.plan().residentRows && pool_) {
    PreferNumaNode near(lane.numaNode);  // the host tier's blocks beside the lane's device
    lane.tier.keep(b, *pool_, data, local, rows);
  }
  b.processChunk(data, local, rows);
}

PassTotals MultiDeviceBackend::finishPass() {
  joinAll();
  passOpen_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [&t0] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  // The other lanes finish on their threads, each waiting for its device and copying its labels, while the first lane
  // copies its own; their statistics then add into the first lane's before its totals are made.
  std::vector<PassTotals> totals(lanes_.size());
  for (std::size_t i = 1; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    lane.worker = std::thread([&lane, &totals, i, &since] {
      try {
        totals[i] = lane.backend->finishPass();
      } catch (...) {
        lane.error = std::current_exception();
      }
      lane.finishMs = since();
    });
  }
  bool othersFailed = false;
  const CudaBackend::LaneStatistics others = [&] {
    std::vector<ExactStatistics::Peer> peers;
    for (std::size_t i = 1; i < lanes_.size(); ++i) {
      lanes_[i].worker.join();
      if (lanes_[i].error) othersFailed = true;
      else peers.push_back({lanes_[i].backend->passStatistics(), lanes_[i].backend->device()});
    }
    return peers;
  };
  PassTotals t;
  try {
    t = lanes_.front().backend->finishPass(others);
  } catch (...) {
    for (std::size_t i = 1; i < lanes_.size(); ++i)
      if (lanes_[i].worker.joinable()) lanes_[i].worker.join();
    throw;  // its bad row, if any, is the lowest of the job
  }
  lanes_.front().finishMs = since();
  if (othersFailed) joinAll();  // the first failed lane's error: the lowest rows
  if (cfg_.stats) {  // EngineConfig.stats: what the split between devices costs a pass
    std::fprintf(stderr, "[kmfleet devices] lanes=%zu merge=%.3f ms (device) broadcast=%.3f ms (host, this pass's begin)",
                 lanes_.size(), static_cast<double>(lanes_.front().backend->mergeMs()), broadcastMs_);
    for (const Lane& lane : lanes_) std::fprintf(stderr, " | held %.3f finished at %.3f", lane.heldMs, lane.finishMs);
    std::fprintf(stderr, "\n");
  }
  for (std::size_t i = 1; i < lanes_.size(); ++i) {
    t.rowsSeen += totals[i].rowsSeen;
    t.rowsSettled += totals[i].rowsSettled;
  }
  for (const Lane& lane : lanes_) {
    t.rowsFromHost += lane.rowsFromHost;
    t.fedRowsSkipped += lane.fedRowsSkipped;
    t.hostRowsHeld += lane.tier.heldRows();
  }
  // The rows the lanes compared with their previous labels on the device, as far as they cover rows from row 0.
  std::int64_t compared = t.changedRows, changed = t.changed;
  for (std::size_t i = 1; i < lanes_.size() && compared == lanes_[i].first; ++i) {
    compared += totals[i].changedRows;
    changed += totals[i].changed;
    if (totals[i].changedRows < lanes_[i].rows) break;
  }
  t.changedRows = compared;
  t.changed = compared > 0 ? changed : 0;
  // Farthest rows: a cluster empty in the job is empty in every lane; the other lanes search theirs now (they deferred
  // it), and the top ones of all are the job's, in the same total order.
  if (spec_.farthest > 0 && std::find(t.counts.begin(), t.counts.end(), 0) != t.counts.end()) {
    for (std::size_t i = 1; i < lanes_.size(); ++i)
      for (FarRow& f : lanes_[i].backend->farthestOfLastPass()) t.farthest.push_back(std::move(f));
    std::stable_sort(t.farthest.begin(), t.farthest.end(), [](const FarRow& a, const FarRow& b) {
      return a.distance > b.distance || (a.distance == b.distance && a.row < b.row);
    });
    if (t.farthest.size() > static_cast<std::size_t>(spec_.farthest)) t.farthest.resize(spec_.farthest);
  }
  return t;
}

void MultiDeviceBackend::abortPass() noexcept {
  for (Lane& lane : lanes_) {
    if (lane.worker.joinable()) lane.worker.join();
    lane.error = nullptr;
    lane.heldEnd = 0;
    lane.backend->abortPass();
  }
  passOpen_ = false;
}

DeviceUpdate MultiDeviceBackend::updateOnDevice(bool dataVariance) {
  return lanes_.front().backend->updateOnDevice(dataVariance);
}

void MultiDeviceBackend::copyUpdatedCentroids(float* dst) { lanes_.front().backend->copyUpdatedCentroids(dst); }

}  // namespace cuda_backend
}  // namespace kmfleet
