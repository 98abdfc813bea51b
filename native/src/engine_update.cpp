// The Engine's centroid update after a fit pass and the data variance, from a backend's fp64 totals (shared by every
// backend: DESIGN.md "Numerics").
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine.h"
#include "row_math.h"
#include "thread_pool.h"

namespace kmfleet {

// sklearn's tol is relative to mean(var(X, axis=0)). From the pass's totals, without another look at the data:
// Σ_i ‖x_i − μ‖² = Σ_c [ Σ_{i∈c} ‖x_i − o_c‖² − n_c ‖μ_c − o_c‖² + n_c ‖μ_c − μ‖² ]  (o_c: the pass's centroid, a
// shift that keeps the fp64 sums well conditioned; μ_c: the cluster's mean). For cosine the rows and centroids
// are unit vectors, so Σ‖x − o‖² = 2·Σ(1 − cos).
// Both functions below split their loops over the pool (at 1M×256×4096-sized K×D one thread takes ~1 ms a pass, as
// much as a GPU pass's sums): every per-cluster or per-dimension value is computed by one thread in a fixed order, and
// the cross-cluster totals are added in cluster order on one thread, so the bits don't depend on the threads.
// The pass's centroids for the host's update. A pass whose centroids the backend kept from its device update does not
// copy them at its start (engine.cpp runBegin); centroids_ still holds them here, since nothing replaces it while a
// pass is open.
const std::vector<float>& Engine::passCentroids() {
  if (!passCentroidsCopied_) {
    std::lock_guard<std::mutex> lock(mu_);
    hostCentroidsLocked();
    passCentroids_.resize(centroids_.size());
    pool_->copy(passCentroids_.data(), centroids_.data(), centroids_.size());
    passCentroidsCopied_ = true;
  }
  return passCentroids_;
}

double Engine::dataVariance(const PassTotals& t) {
  const std::int64_t K = cfg_.k, D = cfg_.dims;
  const double N = static_cast<double>(t.rowsSeen);
  if (t.rowsSeen == 0 || t.sums.size() != static_cast<std::size_t>(K * D)) return std::numeric_limits<double>::quiet_NaN();
  const std::vector<float>& pc = passCentroids();
  std::vector<double> mu(static_cast<std::size_t>(D), 0.0);
  pool_->run([&](int tid, int nt) {  // per dimension, clusters in order
    std::int64_t b = 0, e = 0;
    ThreadPool::range(D, tid, nt, 1, b, e);
    // clusters outer, this thread's dimensions inner: each cluster's slice is read in order (a column walk with a
    // K×D stride is several times slower); every mu[d] still adds the clusters in order
    double* m = mu.data();
    for (std::int64_t k = 0; k < K; ++k) {
      const double* row = t.sums.data() + k * D;
      for (std::int64_t d = b; d < e; ++d) m[d] += row[d];
    }
    for (std::int64_t d = b; d < e; ++d) m[d] /= N;
  });
  std::vector<double> part(static_cast<std::size_t>(K), 0.0);
  pool_->run([&](int tid, int nt) {
    std::int64_t b = 0, e = 0;
    ThreadPool::range(K, tid, nt, 1, b, e);
    for (std::int64_t k = b; k < e; ++k) {
      const double n = static_cast<double>(t.counts[k]);
      if (n == 0) continue;
      const double s = cfg_.metric == Metric::Cosine ? 2.0 * t.inertia[k] : t.inertia[k];
      double off = 0, spread = 0;
      for (std::int64_t d = 0; d < D; ++d) {
        const double mk = t.sums[k * D + d] / n;
        const double a = mk - pc[k * D + d], c = mk - mu[d];
        off += a * a;
        spread += c * c;
      }
      part[k] = s - n * off + n * spread;
    }
  });
  double scatter = 0;
  for (std::int64_t k = 0; k < K; ++k)
    if (t.counts[k] != 0) scatter += part[k];
  return std::max(0.0, scatter) / (N * static_cast<double>(D));
}

void Engine::applyFit(const PassTotals& t, PassResult& r) {
  const std::int64_t K = cfg_.k, D = cfg_.dims;
  std::vector<std::int64_t> n = t.counts;
  std::vector<float>& next = nextCentroids_;
  const std::vector<float>& pc = passCentroids();
  next.resize(pc.size());
  pool_->copy(next.data(), pc.data(), pc.size());
  // Empty clusters, in index order, take the farthest rows in (distance desc, row asc) order — scikit-learn's
  // relocation — skipping a row whose cluster would become empty in turn. Only then are the sums copied.
  std::vector<double> reseeded;
  const std::vector<double>* sums = &t.sums;
  std::size_t cand = 0;
  for (std::int64_t k = 0; k < K; ++k) {
    if (n[k] != 0) continue;
    while (cand < t.farthest.size()) {
      const FarRow& f = t.farthest[cand++];
      if (n[f.label] <= 1) continue;
      if (sums != &reseeded) reseeded = t.sums, sums = &reseeded;
      for (std::int64_t d = 0; d < D; ++d) {
        reseeded[f.label * D + d] -= f.values[d];
        reseeded[k * D + d] = f.values[d];
      }
      --n[f.label];
      n[k] = 1;
      ++r.emptyReseeded;
      break;
    }
  }
  std::vector<double> shift(static_cast<std::size_t>(K), 0.0);
  pool_->run([&](int tid, int nt) {
    std::int64_t b = 0, e = 0;
    ThreadPool::range(K, tid, nt, 1, b, e);
    std::vector<double> m(static_cast<std::size_t>(D));
    for (std::int64_t k = b; k < e; ++k) {
      if (n[k] != 0) {  // still empty (no candidate left): keeps its centroid
        const double inv = 1.0 / static_cast<double>(n[k]);
        for (std::int64_t d = 0; d < D; ++d) m[d] = (*sums)[k * D + d] * inv;
        bool keep = false;
        if (cfg_.metric == Metric::Cosine) {
          double n2 = 0;
          for (double v : m) n2 += v * v;
          keep = !(n2 > 0);  // rows that cancel out: no direction, keep the old centroid
          if (!keep) {
            const double s = 1.0 / std::sqrt(n2);
            for (auto& v : m) v *= s;
          }
        }
        if (!keep)
          for (std::int64_t d = 0; d < D; ++d) next[k * D + d] = static_cast<float>(m[d]);
      }
      shift[k] = sqDist64(next.data() + k * D, pc.data() + k * D, D);
    }
  });
  for (std::int64_t k = 0; k < K; ++k) r.shift += shift[k];
  std::lock_guard<std::mutex> lock(mu_);
  std::swap(centroids_, next);  // the old centroids' buffer holds the next pass's result
  centroidsFromUpdate_ = false;
  centroidsOnDevice_ = false;
}

// The same update computed by the backend where the sums are (backend.h DeviceUpdate: every cluster non-empty, so no
// re-seeding). Its per-cluster terms come back and are added here in cluster order, as above: the same bits.
void Engine::applyDeviceFit(const PassTotals& t, PassResult& r, bool variance) {
  const std::int64_t K = cfg_.k, D = cfg_.dims;
  variance = variance && t.rowsSeen > 0;
  DeviceUpdate u;
  {
    // under mu_: the backend's copy down of the next centroids may reuse the host buffer that a copyCentroids() call on
    // the caller's thread is reading (Backend::copyUpdatedCentroids)
    std::lock_guard<std::mutex> lock(mu_);
    u = backend_->updateOnDevice(variance);
    centroidsFromUpdate_ = true;
    centroidsOnDevice_ = true;  // fetched when read (hostCentroidsLocked, copyCentroidsLocked)
  }
  r.updatedOnDevice = true;
  r.dataVariance = std::numeric_limits<double>::quiet_NaN();
  if (variance) {
    double scatter = 0;
    for (std::int64_t k = 0; k < K; ++k)
      if (t.counts[k] != 0) scatter += u.scatter[static_cast<std::size_t>(k)];
    r.dataVariance = std::max(0.0, scatter) / (static_cast<double>(t.rowsSeen) * static_cast<double>(D));
  }
  for (std::int64_t k = 0; k < K; ++k) r.shift += u.shift[static_cast<std::size_t>(k)];
}

}  // namespace kmfleet
