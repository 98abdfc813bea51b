// AVX-512 kernels (compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c; see CMakeLists.txt).
// Register tile: 12 rows × 32 centroids = 24 zmm accumulators; centroids stream from a K×D panel pack that stays
// in L2 (K-blocks of ~512 KB), the 12 rows sit transposed in L1, each step is 2 loads + 12 broadcasts + 24 FMAs.
// The argmin is fused: per (row, lane) the best and second best value and the best index live in an L1 array
// and are folded into per-row scalars once per K-block. Only this header and <immintrin.h> are included (ODR).
#include <immintrin.h>

#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr int MR = 12;
constexpr int NR = 32;
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
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (std::int64_t d = 0; d < D; ++d) {
    const __m512 c0 = _mm512_load_ps(panel + d * NR);
    const __m512 c1 = _mm512_load_ps(panel + d * NR + 16);
    const float* xd = xp + d * MR;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 xv = _mm512_set1_ps(xd[r]);
      acc[r][0] = _mm512_fmadd_ps(xv, c0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xv, c1, acc[r][1]);
    }
  }
  const __m512 cn0 = _mm512_loadu_ps(cn), cn1 = _mm512_loadu_ps(cn + 16), m2 = _mm512_set1_ps(-2.0f);
  const __m512i idx0 = _mm512_add_epi32(_mm512_set1_epi32(base),
                                        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __m512i idx1 = _mm512_add_epi32(idx0, _mm512_set1_epi32(16));
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    const __m512 v0 = _mm512_fmadd_ps(acc[r][0], m2, cn0);
    const __m512 v1 = _mm512_fmadd_ps(acc[r][1], m2, cn1);
    const __mmask16 lt = _mm512_cmp_ps_mask(v1, v0, _CMP_LT_OQ);  // equal: v0 (the lower index) stays first
    const __m512 a = _mm512_mask_blend_ps(lt, v0, v1);
    const __m512 b = _mm512_mask_blend_ps(lt, v1, v0);
    const __m512i ia = _mm512_mask_blend_epi32(lt, idx0, idx1);
    const __m512 B1 = _mm512_load_ps(b1 + r * 16), B2 = _mm512_load_ps(b2 + r * 16);
    const __m512i I1 = _mm512_load_si512(i1 + r * 16);
    const __mmask16 m = _mm512_cmp_ps_mask(a, B1, _CMP_LT_OQ);
    // second smallest of {B1 <= B2} ∪ {a <= b} = min(max(B1, a), B2, b)
    const __m512 nb2 = _mm512_min_ps(_mm512_min_ps(_mm512_max_ps(B1, a), B2), b);
    _mm512_store_ps(b1 + r * 16, _mm512_mask_blend_ps(m, B1, a));
    _mm512_store_si512(i1 + r * 16, _mm512_mask_blend_epi32(m, I1, ia));
    _mm512_store_ps(b2 + r * 16, nb2);
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
  alignas(64) float b1[MR * 16];
  alignas(64) float b2[MR * 16];
  alignas(64) std::int32_t i1[MR * 16];
  float* xp = t.scratch;
  for (std::int64_t p0 = 0; p0 < npanels; p0 += blockPanels) {
    const std::int64_t p1 = p0 + blockPanels < npanels ? p0 + blockPanels : npanels;
    for (std::int64_t r0 = 0; r0 < n; r0 += MR) {
      const int rows = n - r0 < MR ? static_cast<int>(n - r0) : MR;
      packRows(t.x + r0 * t.ld, t.ld, rows, D, xp);
      for (int r = 0; r < MR; ++r) {
        for (int l = 0; l < 16; ++l) {
          b1[r * 16 + l] = kInf;
          b2[r * 16 + l] = kInf;
          i1[r * 16 + l] = -1;
        }
        if (r < rows) {  // carry the previous K-blocks' result in lane 0
          b1[r * 16] = t.d1[r0 + r];
          b2[r * 16] = t.d2[r0 + r];
          i1[r * 16] = t.best[r0 + r];
        }
      }
      for (std::int64_t p = p0; p < p1; ++p)
        microTile(xp, t.panels + p * panelFloats, D, t.cnorm + p * NR, static_cast<std::int32_t>(p * NR), b1, b2, i1);
      for (int r = 0; r < rows; ++r) {
        float best = kInf;
        std::int32_t bi = 0x7fffffff;
        int bl = -1;
        for (int l = 0; l < 16; ++l) {
          const float v = b1[r * 16 + l];
          const std::int32_t ix = i1[r * 16 + l];
          if (ix >= 0 && (v < best || (v == best && ix < bi))) {
            best = v;
            bi = ix;
            bl = l;
          }
        }
        float second = kInf;
        for (int l = 0; l < 16; ++l) {
          if (b2[r * 16 + l] < second) second = b2[r * 16 + l];
          if (l != bl && b1[r * 16 + l] < second) second = b1[r * 16 + l];
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
  const __m512 m2 = _mm512_set1_ps(-2.0f);
  for (std::int64_t p = 0; p < kpad / NR; ++p) {
    const float* panel = panels + p * D * NR;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (std::int64_t d = 0; d < D; ++d) {
      const __m512 xv = _mm512_set1_ps(x[d]);
      a0 = _mm512_fmadd_ps(xv, _mm512_load_ps(panel + d * NR), a0);
      a1 = _mm512_fmadd_ps(xv, _mm512_load_ps(panel + d * NR + 16), a1);
    }
    _mm512_storeu_ps(out + p * NR, _mm512_fmadd_ps(a0, m2, _mm512_loadu_ps(cnorm + p * NR)));
    _mm512_storeu_ps(out + p * NR + 16, _mm512_fmadd_ps(a1, m2, _mm512_loadu_ps(cnorm + p * NR + 16)));
  }
}

void dots(const float* x, const float* c, std::int64_t nc, std::int64_t D, float* dst) {
  for (std::int64_t t = 0; t < nc; ++t) {
    const float* ct = c + t * D;
    __m512 acc = _mm512_setzero_ps();
    std::int64_t d = 0;
    for (; d + 16 <= D; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + d), _mm512_loadu_ps(ct + d), acc);
    if (d < D) {
      const __mmask16 m = static_cast<__mmask16>((1u << (D - d)) - 1u);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + d), _mm512_maskz_loadu_ps(m, ct + d), acc);
    }
    dst[t] = _mm512_reduce_add_ps(acc);
  }
}

void f16ToF32(const std::uint16_t* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

const KernelTable kTable = {"avx512", NR, MR, assign, rowDistances, dots, f16ToF32};

}  // namespace

const KernelTable* avx512Kernels() { return &kTable; }

}  // namespace cpu
}  // namespace kmfleet
