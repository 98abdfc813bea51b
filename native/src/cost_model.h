// backend: 'auto' — CPU or CUDA? The engine (engine.cpp, makeBackend) asks this before it starts a GPU: a small
// problem must not pay a CUDA context and transfers to be slower than the CPU backend. Free of CUDA on purpose.
//
// Model (seconds for a whole fit of `iterations` passes), rough but on the safe side for small problems:
//   CPU:  2·N·K·D flops per pass at ~12 GFLOP/s per thread (AVX2 FMA kernels measured at this order on
//         the build machine: sklearn 200k×64×256 takes 132 ms/iter on 2 cores ≈ 25 GFLOP/s).
//   CUDA: ~0.35 s once (context + module load + allocations), then per pass the products at 150 TFLOP/s,
//         the streamed bytes at 20 GB/s (H2D from the engine's pinned buffers, pessimistic) and 2 ms of
//         launches and syncs. The GPU wins only when the CPU would take longer than all of that.
#pragma once

#include <cstdint>

namespace kmfleet {
namespace costmodel {

inline double cpuSeconds(double n, double d, double k, int threads, int iterations) {
  const double flops = 2.0 * n * d * k;
  return iterations * flops / (12e9 * (threads > 0 ? threads : 1));
}

inline double cudaSeconds(double n, double d, double k, double rowBytes, double residentFraction, int iterations) {
  const double flops = 2.0 * n * d * k;
  const double firstPass = n * rowBytes / 20e9;
  const double laterPass = (1 - residentFraction) * n * rowBytes / 20e9;
  return 0.35 + firstPass + (iterations - 1) * laterPass + iterations * (flops / 150e12 + 0.002);
}

// True when CUDA should run a problem of this size (assuming a GPU is available).
inline bool preferCuda(std::int64_t n, std::int64_t d, std::int64_t k, std::int64_t rowBytes, int cpuThreads,
                       int iterations = 20) {
  return cudaSeconds(double(n), double(d), double(k), double(rowBytes), 1.0, iterations) <
         cpuSeconds(double(n), double(d), double(k), cpuThreads, iterations);
}

}  // namespace costmodel
}  // namespace kmfleet
