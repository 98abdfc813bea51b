// Device side of RowValues (types.h): one load function per input type and the host dispatch to the kernel
// instantiation. A 16-bit value converts to fp32 exactly, so a kernel reading the raw f16/bf16 rows computes the
// same bits as one reading an fp32 copy of them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "types.h"

namespace kmfleet {
namespace cuda {

template <InType IN>
__device__ __forceinline__ float loadValue(const void* p, size_t i) {
  if constexpr (IN == InType::F32) return static_cast<const float*>(p)[i];
  else if constexpr (IN == InType::F16) return __half2float(static_cast<const __half*>(p)[i]);
  else return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// V adjacent values from element i (V = 1, or 4 with i·size aligned to 4 values): one 8- or 16-byte load.
template <InType IN, int V>
__device__ __forceinline__ void loadValues(const void* p, size_t i, float* out) {
  static_assert(V == 1 || V == 4, "1 or 4 values");
  if constexpr (V == 1) {
    out[0] = loadValue<IN>(p, i);
  } else if constexpr (IN == InType::F32) {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    out[0] = f.x; out[1] = f.y; out[2] = f.z; out[3] = f.w;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(p) + i);
    float2 a, b;
    if constexpr (IN == InType::F16) {
      a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
      b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    } else {
      a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
      b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    }
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
  }
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

// A warp's fp64 sum, shfl_down then broadcast from lane 0: every lane gets the same bits.
__device__ __forceinline__ double warpSum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return __shfl_sync(0xffffffffu, v, 0);
}

// A warp's fp64 Σ(x − y)² over the d values of a row (xv from element `at`, any input type) and an fp32 centroid y:
// lane-strided fmas, then warpSum. The recheck and the bounds' near rows both decide labels with it, so they agree
// bit for bit; rowDistances reports it.
template <InType IN>
__device__ __forceinline__ double warpSqDist64(const void* xv, size_t at, const float* y, int d, int lane) {
  double s = 0;
  for (int j = lane; j < d; j += 32) {
    const double t = static_cast<double>(loadValue<IN>(xv, at + j)) - static_cast<double>(y[j]);
    s = fma(t, t, s);
  }
  return warpSum(s);
}

}  // namespace cuda
}  // namespace kmfleet
