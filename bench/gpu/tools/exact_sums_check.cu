// exact_sums_check: cuda/kernels/exact_sums.cu against host references, bit for bit, and its timings.
//
//   exact_sums_check                       every case (fresh random data, seed from the clock, printed)
//   exact_sums_check seed S                the same with seed S
//   exact_sums_check bench N D K changedFraction
//                                          EXACT_SUMS_BENCH n= d= k= changed%= add_ms= move_ms= finish_ms=
//                                          move_equals_fresh=0|1 (random normal f32 rows, l2; CUDA events, median of
//                                          9 after a warm-up; exit 1 when the moved words differ from a fresh add)
// Prints `CHECK <name> ok|FAIL <details>` a check and `EXACT_SUMS_CHECK failures=<n>`; exits 0 iff none failed.
// Built by scripts/build-cuda-tools with exact_sums.cu alone.
//
// The host reference is written apart from the device code on purpose: the grid from frexp (not from the float's
// bits), plain multi-word integers with 128-bit products (not bins, not the lo/hi split of m²), the inertia as the sum
// over rows of (X − C)² (not sq − 2C·S + n‖C‖²), and its own round-to-nearest-even to fp64 (53 bits, a round bit and
// a sticky bit, not a 64-bit window). What is checked:
//   fresh     exactAddRows over all rows: sum / sq / count words equal the host's, bit for bit
//   finish    exactFinish: counts equal; every fp64 sum and inertia equals the host's correctly rounded exact value,
//             bit for bit; inertia within 1e-12 of a long-double Σ (x − c)² (or Σ 1 − x·c) of the original values
//             where no value is below the grid; exactly 0 where every row sits on its centroid
//   chunks    the same rows added in chunks of odd sizes, in shuffled order, alternating two streams with two
//             scratches into one ExactStats concurrently: the fresh words
//   move f    stats of `prev` (fraction f of the rows relabelled) then exactMoveRows(prev → cur): the fresh words;
//             then exactMoveRows(cur → prev): the words of prev again (whole, or in chunks over two streams)
//   union     addExactStats(rows [0, h), rows [h, n)): the fresh words
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/exact_sums.cuh"
#include "kernels/operands.cuh"
#include "cuda_check.h"

using namespace kmfleet::cuda;
using u64 = unsigned long long;
using u128 = unsigned __int128;


namespace {

int failures = 0;

void report(const std::string& name, const std::string& problem) {
  if (problem.empty()) {
    std::printf("CHECK %s ok\n", name.c_str());
  } else {
    std::printf("CHECK %s FAIL %s\n", name.c_str(), problem.c_str());
    ++failures;
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------------------------
// Host integers: W words, w[0] lowest, two's complement.

template <int W>
struct Big {
  u64 w[W] = {};
};

template <int W>
void bigAdd(Big<W>& a, const Big<W>& b) {
  u128 c = 0;
  for (int i = 0; i < W; ++i) {
    c += static_cast<u128>(a.w[i]) + b.w[i];
    a.w[i] = static_cast<u64>(c);
    c >>= 64;
  }
}

template <int W>
bool bigNeg(const Big<W>& a) { return a.w[W - 1] >> 63; }

template <int W>
Big<W> bigNegate(Big<W> a) {
  Big<W> one;
  one.w[0] = 1;
  for (int i = 0; i < W; ++i) a.w[i] = ~a.w[i];
  bigAdd(a, one);
  return a;
}

template <int W>
void bigSub(Big<W>& a, const Big<W>& b) { bigAdd(a, bigNegate(b)); }

template <int W>
bool bigIsZero(const Big<W>& a) {
  for (int i = 0; i < W; ++i)
    if (a.w[i]) return false;
  return true;
}

// signed 3-word × signed 3-word → signed 6-word (magnitudes, schoolbook, then the sign)
Big<6> bigMul(const Big<3>& a, const Big<3>& b) {
  const bool na = bigNeg(a), nb = bigNeg(b);
  const Big<3> ma = na ? bigNegate(a) : a, mb = nb ? bigNegate(b) : b;
  Big<6> r;
  for (int i = 0; i < 3; ++i) {
    u128 carry = 0;
    for (int j = 0; j < 3; ++j) {
      const u128 t = static_cast<u128>(ma.w[i]) * mb.w[j] + r.w[i + j] + carry;
      r.w[i + j] = static_cast<u64>(t);
      carry = t >> 64;
    }
    for (int t = i + 3; t < 6 && carry; ++t) {
      const u128 s = static_cast<u128>(r.w[t]) + carry;
      r.w[t] = static_cast<u64>(s);
      carry = s >> 64;
    }
  }
  return na != nb ? bigNegate(r) : r;
}

// a = m·2^shift for a small unsigned m, into W words (bits past the top are an error in the caller)
template <int W>
Big<W> bigShifted(u64 m, int shift) {  // shift ≥ 0
  Big<W> r;
  const int q = shift / 64, b = shift % 64;
  if (q < W) r.w[q] = m << b;
  if (b && q + 1 < W) r.w[q + 1] = m >> (64 - b);
  return r;
}

template <int W>
bool bigBit(const Big<W>& a, int i) { return i >= 0 && i < 64 * W && ((a.w[i / 64] >> (i % 64)) & 1); }

// The fp64 nearest (ties to even) to v·2^-gridBits: 53 bits from the top set bit, then the round bit and the sticky
// bits below it decide.
template <int W>
double bigToDouble(const Big<W>& v, int gridBits) {
  const bool neg = bigNeg(v);
  const Big<W> a = neg ? bigNegate(v) : v;
  int p = -1;
  for (int i = 64 * W - 1; i >= 0; --i)
    if (bigBit(a, i)) { p = i; break; }
  if (p < 0) return 0.0;
  u64 mant = 0;
  for (int i = p; i >= p - 52; --i) mant = (mant << 1) | (bigBit(a, i) ? 1 : 0);  // bits below 0 read as 0
  const bool roundBit = bigBit(a, p - 53);
  bool sticky = false;
  for (int i = p - 54; i >= 0 && !sticky; --i) sticky = bigBit(a, i);
  int e = p - 52;  // mant·2^e
  if (roundBit && (sticky || (mant & 1))) {
    ++mant;
    if (mant == (1ull << 53)) {
      mant >>= 1;
      ++e;
    }
  }
  const double r = std::ldexp(static_cast<double>(mant), e - gridBits);
  return neg ? -r : r;
}

// x on the 2^-96 grid, truncated toward zero, as a 192-bit integer: x = f·2^e (frexp), f·2^24 an integer (a float
// has ≤ 24 significant bits), so x·2^96 = (f·2^24)·2^(e − 24 + 96).
Big<3> gridInt(float x) {
  if (x == 0.0f) return Big<3>{};
  int e = 0;
  const double f = std::frexp(static_cast<double>(x), &e);
  const u64 mant = static_cast<u64>(std::ldexp(std::fabs(f), 24));
  const int shift = e - 24 + 96;
  Big<3> r;
  if (shift >= 0) r = bigShifted<3>(mant, shift);
  else r.w[0] = shift <= -64 ? 0 : mant >> -shift;
  return x < 0 ? bigNegate(r) : r;
}

// ---------------------------------------------------------------------------------------------------------------
// Rows in their input type, and the values the host sees.

float halfBitsToFloat(std::uint16_t h) {  // written out, not __half2float
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(m + 1024), e - 25);
  return s ? -v : v;
}
float bf16BitsToFloat(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
std::uint16_t floatToHalfBits(float v) {
  const __half h = __float2half_rn(v);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
std::uint16_t floatToBf16Bits(float v) {  // truncation: never rounds a value up out of range
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return static_cast<std::uint16_t>(b >> 16);
}
float bitsFloat(std::uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

// values (as the host's floats) → the raw input bytes of type t; the values are replaced by what t holds
std::vector<unsigned char> encodeRows(std::vector<float>& v, InType t) {
  std::vector<unsigned char> raw(v.size() * (t == InType::F32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == InType::F32) {
      std::memcpy(raw.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t b = t == InType::F16 ? floatToHalfBits(v[i]) : floatToBf16Bits(v[i]);
      std::memcpy(raw.data() + 2 * i, &b, 2);
      v[i] = t == InType::F16 ? halfBitsToFloat(b) : bf16BitsToFloat(b);
    }
  }
  return raw;
}

// ---------------------------------------------------------------------------------------------------------------
// Host reference statistics.

struct Ref {
  std::vector<Big<3>> sum;  // K × D
  std::vector<Big<6>> sq;   // K
  std::vector<long long> count;
  std::vector<Big<6>> inertia;       // exact, on the 2^-192 grid
  std::vector<long double> inertiaLd;  // from the original values
};

Ref reference(const std::vector<float>& x, long long n, int d, int k, const std::vector<int>& labels,
              const std::vector<float>& cf, bool cosine) {
  Ref r;
  r.sum.assign(static_cast<size_t>(k) * d, Big<3>{});
  r.sq.assign(k, Big<6>{});
  r.count.assign(k, 0);
  r.inertia.assign(k, Big<6>{});
  r.inertiaLd.assign(k, 0.0L);
  std::vector<Big<3>> cg(cf.size());
  for (size_t i = 0; i < cf.size(); ++i) cg[i] = gridInt(cf[i]);
  for (long long i = 0; i < n; ++i) {
    const int c = labels[i];
    ++r.count[c];
    long double ld = cosine ? 1.0L : 0.0L;
    if (cosine) {
      Big<6> one;
      one.w[3] = 1;  // 2^192: one unit on the 2^-192 grid
      bigAdd(r.inertia[c], one);
    }
    for (int j = 0; j < d; ++j) {
      const float xv = x[static_cast<size_t>(i) * d + j];
      const float cv = cf[static_cast<size_t>(c) * d + j];
      const Big<3> X = gridInt(xv);
      const Big<3>& C = cg[static_cast<size_t>(c) * d + j];
      bigAdd(r.sum[static_cast<size_t>(c) * d + j], X);
      bigAdd(r.sq[c], bigMul(X, X));
      if (cosine) {
        bigSub(r.inertia[c], bigMul(X, C));
        ld -= static_cast<long double>(xv) * cv;
      } else {
        Big<3> diff = X;
        bigSub(diff, C);
        bigAdd(r.inertia[c], bigMul(diff, diff));
        const long double t = static_cast<long double>(xv) - cv;
        ld += t * t;
      }
    }
    r.inertiaLd[c] += ld;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// Device side of a case.

struct Words {
  std::vector<u64> sum, sq;
  std::vector<long long> count;
};

Words download(const ExactStats& s) {
  Words w;
  w.sum.resize(static_cast<size_t>(s.k) * s.d * 3);
  w.sq.resize(static_cast<size_t>(s.k) * 6);
  w.count.resize(s.k);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(w.sum.data(), s.sum, w.sum.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(w.sq.data(), s.sq, w.sq.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(w.count.data(), s.count, w.count.size() * 8, cudaMemcpyDeviceToHost));
  return w;
}

std::string hexWords(const u64* w, int n) {
  std::string s;
  char buf[24];
  for (int i = n - 1; i >= 0; --i) {
    std::snprintf(buf, sizeof buf, "%016llx", w[i]);
    s += buf;
    if (i) s += "_";
  }
  return s;
}

// "" when equal (sq only where withSq)
std::string compareWords(const Words& a, const Words& b, bool withSq, int d) {
  for (size_t i = 0; i < a.count.size(); ++i)
    if (a.count[i] != b.count[i])
      return "count[" + std::to_string(i) + "] " + std::to_string(a.count[i]) + " vs " + std::to_string(b.count[i]);
  for (size_t i = 0; i < a.sum.size() / 3; ++i)
    if (std::memcmp(&a.sum[3 * i], &b.sum[3 * i], 24))
      return "sum[" + std::to_string(i / d) + "][" + std::to_string(i % d) + "] " + hexWords(&a.sum[3 * i], 3) +
             " vs " + hexWords(&b.sum[3 * i], 3);
  if (withSq)
    for (size_t i = 0; i < a.sq.size() / 6; ++i)
      if (std::memcmp(&a.sq[6 * i], &b.sq[6 * i], 48))
        return "sq[" + std::to_string(i) + "] " + hexWords(&a.sq[6 * i], 6) + " vs " + hexWords(&b.sq[6 * i], 6);
  return "";
}

Words refWords(const Ref& r) {
  Words w;
  for (const auto& b : r.sum) w.sum.insert(w.sum.end(), b.w, b.w + 3);
  for (const auto& b : r.sq) w.sq.insert(w.sq.end(), b.w, b.w + 6);
  w.count = r.count;
  return w;
}

// Extremes: every value has the largest amount a Σx bin takes (m = 2^24 − 1 at s ≡ 31 mod 32: (2^24 − 1)·2^31 in one
// bin), cluster c ≡ 0 (mod 3) all positive at s = 127, c ≡ 1 all negative, c ≡ 2 mixed: with enough rows that the
// sums kernel runs 256 entries a warp item (its bins' bound), on a 132-SM GPU too.
enum class Kind { Normal, Duplicates, KEqualsN, Magnitudes, Extremes };

struct Case {
  std::string name;
  long long n;
  int d, k;
  InType type;
  bool cosine;
  Kind kind;
  bool misaligned = false;  // rows at an address 4 bytes past an allocation (no vector loads)
};

// magnitudes 2^lo … 2^hi (exclusive of 2^(hi+1)), random signs, plus the edge values (all finite in the input type)
float magnitudeValue(std::mt19937_64& g, int lo, int hi, float big) {
  std::uniform_int_distribution<int> e(lo, hi), pick(0, 39);
  std::uniform_int_distribution<std::uint32_t> m(0, (1u << 23) - 1);
  const bool neg = g() & 1;
  float v;
  switch (pick(g)) {
    case 0: v = hi >= 63 ? bitsFloat(0x5f7fffffu) : std::ldexp(1.0f, hi); break;  // largest below 2^64
    case 1: v = std::ldexp(1.0f, std::max(lo, -72)); break;  // (f32: 2^-72, the smallest the grid holds whole)
    case 2: v = 1e-30f; break;                                // below the grid: truncates to 0
    case 3: v = std::ldexp(1.5f, -73); break;                 // truncates to 2^-73 → 2^-96 multiples
    case 4: v = big; break;  // 1e15 (fp16: 6e4, which it holds)
    case 5: v = 0.0f; break;
    case 6: v = 1e-40f; break;  // a denormal
    default: v = std::ldexp(static_cast<float>((1u << 23) | m(g)), e(g) - 23);
  }
  return neg ? -v : v;
}

std::string fmtDouble(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

struct Device {
  void* x = nullptr;  // the allocation
  RowValues rows;
  int* cur = nullptr;
  int* prev = nullptr;
  float* cf = nullptr;
};

void runCase(const Case& cs, std::uint64_t seed) {
  const long long n = cs.n;
  const int d = cs.d, k = cs.k;
  const bool l2 = !cs.cosine;
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.f, 1.f);

  // rows (host floats), labels, centroids
  std::vector<float> x(static_cast<size_t>(n) * d);
  std::vector<int> cur(n);
  std::vector<float> cf(static_cast<size_t>(k) * d);
  if (cs.kind == Kind::KEqualsN) {
    std::iota(cur.begin(), cur.end(), 0);
    std::shuffle(cur.begin(), cur.end(), g);
  } else {
    std::uniform_int_distribution<int> lab(0, k - 1);
    for (auto& l : cur) l = lab(g);
  }
  if (cs.kind == Kind::Duplicates) {  // every row of a cluster is the cluster's pattern
    std::vector<float> pattern(static_cast<size_t>(k) * d);
    for (auto& v : pattern) v = normal(g) * 3.f;
    for (long long i = 0; i < n; ++i)
      std::copy_n(&pattern[static_cast<size_t>(cur[i]) * d], d, &x[static_cast<size_t>(i) * d]);
  } else if (cs.kind == Kind::Magnitudes) {
    const bool f16 = cs.type == InType::F16;
    for (auto& v : x) v = magnitudeValue(g, f16 ? -26 : -110, f16 ? 14 : 63, f16 ? 6e4f : 1e15f);
  } else if (cs.kind == Kind::Extremes) {
    std::uniform_int_distribution<int> quarter(0, 3);
    for (long long i = 0; i < n; ++i)
      for (int j = 0; j < d; ++j) {
        const int c = cur[i] % 3;
        const int sh = c == 2 ? 31 + 32 * quarter(g) : 127;
        const float v = std::ldexp(static_cast<float>((1u << 24) - 1), sh - 96);
        x[i * d + j] = c == 0 || (c == 2 && (g() & 1)) ? v : -v;
      }
  } else {
    for (auto& v : x) v = normal(g);
  }
  if (cs.cosine)  // unit rows, normalized in fp32 (as the engine's prepareRows would)
    for (long long i = 0; i < n; ++i) {
      float s = 0.f;
      for (int j = 0; j < d; ++j) s += x[i * d + j] * x[i * d + j];
      const float inv = 1.f / std::sqrt(s);
      for (int j = 0; j < d; ++j) x[i * d + j] *= inv;
    }
  const std::vector<unsigned char> raw = encodeRows(x, cs.type);  // x now holds the typed values
  for (float v : x)  // the contract's range (a test-data bug would otherwise show as a mismatch)
    if (!(std::fabs(v) < 0x1p64f)) {
      report(cs.name, "test data out of range: " + fmtDouble(v));
      return;
    }

  // centroids: the rows themselves (K = N, duplicates: every row on its centroid), else the fp32 mean of the
  // cluster (unit length for cosine); an empty cluster gets a random one
  {
    std::vector<double> acc(static_cast<size_t>(k) * d, 0.0);
    std::vector<long long> cnt(k, 0), member(k, -1);
    for (long long i = 0; i < n; ++i) {
      ++cnt[cur[i]];
      if (member[cur[i]] < 0) member[cur[i]] = i;
      for (int j = 0; j < d; ++j) acc[static_cast<size_t>(cur[i]) * d + j] += x[i * d + j];
    }
    for (int c = 0; c < k; ++c) {
      for (int j = 0; j < d; ++j) {
        const size_t i = static_cast<size_t>(c) * d + j;
        cf[i] = cnt[c] ? static_cast<float>(acc[i] / cnt[c]) : normal(g);
      }
      if (cs.kind == Kind::Duplicates || cs.kind == Kind::KEqualsN) {
        // the mean of identical rows is the row itself (a sum of equal floats divided by their count can be off
        // by rounding: take a member row directly)
        if (member[c] >= 0) std::copy_n(&x[member[c] * d], d, &cf[static_cast<size_t>(c) * d]);
      } else if (cs.cosine) {
        float s = 0.f;
        for (int j = 0; j < d; ++j) s += cf[c * d + j] * cf[c * d + j];
        const float inv = s > 0 ? 1.f / std::sqrt(s) : 1.f;
        for (int j = 0; j < d; ++j) cf[c * d + j] *= inv;
      }
    }
  }
  const bool onCentroid = cs.kind == Kind::Duplicates || cs.kind == Kind::KEqualsN;

  const auto t0 = std::chrono::steady_clock::now();
  const Ref ref = reference(x, n, d, k, cur, cf, cs.cosine);
  const double refSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // device
  Device dev;
  const size_t bytes = raw.size();
  const size_t off = cs.misaligned ? 4 : 0;
  CK(cudaMalloc(&dev.x, bytes + off));
  CK(cudaMemcpy(static_cast<char*>(dev.x) + off, raw.data(), bytes, cudaMemcpyHostToDevice));
  dev.rows = RowValues{static_cast<char*>(dev.x) + off, cs.type};
  CK(cudaMalloc(&dev.cur, sizeof(int) * n));
  CK(cudaMalloc(&dev.prev, sizeof(int) * n));
  CK(cudaMalloc(&dev.cf, sizeof(float) * cf.size()));
  CK(cudaMemcpy(dev.cur, cur.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dev.cf, cf.data(), sizeof(float) * cf.size(), cudaMemcpyHostToDevice));

  cudaStream_t s0, s1, s2;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  ExactScratch scA, scB;
  allocExactScratch(scA, n, k);
  allocExactScratch(scB, n, k);
  ExactStats st, st2;
  allocExactStats(st, k, d);
  allocExactStats(st2, k, d);
  const std::string base = cs.name;

  // fresh
  zeroExactStats(st, s0);
  exactAddRows(dev.rows, n, d, dev.cur, l2, scA, st, s0);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s0));
  const Words fresh = download(st);
  {
    std::string p = compareWords(fresh, refWords(ref), l2, d);
    if (p.empty() && !l2)
      for (u64 w : fresh.sq)
        if (w) { p = "sq written although wantSq was false"; break; }
    report(base + "/fresh", p.empty() ? p : "gpu vs host: " + p);
  }

  // finish
  {
    double *sums, *inertia;
    long long* counts;
    CK(cudaMalloc(&sums, sizeof(double) * k * d));
    CK(cudaMalloc(&inertia, sizeof(double) * k));
    CK(cudaMalloc(&counts, sizeof(long long) * k));
    exactFinish(st, dev.cf, cs.cosine, sums, counts, inertia, s0);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s0));
    std::vector<double> hs(static_cast<size_t>(k) * d), hi(k);
    std::vector<long long> hc(k);
    CK(cudaMemcpy(hs.data(), sums, sizeof(double) * hs.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hi.data(), inertia, sizeof(double) * k, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc.data(), counts, sizeof(long long) * k, cudaMemcpyDeviceToHost));
    std::string p;
    for (int c = 0; c < k && p.empty(); ++c)
      if (hc[c] != ref.count[c]) p = "counts[" + std::to_string(c) + "] " + std::to_string(hc[c]);
    for (size_t i = 0; i < hs.size() && p.empty(); ++i) {
      const double want = bigToDouble(ref.sum[i], 96);
      if (std::memcmp(&hs[i], &want, 8))
        p = "sums[" + std::to_string(i / d) + "][" + std::to_string(i % d) + "] " + fmtDouble(hs[i]) + " vs " +
            fmtDouble(want);
    }
    // the long-double check only where the grid holds every value whole (no magnitudes below 2^-72)
    const bool ldComparable = cs.kind != Kind::Magnitudes;
    long double total = 0, totalLd = 0;
    for (int c = 0; c < k && p.empty(); ++c) {
      const double want = bigToDouble(ref.inertia[c], 192);
      if (std::memcmp(&hi[c], &want, 8)) {
        p = "inertia[" + std::to_string(c) + "] " + fmtDouble(hi[c]) + " vs exact " + fmtDouble(want);
        break;
      }
      if (onCentroid && hi[c] != 0.0) p = "inertia[" + std::to_string(c) + "] " + fmtDouble(hi[c]) + " (want 0)";
      if (l2 && bigNeg(ref.inertia[c])) p = "host inertia negative";
      if (ldComparable) {
        const long double ld = ref.inertiaLd[c];
        const long double floor = cs.cosine ? 1e-15L * ref.count[c] : 1e-300L;
        if (std::fabs(static_cast<long double>(hi[c]) - ld) > 1e-12L * std::fabs(ld) + floor)
          p = "inertia[" + std::to_string(c) + "] " + fmtDouble(hi[c]) + " vs long double " +
              fmtDouble(static_cast<double>(ld));
      }
      total += hi[c];
      totalLd += ref.inertiaLd[c];
    }
    if (p.empty() && onCentroid && total != 0) p = "total inertia not 0";
    char info[160];
    std::snprintf(info, sizeof info, " (inertia %.6Lg, long double %.6Lg; host reference %.2f s)", total, totalLd,
                  refSeconds);
    report(base + "/finish", p.empty() ? p : p + info);
    CK(cudaFree(sums));
    CK(cudaFree(inertia));
    CK(cudaFree(counts));
  }

  // chunks: odd sizes (one of 1 row), shuffled, alternating two streams and two scratches, one ExactStats
  {
    std::vector<std::pair<long long, long long>> chunks;  // (first, rows)
    std::uniform_int_distribution<long long> len(1, std::max<long long>(1, n / 5));
    long long first = 0;
    bool one = false;
    while (first < n) {
      long long m = one ? len(g) : 1;
      one = true;
      m = std::min(m, n - first);
      chunks.push_back({first, m});
      first += m;
    }
    std::shuffle(chunks.begin(), chunks.end(), g);
    zeroExactStats(st2, s0);
    CK(cudaStreamSynchronize(s0));
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto [f, m] = chunks[i];
      const bool a = i % 2 == 0;
      exactAddRows(dev.rows.rows(f, d), m, d, dev.cur + f, l2, a ? scA : scB, st2, a ? s1 : s2);
    }
    CK(cudaGetLastError());
    const std::string p = compareWords(download(st2), fresh, l2, d);
    report(base + "/chunks", p.empty() ? p : std::to_string(chunks.size()) + " chunks: " + p);
  }

  // moves
  const double fractions[] = {0.0, 0.003, 0.05, 0.5, 1.0};
  for (int fi = 0; fi < 5; ++fi) {
    const double f = fractions[fi];
    std::vector<int> prev = cur;
    std::uniform_real_distribution<double> u(0, 1);
    std::uniform_int_distribution<int> other(1, std::max(1, k - 1));
    long long changed = 0;
    for (long long i = 0; i < n; ++i)
      if (k > 1 && (f >= 1.0 || u(g) < f)) {
        prev[i] = (cur[i] + other(g)) % k;
        ++changed;
      }
    CK(cudaMemcpy(dev.prev, prev.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
    zeroExactStats(st2, s0);
    exactAddRows(dev.rows, n, d, dev.prev, l2, scA, st2, s0);
    CK(cudaStreamSynchronize(s0));
    const Words before = download(st2);
    const bool chunked = fi % 2 == 1;  // in three chunks over two streams
    auto move = [&](const int* from, const int* to) {
      if (!chunked) {
        exactMoveRows(dev.rows, n, d, from, to, l2, scA, st2, s0);
      } else {
        const long long a = n / 3, b = 2 * n / 3 + 1;
        exactMoveRows(dev.rows, a, d, from, to, l2, scA, st2, s1);
        exactMoveRows(dev.rows.rows(a, d), b - a, d, from + a, to + a, l2, scB, st2, s2);
        exactMoveRows(dev.rows.rows(b, d), n - b, d, from + b, to + b, l2, scA, st2, s1);
      }
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
    };
    move(dev.prev, dev.cur);
    std::string p = compareWords(download(st2), fresh, l2, d);
    if (!p.empty()) p = "prev→cur vs fresh: " + p;
    if (p.empty()) {
      move(dev.cur, dev.prev);
      p = compareWords(download(st2), before, l2, d);
      if (!p.empty()) p = "cur→prev vs prev's words: " + p;
    }
    char name[64];
    std::snprintf(name, sizeof name, "/move_%g%%%s", 100 * f, chunked ? "_chunked" : "");
    report(base + name, p.empty() ? p : p + " (" + std::to_string(changed) + " changed)");
  }

  // union
  {
    const long long h = n / 2 + 7 > n ? n / 2 : n / 2 + 7;
    zeroExactStats(st2, s0);
    exactAddRows(dev.rows, h, d, dev.cur, l2, scA, st2, s0);
    ExactStats st3;
    allocExactStats(st3, k, d);
    zeroExactStats(st3, s0);
    exactAddRows(dev.rows.rows(h, d), n - h, d, dev.cur + h, l2, scB, st3, s0);
    addExactStats(st2, st3, s0);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s0));
    report(base + "/union", compareWords(download(st2), fresh, l2, d));
    freeExactStats(st3);
  }

  freeExactStats(st);
  freeExactStats(st2);
  freeExactScratch(scA);
  freeExactScratch(scB);
  CK(cudaStreamDestroy(s0));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s2));
  CK(cudaFree(dev.x));
  CK(cudaFree(dev.cur));
  CK(cudaFree(dev.prev));
  CK(cudaFree(dev.cf));
}

// ---------------------------------------------------------------------------------------------------------------
// exactFinish's rounding at ties, and its centroids out of range.

void finishEdges() {
  // cluster 0: three rows whose column sums sit on a tie or just past one (fp64 has 53 bits)
  //   col 0: 2^53 + 1            tie → even: 2^53
  //   col 1: 2^53 + 3            tie → even: 2^53 + 4
  //   col 2: 2^53 + 1 + 2^-90    past the tie: 2^53 + 2
  //   col 3: −2^53 − 1           tie → even: −2^53
  // cluster 1: empty, with an infinite centroid (inertia 0, not NaN); cluster 2: one row, a centroid value 2^64
  // (beyond what the statistics hold: inertia NaN)
  const int d = 4, k = 3;
  const float t53 = 0x1p53f;
  const std::vector<float> x = {t53, t53, t53, -t53, 1, 3, 1, -1, 0, 0, 0x1p-90f, 0, 1, 2, 3, 4};
  const std::vector<int> labels = {0, 0, 0, 2};
  const std::vector<float> cf = {t53, t53, t53, -t53, INFINITY, 0, 0, 0, 0x1p64f, 2, 3, 4};
  const long long n = 4;
  void* dx;
  int* dl;
  float* dcf;
  double *sums, *inertia;
  long long* counts;
  CK(cudaMalloc(&dx, sizeof(float) * x.size()));
  CK(cudaMalloc(&dl, sizeof(int) * n));
  CK(cudaMalloc(&dcf, sizeof(float) * cf.size()));
  CK(cudaMalloc(&sums, sizeof(double) * k * d));
  CK(cudaMalloc(&inertia, sizeof(double) * k));
  CK(cudaMalloc(&counts, sizeof(long long) * k));
  CK(cudaMemcpy(dx, x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dl, labels.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dcf, cf.data(), sizeof(float) * cf.size(), cudaMemcpyHostToDevice));
  ExactScratch sc;
  allocExactScratch(sc, n, k);
  ExactStats st;
  allocExactStats(st, k, d);
  zeroExactStats(st, 0);
  exactAddRows(RowValues{dx, InType::F32}, n, d, dl, true, sc, st, 0);
  exactFinish(st, dcf, false, sums, counts, inertia, 0);
  CK(cudaGetLastError());
  std::vector<double> hs(k * d), hi(k);
  std::vector<long long> hc(k);
  CK(cudaMemcpy(hs.data(), sums, sizeof(double) * hs.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hi.data(), inertia, sizeof(double) * k, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hc.data(), counts, sizeof(long long) * k, cudaMemcpyDeviceToHost));
  const double t = 0x1p53;
  const double want[4] = {t, t + 4, t + 2, -t};
  std::string p;
  for (int j = 0; j < 4; ++j)
    if (hs[j] != want[j]) p += " sums[0][" + std::to_string(j) + "] " + fmtDouble(hs[j]) + " want " + fmtDouble(want[j]);
  for (int j = 0; j < 4; ++j) {  // the host's rounding agrees
    Big<3> b;
    for (long long i = 0; i < 3; ++i) bigAdd(b, gridInt(x[i * d + j]));
    if (bigToDouble(b, 96) != want[j]) p += " host rounding of col " + std::to_string(j);
  }
  if (hc[0] != 3 || hc[1] != 0 || hc[2] != 1) p += " counts";
  const std::vector<float> x0(x.begin(), x.begin() + 3 * d), c0(cf.begin(), cf.begin() + d);
  const double in0 = bigToDouble(reference(x0, 3, d, 1, {0, 0, 0}, c0, false).inertia[0], 192);
  if (hi[0] != in0) p += " inertia[0] " + fmtDouble(hi[0]) + " want " + fmtDouble(in0);
  if (hi[1] != 0.0) p += " inertia[1] (empty, infinite centroid) " + fmtDouble(hi[1]) + " want 0";
  if (!std::isnan(hi[2])) p += " inertia[2] (centroid 2^64) " + fmtDouble(hi[2]) + " want NaN";
  for (int j = 0; j < 4; ++j)
    if (hs[4 + j] != 0.0 || std::signbit(hs[4 + j])) p += " sums[1] not +0";
  report("finish/rounding_and_range", p);
  freeExactStats(st);
  freeExactScratch(sc);
  CK(cudaFree(dx));
  CK(cudaFree(dl));
  CK(cudaFree(dcf));
  CK(cudaFree(sums));
  CK(cudaFree(inertia));
  CK(cudaFree(counts));
}

// ---------------------------------------------------------------------------------------------------------------
// bench

__device__ std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fillNormal(float* x, long long n, std::uint64_t salt) {  // Box–Muller on a hash
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float u1 = (hash32(salt + 2 * i) + 1.0f) * 2.3283064e-10f, u2 = hash32(salt + 2 * i + 1) * 2.3283064e-10f;
    x[i] = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
  }
}

template <class F>
float medianMs(F&& f, cudaStream_t s, const std::function<void()>& before = [] {}) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 10; ++r) {
    before();
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) t.push_back(ms);  // the first run warms up
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int bench(long long n, int d, int k, double frac) {
  if (!exactSumsFits(n, d, k)) {
    std::fprintf(stderr, "shape does not fit the exact path (rows < 2^31, K·D ≤ 2^26)\n");
    return 2;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x, *cf;
  int *cur, *prev;
  CK(cudaMalloc(&x, sizeof(float) * n * d));
  CK(cudaMalloc(&cf, sizeof(float) * k * d));
  CK(cudaMalloc(&cur, sizeof(int) * n));
  CK(cudaMalloc(&prev, sizeof(int) * n));
  fillNormal<<<4096, 256, 0, s>>>(x, n * d, 0);
  fillNormal<<<1024, 256, 0, s>>>(cf, static_cast<long long>(k) * d, 0x5eed00000000ull);
  std::mt19937_64 g(12345);
  std::vector<int> hc(n), hp(n);
  std::uniform_int_distribution<int> lab(0, k - 1), other(1, std::max(1, k - 1));
  std::uniform_real_distribution<double> u(0, 1);
  long long changed = 0;
  for (long long i = 0; i < n; ++i) {
    hc[i] = lab(g);
    hp[i] = hc[i];
    if (k > 1 && u(g) < frac) {
      hp[i] = (hc[i] + other(g)) % k;
      ++changed;
    }
  }
  CK(cudaMemcpy(cur, hc.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(prev, hp.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  ExactScratch sc;
  allocExactScratch(sc, n, k);
  ExactStats st, saved;
  allocExactStats(st, k, d);
  allocExactStats(saved, k, d);
  const RowValues rows{x, InType::F32};
  const std::size_t statsBytes = exactStatsBytes(k, d);

  const float addMs = medianMs([&] { exactAddRows(rows, n, d, cur, true, sc, st, s); }, s,
                               [&] { zeroExactStats(st, s); });
  zeroExactStats(saved, s);
  exactAddRows(rows, n, d, prev, true, sc, saved, s);
  // without Σ‖x‖² (cosine's case): what the squares cost
  const float addNoSqMs = medianMs([&] { exactAddRows(rows, n, d, cur, false, sc, st, s); }, s,
                                   [&] { zeroExactStats(st, s); });
  const float moveNoSqMs = medianMs([&] { exactMoveRows(rows, n, d, prev, cur, false, sc, st, s); }, s, [&] {
    CK(cudaMemcpyAsync(st.sum, saved.sum, statsBytes, cudaMemcpyDeviceToDevice, s));
  });
  const float moveMs = medianMs([&] { exactMoveRows(rows, n, d, prev, cur, true, sc, st, s); }, s, [&] {
    CK(cudaMemcpyAsync(st.sum, saved.sum, statsBytes, cudaMemcpyDeviceToDevice, s));  // one allocation, sum first
  });
  double *sums, *inertia;
  long long* counts;
  CK(cudaMalloc(&sums, sizeof(double) * k * d));
  CK(cudaMalloc(&inertia, sizeof(double) * k));
  CK(cudaMalloc(&counts, sizeof(long long) * k));
  const float finishMs = medianMs([&] { exactFinish(st, cf, false, sums, counts, inertia, s); }, s);
  // st holds prev's statistics moved to cur: the same words as a fresh add of cur
  zeroExactStats(saved, s);
  exactAddRows(rows, n, d, cur, true, sc, saved, s);
  CK(cudaStreamSynchronize(s));
  const bool same = compareWords(download(st), download(saved), true, d).empty();
  std::printf("EXACT_SUMS_BENCH n=%lld d=%d k=%d changed%%=%.3f add_ms=%.3f move_ms=%.3f finish_ms=%.3f "
              "add_nosq_ms=%.3f move_nosq_ms=%.3f move_equals_fresh=%d\n",
              n, d, k, 100.0 * changed / n, addMs, moveMs, finishMs, addNoSqMs, moveNoSqMs, same ? 1 : 0);
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) {
    if (argc < 6) {
      std::fprintf(stderr, "usage: exact_sums_check bench N D K changedFraction\n");
      return 2;
    }
    return bench(std::atoll(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atof(argv[5]));
  }
  std::uint64_t seed = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  if (argc >= 3 && std::strcmp(argv[1], "seed") == 0) seed = std::strtoull(argv[2], nullptr, 10);
  else if (argc >= 2) {
    std::fprintf(stderr, "usage: exact_sums_check [seed S] | bench N D K changedFraction\n");
    return 2;
  }
  std::printf("EXACT_SUMS_CHECK seed=%llu\n", static_cast<unsigned long long>(seed));

  const InType F32 = InType::F32, F16 = InType::F16, BF16 = InType::BF16;
  const Kind N = Kind::Normal, DUP = Kind::Duplicates, KN = Kind::KEqualsN, MAG = Kind::Magnitudes,
             EXT = Kind::Extremes;
  std::vector<Case> cases = {
      {"f32_d1_k7", 50001, 1, 7, F32, false, N},
      {"f32_d3_k1", 100003, 3, 1, F32, false, N},
      {"f32_d17_k65536", 200003, 17, 65536, F32, false, N},
      {"f32_d50_k100", 40001, 50, 100, F32, false, N},
      {"bf16_d64_k7", 30001, 64, 7, BF16, false, N},
      {"f32_d100_k1000_misaligned", 60001, 100, 1000, F32, false, N, true},
      {"f16_d128_k7", 50001, 128, 7, F16, false, N},
      {"bf16_d128_k1000", 30001, 128, 1000, BF16, false, N},
      {"f32_d256_k1000_cosine", 20001, 256, 1000, F32, true, N},
      {"f32_d257_k7", 10007, 257, 7, F32, false, N},
      {"f16_d257_k1000", 8009, 257, 1000, F16, false, N},
      {"bf16_d1000_k7", 5003, 1000, 7, BF16, false, N},
      {"f32_d1000_k65_cosine", 5003, 1000, 65, F32, true, N},
      {"f32_d4096_k7", 5003, 4096, 7, F32, false, N},
      {"f16_d4096_k1", 2001, 4096, 1, F16, false, N},
      {"f32_d17_k7_cosine", 50001, 17, 7, F32, true, N},
      {"f32_d100_kN", 5003, 100, 5003, F32, false, KN},
      {"bf16_d3_kN", 70001, 3, 70001, BF16, false, KN},
      {"f32_d128_k7_duplicates", 20001, 128, 7, F32, false, DUP},
      {"f16_d17_k1_duplicates", 30001, 17, 1, F16, false, DUP},
      {"bf16_d300_k50_duplicates", 9001, 300, 50, BF16, false, DUP},
      {"f32_d3_k1_magnitudes", 200003, 3, 1, F32, false, MAG},
      {"f32_d17_k7_magnitudes", 50001, 17, 7, F32, false, MAG},
      {"bf16_d100_k1000_magnitudes", 30001, 100, 1000, BF16, false, MAG},
      {"f16_d33_k9_magnitudes", 20001, 33, 9, F16, false, MAG},
      {"f32_d260_k3_magnitudes", 8009, 260, 3, F32, false, MAG},
      {"f32_d3_k3_extremes", 8000001, 3, 3, F32, false, EXT},
      {"bf16_d40_k3_extremes", 50001, 40, 3, BF16, false, EXT},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!exactSumsFits(cases[i].n, cases[i].d, cases[i].k)) {
      report(cases[i].name, "exactSumsFits refuses the shape");
      continue;
    }
    runCase(cases[i], seed + 1000003ull * i);
  }
  finishEdges();
  // exactSumsFits at its edges
  {
    std::string p;
    if (!exactSumsFits((1ll << 31) - 1, 1, 1)) p += " rows 2^31-1 refused;";
    if (exactSumsFits(1ll << 31, 1, 1)) p += " rows 2^31 taken;";
    if (!exactSumsFits(10, 4096, 1 << 14)) p += " K·D = 2^26 refused;";
    if (exactSumsFits(10, 4096, (1 << 14) + 1)) p += " K·D > 2^26 taken;";
    if (exactSumsFits(10, 0, 1) || exactSumsFits(10, 1, 0)) p += " empty shape taken;";
    report("fits", p);
  }
  std::printf("EXACT_SUMS_CHECK failures=%d\n", failures);
  return failures ? 1 : 0;
}
