// Portable kernels (any x86-64 or other CPU; products and sums rounded separately, which the same γ_D bound covers) and the run-time choice of the best table the CPU supports.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr int NR = 8;

void assign(const AssignTask& t) {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t r = 0; r < t.n; ++r) {
    const float* x = t.x + r * t.ld;
    float best = inf, second = inf;
    std::int32_t bi = -1;
    for (std::int64_t p = 0; p < t.kpad / NR; ++p) {
      const float* panel = t.panels + p * t.D * NR;
      float acc[NR] = {};
      for (std::int64_t d = 0; d < t.D; ++d)
        for (int j = 0; j < NR; ++j) acc[j] += x[d] * panel[d * NR + j];
      for (int j = 0; j < NR; ++j) {
        const float v = t.cnorm[p * NR + j] - 2.0f * acc[j];
        if (v < best) {
          second = best;
          best = v;
          bi = static_cast<std::int32_t>(p * NR + j);
        } else if (v < second) {
          second = v;
        }
      }
    }
    t.best[r] = bi;
    t.d1[r] = best;
    t.d2[r] = second;
  }
}

void rowDistances(const float* x, std::int64_t D, const float* panels, const float* cnorm, std::int64_t kpad,
                  float* out) {
  for (std::int64_t p = 0; p < kpad / NR; ++p) {
    const float* panel = panels + p * D * NR;
    float acc[NR] = {};
    for (std::int64_t d = 0; d < D; ++d)
      for (int j = 0; j < NR; ++j) acc[j] += x[d] * panel[d * NR + j];
    for (int j = 0; j < NR; ++j) out[p * NR + j] = cnorm[p * NR + j] - 2.0f * acc[j];
  }
}

// Portable forms of the k-means++ GEMM helpers (plain loops: the compiler vectorizes them for this unit's ISA).
void transpose32(const float* x, std::int64_t ld, int rows, std::int64_t D, float* xT) {
  for (std::int64_t d = 0; d < D; ++d)
    for (int r = 0; r < 32; ++r) xT[d * 32 + r] = r < rows ? x[r * ld + d] : 0.0f;
}

void dots32x8(const float* xT, std::int64_t D, const float* c8, float* out) {
  for (int i = 0; i < 8 * 32; ++i) out[i] = 0.0f;
  for (std::int64_t d = 0; d < D; ++d)
    for (int j = 0; j < 8; ++j) {
      const float c = c8[d * 8 + j];
      for (int r = 0; r < 32; ++r) out[j * 32 + r] += xT[d * 32 + r] * c;
    }
}

// IEEE binary16 → binary32, exact (subnormals, inf and NaN included).
float halfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | ((112u - static_cast<std::uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void f16ToF32(const std::uint16_t* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i]);
}

std::uint16_t floatToHalf(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN, quiet
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520 (and inf): inf
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), rounded at the half's fixed point 2^-24
    if (abs < 0x33000000u) return sign;  // ≤ 2^-25: rounds to zero (2^-25 itself is a tie, to the even zero)
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24 bits below the result's last place
    const std::uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<std::uint16_t>(sign | (q + (rest > half || (rest == half && (q & 1u)))));
  }
  // normal: re-bias the exponent, round 13 dropped bits to nearest even (a carry may step into the exponent)
  const std::uint32_t r = abs - 0x38000000u;
  return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

void f32ToF16(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = floatToHalf(in[i]);
}

const KernelTable kTable = {"generic", NR, 1, assign, rowDistances, transpose32, dots32x8, f16ToF32, f32ToF16};

}  // namespace

const KernelTable* genericKernels() { return &kTable; }

#if !defined(__x86_64__)
const KernelTable* avx2Kernels() { return nullptr; }
const KernelTable* avx512Kernels() { return nullptr; }
const ScreenKernel* avx512bf16Screen() { return nullptr; }
#endif

const KernelTable& selectKernels() {
  // Read on every engine creation (cheap), so a test can pin KMFLEET_CPU_ISA per engine.
  const KernelTable* chosen = [] {
    const char* cap = std::getenv("KMFLEET_CPU_ISA");
    const bool allow512 = !cap || *cap == 0 || std::strcmp(cap, "avx512") == 0 || std::strcmp(cap, "avx512bf16") == 0;
    const bool allow2 = allow512 || std::strcmp(cap, "avx2") == 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (allow512 && avx512Kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return avx512Kernels();
    if (allow2 && avx2Kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
      return avx2Kernels();
#endif
    return genericKernels();
  }();
  return *chosen;
}

const ScreenKernel* selectScreen() {
  const char* cap = std::getenv("KMFLEET_CPU_ISA");
  if (cap && *cap && std::strcmp(cap, "avx512bf16") != 0) return nullptr;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (avx512bf16Screen() && &selectKernels() == avx512Kernels() && __builtin_cpu_supports("avx512bf16"))
    return avx512bf16Screen();
#endif
  return nullptr;
}

}  // namespace cpu
}  // namespace kmfleet
