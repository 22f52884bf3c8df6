#pragma once
// Portable random helpers. std::uniform_*_distribution and std::shuffle are implemented differently
// by each standard library, so data pipelines that must reproduce bit for bit use these instead.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace libreyolo::data {

// SplitMix64 finaliser: a strong 64-bit mix used to derive independent seeds from small integers.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Seed of one sample: depends only on (run seed, epoch, position in the epoch), never on which
// worker thread produced it, so a loader gives identical results for any number of workers.
inline uint64_t sample_seed(uint64_t seed, int64_t epoch, uint64_t position) {
  return mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(epoch)) ^ position);
}

// Uniform double in [0, 1) from the top 53 bits.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform double in [lo, hi).
inline double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * uniform01(rng); }

// Uniform integer in [lo, hi] (inclusive). The modulo bias is below 2^-40 for ranges under 2^24.
inline int64_t randint(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

// True with probability p.
inline bool bernoulli(std::mt19937_64& rng, double p) { return uniform01(rng) < p; }

// Fisher-Yates shuffle with the helpers above (portable across standard libraries).
template <class T>
void shuffle_portable(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(randint(rng, 0, static_cast<int64_t>(i) - 1));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace libreyolo::data
