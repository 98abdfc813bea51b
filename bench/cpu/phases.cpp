// Where a CPU pass spends its time, per phase, in thread CPU time (robust on a shared machine: time spent
// descheduled does not count). Links the backend's units directly; one thread unless THREADS is given.
//   g++ -O3 ... (see bench/cpu/phases.sh)   ./phases N D K [iters] [threads]
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/cpu_internal.h"

using namespace kmfleet;
using namespace kmfleet::cpu;

static double cpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const std::int64_t N = atoll(argv[1]), D = atoll(argv[2]), K = atoll(argv[3]);
  const int iters = argc > 4 ? atoi(argv[4]) : 3, threads = argc > 5 ? atoi(argv[5]) : 1;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> nd;
  std::vector<float> x(N * D);
  for (auto& v : x) v = nd(rng);
  std::vector<double> norm2(N);
  for (std::int64_t r = 0; r < N; ++r) {
    double s = 0;
    for (std::int64_t d = 0; d < D; ++d) s += double(x[r * D + d]) * x[r * D + d];
    norm2[r] = s;
  }
  // centroids: the first K rows, then WARM untimed Lloyd iterations (the benchmark's init and its later passes)
  std::vector<float> c(x.begin(), x.begin() + K * D);
  const int warm = getenv("WARM") ? atoi(getenv("WARM")) : 3;
  const KernelTable& kt = selectKernels();
  const ScreenKernel* screen = selectScreen();
  ThreadPool pool(threads);
  std::vector<AssignScratch> scratch(threads);
  CentroidPack pack;
  std::vector<std::int32_t> labels(N);
  Accumulator acc;
  double tPack = 0, tAssign = 0, tAcc = 0;
  AssignCounts counts;
  AssignWork work;
  const std::int64_t piece = std::max<std::int64_t>(32 * threads, ((std::int64_t{1} << 20) / (D * 4) + 31) / 32 * 32);
  for (int it = -warm; it < iters; ++it) {
    if (it == 0) tPack = tAssign = tAcc = 0, counts = AssignCounts();
    double t0 = cpuNow();
    pack.build(c.data(), K, D, kt, screen, pool);
    work.allocate(piece, screen != nullptr);
    for (auto& s : scratch) {
      s.kernel.allocate(std::max(scratchFloats(D), screenScratchFloats(D, pack.kpad)), "k");
      s.row.allocate(pack.kpad, "k");
    }
    acc.beginPass(pool, K, D, Metric::L2, 0, N);
    double t1 = cpuNow();
    tPack += t1 - t0;
    for (std::int64_t p0 = 0; p0 < N; p0 += piece) {
      const std::int64_t m = std::min(piece, N - p0);
      double a = cpuNow();
      assignRows(kt, screen, pool, scratch, pack, x.data() + p0 * D, norm2.data() + p0, m, work, labels.data() + p0,
                 counts);
      double b = cpuNow();
      pool.run([&](int tid, int nt) {
        std::int64_t rb, re;
        ThreadPool::range(m, tid, nt, 32, rb, re);
        acc.startPiece(tid);
        acc.collect(tid, p0, rb, re, labels.data() + p0);
      });
      pool.run([&](int tid, int nt) {
        for (int t = tid; t < acc.tasks(); t += nt) acc.moveTask(t, p0, x.data() + p0 * D);
      });
      acc.addRowsSeen(m);
      double e = cpuNow();
      tAssign += b - a;
      tAcc += e - b;
    }
    PassTotals t = acc.finish(pool, pack, x.data(), norm2.data(), N, labels.data());
    for (std::int64_t k = 0; k < K; ++k)
      if (t.counts[k] > 0)
        for (std::int64_t d = 0; d < D; ++d) c[k * D + d] = float(t.sums[k * D + d] / double(t.counts[k]));
  }
  const double flops = 2.0 * N * D * K * iters;
  const double rows = double(N) * iters;
  std::printf("%s N=%lld D=%lld K=%lld threads=%d: pack %.1f ms  assign %.1f ms (%.0f GFLOP/s per cpu-s)  statistics %.1f ms"
              "  [per iteration, cpu time summed over threads]\n  rows: screen %.2f%%, pair %.2f%%, fp32 %.2f%%, fp64 "
              "recheck %.3f%%\n",
              screen ? screen->isa : kt.isa, (long long)N, (long long)D, (long long)K, threads, tPack * 1e3 / iters,
              tAssign * 1e3 / iters, flops / tAssign * 1e-9, tAcc * 1e3 / iters, 100 * counts.screened / rows,
              100 * counts.pairs / rows, 100 * counts.fp32 / rows, 100 * counts.rechecked / rows);
  return 0;
}
