// Fused distance + argmin on tensor cores (mma.sync m16n8k16, fp32 accumulate): the N×K matrix never
// leaves registers.
//
// Block: 128 rows × 128-centroid tiles, 4 warps in 2×2, each warp 64 rows × 64 centroids (4×8 MMA tiles).
// The rows' operands stay in shared memory for the whole block when they fit (Dp·terms ≤ 256 halves per row:
// "A resident"), else they stream beside the centroid tiles. Centroid tiles stream through a 3-stage
// cp.async pipeline, 64 dims at a time (32 in exact mode); shared tiles are XOR-swizzled so ldmatrix is
// conflict-free.
// Each thread keeps, for its 8 rows, (best, second best, best index) across all centroid tiles in
// registers; the quad/warp merge happens once at the end. Ties: strict '<' in increasing column order per
// thread and (distance, index) order in merges → the lowest index wins.
//
// The compared quantity per row r and centroid c is d' = g_r·‖c‖² − x̂_r·ĉ with x̂ = s_r·x, ĉ = s_c·c and
// g_r = s_r·s_c/2, i.e. (s_r·s_c/2)·(‖x−c‖² − ‖x‖²): a positive per-row multiple, so the argmin is unchanged.
//
// Exact mode (F16x3): x̂ = xh + xl, ĉ = ch + cl (fp16), acc = xh·ch + xh·cl + xl·ch. Error bound per row,
// in d' units, for every c (u16 = 2^-11 for the splits, fp32 accumulate; see cuda/NOTES.md "Exactness"):
//   |x̂ − xh − xl| ≤ 2^-22·|x̂| + 2^-25 per element (2^-25: fp16 subnormal half-step), likewise for ĉ;
//   the dropped xl·cl ≤ 2^-22·|x̂||ĉ|; fp32 accumulation ≤ (3·Dp/16 + 1)·2^-22·Σ|terms| (2 ulp per MMA
//   step, allowing truncation inside the tensor core: Fasi et al. 2021 measured round-toward-zero
//   alignment inside NVIDIA's fp32-accumulating MMA); ‖c‖² rounded to fp32 (2^-24) and the final FMA.
//   ε_r = 1.25·[ ĉmax·‖x̂_r‖·(3.2·2^-22 + (3Dp/16+1)·2^-22 + 2^-24) + 2^-25·√Dp·(‖x̂_r‖ + ĉmax)
//              + g_r·2·2^-24·cmax² + g_r·2^-23·(‖x̃_r‖ + cmax)² ]
//   (the last term: x − μ and c − μ are rounded to fp32 before the split, which moves each distance by at
//   most 2^-23·(‖x̃‖ + ‖c̃‖)²; zero when μ is not used).
// If d'₂ − d'₁ > 2ε_r the fp64 argmin is certainly the candidate; otherwise the row is flagged, candidateRows lists
// the centroids inside its window (≤ kCandidates, else all K) and recheckRows takes the fp64 argmin over them.
//
// The one-product screen (both kernels: assign_wgmma.cu kScreen, kScreenMode here): acc = xh·ch only. Its error, with x̂ = xh + xl + rx and
// ĉ = ch + cl + rc (rx, rc the split residuals above):
//   x̂·ĉ − xh·ch = xh·cl + xl·ch + xl·cl + (terms in rx, rc), so by Cauchy–Schwarz
//   |x̂·ĉ − xh·ch| ≤ ‖xh‖·CL + ‖xl‖·CH + ‖xl‖·CL + 3·2^-22·‖x̂‖·ĉmax + 2^-25·√Dp·(‖x̂‖ + ĉmax)
//   with CH = max‖ch‖, CL = max‖cl‖ over the centroids and ‖xl‖ per row, all computed from the stored operands and
//   rounded up (operands.cu), ‖xh‖ ≤ ‖x̂‖ + ‖xl‖ (+ ‖rx‖, in the slack); fp32 accumulation over Dp/16 steps
//   ≤ (Dp/16 + 1)·2^-22·‖xh‖·CH; the ‖c‖², final-FMA and μ terms as above. So ε_r = epsX·‖x̂‖ + epsL·‖xl‖ + … with
//   epsX = 1.25·[CL + A·CH + (3·2^-22 + 2^-24)·ĉmax + 2^-25·√Dp], epsL = 1.25·[2·CL + CH + A·CH], A = (Dp/16+1)·2^-22.
//   ‖xl‖ and CL are the actual rounding residuals, typically ~0.35·2^-11 of the norms rather than the worst case
//   2^-11: about 0.4× the worst-case bound, which passes on ~2.5× fewer rows (random data: ~24 % → ~10 %).
//   Without the norms (rowNormLo null, or centroid operands prepared with a host scale): the worst case,
//   epsX = 1.25·[ĉmax·(2.2·2^-11 + 1.01·(Dp/16 + 1)·2^-22 + 2^-24) + 2^-25·√Dp], epsL = 0.
// A row whose screen margin is beyond 2ε_r keeps the screen's label (the same argument as above); the others take
// the three products and the margin test above, then the recheck.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "assign.cuh"
#include "device_facts.cuh"
#include "row_bounds.cuh"
#ifdef KMFLEET_HOPPER
#include "assign_wgmma.cuh"
#endif

namespace kmfleet {
namespace cuda {
namespace {

constexpr int BM = kBlockRows, BN = kBlockCentroids;
constexpr int STAGES = 3;  // cp.async pipeline depth
constexpr int THREADS = 128;
static_assert(BM == BN, "A and B tiles share one layout");
static_assert(kDimChunk % 64 == 0, "Dp must hold whole 64-dim chunks");
constexpr std::size_t kResidentBytes = 64 * 1024;  // A stays resident when its Dp·terms fit in 64 KB
// Reduction-dim chunk per pipeline stage: 64 dims (half the barriers) for one-MMA modes; 32 in exact mode,
// whose hi+lo tiles would otherwise leave room for only one block per SM.
__host__ __device__ constexpr int bkFor(bool three) { return three ? 32 : 64; }

struct AssignArgs {
  const unsigned short* ahi;
  const unsigned short* alo;
  const float* rowScale;
  const float* rowNorm;
  const unsigned short* bhi;
  const unsigned short* blo;
  const float* cnorm;
  int n, dp, kp;
  int aResident;
  float halfScaleC;            // s_c / 2
  float epsX, epsC, epsG;      // ε_r = epsX·‖x̂_r‖ + epsC + epsG·g_r + epsM·g_r·(‖x̂_r‖/s_r + cmax)²
  float epsM, cmax;
  int* labels;
  int* flagged;
  unsigned* flaggedCount;
  float* flaggedThr;           // exact mode: b1 + 2ε of each flagged row (its candidate window)
  // Candidate mode (second pass over the flagged rows only): rows = flagged[0..*flaggedCount), and every
  // centroid whose d' ≤ flaggedThr is appended to cand[slot·kCandidates ..] (count in candCount[slot]).
  int* candCount;
  int* cand;
  // Exact pass over the rows the screen listed (GATHER): rows = rowIds[0..min(*nDevice, n)).
  const int* rowIds;
  const unsigned* nDevice;
  // The screen: ε_r += epsL·‖xl_r‖ (assign_wgmma.cuh ExactBound)
  const float* rowNormLo;
  float epsL;
  // Margin modes, resident rows with bounds (types.h RowOps): the rows' bounds out (row_bounds.cuh recordRawBounds)
  float* boundUpper;
  float* boundLower;
};

// What a launch computes (as assign_wgmma.cu's modes): one product and the label; one product with best and second
// best and the screen's margin test (rows listed for the exact pass); three products and the exact margin test.
enum : int { kPlainMode = 0, kScreenMode = 1, kExactMode = 2 };

__device__ __forceinline__ unsigned smemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cpCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Element offset of 16-byte chunk c of row r in a swizzled [rows][BK] tile: 8 consecutive rows reading the
// same logical chunk hit 8 different 16-byte bank groups (conflict-free ldmatrix).
template <int BK>
__device__ __forceinline__ int swz(int r, int c) {
  if constexpr (BK == 32) return r * BK + ((c ^ ((r >> 1) & 3)) << 3);
  else return r * BK + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ void ldsm4(unsigned (&r)[4], const unsigned short* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Merge (o1, o2, oi) into (b1, b2, bi): union's best by (distance, index), second best = min of the rest.
__device__ __forceinline__ void mergeBest(float& b1, float& b2, int& bi, float o1, float o2, int oi) {
  bool other = o1 < b1 || (o1 == b1 && oi < bi);
  float nb2 = other ? fminf(b1, o2) : fminf(b2, o1);
  b1 = other ? o1 : b1;
  bi = other ? oi : bi;
  b2 = nb2;
}

template <int MODE, bool GATHER>
__device__ __forceinline__ void mergeAndWrite(const AssignArgs& p, unsigned short* smem, const int* sRow, int nRows,
                                              float (&b1)[8], float (&b2)[8], int (&bi)[8], int row0, int tid, int lane,
                                              int wm, int wn);

// One block of BM rows against centroid tiles [ct0, ct0 + nTiles): rows row0.. of the launch (candidate mode:
// flagged-list positions, GATHER: positions in rowIds; sRow their rows; nRows the launch's row count).
// Long on purpose: its fragments and the per-row best two stay in registers across the tile loop (forceinline'd
// into the three kernels that call it); the steps around the loop are the functions declared above.
template <int MODE, bool CAND, bool GATHER>
__device__ __forceinline__ void assignBlock(const AssignArgs& p, unsigned short* smem, int* sRow, int row0, int nRows,
                                            int ct0, int nTiles) {
  constexpr bool THREE = MODE == kExactMode, MARGIN = MODE != kPlainMode, LIST = CAND || GATHER;
  constexpr int BK = bkFor(THREE), TILE = BM * BK, CPR = BK / 8;  // CPR: 16-byte chunks per tile row
  constexpr int TERMS = THREE ? 2 : 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  if (LIST) {
    const int* list = CAND ? p.flagged : p.rowIds;
    if (tid < BM) sRow[tid] = row0 + tid < nRows ? list[row0 + tid] : 0;
    __syncthreads();
  }
  const int nK = p.dp / BK;
  const int T = nTiles * nK;

  unsigned short* sA = smem;
  unsigned short* sB = smem + (p.aResident ? nK : STAGES) * TERMS * TILE;

  auto loadA = [&](int kc, int slot) {
    unsigned short* base = sA + slot * TERMS * TILE;
    for (int i = tid; i < BM * CPR; i += THREADS) {
      const int r = i / CPR, c = i % CPR;
      const bool ok = row0 + r < nRows;
      const int gr = LIST ? sRow[r] : row0 + r;
      const size_t off = static_cast<size_t>(ok ? gr : 0) * p.dp + kc * BK + c * 8;
      cpAsync16(base + swz<BK>(r, c), p.ahi + off, ok);
      if (THREE) cpAsync16(base + TILE + swz<BK>(r, c), p.alo + off, ok);
    }
  };
  // Stages are loaded in order t = 0, 1, …: their (tile, k-chunk) kept as a cursor. nK is a runtime value, and
  // t / nK, t % nK cost ~20 instructions each per stage, on the loop's issue path.
  int loadCt = ct0, loadKc = 0;
  auto loadStage = [&](int t) {
    const int ct = loadCt, kc = loadKc, slot = t % STAGES;
    if (++loadKc == nK) {
      loadKc = 0;
      ++loadCt;
    }
    unsigned short* base = sB + slot * TERMS * TILE;
    for (int i = tid; i < BN * CPR; i += THREADS) {
      const int r = i / CPR, c = i % CPR;
      const size_t off = static_cast<size_t>(ct * BN + r) * p.dp + kc * BK + c * 8;
      cpAsync16(base + swz<BK>(r, c), p.bhi + off, true);
      if (THREE) cpAsync16(base + TILE + swz<BK>(r, c), p.blo + off, true);
    }
    if (!p.aResident) loadA(kc, slot);
  };

  if (p.aResident)
    for (int kc = 0; kc < nK; ++kc) loadA(kc, kc);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < T) loadStage(s);
    cpCommit();
  }

  // Per-thread rows: i = mi*2 + h → row wm*64 + mi*16 + h*8 + lane/4.
  float g[8], b1[8], b2[8];
  int bi[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lr = wm * 64 + (i >> 1) * 16 + (i & 1) * 8 + (lane >> 2);
    const int r = row0 + lr;
    if (CAND) {
      g[i] = r < nRows ? p.rowScale[sRow[lr]] * p.halfScaleC : 1.f;
      b1[i] = r < nRows ? p.flaggedThr[r] : -INFINITY;  // the window
    } else if (GATHER) {
      g[i] = r < nRows ? p.rowScale[sRow[lr]] * p.halfScaleC : 1.f;
      b1[i] = INFINITY;
    } else {
      g[i] = r < p.n ? p.rowScale[r] * p.halfScaleC : 1.f;
      b1[i] = INFINITY;
    }
    b2[i] = INFINITY;
    bi[i] = 0;
  }

  float acc[4][8][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;

  // (ct, kc): stage t's tile and k-chunk, stepped like loadStage's cursor (kc wraps to 0 → the next tile)
  for (int t = 0, ct = ct0, kc = 0; t < T; ++t, kc = kc + 1 == nK ? 0 : kc + 1, ct += kc == 0) {
    cpWait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < T) loadStage(t + STAGES - 1);
    cpCommit();

    const int slot = t % STAGES;
    const unsigned short* a = sA + (p.aResident ? kc : slot) * TERMS * TILE;
    const unsigned short* b = sB + slot * TERMS * TILE;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned ah[4][4], al[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int r = wm * 64 + mi * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
        ldsm4(ah[mi], a + swz<BK>(r, c));
        if (THREE) ldsm4(al[mi], a + TILE + swz<BK>(r, c));
      }
      // All B fragments of this k16 step first (one-product mode), so the MMAs don't wait on each ldmatrix;
      // exact mode has no registers to spare and loads them per column pair.
      unsigned bh[4][4], bl[4][4];
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (THREE && np > 0) break;
        const int r = wn * 64 + np * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
        ldsm4(bh[np], b + swz<BK>(r, c));
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        const int r = wn * 64 + np * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
        const int q = THREE ? 0 : np;
        if (THREE) {
          if (np > 0) ldsm4(bh[0], b + swz<BK>(r, c));
          ldsm4(bl[0], b + TILE + swz<BK>(r, c));
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          mma(acc[mi][2 * np], ah[mi], bh[q][0], bh[q][1]);
          mma(acc[mi][2 * np + 1], ah[mi], bh[q][2], bh[q][3]);
          if (THREE) {
            mma(acc[mi][2 * np], ah[mi], bl[0][0], bl[0][1]);
            mma(acc[mi][2 * np + 1], ah[mi], bl[0][2], bl[0][3]);
            mma(acc[mi][2 * np], al[mi], bh[0][0], bh[0][1]);
            mma(acc[mi][2 * np + 1], al[mi], bh[0][2], bh[0][3]);
          }
        }
      }
    }

    if (!MARGIN && !CAND && kc == nK - 1) {
      // Epilogue, approximate modes: per row a min-tree over the thread's 16 columns (independent compares,
      // left operand = lower column, the right one wins only when strictly smaller), then one compare with
      // the running best.
      const int base = ct * BN + wn * 64 + 2 * (lane & 3);
      float2 cn[8];
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) cn[ni] = *reinterpret_cast<const float2*>(p.cnorm + base + ni * 8);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = mi * 2 + h;
          float v[16];
          int q[16];
#pragma unroll
          for (int ni = 0; ni < 8; ++ni) {
            v[2 * ni] = fmaf(g[i], cn[ni].x, -acc[mi][ni][2 * h]);
            v[2 * ni + 1] = fmaf(g[i], cn[ni].y, -acc[mi][ni][2 * h + 1]);
            q[2 * ni] = ni * 8;
            q[2 * ni + 1] = ni * 8 + 1;
            acc[mi][ni][2 * h] = 0.f;
            acc[mi][ni][2 * h + 1] = 0.f;
          }
#pragma unroll
          for (int w = 1; w < 16; w <<= 1)
#pragma unroll
            for (int e = 0; e < 16; e += 2 * w) {
              const bool right = v[e + w] < v[e];
              v[e] = right ? v[e + w] : v[e];
              q[e] = right ? q[e + w] : q[e];
            }
          const bool lt = v[0] < b1[i];
          b1[i] = lt ? v[0] : b1[i];
          bi[i] = lt ? base + q[0] : bi[i];
        }
    } else if (kc == nK - 1) {  // epilogue of centroid tile ct: fold into the running best, in increasing column order
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
        const int col = ct * BN + wn * 64 + ni * 8 + 2 * (lane & 3);
        const float2 cn = *reinterpret_cast<const float2*>(p.cnorm + col);
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = mi * 2 + h;
            const float d0 = fmaf(g[i], cn.x, -acc[mi][ni][2 * h]);
            const float d1 = fmaf(g[i], cn.y, -acc[mi][ni][2 * h + 1]);
            if (CAND) {  // append the centroids inside the row's window
              const int slot = row0 + wm * 64 + mi * 16 + h * 8 + (lane >> 2);
              if (d0 <= b1[i]) {
                const int q = atomicAdd(p.candCount + slot, 1);
                if (q < kCandidates) p.cand[static_cast<size_t>(slot) * kCandidates + q] = col;
              }
              if (d1 <= b1[i]) {
                const int q = atomicAdd(p.candCount + slot, 1);
                if (q < kCandidates) p.cand[static_cast<size_t>(slot) * kCandidates + q] = col + 1;
              }
              acc[mi][ni][2 * h] = 0.f;
              acc[mi][ni][2 * h + 1] = 0.f;
              continue;
            }
            // second best only where a margin test needs it (exact and screen modes)
            bool lt = d0 < b1[i];
            if (MARGIN) b2[i] = lt ? b1[i] : fminf(b2[i], d0);
            bi[i] = lt ? col : bi[i];
            b1[i] = lt ? d0 : b1[i];
            lt = d1 < b1[i];
            if (MARGIN) b2[i] = lt ? b1[i] : fminf(b2[i], d1);
            bi[i] = lt ? col + 1 : bi[i];
            b1[i] = lt ? d1 : b1[i];
            acc[mi][ni][2 * h] = 0.f;
            acc[mi][ni][2 * h + 1] = 0.f;
          }
      }
    }
  }

  if constexpr (!CAND) mergeAndWrite<MODE, GATHER>(p, smem, sRow, nRows, b1, b2, bi, row0, tid, lane, wm, wn);
}

// Candidate mode (CAND) runs over the flagged rows only, whose count is on the device: a small grid of blocks
// loops over their row blocks, and blockIdx.y splits the centroid tiles, so a chunk's few flagged rows
// (~0.2 % of random rows) are swept over K by many SMs instead of one or two (candidates are appended with
// atomics in any order; the fp64 recheck decides by (distance, index), so the labels don't depend on it).
// GATHER (the exact pass over the rows the screen listed) loops the same way over its list, all tiles per block.
template <int MODE, bool CAND, bool GATHER>
__global__ void __launch_bounds__(THREADS) assignKernel(AssignArgs p) {
  extern __shared__ __align__(128) unsigned short smem[];
  __shared__ int sRow[CAND || GATHER ? BM : 1];  // candidate / gather mode: the rows of this block
  const int tiles = p.kp / BN;
  if constexpr (GATHER) {
    const int nRows = min(static_cast<int>(*p.nDevice), p.n);
    for (int row0 = blockIdx.x * BM; row0 < nRows; row0 += gridDim.x * BM) {
      assignBlock<MODE, false, true>(p, smem, sRow, row0, nRows, 0, tiles);
      cpWait<0>();      // the next row block reuses the shared memory
      __syncthreads();
    }
  } else if constexpr (!CAND) {
    assignBlock<MODE, false, false>(p, smem, sRow, blockIdx.x * BM, p.n, 0, tiles);
  } else {
    const int nRows = static_cast<int>(*p.flaggedCount);
    const int per = (tiles + gridDim.y - 1) / gridDim.y, ct0 = blockIdx.y * per;
    if (ct0 >= tiles) return;
    for (int row0 = blockIdx.x * BM; row0 < nRows; row0 += gridDim.x * BM) {
      assignBlock<MODE, true, false>(p, smem, sRow, row0, nRows, ct0, min(per, tiles - ct0));
      cpWait<0>();      // the next row block reuses the shared memory
      __syncthreads();
    }
  }
}

// Quad merge (the 4 lanes of a quad share rows), then the two column-warps through shared memory; labels and,
// in exact mode, the rows whose margin is within the bound.
template <int MODE, bool GATHER>
__device__ __forceinline__ void mergeAndWrite(const AssignArgs& p, unsigned short* smem, const int* sRow, int nRows,
                                              float (&b1)[8], float (&b2)[8], int (&bi)[8], int row0, int tid, int lane,
                                              int wm, int wn) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      const float o1 = __shfl_xor_sync(0xffffffffu, b1[i], off);
      const float o2 = __shfl_xor_sync(0xffffffffu, b2[i], off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi[i], off);
      mergeBest(b1[i], b2[i], bi[i], o1, o2, oi);
    }
  cpWait<0>();
  __syncthreads();
  float* s1 = reinterpret_cast<float*>(smem);
  float* s2 = s1 + 2 * BM;
  int* si = reinterpret_cast<int*>(s2 + 2 * BM);
  if ((lane & 3) == 0) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = wm * 64 + (i >> 1) * 16 + (i & 1) * 8 + (lane >> 2);
      s1[wn * BM + r] = b1[i];
      s2[wn * BM + r] = b2[i];
      si[wn * BM + r] = bi[i];
    }
  }
  __syncthreads();
  if (tid < BM && row0 + tid < (GATHER ? nRows : p.n)) {
    const int gr = GATHER ? sRow[tid] : row0 + tid;  // the row (GATHER: from the screen's list)
    float c1 = s1[tid], c2 = s2[tid];
    int ci = si[tid];
    mergeBest(c1, c2, ci, s1[BM + tid], s2[BM + tid], si[BM + tid]);
    p.labels[gr] = ci;
    if (MODE != kPlainMode) {  // kScreenMode: the screen's bound (epsL·‖xl‖ included); the rows within it are listed
      const float sx = p.rowScale[gr], xn = p.rowNorm[gr], gr_ = sx * p.halfScaleC;
      const float m = xn / sx + p.cmax;
      float eps = p.epsX * xn + p.epsC + gr_ * (p.epsG + p.epsM * m * m);
      if (MODE == kScreenMode && p.epsL > 0.f) eps += p.epsL * p.rowNormLo[gr];
      const bool decided = c2 - c1 > 2.f * eps;
      recordRawBounds(p.boundUpper, p.boundLower, gr, decided, gr_, c1 + eps, c2 - eps);
      if (!decided) {
        const unsigned slot = atomicAdd(p.flaggedCount, 1u);
        p.flagged[slot] = gr;
        if (MODE == kExactMode) {
          const float thr = c1 + 2.f * eps;
          p.flaggedThr[slot] = thr + fabsf(thr) * 1e-6f;  // the window, rounded outwards
        }
      }
    }
  }
}

template <int MODE, bool CAND = false, bool GATHER = false>
void launch(const AssignArgs& a, std::size_t smemBytes, cudaStream_t s, dim3 grid = dim3(0)) {
  allowDynamicSmem(reinterpret_cast<const void*>(assignKernel<MODE, CAND, GATHER>), smemBytes);
  if (grid.x == 0) grid = dim3(static_cast<unsigned>((a.n + BM - 1) / BM));
  assignKernel<MODE, CAND, GATHER><<<grid, THREADS, smemBytes, s>>>(a);
}

}  // namespace

std::size_t assignSharedBytes(OpKind op, int dp, int sharedMemoryLimit, bool* aResident) {
  // per-block opt-in limit of this device: 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/89. A lower
  // sharedMemoryLimit lets a machine with more shared memory run the layouts a smaller one would (sm_86/89: 101376,
  // sm_80: 166912).
  int optin = currentDeviceFacts().smemOptin;
  if (sharedMemoryLimit > 0 && sharedMemoryLimit < optin) optin = sharedMemoryLimit;
  const int terms = opTerms(op);
  const int bk = bkFor(op == OpKind::F16x3);
  const std::size_t tileBytes = static_cast<std::size_t>(BM) * bk * 2;
  const int nK = dp / bk;
  const std::size_t aRes = static_cast<std::size_t>(nK) * terms * tileBytes;
  const std::size_t stages = static_cast<std::size_t>(STAGES) * terms * tileBytes;
  const bool res = aRes <= kResidentBytes && aRes + stages <= static_cast<std::size_t>(optin);
  if (aResident) *aResident = res;
  return (res ? aRes : stages) + stages;
}

namespace {
AssignArgs makeArgs(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                    OpKind op, std::size_t* smemBytesOut) {
  const int dp = static_cast<int>(padDims(d));
  AssignArgs a{};
  a.ahi = static_cast<const unsigned short*>(rows.ahi);
  a.alo = static_cast<const unsigned short*>(rows.alo);
  a.rowScale = rows.rowScale;
  a.rowNorm = rows.rowNorm;
  a.boundUpper = rows.boundUpper;
  a.boundLower = rows.boundLower;
  a.bhi = static_cast<const unsigned short*>(c.bhi);
  a.blo = static_cast<const unsigned short*>(c.blo);
  a.cnorm = c.cnorm;
  a.n = static_cast<int>(n);
  a.dp = dp;
  (void)op;
  a.kp = static_cast<int>(padCentroids(k));
  bool res = false;
  const std::size_t smemBytes = assignSharedBytes(op, dp, kernel.sharedMemoryLimit, &res);
  a.aResident = res ? 1 : 0;
  a.halfScaleC = c.scale * 0.5f;
  const double cmaxS = static_cast<double>(c.scale) * c.maxNorm;  // ĉmax
  const double u22 = std::ldexp(1.0, -22), u24 = std::ldexp(1.0, -24),
               u25 = std::ldexp(1.0, -25);
  const double sq = std::sqrt(static_cast<double>(dp));
  a.epsX = static_cast<float>(1.25 * (cmaxS * (3.2 * u22 + (3.0 * dp / 16 + 1) * u22 + u24) + u25 * sq));
  a.epsC = static_cast<float>(1.25 * u25 * sq * cmaxS);
  a.epsG = static_cast<float>(1.25 * 2 * u24 * static_cast<double>(c.maxNorm) * c.maxNorm);
  a.epsM = c.shifted ? static_cast<float>(1.25 * 2 * u24) : 0.f;
  a.cmax = c.maxNorm;
  *smemBytesOut = smemBytes;
  return a;
}

// The one-product screen's bound (derivation at the top of this file) in place of the exact one: a's epsX and epsL
// (epsC, epsG, epsM are the same for both).
AssignArgs withScreenBound(AssignArgs a, const CentroidOps& c, const RowOps& rows) {
  const double cmaxS = static_cast<double>(c.scale) * c.maxNorm;
  const double u11 = std::ldexp(1.0, -11), u22 = std::ldexp(1.0, -22), u24 = std::ldexp(1.0, -24),
               u25 = std::ldexp(1.0, -25);
  const double dp = a.dp, sq = std::sqrt(dp), acc = (dp / 16 + 1) * u22;
  a.rowNormLo = rows.rowNormLo;
  if (rows.rowNormLo && c.hiNorm > 0.f) {  // the operands' own rounding residuals
    const double ch = c.hiNorm, cl = c.loNorm;
    a.epsX = static_cast<float>(1.25 * (cl + acc * ch + (3 * u22 + u24) * cmaxS + u25 * sq));
    a.epsL = static_cast<float>(1.25 * (2 * cl + ch + acc * ch));
  } else {  // the worst case of fp16 rounding
    a.epsX = static_cast<float>(1.25 * (cmaxS * (2.2 * u11 + 1.01 * acc + u24) + u25 * sq));
    a.epsL = 0.f;
  }
  return a;
}
}  // namespace

const char* assignKernelName(const AssignKernel& kernel, int d) {
#ifdef KMFLEET_HOPPER
  if (!kernel.portable && hopperAssignTakes(d)) return "wgmma";
#else
  (void)kernel;
  (void)d;
#endif
  return "mma.sync";
}

namespace {
// assignRows, screenRows and assignListedRows: screenAlone stops after the screen's launch (its labels are not exact);
// listed: screened/screenedCount already list the rows, and no screen runs
void assign(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
            OpKind op, std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
            std::int32_t* screened, unsigned int* screenedCount, bool screenAlone, bool listed, cudaStream_t s) {
  if (n <= 0) return;
  std::size_t smemBytes = 0;
  AssignArgs a = makeArgs(kernel, rows, n, d, c, k, op, &smemBytes);
#ifdef KMFLEET_HOPPER
  // wgmma on compute capability 9.0 when it takes the shape, with the same error bound (exact mode: screened by
  // one product first when the caller gave the scratch)
  const AssignArgs sb = withScreenBound(a, c, rows);
  if (!kernel.portable &&
      assignRowsHopper(rows, n, d, c, k, op, labels, flagged, flaggedCount, flaggedThr,
                       ExactBound{a.epsX, a.epsC, a.epsG, a.epsM, a.cmax},
                       ExactScreen{screened, screenedCount, ExactBound{sb.epsX, sb.epsC, sb.epsG, sb.epsM, sb.cmax, sb.epsL},
                                   screenAlone, listed},
                       s))
    return;
#endif
  a.labels = labels;
  a.flagged = flagged;
  a.flaggedCount = flaggedCount;
  a.flaggedThr = flaggedThr;
  if (op == OpKind::F16x3 && screened && screenedCount) {
    // 1. one product (the hi operands, 64-dim stages) over every row: labels, and the rows its bound can't decide
    if (!listed) {
      std::size_t screenSmem = 0;
      AssignArgs sa = withScreenBound(makeArgs(kernel, rows, n, d, c, k, OpKind::F16x1, &screenSmem), c, rows);
      sa.labels = labels;
      sa.flagged = screened;
      sa.flaggedCount = screenedCount;
      sa.flaggedThr = nullptr;
      cudaMemsetAsync(screenedCount, 0, sizeof(unsigned), s);
      launch<kScreenMode>(sa, screenSmem, s);
      if (screenAlone) return;
    }
    // 2. the three products for those rows (their count is on the device: a few waves of blocks loop over them)
    a.rowIds = screened;
    a.nDevice = screenedCount;
    const std::int64_t blocks = std::min<std::int64_t>((n + BM - 1) / BM, 4LL * currentDeviceFacts().sms);
    launch<kExactMode, false, true>(a, smemBytes, s, dim3(static_cast<unsigned>(blocks)));
    return;
  }
  switch (op) {
    case OpKind::F16x1: launch<kPlainMode>(a, smemBytes, s); break;
    case OpKind::F16x3: launch<kExactMode>(a, smemBytes, s); break;
  }
}
}  // namespace

void assignRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                OpKind op, std::int32_t* labels, std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr,
                std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s) {
  assign(kernel, rows, n, d, c, k, op, labels, flagged, flaggedCount, flaggedThr, screened, screenedCount, false, false,
         s);
}

void assignListedRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c,
                      int k, const std::int32_t* rowIds, const unsigned int* rowCount, std::int32_t* labels,
                      std::int32_t* flagged, unsigned int* flaggedCount, float* flaggedThr, cudaStream_t s) {
  assign(kernel, rows, maxRows, d, c, k, OpKind::F16x3, labels, flagged, flaggedCount, flaggedThr,
         const_cast<std::int32_t*>(rowIds), const_cast<unsigned*>(rowCount), false, true, s);
}

void screenRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t n, int d, const CentroidOps& c, int k,
                std::int32_t* labels, std::int32_t* screened, unsigned int* screenedCount, cudaStream_t s) {
  assign(kernel, rows, n, d, c, k, OpKind::F16x3, labels, nullptr, nullptr, nullptr, screened, screenedCount, true,
         false, s);
}

void candidateRows(const AssignKernel& kernel, const RowOps& rows, std::int64_t maxRows, int d, const CentroidOps& c, int k,
                   const std::int32_t* flagged, const unsigned int* flaggedCount, const float* flaggedThr,
                   int* candCount, int* cand, cudaStream_t s) {
  if (maxRows <= 0) return;
  std::size_t smemBytes = 0;
  AssignArgs a = makeArgs(kernel, rows, maxRows, d, c, k, OpKind::F16x3, &smemBytes);
  a.flagged = const_cast<int*>(flagged);
  a.flaggedCount = const_cast<unsigned*>(flaggedCount);
  a.flaggedThr = const_cast<float*>(flaggedThr);
  a.candCount = candCount;
  a.cand = cand;
  cudaMemsetAsync(candCount, 0, sizeof(int) * static_cast<size_t>(maxRows), s);
  // Tiles split over y in groups of ≥ 2 (each group reloads the rows: many flagged rows, as on blobs, must not
  // pay that per tile), at most 8 groups; ~2 waves of blocks loop over the flagged row blocks.
  const int tiles = a.kp / BN;
  const int split = std::max(1, std::min(tiles / 2, 8));
  const int rowBlocks = static_cast<int>(std::min<std::int64_t>((maxRows + BM - 1) / BM, std::max(1, 264 / split)));
  launch<kExactMode, true>(a, smemBytes, s, dim3(rowBlocks, split));
}

}  // namespace cuda
}  // namespace kmfleet
