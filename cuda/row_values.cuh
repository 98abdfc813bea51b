// Device side of RowValues (kernels.h): one load function per input type and the host dispatch to the kernel
// instantiation. A 16-bit value converts to fp32 exactly, so a kernel reading the raw f16/bf16 rows computes the
// same bits as one reading an fp32 copy of them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels.h"

namespace kmfleet {
namespace cuda {

template <InType IN>
__device__ __forceinline__ float loadValue(const void* p, size_t i) {
  if constexpr (IN == InType::F32) return static_cast<const float*>(p)[i];
  else if constexpr (IN == InType::F16) return __half2float(static_cast<const __half*>(p)[i]);
  else return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

template <InType IN>
using InTag = std::integral_constant<InType, IN>;

// f(InTag<type>{}): the kernel launch for the values' type.
template <typename F>
void withValueType(InType t, F&& f) {
  switch (t) {
    case InType::F32: f(InTag<InType::F32>{}); break;
    case InType::F16: f(InTag<InType::F16>{}); break;
    case InType::BF16: f(InTag<InType::BF16>{}); break;
  }
}

}  // namespace cuda
}  // namespace kmfleet
