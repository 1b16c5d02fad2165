#pragma once
// A byte buffer on 2 MiB-aligned memory that the kernel is advised to back
// with huge pages, as a model's weights are held (model/gguf.cpp): for the
// benchmarks that stream memory the way a forward streams the weights, so
// that 4 KiB pages' TLB misses do not make them slower than a model.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace parspec {

// The x86-64 huge page (transparent huge pages): 2 MiB.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Throws parspec::Error when the memory cannot be had.
  explicit HugePageBuffer(size_t bytes);

  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> data_;
  size_t size_ = 0;
};

}  // namespace parspec
