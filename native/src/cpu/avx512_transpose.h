// The AVX-512 units' row transpose (32 rows → xT[d*32 + r]), shared by kernels_avx512.cpp and
// kernels_avx512bf16.cpp. Include only from units compiled with AVX-512 flags; internal linkage (an anonymous
// namespace), so that no copy of it compiled with one unit's flags can be picked by the linker for another (kernels.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kmfleet {
namespace cpu {
namespace avx512 {
namespace {

constexpr int RB = 32;

// 16 rows (r[0..15], each a 16-float slice of one row) → 16 columns (c[j] = feature j of the 16 rows).
__attribute__((always_inline)) inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // rows 4q..4q+3
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    u[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));  // cols 0,4,8,12
    u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));  // cols 1,5,9,13
    u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));  // cols 2,6,10,14
    u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));  // cols 3,7,11,15
  }
  for (int j = 0; j < 4; ++j) {  // column class j: u[j] (rows 0-3), u[4+j] (4-7), u[8+j] (8-11), u[12+j] (12-15)
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);     // col j, j+8 of rows 0-3, 4-7
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);     // col j+4, j+12
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[j + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[j + 12] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// xT[d*32 + r] = x[r][d] for r < rows (zero for the padding rows).
void transposeBlock(const float* x, std::int64_t ld, int rows, std::int64_t D, float* xT) {
  for (int half = 0; half < 2; ++half) {
    for (std::int64_t c0 = 0; c0 < D; c0 += 16) {
      const int cols = D - c0 < 16 ? static_cast<int>(D - c0) : 16;
      const __mmask16 m = static_cast<__mmask16>(cols == 16 ? 0xffffu : (1u << cols) - 1u);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int row = half * 16 + i;
        r[i] = row < rows ? _mm512_maskz_loadu_ps(m, x + row * ld + c0) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int j = 0; j < cols; ++j) _mm512_store_ps(xT + (c0 + j) * RB + half * 16, r[j]);
    }
  }
}

}  // namespace
}  // namespace avx512
}  // namespace cpu
}  // namespace kmfleet
