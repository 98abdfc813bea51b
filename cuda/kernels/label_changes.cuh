// How many labels differ between two device arrays: the rows whose cluster changed since the previous pass, counted
// where the labels are (resident rows), so the engine need not compare them on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kmfleet {
namespace cuda {

// *out += |{ i < n : a[i] != b[i] }| (integer atomics: exact and order-free). out must be zeroed by the caller.
void countLabelChanges(const std::int32_t* a, const std::int32_t* b, std::int64_t n, unsigned long long* out,
                       cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
