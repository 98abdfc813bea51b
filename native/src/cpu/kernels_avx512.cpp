// AVX-512 kernels (compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c; see CMakeLists.txt).
// Only kernels.h and <immintrin.h> are included (the ODR trap, see kernels.h).
//
// Why rows in lanes: a first version put 32 centroids in the lanes (12×32 register tile, BLIS style) and kept the
// argmin state per (row, lane) in L1; its epilogue and the row packing cost as much as the products at small D
// (measured on the build machine, one thread: D=32 K=100 47 GFLOP/s, D=64 K=256 105, D=256 K=1024 160). With 32
// rows in the lanes the state of the argmin lives in 6 registers for the whole K-block and the epilogue is a few
// vertical ops per centroid: 140 / 150 / 160 GFLOP/s on the same shapes.
#include <immintrin.h>

#include "avx512_transpose.h"
#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr float kInf = __builtin_inff();

// ---- rows in lanes: 32 rows (2 zmm) × 8 centroids (broadcast), argmin state in registers ----------------------
// For each block of 32 rows the rows are transposed once (16×16 in-register transposes) so that a zmm holds one
// feature of 16 rows; each centroid value is broadcast and feeds 2 FMAs. The best/second/index state of the 32 rows
// stays in 6 registers across all centroids of a K-block: no horizontal reductions, no state traffic.
constexpr int RB = avx512::RB;
constexpr int CB = 8;
using avx512::transposeBlock;

void assignRL(const AssignTask& t) {
  const std::int64_t D = t.D, n = t.n;
  const std::int64_t groups = t.kpad / CB;
  std::int64_t blockGroups = (1024 * 1024 / 4) / (D * CB);  // ~1 MiB of centroids per K-block (L2: 2 MiB)
  if (blockGroups < 1) blockGroups = 1;
  float* xT = t.scratch;
  alignas(64) float sb[RB], ss[RB];
  alignas(64) std::int32_t si[RB];
  const __m512 m2 = _mm512_set1_ps(-2.0f), inf = _mm512_set1_ps(kInf);
  for (std::int64_t g0 = 0; g0 < groups; g0 += blockGroups) {
    const std::int64_t g1 = g0 + blockGroups < groups ? g0 + blockGroups : groups;
    for (std::int64_t r0 = 0; r0 < n; r0 += RB) {
      const int rows = n - r0 < RB ? static_cast<int>(n - r0) : RB;
      transposeBlock(t.x + r0 * t.ld, t.ld, rows, D, xT);
      __m512 best0, best1, sec0, sec1;
      __m512i idx0, idx1;
      if (g0 == 0) {
        best0 = best1 = sec0 = sec1 = inf;
        idx0 = idx1 = _mm512_set1_epi32(-1);
      } else {  // carry the previous K-blocks' state
        for (int r = 0; r < RB; ++r) {
          sb[r] = r < rows ? t.d1[r0 + r] : kInf;
          ss[r] = r < rows ? t.d2[r0 + r] : kInf;
          si[r] = r < rows ? t.best[r0 + r] : -1;
        }
        best0 = _mm512_load_ps(sb);
        best1 = _mm512_load_ps(sb + 16);
        sec0 = _mm512_load_ps(ss);
        sec1 = _mm512_load_ps(ss + 16);
        idx0 = _mm512_load_si512(si);
        idx1 = _mm512_load_si512(si + 16);
      }
      for (std::int64_t g = g0; g < g1; ++g) {
        const float* panel = t.panels + g * D * CB;
        __m512 a0[CB], a1[CB];
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
        for (std::int64_t d = 0; d < D; ++d) {
          const __m512 x0 = _mm512_load_ps(xT + d * RB), x1 = _mm512_load_ps(xT + d * RB + 16);
          const float* cd = panel + d * CB;
#pragma GCC unroll 8
          for (int j = 0; j < CB; ++j) {
            const __m512 cb = _mm512_set1_ps(cd[j]);
            a0[j] = _mm512_fmadd_ps(x0, cb, a0[j]);
            a1[j] = _mm512_fmadd_ps(x1, cb, a1[j]);
          }
        }
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) {  // centroids in increasing index: strict < keeps the lowest on ties
          const __m512 cn = _mm512_set1_ps(t.cnorm[g * CB + j]);
          const __m512i kk = _mm512_set1_epi32(static_cast<std::int32_t>(g * CB + j));
          const __m512 v0 = _mm512_fmadd_ps(a0[j], m2, cn), v1 = _mm512_fmadd_ps(a1[j], m2, cn);
          const __mmask16 l0 = _mm512_cmp_ps_mask(v0, best0, _CMP_LT_OQ);
          const __mmask16 l1 = _mm512_cmp_ps_mask(v1, best1, _CMP_LT_OQ);
          sec0 = _mm512_min_ps(sec0, _mm512_max_ps(best0, v0));
          sec1 = _mm512_min_ps(sec1, _mm512_max_ps(best1, v1));
          best0 = _mm512_min_ps(best0, v0);
          best1 = _mm512_min_ps(best1, v1);
          idx0 = _mm512_mask_mov_epi32(idx0, l0, kk);
          idx1 = _mm512_mask_mov_epi32(idx1, l1, kk);
        }
      }
      _mm512_store_ps(sb, best0);
      _mm512_store_ps(sb + 16, best1);
      _mm512_store_ps(ss, sec0);
      _mm512_store_ps(ss + 16, sec1);
      _mm512_store_si512(si, idx0);
      _mm512_store_si512(si + 16, idx1);
      for (int r = 0; r < rows; ++r) {
        t.d1[r0 + r] = sb[r];
        t.d2[r0 + r] = ss[r];
        t.best[r0 + r] = si[r];
      }
    }
  }
}

void dots32x8(const float* xT, std::int64_t D, const float* c8, float* out) {
  __m512 a0[CB], a1[CB];
#pragma GCC unroll 8
  for (int j = 0; j < CB; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
  for (std::int64_t d = 0; d < D; ++d) {
    const __m512 x0 = _mm512_load_ps(xT + d * RB), x1 = _mm512_load_ps(xT + d * RB + 16);
#pragma GCC unroll 8
    for (int j = 0; j < CB; ++j) {
      const __m512 cb = _mm512_set1_ps(c8[d * CB + j]);
      a0[j] = _mm512_fmadd_ps(x0, cb, a0[j]);
      a1[j] = _mm512_fmadd_ps(x1, cb, a1[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < CB; ++j) {
    _mm512_storeu_ps(out + j * RB, a0[j]);
    _mm512_storeu_ps(out + j * RB + 16, a1[j]);
  }
}

void f16ToF32(const std::uint16_t* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

// The recheck's fp32 distances of one row to every centroid: 8 groups at a time, so that 8 independent FMA chains
// hide the FMA latency (one chain per group was latency-bound: 4 cycles per feature).
void rowDistancesRL(const float* x, std::int64_t D, const float* panels, const float* cnorm, std::int64_t kpad,
                    float* out) {
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  const std::int64_t groups = kpad / CB;
  std::int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m256 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) {
      const __m256 xv = _mm256_set1_ps(x[d]);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(xv, _mm256_load_ps(panels + (g + i) * D * CB + d * CB), a[i]);
    }
    for (int i = 0; i < 8; ++i)
      _mm256_storeu_ps(out + (g + i) * CB, _mm256_fmadd_ps(a[i], m2, _mm256_loadu_ps(cnorm + (g + i) * CB)));
  }
  for (; g < groups; ++g) {
    const float* panel = panels + g * D * CB;
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) a = _mm256_fmadd_ps(_mm256_set1_ps(x[d]), _mm256_load_ps(panel + d * CB), a);
    _mm256_storeu_ps(out + g * CB, _mm256_fmadd_ps(a, m2, _mm256_loadu_ps(cnorm + g * CB)));
  }
}

void f32ToF16(const float* in, std::uint16_t* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

const KernelTable kTable = {"avx512", CB, RB, assignRL, rowDistancesRL, transposeBlock, dots32x8, f16ToF32, f32ToF16};

}  // namespace

const KernelTable* avx512Kernels() { return &kTable; }

}  // namespace cpu
}  // namespace kmfleet
