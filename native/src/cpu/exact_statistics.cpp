// Exact per-cluster statistics (exact_statistics.h): words of two's complement integers, w[0] lowest.
#include "exact_statistics.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kmfleet {
namespace cpu {

namespace {

using u64 = std::uint64_t;
using u128 = unsigned __int128;

// x on the grid: x̃ = ±m·2^s·2^-96, m < 2^24. Subnormals (biased exponent 0) are far below the grid: 0. The
// biased exponent of a finite value is at most 254, so s ≤ 200.
struct GridValue {
  u64 m;
  int s;
  bool neg;
};
inline GridValue onGrid(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  const int ex = static_cast<int>((b >> 23) & 0xff);
  const std::uint32_t mant = ex ? (b & 0x7fffffu) | 0x800000u : 0u;
  const int sh = ex - 54;  // ex − 127 − 23 + 96
  GridValue g;
  g.m = sh >= 0 ? mant : (-sh >= 32 ? 0u : mant >> -sh);
  g.s = sh >= 0 ? sh : 0;
  g.neg = (b >> 31) != 0;
  return g;
}

inline bool finite(float x) { return std::isfinite(x); }

// a += m·2^s, m < 2^48, the result's words wrapping (two's complement). s < 64·(W − 1).
template <int W>
inline void addShifted(u64* a, u64 m, int s) {
  const int w = s >> 6;
  const u128 t = static_cast<u128>(m) << (s & 63);
  const u64 lo = static_cast<u64>(t), hi = static_cast<u64>(t >> 64);  // hi < 2^48: hi + 1 cannot wrap
  u64 old = a[w];
  a[w] = old + lo;
  u64 carry = a[w] < old;
  old = a[w + 1];
  a[w + 1] = old + (hi + carry);
  carry = a[w + 1] < old;
  for (int i = w + 2; carry && i < W; ++i) carry = ++a[i] == 0;
}
template <int W>
inline void addWide(u64* a, const u64* b) {
  u64 carry = 0;
  for (int i = 0; i < W; ++i) {
    const u64 s = a[i] + b[i];
    const u64 c1 = s < a[i];
    a[i] = s + carry;
    carry = c1 | (a[i] < s);
  }
}
template <int W>
inline void subWide(u64* a, const u64* b) {
  u64 borrow = 0;
  for (int i = 0; i < W; ++i) {
    const u64 d = a[i] - b[i];
    const u64 b1 = a[i] < b[i];
    a[i] = d - borrow;
    borrow = b1 | (d < borrow);
  }
}

template <int W>
inline bool negative(const u64* v) {
  return static_cast<std::int64_t>(v[W - 1]) < 0;
}
// |v| of a W-word two's complement integer
template <int W>
inline void magnitude(const u64* v, u64* out) {
  const bool neg = negative<W>(v);
  u64 carry = neg ? 1 : 0;
  for (int i = 0; i < W; ++i) {
    out[i] = (neg ? ~v[i] : v[i]) + carry;
    carry = carry && out[i] == 0;
  }
}

// The fp64 nearest (ties to even) to v·2^-gridBits: the top 64 bits of |v| from its highest set bit, every lower bit
// OR'ed into bit 0 (sticky), converted once — 11 bits below the result's 53 carry the round bit and the sticky, all
// that round-to-nearest-even needs — then scaled by an exact power of two (cuda/kernels/exact_sums.cu wideToDouble).
template <int W>
double wideToDouble(const u64* v, int gridBits) {
  u64 a[W];
  magnitude<W>(v, a);
  int top = W - 1;
  while (top >= 0 && a[top] == 0) --top;
  if (top < 0) return 0.0;
  const int lz = __builtin_clzll(a[top]);
  const u64 next = top > 0 ? a[top - 1] : 0;
  u64 top64 = (a[top] << lz) | (lz ? next >> (64 - lz) : 0);
  bool sticky = lz ? (next << lz) != 0 : false;
  for (int i = top - 2; i >= 0 && !sticky; --i) sticky = a[i] != 0;
  top64 |= sticky ? 1 : 0;
  const double mag = std::ldexp(static_cast<double>(top64), 64 * top - lz - gridBits);
  return negative<W>(v) ? -mag : mag;
}

// out = p·2^s into W words (bits beyond W words dropped: the ranges in the header keep them zero)
template <int W>
inline void shiftInto(const u64* p, int np, int s, u64* out) {
  for (int i = 0; i < W; ++i) out[i] = 0;
  const int ws = s >> 6, bs = s & 63;
  for (int i = 0; i < np; ++i) {
    if (i + ws < W) out[i + ws] |= p[i] << bs;
    if (bs && i + ws + 1 < W) out[i + ws + 1] |= p[i] >> (64 - bs);
  }
}

// a += v·2^(64·w) or a −= it, v a 128-bit magnitude; w + 1 < W
template <int W>
inline void addShifted128(u64* a, u128 v, int w) {
  const u64 lo = static_cast<u64>(v), hi = static_cast<u64>(v >> 64);
  u64 old = a[w];
  a[w] = old + lo;
  u64 carry = a[w] < old;
  old = a[w + 1];
  a[w + 1] = old + hi + carry;
  carry = a[w + 1] < old || (carry && a[w + 1] == old);
  for (int i = w + 2; carry && i < W; ++i) carry = ++a[i] == 0;
}
template <int W>
inline void subShifted128(u64* a, u128 v, int w) {
  const u64 lo = static_cast<u64>(v), hi = static_cast<u64>(v >> 64);
  u64 old = a[w];
  a[w] = old - lo;
  u64 borrow = old < lo;
  old = a[w + 1];
  a[w + 1] = old - hi - borrow;
  borrow = old < hi || (borrow && old == hi);
  for (int i = w + 2; borrow && i < W; ++i) borrow = a[i]-- == 0;
}

}  // namespace

// Σ_w window[w]·2^(64·w), window w the 128-bit two's complement (hi[w·stride]:lo[w·stride]), as kSumWords-word
// two's complement (|Σ| < 2^264 there: the header's ranges)
void ExactStatistics::canonical(const std::uint64_t* lo, const std::uint64_t* hi, std::int64_t stride, std::uint64_t* out) {
  u64 acc[kSumWords + 1] = {};
  for (int w = 0; w < kWindows; ++w) {
    const u64 l = lo[w * stride], h = hi[w * stride];
    if (l == 0 && h == 0) continue;
    u64 t[kSumWords + 1];
    const u64 ext = static_cast<std::int64_t>(h) < 0 ? ~0ull : 0ull;
    for (int i = 0; i < kSumWords + 1; ++i) t[i] = i < w ? 0 : i == w ? l : i == w + 1 ? h : ext;
    addWide<kSumWords + 1>(acc, t);
  }
  for (int i = 0; i < kSumWords; ++i) out[i] = acc[i];
}

namespace {

// One row into (or out of) a cluster: its values' windows (lo/hi: [kWindows][D], 128-bit two's complement each) and,
// with q, the row's Σ‖x̃‖² per window w2 of 2s (q[4·w2 + i]: limb i of Σ m²·2^(2s mod 64), the 32-bit limbs summed
// apart, so that no carry links them and D < 2^24 values fit 64 bits). Lane-wise passes over the row with no carries between values, so the
// compiler vectorizes them; only the windows the row's values use are visited.
__attribute__((target_clones("avx512f", "avx2", "default"))) void updateRow(
    u64* __restrict lo, u64* __restrict hi, const float* __restrict x, std::int64_t D, bool subtract,
    u64* __restrict q, u64* __restrict m, u64* __restrict sh, u64* __restrict neg) {
  u64 wmin = ~0ull, wmax = 0;
  for (std::int64_t j = 0; j < D; ++j) {
    std::uint32_t b;
    std::memcpy(&b, x + j, 4);
    const u64 ex = (b >> 23) & 0xff;
    const u64 mant = ex ? (b & 0x7fffffu) | 0x800000u : 0u;
    // on the 2^-96 grid: m·2^s, s = ex − 54 (onGrid above); truncated toward zero below it
    const u64 s = ex >= 54 ? ex - 54 : 0;
    const u64 down = ex >= 54 ? 0 : 54 - ex;
    m[j] = down >= 32 ? 0 : mant >> down;
    sh[j] = s;
    neg[j] = ((b >> 31) ^ static_cast<u64>(subtract)) ? ~0ull : 0ull;
    const u64 w = s >> 6;
    wmin = w < wmin ? w : wmin;
    wmax = w > wmax ? w : wmax;
  }
  for (u64 w = wmin; w <= wmax; ++w) {
    u64* L = lo + w * D;
    u64* H = hi + w * D;
    for (std::int64_t j = 0; j < D; ++j) {
      const u64 in = (sh[j] >> 6) == w ? ~0ull : 0ull;
      const u64 bit = sh[j] & 63;
      const u64 cl = (m[j] << bit) & in;
      const u64 ch = (bit ? m[j] >> (64 - bit) : 0) & in;
      const u64 n = neg[j] & in;
      // ±(ch:cl) in two's complement, then added with the carry from the low word
      const u64 nl = (cl ^ n) - n;
      const u64 nh = (ch ^ n) + (n & (cl == 0 ? 1 : 0));
      const u64 l = L[j] + nl;
      H[j] += nh + (l < nl ? 1 : 0);
      L[j] = l;
    }
  }
  if (!q) return;
  for (u64 w2 = 2 * wmin; w2 <= 2 * wmax + 1 && w2 < ExactStatistics::kSqRowWindows; ++w2) {
    u64 a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (std::int64_t j = 0; j < D; ++j) {
      const u64 s2 = 2 * sh[j];
      const u64 in = (s2 >> 6) == w2 ? ~0ull : 0ull;
      const u64 bit = s2 & 63;
      const u64 mm = m[j] * m[j];
      const u64 cl = (mm << bit) & in;
      const u64 ch = (bit ? mm >> (64 - bit) : 0) & in;
      a0 += cl & 0xffffffffu;
      a1 += cl >> 32;
      a2 += ch & 0xffffffffu;
      a3 += ch >> 32;
    }
    q[4 * w2] = a0;
    q[4 * w2 + 1] = a1;
    q[4 * w2 + 2] = a2;
    q[4 * w2 + 3] = a3;
  }
}

// per thread: the row's values taken apart
struct RowScratch {
  std::vector<u64> m, sh, neg;
};
thread_local RowScratch tlsRow;

}  // namespace

void ExactStatistics::allocate(std::int64_t K, std::int64_t D, bool squares) {
  const std::size_t windows = static_cast<std::size_t>(K * D) * kWindows;
  lo_.allocate(windows, "the per-cluster exact sums");
  hi_.allocate(windows, "the per-cluster exact sums");
  sq_.allocate(squares ? static_cast<std::size_t>(K) * kSqWords : 0, "the per-cluster exact sums of squares");
  count_.assign(static_cast<std::size_t>(K), 0);
  K_ = K;
  D_ = D;
  squares_ = squares;
  std::memset(lo_.data(), 0, windows * 8);
  std::memset(hi_.data(), 0, windows * 8);
  if (squares) std::memset(sq_.data(), 0, static_cast<std::size_t>(K) * kSqWords * 8);
}

void ExactStatistics::update(std::int64_t k, const float* x, bool subtract) {
  RowScratch& r = tlsRow;
  if (static_cast<std::int64_t>(r.m.size()) < D_) {
    r.m.resize(static_cast<std::size_t>(D_));
    r.sh.resize(static_cast<std::size_t>(D_));
    r.neg.resize(static_cast<std::size_t>(D_));
  }
  u64 q[4 * kSqRowWindows] = {};
  const std::size_t at = static_cast<std::size_t>(k * D_) * kWindows;
  updateRow(lo_.data() + at, hi_.data() + at, x, D_, subtract, squares_ ? q : nullptr, r.m.data(), r.sh.data(),
            r.neg.data());
  if (squares_) {
    // limbs 0 and 1 of window w2 weigh 2^(64·w2) and 2^(64·w2 + 32), limbs 2 and 3 one word higher: each pair
    // recombines in 128 bits (below 2^89), whatever D
    u64* sq = sq_.data() + static_cast<std::size_t>(k) * kSqWords;
    for (int w2 = 0; w2 < kSqRowWindows; ++w2) {
      const u64* l = q + 4 * w2;
      for (int half = 0; half < 2; ++half) {
        const u128 v = static_cast<u128>(l[2 * half]) + (static_cast<u128>(l[2 * half + 1]) << 32);
        if (v == 0) continue;
        if (subtract) subShifted128<kSqWords>(sq, v, w2 + half);
        else addShifted128<kSqWords>(sq, v, w2 + half);
      }
    }
  }
  count_[static_cast<std::size_t>(k)] += subtract ? -1 : 1;
}

void ExactStatistics::finish(const float* centroids, Metric metric, ThreadPool& pool, std::vector<double>& sums,
                             std::vector<std::int64_t>& counts, std::vector<double>& inertia) const {
  constexpr int W = kSqWords;
  const bool cosine = metric == Metric::Cosine;
  sums.assign(static_cast<std::size_t>(K_ * D_), 0.0);
  counts.assign(count_.begin(), count_.end());
  inertia.assign(static_cast<std::size_t>(K_), 0.0);
  pool.run([&](int tid, int nt) {
    std::int64_t b, e;
    ThreadPool::range(K_, tid, nt, 1, b, e);
    for (std::int64_t k = b; k < e; ++k) {
      // acc = −(l2: 2)·Σ_j c̃_j·S_j and cc = Σ_j c̃_j² on the 2^-192 grid, exactly
      u64 acc[W] = {}, cc[W] = {}, t[W];
      bool bad = false;
      for (std::int64_t j = 0; j < D_; ++j) {
        const std::size_t i = static_cast<std::size_t>(k * D_ + j);
        u64 sv[kSumWords];
        const std::size_t at = static_cast<std::size_t>(k * D_) * kWindows + static_cast<std::size_t>(j);
        canonical(lo_.data() + at, hi_.data() + at, D_, sv);
        sums[i] = wideToDouble<kSumWords>(sv, 96);
        const float cv = centroids[i];
        bad |= !finite(cv);
        const GridValue g = onGrid(cv);
        if (g.m == 0) continue;
        u64 mag[kSumWords], p[kSumWords + 1];
        magnitude<kSumWords>(sv, mag);
        u64 carry = 0;
        for (int w = 0; w < kSumWords; ++w) {
          const u128 v = static_cast<u128>(mag[w]) * g.m + carry;
          p[w] = static_cast<u64>(v);
          carry = static_cast<u64>(v >> 64);
        }
        p[kSumWords] = carry;
        shiftInto<W>(p, kSumWords + 1, g.s + (cosine ? 0 : 1), t);
        // the term is −(±c̃)(±S): negative when the two signs agree
        if (g.neg == negative<kSumWords>(sv)) subWide<W>(acc, t);
        else addWide<W>(acc, t);
        if (!cosine) addShifted<W>(cc, g.m * g.m, 2 * g.s);
      }
      const std::int64_t n = count_[static_cast<std::size_t>(k)];
      u64 E[W] = {};
      if (cosine) {
        E[3] = static_cast<u64>(n);  // count·2^192 (counts are never negative)
      } else {
        std::memcpy(E, sq_.data() + k * W, sizeof E);
        u64 carry = 0;
        for (int w = 0; w < W; ++w) {
          const u128 v = static_cast<u128>(cc[w]) * static_cast<u64>(n) + carry;
          t[w] = static_cast<u64>(v);
          carry = static_cast<u64>(v >> 64);
        }
        addWide<W>(E, t);
      }
      addWide<W>(E, acc);
      inertia[static_cast<std::size_t>(k)] =
          bad && n != 0 ? std::numeric_limits<double>::quiet_NaN() : wideToDouble<W>(E, 192);
    }
  });
}

}  // namespace cpu
}  // namespace kmfleet
