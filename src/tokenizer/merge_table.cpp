#include "tokenizer/merge_table.h"

namespace parspec {

bool MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  // At most half full keeps probe sequences short.
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = key_of(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) return false;
    if (slot.key == kEmpty) {
      slot = {key, merge};
      ++size_;
      return true;
    }
  }
}

void MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  const size_t capacity = old.empty() ? 64 : old.size() * 2;
  slots_.assign(capacity, Slot{kEmpty, {0, 0}});
  mask_ = capacity - 1;
  shift_ = 64;
  for (size_t c = capacity; c > 1; c >>= 1) --shift_;
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key == kEmpty) continue;
    for (size_t i = slot_of(slot.key);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = slot;
        ++size_;
        break;
      }
    }
  }
}

}  // namespace parspec
