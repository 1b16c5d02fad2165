#pragma once
// Deterministic pseudo-random numbers: xoshiro256** seeded through
// splitmix64. std distributions are implementation-defined, so uniform() is
// built here from raw bits and a seed reproduces a run on every platform.
#include <cstdint>

namespace parspec {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    // splitmix64 outputs of distinct inputs are distinct, so the state is
    // never all zero (the one state xoshiro cannot leave).
    uint64_t counter = seed;
    for (uint64_t& word : state_) word = splitmix64(counter);
  }

  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t shifted = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= shifted;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1): the top 53 bits, so every value is an exact double.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  bool operator==(const Rng&) const = default;

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  static uint64_t splitmix64(uint64_t& counter) {
    uint64_t z = (counter += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_[4];
};

}  // namespace parspec
