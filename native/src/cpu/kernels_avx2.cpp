// AVX2 + FMA kernels (compiled with -mavx2 -mfma -mf16c; see CMakeLists.txt): the same scheme as the AVX-512 unit
// with a 6 rows × 16 centroids register tile (12 ymm accumulators) and 8 lanes of argmin state per row.
// Only this header and <immintrin.h> are included (ODR, see kernels.h).
#include <immintrin.h>

#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr int MR = 6;
constexpr int NR = 16;
constexpr int L = 8;
constexpr float kInf = __builtin_inff();

void packRows(const float* x, std::int64_t ld, int rows, std::int64_t D, float* xp) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    for (std::int64_t d = 0; d < D; ++d) xp[d * MR + r] = xr[d];
  }
  for (int r = rows; r < MR; ++r)
    for (std::int64_t d = 0; d < D; ++d) xp[d * MR + r] = 0.0f;
}

__attribute__((always_inline)) inline void microTile(const float* __restrict xp, const float* __restrict panel,
                                                     std::int64_t D, const float* cn, std::int32_t base, float* b1,
                                                     float* b2, std::int32_t* i1) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (std::int64_t d = 0; d < D; ++d) {
    const __m256 c0 = _mm256_load_ps(panel + d * NR);
    const __m256 c1 = _mm256_load_ps(panel + d * NR + 8);
    const float* xd = xp + d * MR;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_broadcast_ss(xd + r);
      acc[r][0] = _mm256_fmadd_ps(xv, c0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, c1, acc[r][1]);
    }
  }
  const __m256 cn0 = _mm256_loadu_ps(cn), cn1 = _mm256_loadu_ps(cn + 8), m2 = _mm256_set1_ps(-2.0f);
  const __m256i idx0 = _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  const __m256i idx1 = _mm256_add_epi32(idx0, _mm256_set1_epi32(8));
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    const __m256 v0 = _mm256_fmadd_ps(acc[r][0], m2, cn0);
    const __m256 v1 = _mm256_fmadd_ps(acc[r][1], m2, cn1);
    const __m256 lt = _mm256_cmp_ps(v1, v0, _CMP_LT_OQ);  // equal: v0 (the lower index) stays first
    const __m256 a = _mm256_blendv_ps(v0, v1, lt);
    const __m256 b = _mm256_blendv_ps(v1, v0, lt);
    const __m256 ia = _mm256_blendv_ps(_mm256_castsi256_ps(idx0), _mm256_castsi256_ps(idx1), lt);
    const __m256 B1 = _mm256_load_ps(b1 + r * L), B2 = _mm256_load_ps(b2 + r * L);
    const __m256 I1 = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(i1 + r * L)));
    const __m256 m = _mm256_cmp_ps(a, B1, _CMP_LT_OQ);
    const __m256 nb2 = _mm256_min_ps(_mm256_min_ps(_mm256_max_ps(B1, a), B2), b);
    _mm256_store_ps(b1 + r * L, _mm256_blendv_ps(B1, a, m));
    _mm256_store_si256(reinterpret_cast<__m256i*>(i1 + r * L), _mm256_castps_si256(_mm256_blendv_ps(I1, ia, m)));
    _mm256_store_ps(b2 + r * L, nb2);
  }
}

void assign(const AssignTask& t) {
  const std::int64_t D = t.D, n = t.n;
  const std::int64_t panelFloats = D * NR;
  const std::int64_t npanels = t.kpad / NR;
  std::int64_t blockPanels = (512 * 1024 / 4) / panelFloats;
  if (blockPanels < 1) blockPanels = 1;
  for (std::int64_t r = 0; r < n; ++r) {
    t.d1[r] = kInf;
    t.d2[r] = kInf;
    t.best[r] = -1;
  }
  alignas(32) float b1[MR * L];
  alignas(32) float b2[MR * L];
  alignas(32) std::int32_t i1[MR * L];
  float* xp = t.scratch;
  for (std::int64_t p0 = 0; p0 < npanels; p0 += blockPanels) {
    const std::int64_t p1 = p0 + blockPanels < npanels ? p0 + blockPanels : npanels;
    for (std::int64_t r0 = 0; r0 < n; r0 += MR) {
      const int rows = n - r0 < MR ? static_cast<int>(n - r0) : MR;
      packRows(t.x + r0 * t.ld, t.ld, rows, D, xp);
      for (int r = 0; r < MR; ++r) {
        for (int l = 0; l < L; ++l) {
          b1[r * L + l] = kInf;
          b2[r * L + l] = kInf;
          i1[r * L + l] = -1;
        }
        if (r < rows) {
          b1[r * L] = t.d1[r0 + r];
          b2[r * L] = t.d2[r0 + r];
          i1[r * L] = t.best[r0 + r];
        }
      }
      for (std::int64_t p = p0; p < p1; ++p)
        microTile(xp, t.panels + p * panelFloats, D, t.cnorm + p * NR, static_cast<std::int32_t>(p * NR), b1, b2, i1);
      for (int r = 0; r < rows; ++r) {
        float best = kInf;
        std::int32_t bi = 0x7fffffff;
        int bl = -1;
        for (int l = 0; l < L; ++l) {
          const float v = b1[r * L + l];
          const std::int32_t ix = i1[r * L + l];
          if (ix >= 0 && (v < best || (v == best && ix < bi))) {
            best = v;
            bi = ix;
            bl = l;
          }
        }
        float second = kInf;
        for (int l = 0; l < L; ++l) {
          if (b2[r * L + l] < second) second = b2[r * L + l];
          if (l != bl && b1[r * L + l] < second) second = b1[r * L + l];
        }
        t.d1[r0 + r] = best;
        t.d2[r0 + r] = second;
        t.best[r0 + r] = bl < 0 ? -1 : bi;
      }
    }
  }
}

void rowDistances(const float* x, std::int64_t D, const float* panels, const float* cnorm, std::int64_t kpad,
                  float* out) {
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  for (std::int64_t p = 0; p < kpad / NR; ++p) {
    const float* panel = panels + p * D * NR;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) {
      const __m256 xv = _mm256_broadcast_ss(x + d);
      a0 = _mm256_fmadd_ps(xv, _mm256_load_ps(panel + d * NR), a0);
      a1 = _mm256_fmadd_ps(xv, _mm256_load_ps(panel + d * NR + 8), a1);
    }
    _mm256_storeu_ps(out + p * NR, _mm256_fmadd_ps(a0, m2, _mm256_loadu_ps(cnorm + p * NR)));
    _mm256_storeu_ps(out + p * NR + 8, _mm256_fmadd_ps(a1, m2, _mm256_loadu_ps(cnorm + p * NR + 8)));
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

const KernelTable kTable = {"avx2", NR, MR, assign, rowDistances, transpose32, dots32x8, f16ToF32};

}  // namespace

const KernelTable* avx2Kernels() { return &kTable; }

}  // namespace cpu
}  // namespace kmfleet
