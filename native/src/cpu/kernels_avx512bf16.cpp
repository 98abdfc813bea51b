// The bf16 screen (compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma; see CMakeLists.txt):
// the AVX-512 unit's rows-in-lanes tile (32 rows × 8 broadcast centroids) on VDPBF16PS, which does 32 products a
// lane-pair per instruction where an fp32 FMA does 16 — about 1.8× the fp32 kernel's rate on the build machine
// (Zen 5: 381 against 209 GFLOP/s a core). Its values are only a screen: cpu/assign.cpp bounds their error from the
// rounding residuals and decides each row exactly (most from the screen alone). Only kernels.h, the shared transpose
// and <immintrin.h> are included (the ODR trap, see kernels.h).
#include <immintrin.h>

#include "avx512_transpose.h"
#include "kernels.h"

namespace kmfleet {
namespace cpu {
namespace {

constexpr int RB = avx512::RB;
constexpr int CB = 8;
constexpr float kInf = __builtin_inff();

// fp32 → bf16 bits in the high half, rounded to nearest even, subnormal results flushed to zero as VDPBF16PS reads
// them (DAZ): the residual x − x̂ is then the one the products really see. The same rounding as CentroidPack::build's
// (cpu/assign.cpp) for the centroids. The values are finite and far from overflow (the caller checks the range).
__attribute__((always_inline)) inline __m512i roundBf16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
  const __m512i h = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  return _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(h, _mm512_set1_epi32(0x7f800000)), h);
}

// xT (32 rows, features in rows of 32) → xP[p*32 + r] = bf16(x[r][2p]) | bf16(x[r][2p+1]) << 16, and res[r] +=
// Σ (x − x̂)² over the features (fp32).
void packPairs(const float* xT, std::int64_t D, std::uint32_t* xP, __m512 (&res)[2]) {
  const std::int64_t Dp = (D + 1) / 2;
  for (std::int64_t p = 0; p < Dp; ++p) {
    for (int h = 0; h < 2; ++h) {
      const __m512 lo = _mm512_load_ps(xT + 2 * p * RB + h * 16);
      const __m512 hi = 2 * p + 1 < D ? _mm512_load_ps(xT + (2 * p + 1) * RB + h * 16) : _mm512_setzero_ps();
      const __m512i rl = roundBf16(lo), rh = roundBf16(hi);
      const __m512i pair = _mm512_or_si512(rh, _mm512_srli_epi32(rl, 16));
      _mm512_store_si512(xP + p * RB + h * 16, pair);
      const __m512 el = _mm512_sub_ps(lo, _mm512_castsi512_ps(rl)), eh = _mm512_sub_ps(hi, _mm512_castsi512_ps(rh));
      res[h] = _mm512_fmadd_ps(el, el, res[h]);
      res[h] = _mm512_fmadd_ps(eh, eh, res[h]);
    }
  }
}

// Σ (x − c)² in fp64 with row_math.h's order, bit for bit: its 8 interleaved partial sums are the 8 lanes here (a
// product and a sum, never fused: -ffp-contract=off and separate intrinsics), combined in the same tree.
double sqDist64(const float* x, const float* c, std::int64_t D) {
  __m512d s = _mm512_setzero_pd();
  std::int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    const __m512d t = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + d)), _mm512_cvtps_pd(_mm256_loadu_ps(c + d)));
    s = _mm512_add_pd(s, _mm512_mul_pd(t, t));
  }
  if (d < D) {
    const __mmask8 m = static_cast<__mmask8>((1u << (D - d)) - 1u);
    const __m512d t = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + d)),
                                    _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, c + d)));
    s = _mm512_mask_add_pd(s, m, s, _mm512_mul_pd(t, t));
  }
  alignas(64) double v[8];
  _mm512_store_pd(v, s);
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

void screen(ScreenTask& t) {
  const std::int64_t D = t.D, n = t.n, Dp = (D + 1) / 2;
  const std::int64_t groups = t.kpad / CB;
  float* xT = t.scratch;
  std::uint32_t* xP = reinterpret_cast<std::uint32_t*>(t.scratch + ((RB * (D + 2) + 15) / 16) * 16);
  float* vals = t.scratch + ((RB * (D + 2) + 15) / 16) * 16 + ((RB * Dp + 15) / 16) * 16;  // vals[k*32 + r]
  std::int32_t* cand = reinterpret_cast<std::int32_t*>(vals + RB * t.kpad);            // [r*(max+1) + i]
  constexpr int CS = maxCandidates + 1;
  alignas(64) float sb[RB], sn[RB], sr[RB], thr[RB];
  alignas(64) double eb[RB];
  alignas(64) int cnt[RB];
  const __m512 m2 = _mm512_set1_ps(-2.0f), inf = _mm512_set1_ps(kInf);
  for (std::int64_t r0 = 0; r0 < n; r0 += RB) {
    const int rows = n - r0 < RB ? static_cast<int>(n - r0) : RB;
    avx512::transposeBlock(t.x + r0 * t.ld, t.ld, rows, D, xT);
    __m512 res[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    packPairs(xT, D, xP, res);
    // the products: every value to vals, the running minimum and runner-up in registers
    __m512 best0 = inf, best1 = inf, next0 = inf, next1 = inf;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::uint32_t* panel = t.panels + g * Dp * CB;
      __m512 a0[CB], a1[CB];
#pragma GCC unroll 8
      for (int j = 0; j < CB; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
      for (std::int64_t p = 0; p < Dp; ++p) {
        const __m512bh x0 = (__m512bh)_mm512_load_si512(xP + p * RB);
        const __m512bh x1 = (__m512bh)_mm512_load_si512(xP + p * RB + 16);
        const std::uint32_t* cp = panel + p * CB;
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) {
          const __m512bh cb = (__m512bh)_mm512_set1_epi32(static_cast<int>(cp[j]));
          a0[j] = _mm512_dpbf16_ps(a0[j], x0, cb);
          a1[j] = _mm512_dpbf16_ps(a1[j], x1, cb);
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < CB; ++j) {
        const __m512 cn = _mm512_set1_ps(t.cnorm[g * CB + j]);
        const __m512 v0 = _mm512_fmadd_ps(a0[j], m2, cn), v1 = _mm512_fmadd_ps(a1[j], m2, cn);
        _mm512_store_ps(vals + (g * CB + j) * RB, v0);
        _mm512_store_ps(vals + (g * CB + j) * RB + 16, v1);
        next0 = _mm512_min_ps(next0, _mm512_max_ps(best0, v0));
        next1 = _mm512_min_ps(next1, _mm512_max_ps(best1, v1));
        best0 = _mm512_min_ps(best0, v0);
        best1 = _mm512_min_ps(best1, v1);
      }
    }
    _mm512_store_ps(sb, best0);
    _mm512_store_ps(sb + 16, best1);
    _mm512_store_ps(sn, next0);
    _mm512_store_ps(sn + 16, next1);
    _mm512_store_ps(sr, res[0]);
    _mm512_store_ps(sr + 16, res[1]);
    // each row's threshold v* + 2E, in fp64 (8 rows at a time), rounded up to fp32; rows out of range or padding: −inf
    for (int q = 0; q < RB / 8; ++q) {
      const __mmask8 live = static_cast<__mmask8>(rows - 8 * q >= 8 ? 0xff : rows > 8 * q ? (1u << (rows - 8 * q)) - 1u : 0u);
      const __m512d nx = _mm512_maskz_loadu_pd(live, t.norm2 + r0 + 8 * q);
      const __m512d v = _mm512_cvtps_pd(_mm256_load_ps(sb + 8 * q));
      const __m512d rx = _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(_mm512_cvtps_pd(_mm256_load_ps(sr + 8 * q)), _mm512_set1_pd(t.er)),
                                                      _mm512_set1_pd(t.era)));
      const __m512d e = _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(t.ea), rx),
                                                    _mm512_mul_pd(_mm512_set1_pd(t.eb), _mm512_add_pd(_mm512_sqrt_pd(nx), rx))),
                                      _mm512_set1_pd(t.ec));
      _mm512_store_pd(eb + 8 * q, e);
      const __m512d limit = _mm512_add_pd(v, _mm512_add_pd(e, e));
      const __mmask8 ok = live & _mm512_cmp_pd_mask(nx, _mm512_set1_pd(0x1p120), _CMP_LT_OQ) &
                          _mm512_cmp_pd_mask(v, _mm512_set1_pd(static_cast<double>(kInf)), _CMP_LT_OQ);
      const __m256 f = _mm512_cvt_roundpd_ps(limit, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
      _mm256_store_ps(thr + 8 * q, _mm256_mask_blend_ps(ok, _mm256_set1_ps(-kInf), f));
    }
    for (int r = 0; r < RB; ++r) cnt[r] = 0;
    // the candidates, in increasing index
    const __m512 t0 = _mm512_load_ps(thr), t1 = _mm512_load_ps(thr + 16);
    for (std::int64_t k = 0; k < t.kpad; ++k) {
      const __mmask16 c0 = _mm512_cmp_ps_mask(_mm512_load_ps(vals + k * RB), t0, _CMP_LE_OQ);
      const __mmask16 c1 = _mm512_cmp_ps_mask(_mm512_load_ps(vals + k * RB + 16), t1, _CMP_LE_OQ);
      std::uint32_t m = static_cast<std::uint32_t>(c0) | static_cast<std::uint32_t>(c1) << 16;
      while (m) {
        const int r = __builtin_ctz(m);
        m &= m - 1;
        if (cnt[r] < CS) cand[r * CS + cnt[r]] = static_cast<std::int32_t>(k);
        ++cnt[r];
      }
    }
    for (int r = 0; r < rows; ++r) {
      std::int32_t label = -1;
      if (cnt[r] == 1) {
        label = cand[r * CS];
        ++t.screened;
      } else if (cnt[r] > 1 && cnt[r] <= maxCandidates) {
        const float* xr = t.x + (r0 + r) * t.ld;
        double best = kInf;
        for (int i = 0; i < cnt[r]; ++i) {
          const std::int32_t k = cand[r * CS + i];
          const double g = sqDist64(xr, t.c + k * D, D);
          if (g < best) {
            best = g;
            label = k;
          }
        }
        ++t.decided64;
      }
      t.labels[r0 + r] = label;
      if (t.gUpper && label >= 0) {
        // one candidate: the label is the values' argmin, so the others are at least the runner-up; several: at least
        // the minimum
        t.gUpper[r0 + r] = static_cast<double>(vals[label * RB + r]) + eb[r];
        t.gLower[r0 + r] = static_cast<double>(cnt[r] == 1 ? sn[r] : sb[r]) - eb[r];
      }
    }
  }
}

const ScreenKernel kScreen = {"avx512bf16", screen};

}  // namespace

const ScreenKernel* avx512bf16Screen() { return &kScreen; }

}  // namespace cpu
}  // namespace kmfleet
