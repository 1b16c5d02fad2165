#include "core/huge_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

#include "core/error.h"

namespace parspec {

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
  // aligned_alloc wants a multiple of the alignment.
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, rounded)));
  check(data_ != nullptr, "cannot allocate ", bytes >> 20, " MiB");
  madvise(data_.get(), rounded, MADV_HUGEPAGE);  // advice only: without THP it is 4 KiB pages
}

void HugePageBuffer::Free::operator()(uint8_t* p) const {
  std::free(p);
}

}  // namespace parspec
