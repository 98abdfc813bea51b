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
};

// Floats of per-thread scratch the assign kernel needs for dimension D (any table).
inline std::int64_t scratchFloats(std::int64_t D) { return 32 * (D + 16) + 64; }

const KernelTable* genericKernels();
const KernelTable* avx2Kernels();    // nullptr when this build has no AVX2 unit
const KernelTable* avx512Kernels();  // nullptr when this build has no AVX-512 unit

// The best table the CPU supports; env KMFLEET_CPU_ISA=generic|avx2|avx512 caps it (read at each call, so tests
// can exercise every path; the CPU backend calls it once, when it is created).
const KernelTable& selectKernels();

}  // namespace cpu
}  // namespace kmfleet
