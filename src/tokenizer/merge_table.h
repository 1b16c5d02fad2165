#pragma once
// The merges of a byte-level BPE vocabulary: (left id, right id) -> rank and
// resulting id, in an open-addressing hash table. Encoding looks a pair up for
// every candidate merge, so this lookup is the hot path of BPE.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace parspec {

class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  // Returns false (and keeps the existing entry) if the pair is already there.
  bool insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = key_of(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  // Token ids are below 2^31, so no pair has this key.
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // Fibonacci hashing: the top bits of key * 2^64/phi.
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace parspec
