// Exact per-cluster statistics (exact_sums.cuh): Σx̃ in 192-bit and Σ‖x̃‖² in 384-bit two's complement integers, a count,
// kept across passes and brought up to date by the rows whose label changed (cuda/NOTES.md "Exact statistics";
// `exact_sums_check bench` times this code): any D (1…4096), any K, fp32/fp16/bf16 rows, Σ‖x̃‖², and a sort that
// never waits on the host.
//
// The grid. A value x (fp16/bf16 widened to fp32 exactly) with biased exponent ex and 24-bit significand m (0 for
// ex = 0: denormals are far below the grid) is m·2^(ex−150); on the 2^-96 grid that is the integer m·2^sh, sh = ex − 54.
// sh ≥ 0: M = m·2^s with s = sh, exact. sh < 0: M = m >> −sh (truncation toward zero: |x| < 2^-72 loses bits), s = 0.
// The caller guarantees |x| < 2^64, so ex ≤ 190 and s ≤ 136. Every place below keeps the pair (m ≤ 24 bits, s) instead
// of the wide M.
//
// One call, on one stream, no host synchronization:
//   1. the entries sorted by cluster. A fresh add: cub's radix sort of (label, row) (n is known on the host; for all
//      the rows of a pass it beat the counting sort's contended atomics, 5.4 against 6.9 ms at 10M×128×1024 on the
//      H200). A move: a counting sort, as only the device knows how many rows changed — histogram (warp-aggregated
//      atomics: one per distinct label in a warp), in-place exclusive scan over K + 1 counters (the last one ends as
//      the number of entries), scatter (again one atomic per distinct label in a warp). The order inside a cluster
//      is arbitrary: integer sums commute, so it cannot change a bit.
//   2. runSumsKernel, a fixed grid (SMs × resident blocks; the entry count is on the device): each warp takes
//      (run of sorted entries, tile of ≤ 256 columns) items. A lane owns V ≤ 8 adjacent columns of the tile and
//      adds each entry's values as signed 64-bit amounts into its own shared-memory bins; at a cluster change and at
//      the end of the run it folds the bins into 192-bit (Σx) and 384-bit (Σx², one per lane, warp-reduced) integers
//      and adds them to the statistics with 64-bit atomics that carry between words. Every global update is atomic,
//      so callers on several streams (each with its own ExactScratch) may add into the same ExactStats at once.
//   3. exactFinish (once a pass): one warp per cluster turns the integers into fp64 sums (correctly rounded) and an
//      exact inertia (384-bit integers, rounded once).
// bench/gpu/tools/exact_sums_check.cu checks all of it bit for bit against host big-integer references.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <new>

#include "common.cuh"
#include "device_facts.cuh"
#include "exact_sums.cuh"

namespace kmfleet {
namespace cuda {
namespace {

using u64 = unsigned long long;

constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned kSubtract = 0x80000000u;  // entry bit 31: the row leaves the cluster

// Σx bins: 32-bit aligned (bin j holds amounts of weight 2^(32j) on the 2^-96 grid). A value's amount is its m
// shifted by s & 31 (< 2^24 · 2^31 = 2^55) into bin s >> 5 ≤ 136 >> 5 = 4, so five bins reach every in-range value
// (top bit < 4·32 + 55 = 183). A bin takes at most one amount per entry of a run (≤ 256 entries) before it is folded:
// |bin| ≤ 256 · (2^55 − 1) < 2^63, no overflow.
constexpr int kSumBins = 5;
// Σx² bins: 16-bit aligned (bin j: weight 2^(16j) on the 2^-192 grid). x̃² = mm·2^(2s), mm = m² < 2^48, split into
// lo = mm mod 2^24 at bit 2s and hi = mm >> 24 at bit 2s + 24, each shifted by its position & 15: amounts < 2^39.
// In range 2s + 24 ≤ 296, so bins 0…18 (top bit < 18·16 + 39 = 327 < 384). A lane adds 2 amounts a column, at most
// 8 columns an entry, 256 entries a run: |bin| < 4096 · 2^39 = 2^51.
constexpr int kSqBins = 19;
// Out-of-range values (|x| ≥ 2^64, inf, nan: prepareRows' RowFlags::beyondExact rejects them) are clamped into the
// last bin: wrong statistics, but never a write outside the lane's bins.

constexpr int kTileColumns = 256;  // columns of a warp's item: 32 lanes × V ≤ 8
constexpr int kSumThreads = 128;   // runSumsKernel block: 4 warps, bins (5·V + 19)·8 B a thread (≤ 59 KB at V = 8)
constexpr int kMaxRun = 256;       // entries of a run: the bins' bound above
constexpr int kMinRun = 32;
constexpr int kItemsPerWarp = 8;   // runs are shortened (down to 32) until every warp of the grid has ~8 items
constexpr int kSortThreads = 256;
constexpr int kFinishThreads = 256;  // 8 clusters a block

// ---------------------------------------------------------------------------------------------------------------
// Wide integers: W 64-bit words, w[0] lowest, two's complement, arithmetic mod 2^(64W). The statistics are bounded
// (exact_sums.cuh: |Σ| < 2^191 grid units, Σx̃² < 2^363), so wrapping in intermediate results cancels out.

template <int W>
__device__ __forceinline__ void addWide(u64 (&a)[W], const u64 (&b)[W]) {
  u64 carry = 0;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const u64 t = a[i] + carry;
    const u64 c1 = t < carry;  // a[i] = 2^64 − 1 and a carry in: t = 0, then t + b[i] cannot carry again
    a[i] = t + b[i];
    carry = c1 + (a[i] < b[i]);
  }
}

// a −= b: a + ~b + 1
template <int W>
__device__ __forceinline__ void subWide(u64 (&a)[W], const u64 (&b)[W]) {
  u64 carry = 1;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const u64 nb = ~b[i];
    const u64 t = a[i] + carry;
    const u64 c1 = t < carry;
    a[i] = t + nb;
    carry = c1 + (a[i] < nb);
  }
}

template <int W>
__device__ __forceinline__ bool isZero(const u64 (&a)[W]) {
  u64 o = 0;
#pragma unroll
  for (int i = 0; i < W; ++i) o |= a[i];
  return o == 0;
}

// a += b·2^bit for a signed 64-bit b (sign-extended to W words). `bit` is a compile-time constant at every call (an
// unrolled bin index), so the word selection and shifts below fold away. Word i of (B << (64q + r)), B the
// sign-extended b = [b, ext, ext, …], is (B[i−q] << r) | (B[i−q−1] >> (64 − r)), with B[k < 0] = 0.
template <int W>
__device__ __forceinline__ void addShifted(u64 (&a)[W], long long b, int bit) {
  const u64 ext = b < 0 ? ~0ull : 0ull;
  const int q = bit >> 6, r = bit & 63;
  u64 t[W];
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const u64 cur = i < q ? 0ull : (i == q ? static_cast<u64>(b) : ext);
    const u64 prev = i - 1 < q ? 0ull : (i - 1 == q ? static_cast<u64>(b) : ext);
    t[i] = (cur << r) | (r ? prev >> (64 - r) : 0ull);
  }
  addWide(a, t);
}

// out = in << sh (mod 2^384) for a runtime sh ≥ 0 (sh ≥ 384 gives 0). The word selections are unrolled compares
// rather than indexing, so the arrays stay in registers.
template <int N>
__device__ __forceinline__ void shiftInto6(const u64 (&in)[N], int sh, u64 (&out)[6]) {
  const int q = sh >> 6, r = sh & 63;
#pragma unroll
  for (int i = 0; i < 6; ++i) {
    u64 hi = 0, lo = 0;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (t + q == i) hi = in[t];      // in[t] lands in word t + q …
      if (t + q + 1 == i) lo = in[t];  // … and its top r bits spill into word t + q + 1
    }
    out[i] = (hi << r) | (r ? lo >> (64 - r) : 0ull);
  }
}

// a += b with 64-bit atomics. Each atomicAdd reports the word's old value, so the addition that wraps a word (and only
// that one) sees it and forwards 1 into the next word: the carries are counted exactly once whatever other threads
// do in between, and the final words are the exact sum mod 2^(64W). Words with nothing to add are skipped.
template <int W>
__device__ __forceinline__ void atomicAddWide(u64* a, const u64 (&b)[W]) {
  u64 carry = 0;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const u64 add = b[i] + carry;
    u64 next = add < carry;  // b[i] = 2^64 − 1 plus a carry: the word receives 0 and the carry moves on
    if (add != 0) {
      const u64 old = atomicAdd(a + i, add);
      next += old + add < old;  // (next was 0: add ≠ 0 rules out the wrap above)
    }
    carry = next;
  }
}

template <int W>
__device__ __forceinline__ void warpSumWide(u64 (&a)[W]) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    u64 o[W];
#pragma unroll
    for (int i = 0; i < W; ++i) o[i] = __shfl_down_sync(kFull, a[i], off);
    addWide(a, o);
  }
}

__device__ __forceinline__ double pow2(int e) {  // 2^e, −1022 ≤ e ≤ 1023: exact
  return __longlong_as_double(static_cast<long long>(e + 1023) << 52);
}

// The fp64 nearest (ties to even) to v·2^-gridBits, v a W-word two's complement integer. The top 64 bits of |v| from
// its highest set bit, with every lower bit OR'ed into bit 0 (sticky): a 64-bit integer keeps 11 bits below the 53 of
// the result, so __ull2double_rn sees the round bit and whether anything lies below it, which is all that RNE needs
// (one rounding, from the exact value). The power-of-two scaling is exact: |v|·2^-gridBits is in [2^-192, 2^192].
template <int W>
__device__ __forceinline__ double wideToDouble(const u64 (&v)[W], int gridBits) {
  const bool neg = static_cast<long long>(v[W - 1]) < 0;
  u64 a[W];
  u64 carry = neg ? 1ull : 0ull;  // |v| = ~v + 1: the +1 carries through words that wrap to 0
#pragma unroll
  for (int i = 0; i < W; ++i) {
    a[i] = (neg ? ~v[i] : v[i]) + carry;
    carry = carry && a[i] == 0;
  }
  // From the top: the highest nonzero word, the word below it, and whether anything further down is nonzero. (A
  // sequential scan with selects: picking words by a computed index made the compiler put `a` in local memory.)
  int top = -1;
  u64 hi = 0, next = 0;
  bool sticky = false;
#pragma unroll
  for (int i = W - 1; i >= 0; --i) {
    if (top >= 0) {
      if (top == i + 1) next = a[i];
      else sticky |= a[i] != 0;
    } else if (a[i] != 0) {
      top = i;
      hi = a[i];
    }
  }
  if (top < 0) return 0.0;
  // window: bits [64·top − lz, 64·top − lz + 64) of |v|; for top = 0, next = 0 and the window holds |v| exactly
  const int lz = __clzll(static_cast<long long>(hi));
  u64 top64 = (hi << lz) | (lz ? next >> (64 - lz) : 0ull);
  sticky |= (next << lz) != 0;  // the bits of `next` below the window
  top64 |= sticky ? 1ull : 0ull;
  const double mag = __ull2double_rn(top64) * pow2(64 * top - lz - gridBits);
  return neg ? -mag : mag;
}

// x on the grid: x̃ = ±m·2^s·2^-96, m < 2^24 (see the header comment).
struct GridValue {
  unsigned m;
  int s;
  bool neg;
};
__device__ __forceinline__ GridValue onGrid(float x) {
  const unsigned b = __float_as_uint(x);
  const int ex = (b >> 23) & 0xff;
  const unsigned mant = ex ? (b & 0x7fffffu) | 0x800000u : 0u;
  const int sh = ex - 54;  // ex − 127 − 23 + 96
  GridValue g;
  g.m = sh >= 0 ? mant : mant >> min(-sh, 31);  // mant < 2^24: a shift by 24…31 already gives 0
  g.s = sh >= 0 ? sh : 0;
  g.neg = b >> 31;
  return g;
}

// |x| ≥ 2^64 (and inf, nan): biased exponent ≥ 127 + 64
__device__ __forceinline__ bool outOfRange(float x) { return ((__float_as_uint(x) >> 23) & 0xff) >= 191; }

// ---------------------------------------------------------------------------------------------------------------
// Counting sort of a move's entries by cluster (a fresh add sorts its rows with cub's radix sort instead: exactAddRows).

// f(has, key, entry) twice for each of a warp's rows (every lane calls it: warp-uniform, so f may use full-warp
// intrinsics): + at cur and − at prev for a row whose label changed. Labels outside [0, K) — which the contract rules
// out — are skipped, the same in both passes, so the sort stays consistent and never writes out of bounds.
template <typename F>
__device__ __forceinline__ void forEachEntry(const int* cur, const int* prev, long long n, int k, F&& f) {
  const int lane = threadIdx.x & 31;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long base = static_cast<long long>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31); base < n;
       base += stride) {
    const long long r = base + lane;
    const bool in = r < n;
    const int to = in ? cur[r] : 0;
    const bool toOk = static_cast<unsigned>(to) < static_cast<unsigned>(k);
    const int from = in ? prev[r] : 0;
    const bool changed = in && from != to;
    f(changed && toOk, to, static_cast<unsigned>(r));
    f(changed && static_cast<unsigned>(from) < static_cast<unsigned>(k), from, static_cast<unsigned>(r) | kSubtract);
  }
}

// Lanes with the same key share one atomic (K = 1 with 10M rows would otherwise be 10M atomics on one counter).
__global__ void countEntriesKernel(const int* cur, const int* prev, long long n, int k, unsigned* counts) {
  const int lane = threadIdx.x & 31;
  forEachEntry(cur, prev, n, k, [&](bool has, int key, unsigned) {
    const unsigned mask = __ballot_sync(kFull, has);
    if (has) {
      const unsigned group = __match_any_sync(mask, key);
      if (lane == __ffs(group) - 1) atomicAdd(counts + key, static_cast<unsigned>(__popc(group)));
    }
  });
}

// cursor: the exclusive scan of the counts. The group's leader reserves the group's slots; each lane takes the slot of
// its rank within the group. cursor[K] (never incremented) is the number of entries.
__global__ void scatterEntriesKernel(const int* cur, const int* prev, long long n, int k, unsigned* cursor, int* keys,
                                     unsigned* entries, unsigned* total) {
  const int lane = threadIdx.x & 31;
  if (blockIdx.x == 0 && threadIdx.x == 0) *total = cursor[k];
  forEachEntry(cur, prev, n, k, [&](bool has, int key, unsigned entry) {
    const unsigned mask = __ballot_sync(kFull, has);
    if (has) {
      const unsigned group = __match_any_sync(mask, key);
      const int leader = __ffs(group) - 1;
      unsigned pos = 0;
      if (lane == leader) pos = atomicAdd(cursor + key, static_cast<unsigned>(__popc(group)));
      pos = __shfl_sync(mask, pos, leader) + __popc(group & ((1u << lane) - 1));
      keys[pos] = key;
      entries[pos] = entry;
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// The sums over sorted entries.

// Items (run, tile), run-major, taken by the warps in turn. A lane holds columns col0 … col0 + V − 1 of the tile;
// its bins live in shared memory at [bin][v][thread] (consecutive lanes in consecutive words, and blockDim a multiple
// of 32, so a warp's bin accesses never conflict whatever bin each lane picks).
template <InType IN, int V, bool SQ>
__global__ void __launch_bounds__(kSumThreads)
    runSumsKernel(const void* x, int d, int tiles, bool vec, const int* keys, const unsigned* entries,
                  const unsigned* total, u64* sum, u64* sq, long long* count) {
  extern __shared__ long long bins[];
  const int stride = blockDim.x;
  long long* sumBin = bins + threadIdx.x;                                    // [(j·V + v)·stride]
  long long* sqBin = bins + static_cast<size_t>(kSumBins) * V * stride + threadIdx.x;  // [j·stride]
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < kSumBins * V; ++j) sumBin[j * stride] = 0;
  if constexpr (SQ)
#pragma unroll
    for (int j = 0; j < kSqBins; ++j) sqBin[j * stride] = 0;

  const long long n = *total;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x >> 5);
  // Long runs fold and flush less often (a fresh add: 256); short ones spread few entries (a move's changed rows)
  // over more warps. The probe measured 256 and 32 best for those two; this picks between them from the count.
  int run = kMaxRun;
  while (run > kMinRun && ((n + run - 1) / run) * tiles < kItemsPerWarp * warps) run >>= 1;
  const long long items = (n + run - 1) / run * tiles;

  for (long long item = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; item < items;
       item += warps) {
    const long long r = item / tiles;
    const int tile = static_cast<int>(item - r * tiles);
    const long long e0 = r * run, e1 = min(n, e0 + run);
    const int col0 = tile * kTileColumns + lane * V;

    // The bins of the entries since the last flush (all of cluster c) into the statistics of c.
    auto flush = [&](int c, int net) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        u64 w[3] = {0, 0, 0};
#pragma unroll
        for (int j = 0; j < kSumBins; ++j) {
          long long& b = sumBin[(j * V + v) * stride];
          addShifted(w, b, 32 * j);
          b = 0;
        }
        // (columns past D only ever received zeros)
        if (col0 + v < d && !isZero(w)) atomicAddWide(sum + (static_cast<size_t>(c) * d + col0 + v) * 3, w);
      }
      if constexpr (SQ) {
        u64 w[6] = {0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < kSqBins; ++j) {
          long long& b = sqBin[j * stride];
          addShifted(w, b, 16 * j);
          b = 0;
        }
        warpSumWide(w);  // one 384-bit atomic a flush instead of 32
        if (lane == 0 && !isZero(w)) atomicAddWide(sq + static_cast<size_t>(c) * 6, w);
      }
      // the rows, once (tile 0): ±1 an entry, summed over the flush
      if (tile == 0 && lane == 0 && net != 0)
        atomicAdd(reinterpret_cast<u64*>(count + c), static_cast<u64>(static_cast<long long>(net)));
    };

    int c = keys[e0];
    int net = 0;
    for (long long base = e0; base < e1; base += 32) {
      // 32 entries read at once, one a lane, then handed round by shuffles
      const int m = static_cast<int>(min(32ll, e1 - base));
      int myKey = 0;
      unsigned myEntry = 0;
      if (lane < m) {
        myKey = keys[base + lane];
        myEntry = entries[base + lane];
      }
      for (int t = 0; t < m; ++t) {
        const int ce = __shfl_sync(kFull, myKey, t);
        const unsigned en = __shfl_sync(kFull, myEntry, t);
        if (ce != c) {
          flush(c, net);
          c = ce;
          net = 0;
        }
        const bool sub = en & kSubtract;
        net += sub ? -1 : 1;
        const size_t row = static_cast<size_t>(en & ~kSubtract) * d + col0;
        float val[V];
        bool loaded = false;
        if constexpr (V >= 4) {
          if (vec) {  // D % 4 == 0 and aligned rows: a group of 4 is wholly inside D or wholly past it
#pragma unroll
            for (int v0 = 0; v0 < V; v0 += 4) {
              if (col0 + v0 < d) {
                loadValues<IN, 4>(x, row + v0, val + v0);
              } else {
#pragma unroll
                for (int v = 0; v < 4; ++v) val[v0 + v] = 0.f;
              }
            }
            loaded = true;
          }
        }
        if (!loaded)
#pragma unroll
          for (int v = 0; v < V; ++v) val[v] = col0 + v < d ? loadValue<IN>(x, row + v) : 0.f;

#pragma unroll
        for (int v = 0; v < V; ++v) {
          const GridValue g = onGrid(val[v]);
          // Σx: ±m·2^s = ±(m << (s & 31))·2^(32·(s >> 5)); negated when the value or the entry (not both) is negative
          const long long a = static_cast<long long>(g.m) << (g.s & 31);
          sumBin[(min(g.s >> 5, kSumBins - 1) * V + v) * stride] += (g.neg != sub) ? -a : a;
          if constexpr (SQ) {
            // Σx²: mm·2^(2s) as lo·2^(2s) + hi·2^(2s + 24); (2s + 24) & 15 = (2s + 8) & 15
            const u64 mm = static_cast<u64>(g.m) * g.m;
            const int p = 2 * g.s;
            const long long lo = static_cast<long long>(mm & 0xffffffull) << (p & 15);
            const long long hi = static_cast<long long>(mm >> 24) << ((p + 8) & 15);
            sqBin[min(p >> 4, kSqBins - 1) * stride] += sub ? -lo : lo;
            sqBin[min((p + 24) >> 4, kSqBins - 1) * stride] += sub ? -hi : hi;
          }
        }
      }
    }
    flush(c, net);
  }
}

template <InType IN, int V, bool SQ>
void launchRunSums(RowValues x, int d, int tiles, bool vec, std::int64_t maxEntries, const ExactScratch& a,
                   const ExactStats& s, cudaStream_t st) {
  auto kernel = runSumsKernel<IN, V, SQ>;
  const std::size_t smem = static_cast<std::size_t>(kSumBins * V + (SQ ? kSqBins : 0)) * kSumThreads * sizeof(long long);
  allowDynamicSmem(reinterpret_cast<const void*>(kernel), smem);  // before the occupancy query, which honours it
  const int perSm = residentBlocksPerSm(reinterpret_cast<const void*>(kernel), kSumThreads, smem);
  // Persistent: every resident block, no more (the entry count is on the device); fewer when even the most entries
  // this call can have would not give each warp an item.
  const std::int64_t maxItems = (maxEntries + kMinRun - 1) / kMinRun * tiles;
  const std::int64_t blocks =
      std::min<std::int64_t>(static_cast<std::int64_t>(currentDeviceFacts().sms) * perSm, (maxItems + 3) / 4);
  if (blocks <= 0) return;
  kernel<<<static_cast<unsigned>(blocks), kSumThreads, smem, st>>>(x.p, d, tiles, vec, a.keys, a.entries, a.total,
                                                                   s.sum, s.sq, s.count);
}

void runSums(RowValues x, int d, std::int64_t maxEntries, bool wantSq, const ExactScratch& a, const ExactStats& s,
             cudaStream_t st) {
  const int dt = std::min(d, kTileColumns);
  const int v = dt <= 32 ? 1 : dt <= 64 ? 2 : dt <= 128 ? 4 : 8;
  const int tiles = (d + 32 * v - 1) / (32 * v);
  const std::uintptr_t align = x.type == InType::F32 ? 16 : 8;  // a float4, or 4 16-bit values (uint2)
  const bool vec = v >= 4 && d % 4 == 0 && reinterpret_cast<std::uintptr_t>(x.p) % align == 0;
  withValueType(x.type, [&](auto inTag) {
    constexpr InType IN = decltype(inTag)::value;
    auto go = [&](auto vTag) {
      constexpr int V = decltype(vTag)::value;
      if (wantSq) launchRunSums<IN, V, true>(x, d, tiles, vec, maxEntries, a, s, st);
      else launchRunSums<IN, V, false>(x, d, tiles, vec, maxEntries, a, s, st);
    };
    switch (v) {
      case 1: go(std::integral_constant<int, 1>{}); break;
      case 2: go(std::integral_constant<int, 2>{}); break;
      case 4: go(std::integral_constant<int, 4>{}); break;
      default: go(std::integral_constant<int, 8>{}); break;
    }
  });
}

unsigned sortBlocks(std::int64_t n) {
  return static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((n + kSortThreads - 1) / kSortThreads, currentDeviceFacts().sms * 8)));
}

// The counting sort of a move's entries into a.keys / a.entries, their number (known only here) into *a.total.
void sortMoveEntries(const int* cur, const int* prev, std::int64_t n, ExactScratch& a, cudaStream_t st) {
  const int k = a.k;
  cudaMemsetAsync(a.clusterStart, 0, (static_cast<std::size_t>(k) + 1) * sizeof(unsigned), st);
  const unsigned blocks = sortBlocks(n);
  countEntriesKernel<<<blocks, kSortThreads, 0, st>>>(cur, prev, n, k, a.clusterStart);
  std::size_t bytes = a.scanTempBytes;
  cub::DeviceScan::ExclusiveSum(a.scanTemp, bytes, a.clusterStart, a.clusterStart, k + 1, st);  // in place
  scatterEntriesKernel<<<blocks, kSortThreads, 0, st>>>(cur, prev, n, k, a.clusterStart, a.keys, a.entries, a.total);
}

// ---------------------------------------------------------------------------------------------------------------
// Small kernels: sum of two statistics, the range check, the finish.

__global__ void addStatsKernel(u64* dsum, const u64* ssum, u64* dsq, const u64* ssq, long long* dcount,
                               const long long* scount, long long kd, int k) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < kd + k; i += stride) {
    if (i < kd) {
      u64 a[3] = {dsum[3 * i], dsum[3 * i + 1], dsum[3 * i + 2]};
      const u64 b[3] = {ssum[3 * i], ssum[3 * i + 1], ssum[3 * i + 2]};
      addWide(a, b);
#pragma unroll
      for (int w = 0; w < 3; ++w) dsum[3 * i + w] = a[w];
    } else {
      const long long c = i - kd;
      u64 a[6], b[6];
#pragma unroll
      for (int w = 0; w < 6; ++w) {
        a[w] = dsq[6 * c + w];
        b[w] = ssq[6 * c + w];
      }
      addWide(a, b);
#pragma unroll
      for (int w = 0; w < 6; ++w) dsq[6 * c + w] = a[w];
      dcount[c] += scount[c];
    }
  }
}

// One warp per cluster. Lane-strided columns: the sums converted, and (from the centroid c̃_j = ±mc·2^sc, 2^-96 grid,
// and S_j = sum[c][j]) the cluster's inertia terms on the 2^-192 grid, exact:
//   l2      acc = −2·Σ_j c̃_j·S_j,   cc = Σ_j mc²·2^(2sc)        E = sq + acc + count·cc
//   cosine  acc = −Σ_j c̃_j·S_j                                  E = count·2^192 + acc
// Bounds (|c| < 2^64 like the rows: mc·2^sc < 2^160; |S_j| < 2^191; D ≤ 2^12; count < 2^31): |c̃_j·S_j| < 2^351, so
// |acc| < 2^364, count·cc < 2^363, sq < 2^363: E fits 384 bits. A centroid value ≥ 2^64 (inf, nan) does not fit: a
// non-empty cluster with one gets NaN inertia rather than wrapped garbage (its sums are still right).
template <bool COSINE>
__global__ void finishKernel(const u64* sum, const u64* sq, const long long* count, const float* cf, int k, int d,
                             double* sumsOut, long long* countsOut, double* inertiaOut) {
  const long long c = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (c >= k) return;  // whole warps
  const int lane = threadIdx.x & 31;
  u64 acc[6] = {0, 0, 0, 0, 0, 0}, cc[6] = {0, 0, 0, 0, 0, 0};
  bool bad = false;
  for (int j = lane; j < d; j += 32) {
    const size_t i = static_cast<size_t>(c) * d + j;
    const u64 sv[3] = {sum[3 * i], sum[3 * i + 1], sum[3 * i + 2]};
    sumsOut[i] = wideToDouble(sv, 96);
    const float cv = cf[i];
    bad |= outOfRange(cv);
    const GridValue g = onGrid(cv);
    // |S|·mc: 3 words × < 2^24 → 4 words (each word's high half < 2^24, so adding it and a carry cannot wrap it)
    const bool sNeg = static_cast<long long>(sv[2]) < 0;
    u64 mag[3];
    u64 carry = sNeg ? 1ull : 0ull;
#pragma unroll
    for (int w = 0; w < 3; ++w) {
      mag[w] = (sNeg ? ~sv[w] : sv[w]) + carry;
      carry = carry && mag[w] == 0;
    }
    const u64 m = g.m;
    u64 p[4];
    p[0] = mag[0] * m;
    u64 h = __umul64hi(mag[0], m);
#pragma unroll
    for (int w = 1; w < 3; ++w) {
      const u64 lo = mag[w] * m;
      p[w] = lo + h;
      h = __umul64hi(mag[w], m) + (p[w] < lo);
    }
    p[3] = h;
    u64 t[6];
    shiftInto6(p, g.s + (COSINE ? 0 : 1), t);  // ·2^sc, and ·2 for l2
    // the term is −(±c̃)(±S): negative when the two signs agree
    if (g.neg == sNeg) subWide(acc, t);
    else addWide(acc, t);
    if constexpr (!COSINE) {
      const u64 mm[1] = {m * m};
      shiftInto6(mm, 2 * g.s, t);
      addWide(cc, t);
    }
  }
  warpSumWide(acc);
  if constexpr (!COSINE) warpSumWide(cc);
  bad = __any_sync(kFull, bad);
  if (lane != 0) return;
  const long long n = count[c];
  countsOut[c] = n;
  u64 e[6];
  if constexpr (COSINE) {
    const u64 ext = n < 0 ? ~0ull : 0ull;
    const u64 nw[6] = {0, 0, 0, static_cast<u64>(n), ext, ext};  // count·2^192
#pragma unroll
    for (int w = 0; w < 6; ++w) e[w] = nw[w];
  } else {
#pragma unroll
    for (int w = 0; w < 6; ++w) e[w] = sq[6 * c + w];
    // count·cc, |count| by the words with carries, then the sign
    const u64 an = n < 0 ? 0ull - static_cast<u64>(n) : static_cast<u64>(n);
    u64 t[6], carry = 0;
#pragma unroll
    for (int w = 0; w < 6; ++w) {
      const u64 lo = cc[w] * an + carry;
      carry = __umul64hi(cc[w], an) + (lo < carry);  // the high half ≤ 2^64 − 2: room for the carry
      t[w] = lo;
    }
    if (n < 0) subWide(e, t);
    else addWide(e, t);
  }
  addWide(e, acc);
  // (an empty cluster's E is sq = 0 whatever its centroid: S = 0 and count = 0 zero the wrapped terms)
  inertiaOut[c] = bad && n != 0 ? __longlong_as_double(0x7ff8000000000000ll) : wideToDouble(e, 192);
}

template <typename T>
T* carve(char*& p, std::size_t n) {
  T* r = reinterpret_cast<T*>(p);
  p += (n * sizeof(T) + 255) / 256 * 256;
  return r;
}

std::size_t up256(std::size_t x) { return (x + 255) / 256 * 256; }

int keyBits(int k) {  // bits of the largest label
  int bits = 1;
  while (bits < 31 && (1 << bits) < k) ++bits;
  return bits;
}

// cub's temporary storage: the counting sort's scan over K + 1 counters, and the radix sort of a fresh add's
// (label, row) pairs (maxRows of them). One buffer serves both (they run one after the other on the call's stream).
std::size_t tempBytes(std::int64_t maxRows, int k) {
  std::size_t scan = 0, sort = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<unsigned*>(nullptr), static_cast<unsigned*>(nullptr), k + 1);
  const int rows = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(maxRows, 1), INT32_MAX));
  cub::DeviceRadixSort::SortPairs(nullptr, sort, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                  static_cast<const unsigned*>(nullptr), static_cast<unsigned*>(nullptr), rows, 0,
                                  keyBits(k));
  return std::max(scan, sort);
}

__global__ void iotaKernel(unsigned* v, long long n, unsigned* total) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    v[i] = static_cast<unsigned>(i);
  if (blockIdx.x == 0 && threadIdx.x == 0) *total = static_cast<unsigned>(n);
}

std::size_t scratchLayoutBytes(std::int64_t maxRows, int k, std::size_t temp) {
  const std::size_t entries = 2 * static_cast<std::size_t>(std::max<std::int64_t>(maxRows, 0));
  return up256((static_cast<std::size_t>(k) + 1) * sizeof(unsigned)) + up256(sizeof(unsigned)) +
         up256(entries * sizeof(int)) + up256(entries * sizeof(unsigned)) + up256(temp);
}

}  // namespace

bool exactSumsFits(std::int64_t rows, int d, int k) {
  return rows >= 0 && rows < (std::int64_t{1} << 31) && d >= 1 && k >= 1 &&
         static_cast<std::int64_t>(k) * d <= (std::int64_t{1} << 26);
}

std::size_t exactStatsBytes(int k, int d) {
  const std::size_t kd = static_cast<std::size_t>(k) * d;
  return up256(kd * 3 * sizeof(u64)) + up256(static_cast<std::size_t>(k) * 6 * sizeof(u64)) +
         up256(static_cast<std::size_t>(k) * sizeof(long long));
}

void allocExactStats(ExactStats& s, int k, int d) {
  void* base = nullptr;
  if (cudaMalloc(&base, exactStatsBytes(k, d)) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  char* p = static_cast<char*>(base);
  s.sum = carve<u64>(p, static_cast<std::size_t>(k) * d * 3);  // first: the allocation's base
  s.sq = carve<u64>(p, static_cast<std::size_t>(k) * 6);
  s.count = carve<long long>(p, static_cast<std::size_t>(k));
  s.k = k;
  s.d = d;
}

void freeExactStats(ExactStats& s) {
  if (s.sum) cudaFree(s.sum);
  s = ExactStats{};
}

void zeroExactStats(const ExactStats& s, cudaStream_t st) {
  if (s.sum) cudaMemsetAsync(s.sum, 0, exactStatsBytes(s.k, s.d), st);  // one allocation, sum first
}

void addExactStats(const ExactStats& dst, const ExactStats& src, cudaStream_t st) {
  const long long kd = static_cast<long long>(dst.k) * dst.d;
  const long long items = kd + dst.k;
  const unsigned blocks =
      static_cast<unsigned>(std::max<long long>(1, std::min<long long>((items + 255) / 256, currentDeviceFacts().sms * 16ll)));
  addStatsKernel<<<blocks, 256, 0, st>>>(dst.sum, src.sum, dst.sq, src.sq, dst.count, src.count, kd, dst.k);
}

std::size_t exactScratchBytes(std::int64_t maxRows, int k) {
  return scratchLayoutBytes(maxRows, k, tempBytes(maxRows, k));
}

void allocExactScratch(ExactScratch& a, std::int64_t maxRows, int k) {
  const std::size_t temp = tempBytes(maxRows, k);
  void* base = nullptr;
  if (cudaMalloc(&base, scratchLayoutBytes(maxRows, k, temp)) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  char* p = static_cast<char*>(base);
  const std::size_t entries = 2 * static_cast<std::size_t>(std::max<std::int64_t>(maxRows, 0));
  a.clusterStart = carve<unsigned>(p, static_cast<std::size_t>(k) + 1);  // first: the allocation's base (never empty)
  a.total = carve<unsigned>(p, 1);
  a.keys = carve<int>(p, entries);
  a.entries = carve<unsigned>(p, entries);
  a.scanTemp = carve<char>(p, temp);
  a.scanTempBytes = temp;
  a.maxRows = maxRows;
  a.k = k;
}

void freeExactScratch(ExactScratch& a) {
  if (a.clusterStart) cudaFree(a.clusterStart);
  a = ExactScratch{};
}

// A fresh add knows its entry count (n) on the host, so cub's radix sort orders them (see the header comment). The
// pairs go from (labels, iota in entries' upper half) into (keys, entries' lower half).
static void radixSortRows(const int* labels, std::int64_t n, ExactScratch& a, cudaStream_t st) {
  unsigned* rowsIn = a.entries + n;  // the upper half: entries hold 2·maxRows
  const unsigned blocks = sortBlocks(n);
  iotaKernel<<<blocks, kSortThreads, 0, st>>>(rowsIn, n, a.total);
  std::size_t bytes = a.scanTempBytes;
  cub::DeviceRadixSort::SortPairs(a.scanTemp, bytes, labels, a.keys, rowsIn, a.entries, static_cast<int>(n), 0,
                                  keyBits(a.k), st);
}

void exactAddRows(RowValues x, std::int64_t n, int d, const std::int32_t* labels, bool wantSq, ExactScratch& a,
                  const ExactStats& s, cudaStream_t st) {
  if (n <= 0) return;
  radixSortRows(labels, n, a, st);
  runSums(x, d, n, wantSq, a, s, st);
}

void exactMoveRows(RowValues x, std::int64_t n, int d, const std::int32_t* prev, const std::int32_t* cur, bool wantSq,
                   ExactScratch& a, const ExactStats& s, cudaStream_t st) {
  if (n <= 0) return;
  sortMoveEntries(cur, prev, n, a, st);
  runSums(x, d, 2 * n, wantSq, a, s, st);
}

void exactFinish(const ExactStats& s, const float* cf, bool cosine, double* sumsOut, long long* countsOut,
                 double* inertiaOut, cudaStream_t st) {
  const int warpsPerBlock = kFinishThreads / 32;
  const unsigned blocks = static_cast<unsigned>((s.k + warpsPerBlock - 1) / warpsPerBlock);
  if (blocks == 0) return;
  if (cosine)
    finishKernel<true><<<blocks, kFinishThreads, 0, st>>>(s.sum, s.sq, s.count, cf, s.k, s.d, sumsOut, countsOut,
                                                          inertiaOut);
  else
    finishKernel<false><<<blocks, kFinishThreads, 0, st>>>(s.sum, s.sq, s.count, cf, s.k, s.d, sumsOut, countsOut,
                                                           inertiaOut);
}

}  // namespace cuda
}  // namespace kmfleet
