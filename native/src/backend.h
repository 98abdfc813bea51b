// The backend-neutral interface of the native engine (DESIGN.md "Native engine", "Numerics").
//
// Two layers:
//   Engine  (native/src/engine.*)  what every backend shares: validation, feed order, label double-buffering and
//                                  the reassigned count, the centroid update from fp64 sums (or, where the
//                                  backend offers it, the backend's updateOnDevice with the same bits), empty-
//                                  cluster re-seeding, shift, data variance, k-means++ init, the cancel flag.
//   Backend (this file)            what touches the data: host buffers, resident rows, fused distance + argmin,
//                                  exactness recheck, deterministic per-cluster statistics.
// Implementations: native/src/cpu/cpu_backend.* (makeCpuBackend) and cuda/ (makeCudaBackend, see cuda_bridge.h).
//
// Threading: the Engine calls a Backend from ONE thread (the engine thread), never concurrently. A backend may use
// its own threads/streams inside (the CUDA backend also borrows the engine's pool while its call runs). Errors are thrown as kmfleet::EngineError (never abort, never a NaN centroid).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kmfleet {

enum class Metric { L2, Cosine };
enum class DType { F32, F16, BF16 };
enum class Precision { Auto, FP32, TF32, BF16, FP16 };
enum class BackendKind { Auto, Cpu, Cuda };
enum class PassMode { Fit, Assign };

inline std::size_t dtypeBytes(DType t) { return t == DType::F32 ? 4 : 2; }

// Settings of the CUDA backend (native/index.ts CudaOptions): the defaults are what production runs; tests and
// measurements change them to compare paths that must give the same bits. The CPU backend ignores them.
enum class RelativeKeys { Policy, Off, Always };
struct CudaSettings {
  bool portableKernel = false;       // the portable mma.sync assignment kernel even where the Hopper one could run
  int sharedMemoryLimit = 0;         // bytes per block the portable kernel plans for; 0: the device's opt-in limit
  bool exactScreen = true;           // exact mode: screen with one product first where the screen policy says so
  RelativeKeys relativeKeys = RelativeKeys::Policy;  // exact screen keyed on each resident row's last best
  int slots = 0;                     // device slots for streamed chunks, 2..16; 0: the planner's
  int residentAhead = 2;             // resident steps queued ahead of streamed chunks in a partly resident pass
};

// What the caller asked for (native/index.ts EngineOptions). 0 / -1 mean "the planner chooses".
struct EngineConfig {
  std::int64_t rows = 0;
  std::int64_t dims = 0;
  std::int64_t k = 0;
  Metric metric = Metric::L2;
  DType dtype = DType::F32;       // the caller's rows; a backend gets the type the engine keeps them in (row_narrowing.h)
  BackendKind backend = BackendKind::Auto;
  Precision precision = Precision::Auto;
  std::int64_t chunkRows = 0;     // rows per host buffer; 0 = planner
  int buffers = 0;                // host buffers; 0 = default (2 cpu, 3 cuda)
  int threads = 0;                // CPU threads; 0 = all cores
  std::int64_t memoryBudget = -1; // bytes for resident rows (device memory on CUDA, host on CPU); -1 = planner
  // CUDA: bytes of device memory the engine may take in all (centroids, sums, chunk slots, resident rows): a job on a
  // shared device; -1 = what the device has free, less a headroom. The CPU backend ignores it.
  std::int64_t deviceMemoryLimit = -1;
  // bytes of host memory for the engine's host tier (host_tier.h): the rows after the resident ones, kept as they are
  // first fed; -1 = what the host can give (host_memory.h availableHostMemory), 0 = none
  std::int64_t hostMemoryBudget = -1;
  int device = 0;                 // CUDA ordinal
  // CUDA: the devices of a job on several GPUs (cuda/multi_device_backend.h), its rows split between them, the same
  // bits as on one; device is the first of them. Empty: the one device `device`.
  std::vector<int> devices;
  bool hostUpdate = false;        // the fit update on the host even where the backend could run it (the same bits)
  bool rowBounds = true;          // skip the rows whose bounds prove their label unchanged, where the backend can (the same bits)
  bool stats = false;             // per-pass diagnostics on stderr (KMFLEET_ENGINE_STATS, docs/operations.md)
  CudaSettings cuda;
};

// What the backend's planner chose (native/index.ts EnginePlan). Fixed for the engine's life.
struct Plan {
  BackendKind backend = BackendKind::Cpu; // Cpu or Cuda, never Auto
  std::string device;                     // e.g. "NVIDIA H200" or "cpu x86_64 avx512 (2 threads)"
  Precision precision = Precision::FP32;  // never Auto
  std::int64_t chunkRows = 0;             // 1 <= chunkRows <= rows
  int buffers = 0;                        // host buffers, each chunkRows * rowBytes bytes
  std::int64_t residentRows = 0;          // the first residentRows rows are kept by the backend (0..rows)
  // rows [residentRows, residentRows + hostRows) are kept by the engine in host memory (host_tier.h); set by the
  // Engine, 0 in a backend's own plan
  std::int64_t hostRows = 0;
  // A backend that keeps rows of [0, residentRows) elsewhere than on its device (a job on several devices: its lanes'
  // host tiers and the rows neither holds, cuda/multi_device_backend.h): the rows on its device(s) (-1: residentRows)
  // and those in its own host memory. What JS reports as resident and host rows comes from them.
  std::int64_t deviceRows = -1;
  std::int64_t backendHostRows = 0;
  std::size_t rowBytes = 0;               // dims * dtypeBytes(dtype)
  // bytes of a row as the engine and the backend keep and stream it: rowBytes, or half of it where the engine rounds
  // fp32 rows to the job's 16-bit precision (row_narrowing.h); set by the Engine, 0 in a backend's own plan
  std::size_t storedRowBytes = 0;
  DType keptDtype = DType::F32;  // the type of those rows; set by the Engine
};

enum class ErrorCode { InvalidArgument, OutOfMemory, NonFiniteInput, Device, Cancelled };

// The one exception type that crosses the backend/engine boundary. The binding maps `code` to the TS classes
// (InvalidArgumentError, ..., CancelledError); `row` is the first bad global row for NonFiniteInput, else -1.
class EngineError : public std::runtime_error {
 public:
  EngineError(ErrorCode code, const std::string& message, std::int64_t row = -1)
      : std::runtime_error(message), code_(code), row_(row) {}
  ErrorCode code() const { return code_; }
  std::int64_t row() const { return row_; }

 private:
  ErrorCode code_;
  std::int64_t row_;
};

// One pass, as the engine hands it to the backend in beginPass. Pointers stay valid until finishPass/abortPass.
struct PassSpec {
  PassMode mode = PassMode::Fit;
  // K×D fp32 centroids of this pass (unit length for cosine). Fixed during the pass.
  const float* centroids = nullptr;
  // Engine-owned, `rows` long: the backend writes labels[r] (0..K-1) for every row r it processes, resident
  // rows included, before finishPass returns. Ties between equal distances: the LOWEST centroid index wins.
  std::int32_t* labels = nullptr;
  // Engine-owned, `rows` long, or nullptr: the labels of the last completed pass (-1 where a row has none), read only.
  // A backend may count the rows whose label changed as it writes them (PassTotals.changedRows).
  const std::int32_t* previousLabels = nullptr;
  // The engine takes this pass's labels as changes (PassTotals.labelsAsChanges): a backend that holds every row's
  // labels of the last pass itself may report only the rows whose label changed instead of writing `labels`.
  bool labelsAsChanges = false;
  // Engine-owned, `rows` long, or nullptr: the backend writes the row's distance to its label's centroid
  // (squared L2, or 1 − cos for cosine), computed in fp64 and rounded to fp32.
  float* distances = nullptr;
  // Fit passes: how many of the farthest rows to report for empty-cluster re-seeding (0 on assign passes).
  // Reported only when the pass left a cluster empty (PassTotals.farthest).
  int farthest = 0;
  // Set by cancel(); a backend may poll it inside long internal work (resident rows) and throw Cancelled.
  const std::atomic<bool>* cancel = nullptr;
  // Only for a backend that updatesOnDevice(). keepSums: a fit pass whose update the engine will ask of the backend
  // (updateOnDevice) — the sums may stay on the device (PassTotals.sumsKept). centroidsFromUpdate: `centroids` are
  // the `next` of the backend's last updateOnDevice (the engine set nothing else since): the backend uses the copy it
  // kept, and `centroids` is nullptr when the engine never fetched them to the host (copyUpdatedCentroids).
  bool keepSums = false;
  bool centroidsFromUpdate = false;
};

// Host memory for the engine's host tier, from Backend::allocateHostRows: page-locked where the backend copies from
// it (CUDA), so that a chunk goes to the device at the link's speed. Frees itself.
class HostBlock {
 public:
  HostBlock() = default;
  HostBlock(void* data, void (*release)(void*)) : data_(data), release_(release) {}
  ~HostBlock() { if (data_ && release_) release_(data_); }
  HostBlock(HostBlock&& o) noexcept : data_(o.data_), release_(o.release_) { o.data_ = nullptr; }
  HostBlock& operator=(HostBlock&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(release_, o.release_);
    return *this;
  }
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  void (*release_)(void*) = nullptr;
};

// A candidate for re-seeding an empty cluster: one of the rows farthest from its assigned centroid.
struct FarRow {
  std::int64_t row = -1;
  double distance = 0;         // fp64 distance to the assigned centroid (same metric as the inertia)
  std::int32_t label = -1;
  std::vector<float> values;   // the row as the kernels saw it (fp32, unit length for cosine), D values
};

// A row whose label a pass changed, and its new label (PassTotals.labelChanges).
struct LabelChange {
  std::uint32_t row;
  std::int32_t label;
};

// What a pass accumulated. Everything in fp64 and in a FIXED order: for each cluster the rows are added in
// global row order, whatever the chunking, the thread count or the resident/streamed split. This is what
// makes centroids bitwise reproducible (DESIGN.md "Numerics").
struct PassTotals {
  std::vector<double> sums;         // K×D Σ rows per cluster (both passes: the engine derives the data variance)
  std::vector<std::int64_t> counts; // K rows per cluster
  std::vector<double> inertia;      // K Σ distances per cluster (squared L2, or 1 − cos), fp64
  // Fit passes where some counts[k] == 0 (the only time the engine re-seeds): the top `farthest` rows ordered by
  // (distance descending, row ascending) — a total order, so the set is unique; fewer when the pass had fewer
  // rows. Empty when every cluster has a row: a backend need not find them then (on CUDA they cost ~75 µs per
  // chunk), and may find them late, from distances it kept, once a count comes out 0.
  std::vector<FarRow> farthest;
  std::int64_t rowsSeen = 0;        // rows processed in the pass, resident included
  // Optional: rows [0, changedRows) were compared by the backend with the labels of its previous completed pass
  // (the engine's labels for them), and `changed` of them differ. 0: the engine compares every row itself. The
  // CUDA backend compares its resident rows on the device and its streamed chunks' as their labels come down
  // (PassSpec.previousLabels), so no host walk over every label waits at the end of the pass.
  std::int64_t changedRows = 0;
  std::int64_t changed = 0;
  // PassSpec.labelsAsChanges was set and the backend took it: it wrote no labels into PassSpec.labels; every row the
  // pass saw was compared (changedRows == rowsSeen), and those whose label changed are in labelChanges (any order,
  // `changed` of them). Where rows' labels live on the device, late passes of a converging run then bring a few
  // thousand rows' labels to the host instead of every row's.
  bool labelsAsChanges = false;
  std::vector<LabelChange> labelChanges;
  // Fit passes with PassSpec.keepSums and every cluster non-empty: `sums` is left empty and the backend kept them
  // for updateOnDevice. A pass that left a cluster empty always brings its sums (the host re-seeds).
  bool sumsKept = false;
  // A backend that keeps rows elsewhere than on its device (Plan.deviceRows): the rows of this pass it took from its own
  // host memory, those it holds there after the pass, and the rows the caller fed that it had already processed from
  // what it holds (PassResult's rowsFrom counts them where they came from).
  std::int64_t rowsFromHost = 0, hostRowsHeld = 0, fedRowsSkipped = 0;
  // rows whose label the backend's bounds proved unchanged without computing their distances (EngineConfig.rowBounds)
  std::int64_t rowsSettled = 0;
};

// Optional (Backend::updatesOnDevice): the update of a fit pass whose sums the backend kept, computed where they are
// with the Engine's arithmetic bit for bit (engine_update.cpp: applyFit without re-seeding, dataVariance).
struct DeviceUpdate {
  std::vector<double> shift;    // K: ‖next_k − c_k‖² (row_math.h sqDist64)
  std::vector<double> scatter;  // K, when the data variance was asked: cluster k's term (0 for an empty cluster)
  // The next centroids stay with the backend: the engine reads them only when its caller does
  // (Backend::copyUpdatedCentroids), so an iteration nobody looks at does not bring K×D floats down to the host.
};

// Distance exactness contract for Precision::FP32 (DESIGN.md "Numerics"): the label equals the argmin of the
// fp64 distance Σ(x−c)² except where the two best fp64 distances are within a relative 1e-6 (then either of
// the two is acceptable); the reported distance/inertia is the fp64 value for the chosen centroid.

// The rows of one chunk, read piece by piece on several threads at once (Backend::processChunkInPieces): a reader of
// the rows' file (file_rows.h).
class ChunkPieces {
 public:
  virtual ~ChunkPieces() = default;
  // rows per piece: the size the reader reads best in
  virtual std::int64_t pieceRows() const = 0;
  // Rows [first, first + count) of the chunk (first counted from the chunk's first row) into dst, whole rows as the
  // backend keeps them. Throws EngineError.
  virtual void read(void* dst, std::int64_t first, std::int64_t count) const = 0;
};

class HostTier;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const Plan& plan() const = 0;

  // Host buffer i (0 <= i < plan().buffers), plan().chunkRows * plan().rowBytes bytes, owned by the backend
  // (pinned on CUDA), alive as long as the backend. The engine fills it with whole rows in its config's dtype.
  virtual void* hostBuffer(int index) = 0;

  // Rows of [0, plan().residentRows) the backend already holds, contiguously from row 0 (0 until a pass or
  // loadRows has retained some; residentRows once all are). The engine skips [0, residentHeld()) in a later pass
  // whenever it is above 0 and streams the rest after them.
  virtual std::int64_t residentHeld() const = 0;

  // Start a pass: take the centroids (upload on CUDA), reset the accumulators.
  virtual void beginPass(const PassSpec& spec) = 0;

  // Process the resident rows [0, residentHeld()) with the current centroids, before any streamed chunk.
  // Called by the engine when residentHeld() > 0, lazily: at the pass's first chunk that starts past row 0, or in
  // its finish (a pass whose first chunk starts at row 0 streams every row and does not call it).
  virtual void processResident() = 0;

  // Process rows [firstRow, firstRow + rows) at `data`: one of the backend's host buffers, or a block of the engine's
  // host tier (allocateHostRows), whole rows in its config's dtype. Chunks arrive in row order. Rows of
  // [0, residentRows) seen for the first time are retained (converted/normalized as needed).
  // Returns once the memory may be refilled; compute may still be in flight (CUDA) — finishPass waits for it.
  // Input checks, before anything of the chunk is accumulated: a non-finite value → EngineError NonFiniteInput
  // naming the first bad global row; cosine and a zero-norm row → InvalidArgument naming the row. (An async
  // backend may report such an error from a later processChunk or from finishPass.)
  virtual void processChunk(const void* data, std::int64_t firstRow, std::int64_t rows) = 0;

  // The engine's host tier's held chunks (host_tier.h) from row `from` (where the pass stands, past the resident rows)
  // up to `upTo` or the first chunk not held, in order; returns the row it reached. The default hands each chunk to
  // processChunk. A backend that keeps per-row state across passes may leave out rows it proves unchanged (CUDA: the
  // rows their bounds settle are not read), with the results of processing every one. Throws Cancelled once `cancel`.
  virtual std::int64_t processHostTier(const HostTier& tier, std::int64_t from, std::int64_t upTo,
                                       const std::atomic<bool>& cancel);

  // Host memory for `bytes` of the engine's host tier, in the form processChunk reads fastest (page-locked on CUDA).
  // Where that form cannot be had (a page-lock limit), plain memory with `warning` set; OutOfMemory when there is
  // none.
  virtual HostBlock allocateHostRows(std::size_t bytes, std::string& warning) {
    (void)warning;
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes < 64 ? 64 : (bytes + 63) / 64 * 64) != 0)
      throw EngineError(ErrorCode::OutOfMemory, "cannot allocate " + std::to_string(bytes >> 20) +
                                                    " MiB of host memory for the host tier");
    return HostBlock(p, std::free);
  }

  // Optional (Backend::takesPieces; CUDA): processChunk for rows that the engine's pool threads read piece by piece
  // into small page-locked buffers of the backend's, each copied to the device as it lands. The pieces stay in the
  // CPU's cache, so the rows cross host memory once on their way from the page cache, not three times as through a
  // chunk-sized buffer. The same checks and results as processChunk.
  virtual bool takesPieces() const { return false; }
  virtual void processChunkInPieces(const ChunkPieces& pieces, std::int64_t firstRow, std::int64_t rows) {
    (void)pieces;
    (void)firstRow;
    (void)rows;
    throw EngineError(ErrorCode::InvalidArgument, "this backend takes no chunk in pieces");
  }

  // Wait for all work of the pass and return its totals. Labels (and distances) are in the engine's arrays.
  virtual PassTotals finishPass() = 0;

  // Drop a pass after an error or a cancel: wait for in-flight work, discard partial totals. Never throws.
  // Resident rows retained so far: CUDA discards them unless complete; the CPU backend keeps the rows it holds from
  // row 0 (they passed the input checks), and residentHeld() says how many.
  virtual void abortPass() noexcept = 0;

  // Optional device-side update (the CUDA backend). Called right after a finishPass that returned sumsKept; the
  // backend then holds `next` as the centroids of a following pass with PassSpec.centroidsFromUpdate.
  virtual bool updatesOnDevice() const { return false; }
  virtual DeviceUpdate updateOnDevice(bool dataVariance) {
    (void)dataVariance;
    throw EngineError(ErrorCode::InvalidArgument, "this backend does not update centroids on its device");
  }
  // The `next` centroids of the last updateOnDevice (K×D) into dst, waiting for them if their copy down is still in
  // flight. Valid until the next updateOnDevice or a pass that brings other centroids; the engine serializes it with
  // updateOnDevice. May be called from another thread than the pass's, also while a pass is open.
  virtual void copyUpdatedCentroids(float* dst) {
    (void)dst;
    throw EngineError(ErrorCode::InvalidArgument, "this backend does not update centroids on its device");
  }

  // Optional (Backend::loadsRows; the CPU backend): retain rows [firstRow, firstRow + count) as resident rows —
  // converted/normalized as processChunk would — WITHOUT a pass: no labels, nothing accumulated. A worker hands
  // over rows while its download is still running, so that the first pass costs like a later one. `rows` holds
  // count whole rows in its config's dtype (count * plan().rowBytes bytes), owned by the caller and read only during
  // the call. Never called while a pass is open. Ranges may come in any order and may overlap; rows at or past
  // plan().residentRows are ignored. residentHeld() of such a backend is the rows held contiguously from row 0
  // (complete or not): the next pass processes those (processResident) and the engine streams the rest after them.
  // Input checks are the pass's: a row that fails them (non-finite; zero norm for cosine) is not retained, nor are
  // the rows after it in the call, and nothing is thrown — the pass that streams that row reports it exactly as
  // without a load. Throws only OutOfMemory (the first call allocates the resident rows), retaining nothing then.
  virtual bool loadsRows() const { return false; }
  virtual void loadRows(const void* rows, std::int64_t firstRow, std::int64_t count) {
    (void)rows;
    (void)firstRow;
    (void)count;
    throw EngineError(ErrorCode::InvalidArgument, "this backend does not load rows ahead of a pass");
  }
};

// GPU inventory (native/index.ts GpuInfo). Filled by cuda/ (queryCudaDevices) or by the engine without CUDA.
struct GpuDevice {
  int ordinal = 0;
  std::string name;
  std::string computeCapability; // "9.0"
  std::uint64_t totalMemory = 0; // bytes
  std::uint64_t freeMemory = 0;  // bytes
};
struct GpuInfo {
  bool available = false;
  std::string reason; // when unavailable: "built without CUDA", "no CUDA driver", "no device"
  std::vector<GpuDevice> devices;
};

}  // namespace kmfleet
