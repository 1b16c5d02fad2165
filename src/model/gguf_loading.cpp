// How a GGUF file's bytes are held: mapped, or read into huge-page memory
// (with tensors rewritten on the way where a loader asks), and a mapped
// file's tensors read in later.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "core/huge_buffer.h"
#include "model/gguf.h"

namespace parspec {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLargeFile = size_t{64} << 20;  // from here on, weights want 2 MiB pages

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Reads `size` bytes at `offset` of `fd` into `dest`: "" when done, otherwise why not.
std::string read_fully(int fd, char* dest, size_t size, size_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = pread(fd, dest + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::strerror(errno);
    if (got == 0) return "file shrank while reading";
    done += static_cast<size_t>(got);
  }
  return "";
}

bool should_copy(WeightLoading loading) {
  switch (loading) {
    case WeightLoading::kCopy:
      return true;
    case WeightLoading::kMap:
      return false;
    case WeightLoading::kAuto:
      break;
  }
  // Mapped pages of a file that shrinks later are lost to the process: unless
  // asked to map, every file is read in (a small one costs milliseconds).
  const char* env = std::getenv("PARSPEC_MMAP");
  return env == nullptr || std::string_view(env) != "1";
}

// The file mapped read-only; a large file starts on a 2 MiB boundary, so that
// ranges hold_in_memory() reads in later can be backed by 2 MiB pages.
void* map_at_huge_page_boundary(int fd, size_t size) {
  const size_t reserved = size + kHugePageBytes;
  void* area = size < kLargeFile
                   ? MAP_FAILED
                   : mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const auto start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = round_up(start, kHugePageBytes);
  void* mapping =
      mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (mapping == MAP_FAILED) {
    munmap(area, reserved);
    return MAP_FAILED;
  }
  // Give back the reservation around the mapping.
  const uintptr_t end = aligned + round_up(size, kPage);
  if (aligned > start) munmap(area, aligned - start);
  if (start + reserved > end) munmap(reinterpret_cast<void*>(end), start + reserved - end);
  return mapping;
}

}  // namespace

void GgufFile::hold_in_memory(const std::vector<const GgufTensorInfo*>& tensors,
                              const TransformChooser& choose) {
  if (copied_ || mapping_ == nullptr) return;
  // Page ranges of the file, merged where less than a huge page apart.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const GgufTensorInfo* t : tensors) {
    const size_t begin = static_cast<size_t>(data_offset_ + t->offset);
    ranges.emplace_back(
        begin / kPage * kPage,
        std::min(round_up(begin + static_cast<size_t>(t->n_bytes), kPage), round_up(size_, kPage)));
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + kHugePageBytes)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  // Pages held by an earlier call keep their bytes (some of them rewritten).
  std::vector<std::pair<size_t, size_t>> fresh;
  for (auto [begin, end] : merged) {
    for (const auto& [held_begin, held_end] : held_pages_) {
      if (held_end <= begin || held_begin >= end) continue;
      if (held_begin > begin) fresh.emplace_back(begin, held_begin);
      begin = std::max(begin, held_end);
    }
    if (begin < end) fresh.emplace_back(begin, end);
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path_, ": cannot open: ", std::strerror(errno));
  auto* base = static_cast<char*>(mapping_);
  std::string error;
  auto give_up = [&](const std::string& why) {
    ::close(fd);
    fail(path_, why);
  };
  for (const auto& [begin, end] : fresh) {
    char* at = base + begin;
    // Anonymous pages replace the file's at the same addresses, then get its bytes.
    if (mmap(at, end - begin, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) == MAP_FAILED)
      give_up(std::string(": cannot hold tensors in memory: ") + std::strerror(errno));
    madvise(at, end - begin, MADV_HUGEPAGE);  // advice only
    error = read_fully(fd, at, std::min(end, size_) - begin, begin);
    if (!error.empty()) give_up(": cannot read: " + error);
    mprotect(at, end - begin, PROT_READ);
    held_bytes_ += end - begin;
    held_pages_.emplace_back(begin, end);
  }
  std::sort(held_pages_.begin(), held_pages_.end());
  // Tensors rewritten as they are read (repacked), in place over the held pages.
  transformed_.resize(tensors_.size(), false);
  for (const GgufTensorInfo* t : choose ? tensors : std::vector<const GgufTensorInfo*>{}) {
    const auto index = static_cast<size_t>(t - tensors_.data());
    if (transformed_[index]) continue;
    const TensorTransform transform = choose(*this, *t);
    if (!transform) continue;
    const size_t begin = static_cast<size_t>(data_offset_ + t->offset);
    const size_t page = begin / kPage * kPage;
    const size_t page_end = round_up(begin + static_cast<size_t>(t->n_bytes), kPage);
    mprotect(base + page, page_end - page, PROT_READ | PROT_WRITE);
    std::mutex mutex;
    auto read = [&, begin](size_t offset, size_t n, uint8_t* to) {
      const std::string why = read_fully(fd, reinterpret_cast<char*>(to), n, begin + offset);
      if (why.empty()) return true;
      const std::lock_guard lock(mutex);
      if (error.empty()) error = why;
      return false;
    };
    transform(read, reinterpret_cast<uint8_t*>(base + begin));
    mprotect(base + page, page_end - page, PROT_READ);
    if (!error.empty()) give_up(": cannot read: " + error);
    transformed_[index] = true;
  }
  ::close(fd);
}

void GgufFile::copy_to_huge_pages(int fd, WeightLoading loading, const TransformChooser& choose) {
  if (!should_copy(loading)) return;
  const bool large = size_ >= kLargeFile;
  const size_t rounded = round_up(size_, large ? kHugePageBytes : kPage);
  void* memory = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;                    // the mapping stays: slower, not wrong
  if (large) madvise(memory, rounded, MADV_HUGEPAGE);  // advice only: without THP, 4 KiB pages
#ifdef MADV_POPULATE_WRITE
  // Every page faulted in now, in order: transforms write from several threads
  // at once, and their faults left ~40% of a 1B model in 4 KiB pages in most
  // checks (docs/performance.md).
  madvise(memory, rounded, MADV_POPULATE_WRITE);  // advice only too (Linux 5.14+)
#endif
  auto* dest = static_cast<uint8_t*>(memory);
  std::string error;
  auto read_range = [&](size_t begin, size_t end) {
    if (error.empty() && begin < end)
      error = read_fully(fd, reinterpret_cast<char*>(dest + begin), end - begin, begin);
  };
  std::vector<bool> transformed(tensors_.size(), false);
  try {
    // Tensors in file order: the bytes before each transformed one are read
    // as they are, then the transform reads and rewrites the tensor's.
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    size_t cursor = 0;
    for (size_t i : choose ? order : std::vector<size_t>{}) {
      const GgufTensorInfo& info = tensors_[i];
      const TensorTransform transform = choose(*this, info);
      if (!transform) continue;
      const size_t begin = static_cast<size_t>(data_offset_ + info.offset);
      read_range(cursor, begin);
      std::mutex mutex;
      auto read = [&](size_t at, size_t n, uint8_t* to) {
        const std::string why = read_fully(fd, reinterpret_cast<char*>(to), n, begin + at);
        if (why.empty()) return true;
        const std::lock_guard lock(mutex);
        if (error.empty()) error = why;
        return false;
      };
      if (error.empty()) transform(read, dest + begin);
      transformed[i] = true;
      cursor = begin + static_cast<size_t>(info.n_bytes);
    }
    read_range(cursor, size_);
  } catch (...) {
    munmap(memory, rounded);
    throw;
  }
  if (!error.empty()) {
    munmap(memory, rounded);
    fail(path_, ": cannot read: ", error);
  }
  mprotect(memory, rounded, PROT_READ);
  guard_.reset();
  munmap(mapping_, mapped_size_);
  mapping_ = memory;
  mapped_size_ = rounded;
  base_ = dest;
  copied_ = true;
  transformed_ = std::move(transformed);
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, WeightLoading loading,
                                         const TransformChooser& choose) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    fail(path, ": empty file (truncated while reading header magic)");
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* mapping = map_at_huge_page_boundary(fd, size);
  if (mapping == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail(path, ": cannot mmap: ", std::strerror(err));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapped_size_ = size;
  file->base_ = static_cast<const uint8_t*>(mapping);
  file->size_ = size;
  file->guard_ = std::make_unique<MappedFileGuard>(mapping, size, path);
  try {
    // Parsed from the mapping (only the header's pages are read), then, where
    // the policy says copy, read into memory with the tensors' transforms.
    file->parse();  // on throw, the destructor unmaps
    file->copy_to_huge_pages(fd, loading, choose);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // a mapping keeps the file alive
  return file;
}

GgufFile::~GgufFile() {
  guard_.reset();
  if (mapping_ != nullptr) munmap(mapping_, mapped_size_);
}

}  // namespace parspec
