// Fused distance + argmin for Hopper (sm_90a): wgmma.m64n128k16 with both operands in shared memory, TMA
// loads completing on mbarriers, warp-specialized, persistent.
//
// Why a second kernel: the portable mma.sync kernel (assign.cu) is bound by shared-memory reads as much as
// by the tensor cores — every warp re-reads its B fragments with ldmatrix (cuda/NOTES.md). wgmma reads each
// operand tile from shared memory once per warpgroup, straight into the tensor cores.
//
// Block (one per SM, looping over row blocks of 256 rows):
//   warpgroup 0     producer: one thread issues the TMA loads — the block's rows (A, Dp/64 boxes of 256×64,
//                   resident for the whole block, double-buffered when two fit so the next block's rows arrive
//                   during this one), then the centroid stages (B, 128 centroids × 64 dims = 16 KB each) in
//                   (tile, dim-chunk) order through a ring of S stages.
//   warpgroups 1, 2 consumers: each owns 128 rows (two m64 halves) and keeps a 2 × 64×128 fp32 accumulator
//                   (128 registers per thread). Per centroid tile: Dp/16 k-steps × 2 wgmma, then the epilogue
//                   d' = g_r·‖c‖² − acc, a per-row min over the thread's 32 columns, folded into the running
//                   (best, tile); the quad merge and the label store once per row block. The plain mode starts
//                   the accumulators at −g_r·‖c‖² instead (exact: g_r is a power of two), so its epilogue reads
//                   −d' straight from them.
// The compared quantity is assign.cu's: d' is a positive per-row multiple of ‖x−c‖² − ‖x‖². The plain and
// screen epilogues compare keys — d' with its 5 low bits replaced by the column's place among the thread's 32
// (one LOP3 and one FMNMX a value instead of a compare and two selects).
// Values within 2⁻¹⁸ of each other (exact duplicates included) are then ordered by that place before their index:
// deterministic, not always the lowest index (the portable kernel's tie rule). That is inside the products' own
// error in these modes; the screen's margin test allows for it, and exact mode's epilogue compares the values
// themselves (strict '<' in increasing column order per thread, then (distance, index) order in the merge).
//
// Shared-memory layouts are what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and what the wgmma descriptors say:
// K-major rows of 64 16-bit values (128 bytes), 8-row groups 1024 bytes apart, 16-byte chunks XOR-swizzled by
// row % 8. A k16 step inside the 64-wide box advances the descriptor's start address by 32 bytes.
#include <cuda.h>  // CUtensorMap and the cuTensorMapEncodeTiled prototype (the function itself: the driver entry point)
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "assign_wgmma.cuh"
#include "device_facts.cuh"
#include "row_bounds.cuh"

namespace kmfleet {
namespace cuda {
namespace {

constexpr int kConsumers = 2;
// M = m64 halves per consumer: 2 (256-row blocks) in general; 1 (128-row blocks) for exact fp32 with Dp > 128, whose
// hi + lo rows of a 256-row block would not fit beside the centroid ring.
__host__ __device__ constexpr int blockRowsH(int M) { return kConsumers * 64 * M; }
__host__ __device__ constexpr int aChunkBytes(int M) { return blockRowsH(M) * 64 * 2; }  // one 64-dim chunk of a block's rows
constexpr int kTileN = 128;                                     // centroids per tile = kBlockCentroids (Kp padding)
constexpr int kChunk = 64;                                      // dims per TMA box: one 128-byte swizzle row
constexpr int kThreadsH = 128 * (kConsumers + 1);
constexpr int kStageBytes = kTileN * kChunk * 2;                // 16 KB
constexpr int kMaxStages = 8;
constexpr int kMinStages = 3;
constexpr int kMaxDp = 256;
constexpr int kMaxChunks = kMaxDp / 64;
static_assert(kTileN == kBlockCentroids, "centroids are padded to whole tiles");
static_assert(kChunk == kDimChunk, "rows are padded to whole TMA boxes");

// What a launch computes (the kernel's MODE):
//   kPlain   one product per k-step (tf32 mode): the label only.
//   kScreen  one product (the hi operands of exact mode) with best and second best: a row whose margin is beyond
//            the one-product bound keeps its label; the others are listed in `flagged` for the exact pass.
//   kExact   hi·hi + hi·lo + lo·hi with best and second best: the margin test of the exact bound; rows within it are
//            listed in `flagged` with their window (flaggedThr) for candidateRows and the fp64 recheck.
//   kScreenRef  kScreen on 16-bit keys relative to each row's best of the previous pass (refIn; see its epilogue).
constexpr int kPlain = 0, kScreen = 1, kExact = 2, kScreenRef = 3;

struct HopperArgs {
  const float* rowScale;
  const float* rowNorm;        // margin modes: ‖x̂‖ of each scaled row (the error bound)
  const float* rowNormLo;      // kScreen with bound.epsL > 0: ‖xl‖ of each row's lo operand
  const float* cnorm;
  int* labels;
  int* flagged;                // margin modes: rows whose margin is within the bound, their count and window
  unsigned* flaggedCount;
  float* flaggedThr;           // kExact only
  // GATHER: block row i is row rowIds[i] of rowsHi/rowsLo (Dp halves per row), for i < min(*nDevice, n)
  const int* rowIds;
  const unsigned* nDevice;
  const unsigned short* rowsHi;
  const unsigned short* rowsLo;
  int dp;
  int n, nK, nTiles, rowBlocks, stages, aBufs;
  float halfScaleC;
  unsigned keyMask;            // ~31u: clears the low bits of a key for its column (a register, see withLowBits)
  unsigned keyMask16;          // 0xFFF0FFF0u: the same for both halves of a packed pair of bf16 keys (kScreenRef)
  // screens: w = d'/g_r of each row's best (‖x̃ − c̃‖² − ‖x̃‖², unscaled) written to refOut when not null, read back
  // from refIn by the next pass's kScreenRef
  const float* refIn;
  float* refOut;
  // margin modes, resident rows with bounds (types.h RowOps): each row's bounds (row_bounds.cuh recordRawBounds)
  float* boundUpper;
  float* boundLower;
  ExactBound bound;
};

__device__ __forceinline__ unsigned smemU32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// ---- mbarrier ----
__device__ __forceinline__ void barInit(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemU32(bar)), "r"(count));
}
__device__ __forceinline__ void barExpectTx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smemU32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barArrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemU32(bar)) : "memory");
}
// Waits until the phase of the given parity has completed (a fresh barrier's "previous" phase, parity 1, counts
// as completed: producers start by waiting on parity 1 of their empty barriers).
__device__ __forceinline__ void barWait(std::uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smemU32(bar)),
      "r"(parity)
      : "memory");
}

// ---- TMA: one 2-D box into shared memory, completion counted on bar ----
__device__ __forceinline__ void tmaLoad2d(void* dst, const CUtensorMap* map, int c0, int c1, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smemU32(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(smemU32(bar))
      : "memory");
}

// ---- wgmma ----
// Shared-memory matrix descriptor: start address, leading offset (unused with a swizzled K-major layout), stride
// offset 1024 bytes between 8-row groups, 128-byte swizzle.
__device__ __forceinline__ std::uint64_t smemDesc(const void* p) {
  const std::uint64_t addr = smemU32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | (std::uint64_t(1024 >> 4) << 32) | (1ull << 62);
}
// The descriptor of p + bytes: the start address is the low 14 bits in 16-byte units, and shared memory (< 256 KB)
// keeps it from carrying into the fields above. One integer add per wgmma instead of the whole encoding (the
// consumers issue 16–48 wgmmas a tile, each with two descriptors, between their epilogues).
__device__ __forceinline__ std::uint64_t descPlus(std::uint64_t desc, int bytes) { return desc + (bytes >> 4); }
__device__ __forceinline__ void wgFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#define KMF_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define KMF_WGMMA_BODY(TYPE)                                                                                   \
  asm volatile(                                                                                                \
      "{\n"                                                                                                    \
      ".reg .pred p;\n"                                                                                        \
      "setp.ne.b32 p, %66, 0;\n"                                                                               \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                                         \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                       \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                       \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                      \
      "%64, %65, p, 1, 1, 0, 0;\n"                                                                             \
      "}\n"                                                                                                    \
      : KMF_ACC8(0), KMF_ACC8(8), KMF_ACC8(16), KMF_ACC8(24), KMF_ACC8(32), KMF_ACC8(40), KMF_ACC8(48),         \
        KMF_ACC8(56)                                                                                           \
      : "l"(descA), "l"(descB), "r"(accumulate))

// d (64×128 fp32 fragment) = A·Bᵀ (+ d when accumulate): A 64×16, B 128×16, both K-major in shared memory.
__device__ __forceinline__ void wgmma128(float (&d)[64], std::uint64_t descA, std::uint64_t descB, int accumulate) {
  KMF_WGMMA_BODY("f16");
}
#undef KMF_WGMMA_BODY
#undef KMF_ACC8
// (v & mask) | low: one LOP3 when the mask is in a register (a kernel argument the compiler can't fold) and the low
// bits an immediate; with both as immediates the compiler emits two. The operands stay fp32 registers: keys made
// straight from the accumulators through __float_as_uint would make NVVM carry the accumulators as integers, and
// ptxas then waits for the products before every such read (C7517) — the wgmmas serialized.
__device__ __forceinline__ float withLowBits(float v, unsigned mask, unsigned low) {
  float k;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=f"(k) : "f"(v), "r"(mask), "r"(low));
  return k;
}

// A pair of bf16 keys for kScreenRef: u0 (lower half) and u1 (upper half) rounded to bf16 (fp32's exponent range:
// no scaling; satfinite keeps a huge value finite, where the low bits would make an infinity a NaN), each with its
// 4 low bits replaced by the column's place (`low` = place·0x10001, the mask a register as in withLowBits).
__device__ __forceinline__ unsigned keyPairBf16(float u0, float u1, unsigned mask, unsigned low) {
  unsigned k;
  asm("{\n.reg .b32 h;\ncvt.rn.satfinite.bf16x2.f32 h, %1, %2;\nlop3.b32 %0, h, %3, %4, 0xEA;\n}"
      : "=r"(k)
      : "f"(u1), "f"(u0), "r"(mask), "r"(low));
  return k;
}
__device__ __forceinline__ unsigned bmin2(unsigned a, unsigned b) {
  unsigned d;
  asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ unsigned bmax2(unsigned a, unsigned b) {
  unsigned d;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// The two bf16 halves of a packed pair as floats (exact: a bf16 is the top half of an fp32): lower → x, upper → y.
__device__ __forceinline__ float2 bf16Halves(unsigned v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xFFFF0000u));
}

// Best and second best of 2N values given as N (best, next) pairs, by a tree: merging (b1, n1) and (b2, n2) gives
// best = better(b1, b2), next = better(worse(b1, b2), better(n1, n2)) — ~3 operations a value in any order. The best
// ends in best[0], the second in next[0]. (better, worse) = (min, max) for distances, (max, min) for their negations.
template <int N, typename T, typename Better, typename Worse>
__device__ __forceinline__ void bestTwoTree(T (&best)[N], T (&next)[N], Better better, Worse worse) {
#pragma unroll
  for (int w = 1; w < N; w <<= 1)
#pragma unroll
    for (int l = 0; l < N; l += 2 * w) {
      next[l] = better(worse(best[l], best[l + w]), better(next[l], next[l + w]));
      best[l] = better(best[l], best[l + w]);
    }
}

__device__ __forceinline__ void setMaxRegsInc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory"); }
__device__ __forceinline__ void setMaxRegsDec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory"); }

struct SharedLayout {
  unsigned short* a;   // aBufs × nK × terms × (block rows × 64)
  unsigned short* b;   // stages × (128 centroids × 64)
  std::uint64_t* full;  // stages
  std::uint64_t* empty; // stages
  std::uint64_t* aFull; // aBufs × kMaxChunks: one per dim-chunk, so the first products start before all rows land
  std::uint64_t* aEmpty;// aBufs
};

__device__ __forceinline__ SharedLayout carve(unsigned char* raw, const HopperArgs& p, int terms, int aChunk) {
  // 1024-byte alignment: the 128-byte swizzle pattern repeats every 8 rows of 128 bytes.
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(raw) + 1023) & ~std::uintptr_t(1023));
  SharedLayout s;
  s.a = reinterpret_cast<unsigned short*>(base);
  base += static_cast<std::size_t>(p.aBufs) * p.nK * terms * aChunk;
  s.b = reinterpret_cast<unsigned short*>(base);
  base += static_cast<std::size_t>(p.stages) * kStageBytes;
  auto* bars = reinterpret_cast<std::uint64_t*>(base);
  s.full = bars;
  s.empty = bars + kMaxStages;
  s.aFull = bars + 2 * kMaxStages;
  s.aEmpty = bars + 2 * kMaxStages + 2 * kMaxChunks;
  return s;
}
constexpr std::size_t kBarrierBytes = (2 * kMaxStages + 2 * kMaxChunks + 2) * sizeof(std::uint64_t);

// Named barriers 1 and 2 order the two consumers' wgmma issue: consumer c issues a tile's products only after the
// other has issued its own previous tile, so one warpgroup's epilogue runs while the other's products keep the
// tensor cores busy (the "ping-pong" of FlashAttention-3). 256 = both consumers' threads.
// A position in the centroid ring: its stage and the phase of that stage's barriers. Advanced one stage at a time:
// `it % stages` and `it / stages` with a runtime divisor cost ~20 instructions each, and the consumers computed
// them per k-chunk and per released stage, on their path between two tiles (ncu source counters, H200: ~25 % of the
// consumers' samples outside the products and the epilogue).
struct RingPos {
  unsigned slot = 0, phase = 0;
  __device__ __forceinline__ void advance(unsigned stages) {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1;
    }
  }
  __device__ __forceinline__ RingPos next(unsigned stages) const {
    RingPos n = *this;
    n.advance(stages);
    return n;
  }
};

__device__ __forceinline__ void namedSync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void namedArrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// kExact (exact fp32 mode): rows and centroids are hi + lo fp16 pairs, the products hi·hi + hi·lo + lo·hi (the
// order of assign.cu), and each row keeps its second best too, for the margin test of the error bound.
// M = 1 (128-row blocks, exact Dp > 128): each consumer hands a k-chunk's stages back as soon as its products are
// done (wgmma.wait_group 1), so the ring need not hold a whole centroid tile beside the rows; the consumers then
// issue freely (with the ping-pong, the second consumer would still need the whole tile the first one went through).
// GATHER (the exact pass over the rows the screen listed): the rows are not one contiguous range, so the producer
// warpgroup's warps 1–3 copy them into the row buffers with cp.async (in the layout the 128-byte-swizzled TMA
// boxes have), and the row count is read on the device.
// One function on purpose: the accumulators, the running best two per row and the pipeline's barriers live in
// registers across the producer/consumer loop, and splitting it into calls the compiler does not inline spills them.
template <int MODE, int M, bool GATHER>
__global__ void __launch_bounds__(kThreadsH, 1)
    assignHopperKernel(const __grid_constant__ CUtensorMap rowsHi, const __grid_constant__ CUtensorMap rowsLo,
                       const __grid_constant__ CUtensorMap centroidsHi, const __grid_constant__ CUtensorMap centroidsLo,
                       const HopperArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool THREE = MODE == kExact, MARGIN = MODE != kPlain, REF = MODE == kScreenRef;
  constexpr bool SCREEN = MODE == kScreen || REF;
  static_assert(!GATHER || MODE == kExact, "only the exact pass gathers its rows");
  constexpr int TERMS = THREE ? 2 : 1;
  constexpr int kGatherThreads = 96;  // producer warps 1–3
  extern __shared__ unsigned char smemRaw[];
  constexpr int kBlockRowsH = blockRowsH(M), kAChunkBytes = aChunkBytes(M), kRowsPerConsumer = 64 * M;
  // the two consumers take turns issuing their products (named barriers) where both have 256-row halves
  constexpr bool kPingPong = M == 2;
  // keys: the plain and screen epilogues compare d' with the column in its low bits (see below); exact mode doesn't
  constexpr bool kKeys = MODE == kPlain || MODE == kScreen;
  // plain mode: the accumulators start at −g·‖c‖² instead of 0, so the products leave u = −d' in them and the
  // epilogue makes keys straight from the accumulators (see the tile loop)
  constexpr bool kInit = MODE == kPlain;
  // kScreenRef starts them at ρ − g·‖c‖² (ρ: the row's previous best d'), so they end at u = ρ − d'
  constexpr bool kStart = kInit || REF;
  const SharedLayout sm = carve(smemRaw, p, TERMS, kAChunkBytes);
  const int tid = threadIdx.x, wg = tid >> 7;
  constexpr unsigned kConsumerWarps = 4 * kConsumers;
  constexpr int kAChunkHalves = kAChunkBytes / 2, kStageHalves = kStageBytes / 2;
  // GATHER: the count the screen left on the device (the stream orders it before this launch)
  const int n = GATHER ? min(static_cast<int>(*p.nDevice), p.n) : p.n;
  const int rowBlocks = GATHER ? (n + kBlockRowsH - 1) / kBlockRowsH : p.rowBlocks;

  if (tid == 0) {
    for (int s = 0; s < p.stages; ++s) {
      barInit(sm.full + s, 1);
      barInit(sm.empty + s, kConsumerWarps);
    }
    for (int b = 0; b < p.aBufs; ++b) {
      for (int kc = 0; kc < p.nK; ++kc) barInit(sm.aFull + b * kMaxChunks + kc, GATHER ? kGatherThreads : 1);
      barInit(sm.aEmpty + b, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    setMaxRegsDec();
    if constexpr (GATHER) {
      if (tid >= 32) {
        // ---- row gatherers: block row i ← row rowIds[i], 16-byte pieces at the swizzled positions TMA would use
        // (piece c of row r at c ^ (r % 8)); each thread waits for its own copies and makes them visible to the
        // tensor cores' (async proxy) reads before it arrives
        const int gt = tid - 32;
        unsigned blockIter = 0;
        for (int rb = blockIdx.x; rb < rowBlocks; rb += gridDim.x, ++blockIter) {
          const unsigned ab = blockIter % p.aBufs, aPhase = (blockIter / p.aBufs) & 1;
          barWait(sm.aEmpty + ab, aPhase ^ 1);
          unsigned short* aBase = sm.a + static_cast<std::size_t>(ab) * p.nK * TERMS * kAChunkHalves;
          for (int kc = 0; kc < p.nK; ++kc) {
            for (int t = 0; t < TERMS; ++t) {
              const unsigned short* src = t ? p.rowsLo : p.rowsHi;
              unsigned short* dst = aBase + static_cast<std::size_t>(kc * TERMS + t) * kAChunkHalves;
              for (int q = gt; q < kBlockRowsH * 8; q += kGatherThreads) {
                const int r = q >> 3, c = q & 7, i = rb * kBlockRowsH + r;
                const bool valid = i < n;
                const long long row = valid ? __ldg(p.rowIds + i) : 0;
                const unsigned short* from = src + row * p.dp + kc * kChunk + c * 8;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemU32(dst + r * kChunk + ((c ^ (r & 7)) << 3))),
                             "l"(from), "r"(valid ? 16 : 0)
                             : "memory");
              }
            }
            asm volatile("cp.async.wait_all;\n" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            barArrive(sm.aFull + ab * kMaxChunks + kc);
          }
        }
        return;
      }
    }
    if (tid != 0) return;
    // ---- producer ----
    if (!GATHER) asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&rowsHi)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(&centroidsHi)) : "memory");
    RingPos pos;
    unsigned blockIter = 0;
    for (int rb = blockIdx.x; rb < rowBlocks; rb += gridDim.x, ++blockIter) {
      if constexpr (!GATHER) {
      const unsigned ab = blockIter % p.aBufs, aPhase = (blockIter / p.aBufs) & 1;
      barWait(sm.aEmpty + ab, aPhase ^ 1);
      unsigned short* aBase = sm.a + static_cast<std::size_t>(ab) * p.nK * TERMS * kAChunkHalves;
      for (int kc = 0; kc < p.nK; ++kc) {
        std::uint64_t* bar = sm.aFull + ab * kMaxChunks + kc;
        barExpectTx(bar, TERMS * kAChunkBytes);
        for (int t = 0; t < TERMS; ++t)
          tmaLoad2d(aBase + static_cast<std::size_t>(kc * TERMS + t) * kAChunkHalves, t ? &rowsLo : &rowsHi,
                    kc * kChunk, rb * kBlockRowsH, bar);
      }
      }
      for (int ct = 0; ct < p.nTiles; ++ct)
        for (int kc = 0; kc < p.nK; ++kc)
          for (int t = 0; t < TERMS; ++t, pos.advance(p.stages)) {
            barWait(sm.empty + pos.slot, pos.phase ^ 1);
            barExpectTx(sm.full + pos.slot, kStageBytes);
            tmaLoad2d(sm.b + static_cast<std::size_t>(pos.slot) * kStageHalves, t ? &centroidsLo : &centroidsHi,
                      kc * kChunk, ct * kTileN, sm.full + pos.slot);
          }
    }
    return;
  }

  // ---- consumers ----
  setMaxRegsInc();
  const int consumer = wg - 1, ctid = tid - 128 * wg, warp = ctid >> 5, lane = ctid & 31;
  const int rowOff = consumer * kRowsPerConsumer;  // this warpgroup's rows within the row block
  const int myTurn = 1 + consumer, otherTurn = 2 - consumer;
  if (kPingPong && consumer == 1) namedArrive(1);  // consumer 0 issues first
  float acc[M][64];
  // Thread's rows: half m, fragment row h → rowOff + m·64 + warp·16 + h·8 + lane/4. Their factors g_r are read
  // one row block ahead, so the global load's latency is not paid at every block start.
  auto rowOf = [&](int rb, int i) { return rb * kBlockRowsH + rowOff + (i >> 1) * 64 + warp * 16 + (i & 1) * 8 + (lane >> 2); };
  auto rowId = [&](int r) { return GATHER ? __ldg(p.rowIds + r) : r; };  // r < n
  auto loadG = [&](int rb, float (&g)[2 * M]) {
#pragma unroll
    for (int i = 0; i < 2 * M; ++i) {
      const int r = rowOf(rb, i);
      g[i] = r < n ? __ldg(p.rowScale + rowId(r)) : 1.f;
    }
  };
  // ‖c‖² of the thread's 32 columns of a tile, loaded after the previous tile's epilogue so that their latency passes
  // while this tile's products are issued and run
  auto loadCn = [&](float2 (&c)[16], int tile) {
    const int base = tile * kTileN + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j) c[j] = __ldg(reinterpret_cast<const float2*>(p.cnorm + base + j * 8));
  };
  // Margin modes: each row's ‖x̂‖ and (screens) ‖xl‖ for the margin test, and (kScreenRef) its w, one row block
  // ahead as g: loaded where the test needs them, their latency stalled the block's end (ncu: long-scoreboard
  // stalls 21 % of the relative screen's samples)
  constexpr int kRowArgs = MARGIN ? 2 * M : 1;
  auto loadRowArgs = [&](int rb, float (&xn)[kRowArgs], float (&xl)[kRowArgs], float (&w)[kRowArgs]) {
#pragma unroll
    for (int i = 0; i < 2 * M; ++i) {
      const int r = rowOf(rb, i);
      const bool in = r < n;
      const int id = in ? rowId(r) : 0;
      xn[i] = in ? __ldg(p.rowNorm + id) : 0.f;
      if constexpr (SCREEN) xl[i] = in && p.bound.epsL > 0.f ? __ldg(p.rowNormLo + id) : 0.f;
      if constexpr (REF) w[i] = in ? __ldg(p.refIn + id) : 0.f;
    }
  };
  float2 cn[16];
  loadCn(cn, 0);
  float gNext[2 * M], xnNext[kRowArgs], xlNext[kRowArgs], wNext[kRowArgs];
  loadG(blockIdx.x, gNext);
  if constexpr (MARGIN) loadRowArgs(blockIdx.x, xnNext, xlNext, wNext);
  // pos: the next stage to consume; released: the next stage to hand back (every stage is released in order)
  RingPos pos, released;
  auto release = [&](int stages) {  // one arrival per warp
    for (int q = 0; q < stages; ++q, released.advance(p.stages))
      if (lane == 0) barArrive(sm.empty + released.slot);
  };
  unsigned blockIter = 0;
  for (int rb = blockIdx.x; rb < rowBlocks; rb += gridDim.x, ++blockIter) {
    const unsigned ab = blockIter % p.aBufs, aPhase = (blockIter / p.aBufs) & 1;
    const unsigned short* aBase = sm.a + static_cast<std::size_t>(ab) * p.nK * TERMS * kAChunkHalves;
    float g[2 * M], best[2 * M], second[2 * M], xn[kRowArgs], xl[kRowArgs];
    int bestIdx[2 * M];
    // kScreenRef: per row ρ = g·w, the previous best d'; the running best and second of u = ρ − d' (maxima) as
    // packed bf16 keys (lower half: the thread's even columns, upper: odd) and each half's tile
    float rho[REF ? 2 * M : 1];
    unsigned run1[REF ? 2 * M : 1], run2[REF ? 2 * M : 1];
    int tileX[REF ? 2 * M : 1], tileY[REF ? 2 * M : 1];
#pragma unroll
    for (int i = 0; i < 2 * M; ++i) {
      g[i] = gNext[i] * p.halfScaleC;
      if constexpr (MARGIN) {
        xn[i] = xnNext[i];
        xl[i] = xlNext[i];
      }
      best[i] = INFINITY;
      second[i] = INFINITY;
      bestIdx[i] = 0;
      if constexpr (REF) {
        // ρ from a finite w only: any finite ρ keeps the labels exact (the margin test allows for it below); a poor
        // one only fails more rows over to the three products
        const float w = fabsf(wNext[i]) <= 1e30f ? wNext[i] : 0.f;
        rho[i] = g[i] * w;
        run1[i] = 0xFF80FF80u;  // −inf, −inf
        run2[i] = 0xFF80FF80u;
        tileX[i] = 0;
        tileY[i] = 0;
      }
    }
    loadG(rb + gridDim.x, gNext);
    if constexpr (MARGIN) loadRowArgs(rb + gridDim.x, xnNext, xlNext, wNext);

    for (int ct = 0; ct < p.nTiles; ++ct) {
      const int nextTile = ct + 1 == p.nTiles ? 0 : ct + 1;  // the next row block starts at tile 0
      if constexpr (kStart) {
        // plain: acc = −g·‖c‖², exact (g = s_r·s_c/2 is a power of two) unless it leaves fp32's range, where d' itself
        // did before; the products then leave u = x̂·ĉ − g·‖c‖² = −d'. 128 independent multiplies before this tile's
        // turn instead of an FFMA at the head of every value's chain in the epilogue.
        // kScreenRef: acc = ρ − g·‖c‖² (one rounding; the bound allows for it and for the products' accumulation
        // onto it), so the products leave u = ρ − d'.
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = m * 2 + h;
              const float ng = -g[i];
              acc[m][4 * j + 2 * h] = REF ? fmaf(ng, cn[j].x, rho[i]) : ng * cn[j].x;
              acc[m][4 * j + 2 * h + 1] = REF ? fmaf(ng, cn[j].y, rho[i]) : ng * cn[j].y;
            }
      }
      if (kPingPong) namedSync(myTurn);
      wgFence();
      // Both halves' products per k-step, back to back on the same B descriptor. (Issuing half 0's products
      // in one commit group and half 1's in the next, to overlap half 0's epilogue with half 1's products,
      // measured slower.)
      for (int kc = 0; kc < p.nK; ++kc) {
        if (ct == 0) barWait(sm.aFull + ab * kMaxChunks + kc, aPhase);  // this block's rows, chunk kc
        const RingPos lo = pos.next(p.stages);
        const unsigned slot = pos.slot, slotLo = lo.slot;
        barWait(sm.full + slot, pos.phase);
        if (THREE) barWait(sm.full + slotLo, lo.phase);
        pos = THREE ? lo.next(p.stages) : lo;
        const unsigned short* aHi = aBase + static_cast<std::size_t>(kc * TERMS) * kAChunkHalves + rowOff * kChunk;
        const unsigned short* aLo = aHi + kAChunkHalves;
        const unsigned short* bHi = sm.b + static_cast<std::size_t>(slot) * kStageHalves;
        const unsigned short* bLo = sm.b + static_cast<std::size_t>(slotLo) * kStageHalves;
        const std::uint64_t dA = smemDesc(aHi), dB = smemDesc(bHi);
        const std::uint64_t dALo = THREE ? smemDesc(aLo) : 0, dBLo = THREE ? smemDesc(bLo) : 0;
#pragma unroll
        for (int kk = 0; kk < kChunk / 16; ++kk) {
          const std::uint64_t dbh = descPlus(dB, kk * 32);  // 16 halves a k-step
          const int accumulate = (kStart || kc > 0 || kk > 0) ? 1 : 0;
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const int aBytes = (m * 64 * kChunk + kk * 16) * 2;
            const std::uint64_t dah = descPlus(dA, aBytes);
            wgmma128(acc[m], dah, dbh, accumulate);
            if constexpr (THREE) {
              wgmma128(acc[m], dah, descPlus(dBLo, kk * 32), 1);
              wgmma128(acc[m], descPlus(dALo, aBytes), dbh, 1);
            }
          }
        }
        wgCommit();
        if constexpr (M == 1) {  // the previous k-chunk's products are done: its stages go back now
          if (kc > 0) {
            wgWait<1>();
            release(TERMS);
          }
        }
      }
      if (kPingPong) namedArrive(otherTurn);
      wgWait<0>();
      // this tile's stages are consumed (M = 1: the last k-chunk's): hand them back to the producer (one arrival per
      // warp); after the block's last products its rows are no longer read either: the next block's may load while
      // this epilogue runs
      release(M == 1 ? TERMS : p.nK * TERMS);
      if (lane == 0 && ct == p.nTiles - 1) barArrive(sm.aEmpty + ab);
      // the next tile's ‖c‖² (the next row block starts at tile 0): with kInit before this epilogue, which no longer
      // reads them, so that their latency passes under it; else after it
      if constexpr (kStart) loadCn(cn, nextTile);

      const int colBase = ct * kTileN + 2 * (lane & 3);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if constexpr (MODE == kPlain) {
          // keys: u = acc (= −d': the accumulators started at −g·‖c‖²) with its 5 low bits replaced by 31 − L,
          // L = 2j + e the column's place
          // among the thread's 32; one max per value picks the best column (among equal u ≥ 0, the thread's lowest).
          // The running best keeps −key (a d' again, for the merge below) and the tile it came from.
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = m * 2 + h;
            float k[32];
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float a = acc[m][4 * j + 2 * h + e];
                k[2 * j + e] = withLowBits(a, p.keyMask, 31 - (2 * j + e));
              }
#pragma unroll
            for (int w = 1; w < 32; w <<= 1)
#pragma unroll
              for (int l = 0; l < 32; l += 2 * w) k[l] = fmaxf(k[l], k[l + w]);
            const float v = -k[0];
            const bool lt = v < best[i];
            best[i] = lt ? v : best[i];
            bestIdx[i] = lt ? ct : bestIdx[i];
          }
        } else if constexpr (REF) {
          // The accumulators hold u = ρ − d' (ρ: the row's previous best), near 0 for the columns that matter when
          // ρ is a good guess. They are rounded to bf16 two columns to a register, with the place j in the 4 low
          // bits of each half, and the (low, high) tree of kScreen runs mirrored (maxima) on packed pairs: one
          // max.bf16x2/min.bf16x2 does two columns, so ~1.5 ALU operations a value for best and second instead of
          // ~3, and no FFMA (the start did it). A key is within 2⁻³·|key| of its u (15.5 bf16 units in the last
          // place of its binade), so the slack the margin test allows for is small where |u| is: near the best.
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = m * 2 + h;
            unsigned lo[8], hi[8];  // hi: the larger u (better), lo: the smaller
#pragma unroll
            for (int q = 0; q < 8; ++q) {
              unsigned k2[2];
#pragma unroll
              for (int v = 0; v < 2; ++v) {
                const int j = 2 * q + v;
                k2[v] = keyPairBf16(acc[m][4 * j + 2 * h], acc[m][4 * j + 2 * h + 1], p.keyMask16,
                                    static_cast<unsigned>(j) * 0x10001u);
              }
              hi[q] = bmax2(k2[0], k2[1]);
              lo[q] = bmin2(k2[0], k2[1]);
            }
            bestTwoTree(hi, lo, bmax2, bmin2);
            // a half whose best changed took this tile's (keys of one tile are distinct within a half; an equal
            // key of a later tile leaves the earlier one, as strict '<' would)
            const unsigned nb = bmax2(hi[0], run1[i]), changed = nb ^ run1[i];
            run2[i] = bmax2(bmin2(hi[0], run1[i]), bmax2(run2[i], lo[0]));
            run1[i] = nb;
            tileX[i] = (changed & 0xFFFFu) ? ct : tileX[i];
            tileY[i] = (changed >> 16) ? ct : tileY[i];
          }
        } else if constexpr (MODE == kScreen) {
          // keys (d' with its 5 low bits replaced by L): best and second best by a tree of (low, high) pairs —
          // leaves min/max of two values, a merge low = min(l1, l2), high = min(max(l1, l2), min(h1, h2)) — then
          // merged with the running pair the same way. The margin test allows for the keys' rounding.
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = m * 2 + h;
            float lo[16], hi[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const float k0 = withLowBits(fmaf(g[i], cn[j].x, -acc[m][4 * j + 2 * h]), p.keyMask, 2 * j);
              const float k1 = withLowBits(fmaf(g[i], cn[j].y, -acc[m][4 * j + 2 * h + 1]), p.keyMask, 2 * j + 1);
              lo[j] = fminf(k0, k1);
              hi[j] = fmaxf(k0, k1);
            }
            bestTwoTree(lo, hi, [](float a, float b) { return fminf(a, b); }, [](float a, float b) { return fmaxf(a, b); });
            const bool lt = lo[0] < best[i];
            second[i] = fminf(fmaxf(lo[0], best[i]), fminf(second[i], hi[0]));
            best[i] = fminf(lo[0], best[i]);
            bestIdx[i] = lt ? ct : bestIdx[i];
          }
        } else {
          static_assert(MODE == kExact, "plain, screen and relative keys are above");
          // exact mode: best and second best, in increasing column order (strict '<':
          // the lowest index wins)
#pragma unroll
          for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = m * 2 + h;
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float v = fmaf(g[i], e ? cn[j].y : cn[j].x, -acc[m][4 * j + 2 * h + e]);
                const bool lt = v < best[i];
                second[i] = lt ? best[i] : fminf(second[i], v);
                bestIdx[i] = lt ? colBase + j * 8 + e : bestIdx[i];
                best[i] = lt ? v : best[i];
              }
            }
        }
      }
      if constexpr (!kStart) loadCn(cn, nextTile);
    }
    // quad merge (the 4 lanes of a quad hold the same rows, different columns), then the store
#pragma unroll
    for (int i = 0; i < 2 * M; ++i) {
      if constexpr (REF) {  // the two halves merged: best and second as keys of t = d' − ρ, and the best's centroid
        const float2 b = bf16Halves(run1[i]), s2 = bf16Halves(run2[i]);
        const bool odd = b.y > b.x;  // equal keys: the even (lower) column
        best[i] = -(odd ? b.y : b.x);
        second[i] = -fmaxf(fminf(b.x, b.y), fmaxf(s2.x, s2.y));
        const int j = static_cast<int>((odd ? run1[i] >> 16 : run1[i]) & 15u);
        bestIdx[i] = (odd ? tileY[i] : tileX[i]) * kTileN + 2 * (lane & 3) + j * 8 + (odd ? 1 : 0);
      }
      if constexpr (kKeys) {  // the best key's tile and column within the thread's 32 → its centroid
        const int L = MODE == kPlain ? 31 - (__float_as_int(best[i]) & 31) : __float_as_int(best[i]) & 31;
        bestIdx[i] = bestIdx[i] * kTileN + 2 * (lane & 3) + (L >> 1) * 8 + (L & 1);
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best[i], off);
        const float os = __shfl_xor_sync(0xffffffffu, second[i], off);
        const int oi = __shfl_xor_sync(0xffffffffu, bestIdx[i], off);
        const bool other = ob < best[i] || (ob == best[i] && oi < bestIdx[i]);
        second[i] = other ? fminf(best[i], os) : fminf(second[i], ob);
        best[i] = other ? ob : best[i];
        bestIdx[i] = other ? oi : bestIdx[i];
      }
      const int rr = rowOf(rb, i);
      if ((lane & 3) == 0 && rr < n) {
        const int r = rowId(rr);
        p.labels[r] = bestIdx[i];
        if constexpr (MARGIN) {  // the margin test of assign.cu's mergeAndWrite (kScreen: its bound for one product)
          const ExactBound& b = p.bound;
          // g = s_r·s_c/2 with s_r the row's scale (prefetched, as ‖x̂‖ and ‖xl‖)
          const float gr = g[i], sx = gr / p.halfScaleC;
          const float mm = xn[i] / sx + b.cmax;
          float eps = b.epsX * xn[i] + b.epsC + gr * (b.epsG + b.epsM * mm * mm);
          if constexpr (SCREEN) {
            if (b.epsL > 0.f) eps += b.epsL * xl[i];
            // the next pass's guess of this row's best: w = d'/g (REF: d' = key + ρ)
            if (p.refOut) p.refOut[r] = (REF ? best[i] + rho[i] : best[i]) / gr;
          }
          bool decided;
          float up, lo;  // bounds on d' of the label's centroid and of every other one (row_bounds.cuh)
          if constexpr (REF) {
            // Keys k1 ≤ k2 of t = d' − ρ: the best column's t is at most k1 + Δ(k1) and every other column's at
            // least k2 − Δ(k2), Δ(k) = 2⁻³·|k| widened by 1/16 for fp32's rounding here, plus 2⁻¹²⁰ for keys among
            // bf16's subnormals (k − Δ(k) increases with k, so k2 bounds every other column); keys that may have
            // saturated (|k| ≥ 2¹²⁷) decide nothing. The start ρ − g·‖c‖² in the accumulators adds its rounding and
            // the products' accumulation onto it: (Dp/16 + 1)·2⁻²² of |ρ| + g·max‖c̃‖², as the one-product bound
            // counts the products' own.
            const float k1 = best[i], k2 = second[i];
            const float start = (p.dp / 16 + 1) * 0x1p-22f * (fabsf(rho[i]) + gr * b.cmax * b.cmax) * 1.25f;
            const float e2 = 2.f * (eps + start) * (1.f + 0x1p-10f);
            const float up1 = k1 + (0x1.1p-3f * fabsf(k1) + 0x1p-120f), lo2 = k2 - (0x1.1p-3f * fabsf(k2) + 0x1p-120f);
            decided = fabsf(k1) < 0x1p127f && k2 > -0x1p127f && lo2 - up1 > e2;
            // d' = t + ρ, the additions' rounding allowed for
            const float slack = 0.5f * e2 + 0x1p-20f * (fabsf(rho[i]) + fabsf(up1) + fminf(fabsf(lo2), 0x1p100f));
            up = rho[i] + up1 + slack;
            lo = rho[i] + lo2 - slack;
          } else {
            // keys: each of best and second is within 32 units in the last place of its value, i.e. 2⁻¹⁸ of it, and
            // |second| ≤ |best| + gap; so the values' gap exceeds 2ε when gap·(1 − 2⁻¹⁷) > 2ε + 2⁻¹⁷·|best|
            // (2⁻¹⁷ rather than 2⁻¹⁸: room for this test's own rounding). An infinite gap (K = 1) passes.
            const float gap = second[i] - best[i];
            decided = kKeys ? gap * (1.f - 0x1p-17f) > 2.f * eps + 0x1p-17f * fabsf(best[i]) : gap > 2.f * eps;
            // a key is within 2⁻¹⁷ of its value (2⁻¹⁴⁰: among the subnormals); an infinite second (K = 1) stays one
            const float kb = kKeys ? 0x1p-16f * fabsf(best[i]) + 0x1p-140f : 0.f;
            const float ks = kKeys ? 0x1p-16f * fminf(fabsf(second[i]), 0x1p100f) + 0x1p-140f : 0.f;
            up = best[i] + kb + eps;
            lo = second[i] - ks - eps;
          }
          recordRawBounds(p.boundUpper, p.boundLower, r, decided, gr, up, lo);
          if (!decided) {
            const unsigned slot = atomicAdd(p.flaggedCount, 1u);
            p.flagged[slot] = r;
            if constexpr (THREE) {
              const float thr = best[i] + 2.f * eps;
              p.flaggedThr[slot] = thr + fabsf(thr) * 1e-6f;  // the window, rounded outwards
            }
          }
        }
      }
    }
  }
#endif
}

// ---- host side ----

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled lives in the driver (libcuda), which the addon does not link (static cudart, loads on
// machines without a driver): ask the runtime for the entry point once.
EncodeTiledFn encodeTiled() {
  static EncodeTiledFn fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiledFn>(f);
    else
      cudaGetLastError();
  });
  return fn;
}

// A 2-D map over a row-major [outer][dp] array of 16-bit values, boxes of 64 × boxRows, 128-byte swizzle.
bool makeMap(CUtensorMap* map, const void* base, std::int64_t outer, int dp, int boxRows) {
  EncodeTiledFn fn = encodeTiled();
  if (!fn) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(dp), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(dp) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kChunk), static_cast<cuuint32_t>(boxRows)};
  const cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base),
            dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}


template <int MODE, int M, bool GATHER>
void launchHopper(const CUtensorMap (&maps)[4], const HopperArgs& a, std::size_t smem, int grid, cudaStream_t s) {
  allowDynamicSmem(reinterpret_cast<const void*>(assignHopperKernel<MODE, M, GATHER>), smem);
  assignHopperKernel<MODE, M, GATHER><<<grid, kThreadsH, smem, s>>>(maps[0], maps[1], maps[2], maps[3], a);
}

// Shared memory of one launch: rows (aBufs buffers), the centroid ring, barriers. False when it can't fit.
bool sizeLaunch(HopperArgs& a, int terms, int M, const DeviceFacts& dev, std::size_t* smem) {
  const std::size_t aBytes = static_cast<std::size_t>(a.nK) * terms * aChunkBytes(M);
  const std::size_t fixed = 1024 /* alignment slack */ + kBarrierBytes;
  const std::size_t optin = static_cast<std::size_t>(dev.smemOptin);
  // M = 2: a tile's stages must all fit in the ring (a consumer releases them together), plus one to load ahead;
  // M = 1: two k-chunks' stages per consumer (the one in flight and the one being issued), plus one
  const std::size_t held = M == 1 ? 2 * static_cast<std::size_t>(terms) : static_cast<std::size_t>(a.nK) * terms;
  const std::size_t minStages = std::max<std::size_t>(kMinStages, held + 1);
  if (fixed + aBytes + minStages * kStageBytes > optin) return false;
  // Two row buffers when that still leaves the ring deep enough: the next block's rows then load during this one.
  a.aBufs = fixed + 2 * aBytes + std::max<std::size_t>(4, minStages) * kStageBytes <= optin ? 2 : 1;
  a.stages = static_cast<int>(std::min<std::size_t>(kMaxStages, (optin - fixed - a.aBufs * aBytes) / kStageBytes));
  *smem = fixed + a.aBufs * aBytes + static_cast<std::size_t>(a.stages) * kStageBytes;
  return true;
}

}  // namespace

bool hopperAssignTakes(int d) {
  return static_cast<int>(padDims(d)) <= kMaxDp && currentDeviceFacts().hopper;
}

bool assignRowsHopper(const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k, OpKind op,
                      std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                      const ExactBound& bound, const ExactScreen& screen, cudaStream_t s) {
  if (n <= 0 || n > INT32_MAX / 2 || !hopperAssignTakes(d)) return false;  // row indices (and one block ahead) in int
  const int dp = static_cast<int>(padDims(d));
  const DeviceFacts dev = currentDeviceFacts();
  const bool three = op == OpKind::F16x3;
  const int terms = three ? 2 : 1;
  // 128-row blocks where 256 rows of hi + lo would not fit
  const int M = three && dp > 128 ? 1 : 2;

  HopperArgs a{};
  a.nK = dp / kChunk;
  std::size_t smem = 0;
  if (!sizeLaunch(a, terms, M, dev, &smem)) return false;
  // exact mode screened by one product first (rows and centroids: the hi operands, 256-row blocks)
  const bool screened = three && screen.rows && screen.count;
  HopperArgs screenShape{};  // the screen's row buffers and ring (one product, 256-row blocks)
  screenShape.nK = a.nK;
  std::size_t screenSmem = 0;
  if (screened && !sizeLaunch(screenShape, 1, 2, dev, &screenSmem)) return false;

  const std::int64_t kp = padCentroids(k);
  CUtensorMap maps[4];  // rows hi, rows lo, centroids hi, centroids lo (lo = hi when one product)
  const int blockRows = blockRowsH(M);
  if (!makeMap(&maps[0], rows.ahi, n, dp, screened ? blockRowsH(2) : blockRows) ||
      !makeMap(&maps[2], c.bhi, kp, dp, kTileN))
    return false;
  if (three) {
    if (!makeMap(&maps[1], rows.alo, n, dp, blockRows) || !makeMap(&maps[3], c.blo, kp, dp, kTileN))
      return false;
  } else {
    maps[1] = maps[0];
    maps[3] = maps[2];
  }

  a.rowScale = rows.rowScale;
  a.rowNorm = rows.rowNorm;
  a.rowNormLo = rows.rowNormLo;
  a.cnorm = c.cnorm;
  a.labels = labels;
  a.flagged = flagged;
  a.flaggedCount = flaggedCount;
  a.flaggedThr = flaggedThr;
  a.boundUpper = rows.boundUpper;
  a.boundLower = rows.boundLower;
  a.n = static_cast<int>(n);
  a.dp = dp;
  a.nTiles = static_cast<int>(kp / kTileN);
  a.rowBlocks = static_cast<int>((n + blockRows - 1) / blockRows);
  a.halfScaleC = c.scale * 0.5f;
  a.keyMask = ~31u;
  a.keyMask16 = 0xFFF0FFF0u;  // the low 4 bits of each bf16 half
  a.bound = bound;
  const int grid = std::min(a.rowBlocks, dev.sms);
  if (screened) {
    // 1. one product over every row: labels, and the rows the one-product bound can't decide → screen.rows
    HopperArgs sa = a;
    sa.aBufs = screenShape.aBufs;
    sa.stages = screenShape.stages;
    sa.flagged = screen.rows;
    sa.flaggedCount = screen.count;
    sa.flaggedThr = nullptr;
    sa.bound = screen.bound;
    sa.rowBlocks = static_cast<int>((n + blockRowsH(2) - 1) / blockRowsH(2));
    sa.refOut = rows.screenRef;
    sa.refIn = rows.screenRelative ? rows.screenRef : nullptr;
    if (!screen.listed) {
      if (cudaMemsetAsync(screen.count, 0, sizeof(unsigned), s) != cudaSuccess) return false;
      if (sa.refIn) launchHopper<kScreenRef, 2, false>(maps, sa, screenSmem, std::min(sa.rowBlocks, dev.sms), s);
      else launchHopper<kScreen, 2, false>(maps, sa, screenSmem, std::min(sa.rowBlocks, dev.sms), s);
      if (screen.alone) return true;
    }
    // 2. the exact products over those rows only (gathered; their count is on the device)
    a.rowIds = screen.rows;
    a.nDevice = screen.count;
    a.rowsHi = static_cast<const unsigned short*>(rows.ahi);
    a.rowsLo = static_cast<const unsigned short*>(rows.alo);
    if (M == 1) launchHopper<kExact, 1, true>(maps, a, smem, grid, s);
    else launchHopper<kExact, 2, true>(maps, a, smem, grid, s);
    return true;
  }
  if (three && M == 1) launchHopper<kExact, 1, false>(maps, a, smem, grid, s);
  else if (three) launchHopper<kExact, 2, false>(maps, a, smem, grid, s);
  else launchHopper<kPlain, 2, false>(maps, a, smem, grid, s);
  return true;
}

}  // namespace cuda
}  // namespace kmfleet
