// How many labels differ between two device arrays, and which: the rows whose cluster changed since the previous
// pass, found where the labels are (resident rows), so the engine need not compare them on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kmfleet {
namespace cuda {

// *out += |{ i < n : a[i] != b[i] }| (integer atomics: exact and order-free). out must be zeroed by the caller.
void countLabelChanges(const std::int32_t* a, const std::int32_t* b, std::int64_t n, unsigned long long* out,
                       cudaStream_t s);

// The same count into *count (zeroed by the caller), and the first `capacity` changed rows into list as
// (row, labels[row]), in no fixed order (warp-aggregated atomics), each once: the engine applies them to its copy of
// the previous labels. Rows < 2^31.
void listLabelChanges(const std::int32_t* labels, const std::int32_t* previous, std::int64_t n, int2* list,
                      std::int64_t capacity, unsigned long long* count, cudaStream_t s);

}  // namespace cuda
}  // namespace kmfleet
