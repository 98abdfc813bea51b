// The CUDA backend's fixed shape (backend_shape.h): the memory plan on the current device, the plan it reports, and
// the prepared rows' device arrays sized by it.
#include "backend_shape.h"

#include <cuda_runtime.h>

#include <string>

#include "device_memory.h"
#include "kernels/accumulate.cuh"

namespace kmfleet {
namespace cuda_backend {

using namespace cuda;

BackendShape BackendShape::onCurrentDevice(const EngineConfig& cfg) {
  BackendShape s;
  s.device = cfg.device;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, cfg.device), "cudaGetDeviceProperties");
  std::size_t freeB = 0, totalB = 0;
  check(cudaMemGetInfo(&freeB, &totalB), "cudaMemGetInfo");
  s.memory = planMemory(cfg, freeB);
  s.n = cfg.rows;
  s.d = static_cast<int>(cfg.dims);
  s.k = static_cast<int>(cfg.k);
  s.dp = padDims(s.d);
  s.kp = padCentroids(s.k);
  s.rowBytes = static_cast<std::size_t>(s.d) * dtypeBytes(cfg.dtype);
  s.cosine = cfg.metric == Metric::Cosine;
  s.input = inType(cfg.dtype);
  s.rows16 = keepsRows16(s.input, s.cosine);
  s.stats = cfg.stats;
  s.settings = cfg.cuda;
  s.rowBounds = cfg.rowBounds && s.memory.op == OpKind::F16x3 && s.memory.residentRows > 0;
  s.kernel = AssignKernel{cfg.cuda.portableKernel, cfg.cuda.sharedMemoryLimit};
  s.plan.backend = BackendKind::Cuda;
  // the device and the assignment kernel its rows run on (a portable build, or CudaSettings.portableKernel, says so)
  s.plan.device = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
                  assignKernelName(s.kernel, s.d) + ")";
  s.plan.precision = s.memory.precision;
  s.plan.chunkRows = s.memory.chunkRows;
  s.plan.buffers = s.memory.buffers;
  s.plan.residentRows = s.memory.residentRows;
  s.plan.rowBytes = s.rowBytes;
  return s;
}

bool BackendShape::keepsResidentDistances() const { return !distancesFromSums(d); }

RowOps allocRowOps(const BackendShape& shape, std::size_t rows, const char* what, bool streamed) {
  const int d = shape.d;
  const std::size_t dp = std::size_t(shape.dp);
  const OpKind op = shape.memory.op;
  RowOps o;
  o.x16Type = shape.input;
  if (!shape.rows16) o.xf = devAlloc<float>(rows * d, what);
  else if (!streamed) o.x16 = devAlloc<unsigned short>(rows * d, what);
  o.ahi = devAlloc<unsigned short>(rows * dp, what);
  o.alo = opTerms(op) > 1 ? devAlloc<unsigned short>(rows * dp, what) : nullptr;
  o.rowScale = devAlloc<float>(rows, what);
  o.rowNorm = devAlloc<float>(rows, what);
  // exact mode: the lo operand's norm, for the one-product screen's bound (planner: operandRowBytes)
  o.rowNormLo = op == OpKind::F16x3 ? devAlloc<float>(rows, what) : nullptr;
  // exact mode, resident rows: each row's best from the last screened pass, the next one's guess (types.h
  // RowOps.screenRef; planner: residentRowBytes). Zeros until a screen writes them: finite, so always safe.
  if (op == OpKind::F16x3 && !streamed) {
    o.screenRef = devAlloc<float>(rows, what);
    check(cudaMemset(o.screenRef, 0, rows * sizeof(float)), "memset");
  }
  // resident rows with bounds: ‖fl(x − μ)‖², which turns the kernels' d' into distances (RowOps.rowSqNorm)
  // and streamed chunks where the host tier's rows may keep bounds (tier_rows.h)
  if ((shape.rowBounds && !streamed) || (streamed && shape.memory.tierBytes > 0))
    o.rowSqNorm = devAlloc<float>(rows, what);
  return o;
}

void freeRowOps(RowOps& o) noexcept {
  for (void* p : {static_cast<void*>(o.xf), o.ahi, o.alo, static_cast<void*>(o.rowScale),
                  static_cast<void*>(o.rowNorm), static_cast<void*>(o.rowNormLo), static_cast<void*>(o.screenRef), o.x16,
                  static_cast<void*>(o.rowSqNorm)})
    if (p) cudaFree(p);
  o = RowOps{};
}

}  // namespace cuda_backend
}  // namespace kmfleet
