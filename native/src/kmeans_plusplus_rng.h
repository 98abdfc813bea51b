// The seeded stream of k-means++ (splitmix64 → xoshiro256**), shared by the CPU version (kmeans_plusplus.cpp) and
// the GPU one (cuda/kernels/kmeans_plusplus.cu): both take the same uniforms in the same order (the first center, then
// per center one per candidate), so a seed means the same draws on either backend.
#pragma once

#include <cmath>
#include <cstdint>

namespace kmfleet {

class KmeansPlusPlusRng {
 public:
  explicit KmeansPlusPlusRng(std::uint64_t seed) {
    for (auto& w : s_) {  // splitmix64
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
  }
  std::uint64_t next() {  // xoshiro256**
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

// 2 + floor(ln k) candidates per center, as scikit-learn.
inline int kmeansPlusPlusTrials(std::int64_t k) { return 2 + static_cast<int>(std::floor(std::log(static_cast<double>(k)))); }

// The first center: row floor(u·n) of the sample for the stream's first uniform.
inline std::int64_t kmeansPlusPlusFirst(KmeansPlusPlusRng& rng, std::int64_t n) {
  const std::int64_t first = static_cast<std::int64_t>(rng.uniform() * static_cast<double>(n));
  return first >= n ? n - 1 : first;
}

}  // namespace kmfleet
