// The Hopper (sm_90a) path of the fused assignment: wgmma products, TMA loads, a persistent grid.
// Compiled only into builds whose architecture list holds 90 (cuda/CMakeLists.txt defines KMFLEET_HOPPER then);
// assignRows (assign_kernel.cu) tries it first and falls back to the portable mma.sync kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels.h"

namespace kmfleet {
namespace cuda {

// Labels for n rows, as assignRows for the one-product operand kinds (F16x1, BF16x1). Returns false without
// launching anything when this path can't take the call: not a compute capability 9.0 device, exact mode
// (F16x3), Dp > 256, or KMFLEET_ASSIGN_KERNEL=mma in the environment (the portable kernel, for A/B runs).
bool assignRowsHopper(const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k, OpKind op,
                      std::int32_t* labels, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
