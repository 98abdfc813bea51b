// AVX2 + FMA kernels (compiled with -mavx2 -mfma -mf16c; see CMakeLists.txt): the AVX-512 unit's rows-in-lanes
// scheme at half width (8 rows × 8 centroids, 16 registers). Measured on the build machine, one thread, against an
// earlier 6×16 centroids-in-lanes tile (GFLOP/s): D=32 K=100 52 → 69, D=64 K=256 78 → 79, D=256 K=1024 97 → 90.
// Only this header and <immintrin.h> are included (ODR, see kernels.h).
#include <immintrin.h>

#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr int RB = 8;  // rows per block: one ymm
constexpr int CB = 8;  // centroids per group (broadcast)
constexpr float kInf = __builtin_inff();

// 8 rows (r[i] = 8 consecutive features of row i) → r[j] = feature j of the 8 rows.
__attribute__((always_inline)) inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// xT[d*8 + r] = x[r][d] for r < rows (zero for the padding rows).
void transposeBlock(const float* x, std::int64_t ld, int rows, std::int64_t D, float* xT) {
  for (std::int64_t c0 = 0; c0 < D; c0 += 8) {
    const int cols = D - c0 < 8 ? static_cast<int>(D - c0) : 8;
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_maskload_ps(x + i * ld + c0, m) : _mm256_setzero_ps();
    transpose8(r);
    for (int j = 0; j < cols; ++j) _mm256_store_ps(xT + (c0 + j) * RB, r[j]);
  }
}

// Rows in lanes, as the AVX-512 unit (see there): 8 rows × 8 broadcast centroids, argmin state in 3 registers.
void assign(const AssignTask& t) {
  const std::int64_t D = t.D, n = t.n;
  const std::int64_t groups = t.kpad / CB;
  std::int64_t blockGroups = (1024 * 1024 / 4) / (D * CB);  // ~1 MiB of centroids per K-block
  if (blockGroups < 1) blockGroups = 1;
  float* xT = t.scratch;
  alignas(32) float sb[RB], ss[RB];
  alignas(32) std::int32_t si[RB];
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  for (std::int64_t g0 = 0; g0 < groups; g0 += blockGroups) {
    const std::int64_t g1 = g0 + blockGroups < groups ? g0 + blockGroups : groups;
    for (std::int64_t r0 = 0; r0 < n; r0 += RB) {
      const int rows = n - r0 < RB ? static_cast<int>(n - r0) : RB;
      transposeBlock(t.x + r0 * t.ld, t.ld, rows, D, xT);
      for (int r = 0; r < RB; ++r) {
        const bool carry = g0 > 0 && r < rows;
        sb[r] = carry ? t.d1[r0 + r] : kInf;
        ss[r] = carry ? t.d2[r0 + r] : kInf;
        si[r] = carry ? t.best[r0 + r] : -1;
      }
      __m256 best = _mm256_load_ps(sb), sec = _mm256_load_ps(ss);
      __m256 idx = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(si)));
      for (std::int64_t g = g0; g < g1; ++g) {
        const float* panel = t.panels + g * D * CB;
        __m256 a[CB];
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) a[j] = _mm256_setzero_ps();
        for (std::int64_t d = 0; d < D; ++d) {
          const __m256 x0 = _mm256_load_ps(xT + d * RB);
          const float* cd = panel + d * CB;
#pragma GCC unroll 8
          for (int j = 0; j < CB; ++j) a[j] = _mm256_fmadd_ps(x0, _mm256_broadcast_ss(cd + j), a[j]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) {  // centroids in increasing index: strict < keeps the lowest on ties
          const __m256 v = _mm256_fmadd_ps(a[j], m2, _mm256_broadcast_ss(t.cnorm + g * CB + j));
          const __m256 lt = _mm256_cmp_ps(v, best, _CMP_LT_OQ);
          sec = _mm256_min_ps(sec, _mm256_max_ps(best, v));
          best = _mm256_min_ps(best, v);
          idx = _mm256_blendv_ps(idx, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<std::int32_t>(g * CB + j))), lt);
        }
      }
      _mm256_store_ps(sb, best);
      _mm256_store_ps(ss, sec);
      _mm256_store_si256(reinterpret_cast<__m256i*>(si), _mm256_castps_si256(idx));
      for (int r = 0; r < rows; ++r) {
        t.d1[r0 + r] = sb[r];
        t.d2[r0 + r] = ss[r];
        t.best[r0 + r] = si[r];
      }
    }
  }
}

// The recheck's fp32 distances of one row to every centroid, 4 groups at a time (independent FMA chains).
void rowDistances(const float* x, std::int64_t D, const float* panels, const float* cnorm, std::int64_t kpad,
                  float* out) {
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  const std::int64_t groups = kpad / CB;
  std::int64_t g = 0;
  for (; g + 4 <= groups; g += 4) {
    __m256 a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) {
      const __m256 xv = _mm256_broadcast_ss(x + d);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) a[i] = _mm256_fmadd_ps(xv, _mm256_load_ps(panels + (g + i) * D * CB + d * CB), a[i]);
    }
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_ps(out + (g + i) * CB, _mm256_fmadd_ps(a[i], m2, _mm256_loadu_ps(cnorm + (g + i) * CB)));
  }
  for (; g < groups; ++g) {
    const float* panel = panels + g * D * CB;
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) a = _mm256_fmadd_ps(_mm256_broadcast_ss(x + d), _mm256_load_ps(panel + d * CB), a);
    _mm256_storeu_ps(out + g * CB, _mm256_fmadd_ps(a, m2, _mm256_loadu_ps(cnorm + g * CB)));
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

void f16ToF32(const std::uint16_t* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

void f32ToF16(const float* in, std::uint16_t* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

const KernelTable kTable = {"avx2", CB, RB, assign, rowDistances, transpose32, dots32x8, f16ToF32, f32ToF16};

}  // namespace

const KernelTable* avx2Kernels() { return &kTable; }

}  // namespace cpu
}  // namespace kmfleet
