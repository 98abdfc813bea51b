// CPU distance kernels, one table per instruction set, chosen at run time (no -march=native: the addon runs on
// other x86-64 CPUs than the one that built it). Each ISA lives in its own translation unit compiled with its own
// target flags; those units include only this POD header and <immintrin.h>, so no inline C++ function compiled
// with AVX-512 can leak into code that runs on an older CPU (the ODR trap of per-file flags).
#pragma once

#include <cstdint>

namespace kmfleet {
namespace cpu {

// Rows [0, n) of x (row-major, stride ld floats, D features) against K centroids packed in panels of `nr`:
// panels[p*D*nr + d*nr + j] = c[p*nr + j][d]; cnorm[k] = ‖c_k‖² rounded to fp32, +inf for the padding k >= K.
// For every row: the smallest and second smallest fp32 value of ‖c‖² − 2·x·c (‖x‖² omitted: constant per row),
// and the index of the smallest. The dot products are plain sequential fp32 sums over d (one FMA per step), which
// is what the error bound in cpu/assign.cpp assumes.
struct AssignTask {
  const float* x = nullptr;
  std::int64_t ld = 0;
  std::int64_t n = 0;
  std::int64_t D = 0;
  const float* panels = nullptr;
  const float* cnorm = nullptr;
  std::int64_t kpad = 0;        // K rounded up to a multiple of nr
  float* scratch = nullptr;     // at least scratchFloats(D) floats, 64-byte aligned, private to the calling thread
  std::int32_t* best = nullptr; // n
  float* d1 = nullptr;          // n
  float* d2 = nullptr;          // n
};

struct KernelTable {
  const char* isa;  // "avx512", "avx2", "generic"
  int nr;           // centroids per panel
  int mr;           // rows per micro-tile
  void (*assign)(const AssignTask& task);
  // out[k] = ‖c_k‖² − 2·x·c_k for k < kpad (same arithmetic class as assign: the same error bound holds).
  void (*rowDistances)(const float* x, std::int64_t D, const float* panels, const float* cnorm, std::int64_t kpad,
                       float* out);
  // k-means++ on the sample, as small GEMMs: rows in blocks of 32 stored transposed (xT[d*32 + r], zero rows
  // beyond `rows`), candidates in groups of 8 (c8[d*8 + j]); out[j*32 + r] = Σ_d xT[d*32+r]·c8[d*8+j] in fp32.
  void (*transpose32)(const float* x, std::int64_t ld, int rows, std::int64_t D, float* xT);
  void (*dots32x8)(const float* xT, std::int64_t D, const float* c8, float* out);
  void (*f16ToF32)(const std::uint16_t* in, float* out, std::int64_t n);
  // fp32 → fp16 rounded to nearest, ties to even, subnormals and overflow to ±inf as IEEE 754 says: the same bits from
  // every table (F16C's conversion is that rounding).
  void (*f32ToF16)(const float* in, std::uint16_t* out, std::int64_t n);
};

// Floats of per-thread scratch the assign kernel needs for dimension D (any table).
inline std::int64_t scratchFloats(std::int64_t D) { return 32 * (D + 16) + 64; }

// The bf16 screen (AVX-512 BF16): rows [0, n) against centroids rounded to bf16, packed in groups of 8 as pairs of
// features: panels[g*Dp*8 + p*8 + j] = bf16(c[8g+j][2p]) | bf16(c[8g+j][2p+1]) << 16 (Dp = ⌈D/2⌉, a missing odd
// feature is 0), rounded to nearest even, subnormal results flushed to zero. The rows are rounded the same way inside
// the kernel. Per row it computes every v_k = fl32(cnorm_k − 2·Σ x̂_d ĉ_kd), their minimum v*, and the error bound
//   E = ea·r + eb·(‖x‖ + r) + ec,   r = sqrt(Σ(x − x̂)² summed in fp32 · er + era)      (cpu/assign.cpp derives it)
// with |v_k − (‖c_k‖² − 2 x·c_k)| ≤ E for every k. The candidates are the k with v_k ≤ v* + 2E (every other centroid
// is provably farther than the nearest): one candidate is the label; up to maxCandidates are decided by Σ(x − c)² in
// fp64 with row_math.h's summation order (the lowest index on ties); more leave the row open (label −1) for the fp32
// path. Rows with ‖x‖² ≥ 2^120 are left open.
struct ScreenTask {
  const float* x = nullptr;
  std::int64_t ld = 0, n = 0, D = 0;
  const double* norm2 = nullptr;  // n: ‖x‖² in fp64
  const std::uint32_t* panels = nullptr;
  const float* cnorm = nullptr;
  std::int64_t kpad = 0;          // K rounded up to a multiple of 8
  const float* c = nullptr;       // K×D fp32 centroids (the fp64 decision)
  double ea = 0, eb = 0, ec = 0, er = 0, era = 0;
  float* scratch = nullptr;       // screenScratchFloats(D, kpad) floats, 64-byte aligned, private to the calling thread
  std::int32_t* labels = nullptr; // n: the label, or −1 (open)
  // Optional, n each (nullptr: not wanted): for a row it decides, gUpper ≥ g_label and gLower ≤ g_k for every other k,
  // with g_k = ‖c_k‖² − 2x·c_k, from its values and E (cpu/row_bounds.h)
  double* gUpper = nullptr;
  double* gLower = nullptr;
  std::int64_t screened = 0, decided64 = 0;  // out: rows with one candidate, rows decided in fp64
};
constexpr int maxCandidates = 16;
inline std::int64_t screenScratchFloats(std::int64_t D, std::int64_t kpad) {
  return 32 * (D + 2) + 32 * ((D + 1) / 2) + 32 * kpad + 32 * (maxCandidates + 1) + 256;
}

struct ScreenKernel {
  const char* isa;  // "avx512bf16"
  void (*screen)(ScreenTask& task);
};
const ScreenKernel* avx512bf16Screen();  // nullptr when this build has no AVX-512 BF16 unit
// The screen to use beside selectKernels()'s table, or nullptr: the CPU must have AVX-512 BF16 and
// KMFLEET_CPU_ISA must be unset, empty or avx512bf16.
const ScreenKernel* selectScreen();

const KernelTable* genericKernels();
const KernelTable* avx2Kernels();    // nullptr when this build has no AVX2 unit
const KernelTable* avx512Kernels();  // nullptr when this build has no AVX-512 unit

// The best table the CPU supports; env KMFLEET_CPU_ISA=generic|avx2|avx512|avx512bf16 caps it (read at each call, so tests
// can exercise every path; the CPU backend calls it once, when it is created).
const KernelTable& selectKernels();

}  // namespace cpu
}  // namespace kmfleet
