#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "core/huge_buffer.h"

namespace parspec {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read by memcpy: little-endian only");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Arrays of arrays are legal but nothing real nests deeply; the limit bounds recursion.
constexpr int kMaxArrayDepth = 4;
// Each decoded value costs ~50 bytes of memory for as little as 1 byte of file: cap the total
// (keys and array items) so a hostile file cannot make us allocate many times its size. Real
// models (vocab 256k: tokens, scores, types, merges) stay far below.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;
// Real models have at most a few thousand tensors.
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
// Vectors sized from a count in the file grow as items are actually read, beyond this.
constexpr uint64_t kMaxReserve = 4096;
// Smallest encodings, used to reject counts the remaining bytes cannot possibly hold.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset

bool is_known_value_type(uint32_t id) {
  return id <= static_cast<uint32_t>(GgufType::F64);
}

// Fixed encoded size of a scalar type; 0 for string and array.
uint64_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::STRING:
    case GgufType::ARRAY:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_size(GgufType type) {
  if (type == GgufType::STRING) return 8;  // u64 length
  if (type == GgufType::ARRAY) return 12;  // u32 element type + u64 count
  return scalar_size(type);
}

bool is_unsigned_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed_int(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_float(GgufType t) {
  return t == GgufType::F32 || t == GgufType::F64;
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  out += s;
  out += "'";
  return out;
}

// Sequential bounds-checked reader over the mapped bytes. Every failure names the file and
// what was being read (the context set by the caller plus the item).
class Reader {
 public:
  Reader(const std::string& file, const uint8_t* data, size_t size)
      : file_(file), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }
  void push_element(uint64_t index) { element_path_.push_back(index); }
  void pop_element() { element_path_.pop_back(); }

  template <class T>
  T read(std::string_view what) {
    if (remaining() < sizeof(T)) truncated(what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const auto length = read<uint64_t>(what);
    if (length > remaining()) {
      error(what, ": string length ", length, " exceeds the ", remaining(),
            " bytes left in the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
    pos_ += length;
    return s;
  }

  [[noreturn]] void truncated(std::string_view what) const {
    fail(file_, ": truncated while reading ", describe(what));
  }

  template <class... Parts>
  [[noreturn]] void error(std::string_view what, const Parts&... parts) const {
    fail(file_, ": ", describe(what), parts...);
  }

 private:
  std::string describe(std::string_view what) const {
    std::string s = context_;
    if (!what.empty()) {
      if (!s.empty()) s += ' ';
      s += what;
    }
    if (!element_path_.empty()) {
      s += " (array element ";
      for (size_t i = 0; i < element_path_.size(); ++i) {
        if (i > 0) s += '/';
        s += std::to_string(element_path_[i]);
      }
      s += ')';
    }
    return s;
  }

  const std::string& file_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string context_;
  std::vector<uint64_t> element_path_;
};

class MetadataParser {
 public:
  explicit MetadataParser(Reader& reader) : r_(reader) {}

  // Counts `n` more values against kMaxMetadataValues.
  void charge(uint64_t n, std::string_view what) {
    n_values_ += n;
    if (n_values_ > kMaxMetadataValues) {
      r_.error(what, ": too many metadata values in the file (limit ", kMaxMetadataValues, ")");
    }
  }

  GgufValue read_value(GgufType type, int depth) {
    switch (type) {
      case GgufType::U8:
        return {type, uint64_t{r_.read<uint8_t>("value")}};
      case GgufType::I8:
        return {type, int64_t{r_.read<int8_t>("value")}};
      case GgufType::U16:
        return {type, uint64_t{r_.read<uint16_t>("value")}};
      case GgufType::I16:
        return {type, int64_t{r_.read<int16_t>("value")}};
      case GgufType::U32:
        return {type, uint64_t{r_.read<uint32_t>("value")}};
      case GgufType::I32:
        return {type, int64_t{r_.read<int32_t>("value")}};
      case GgufType::U64:
        return {type, r_.read<uint64_t>("value")};
      case GgufType::I64:
        return {type, r_.read<int64_t>("value")};
      case GgufType::F32:
        return {type, double{r_.read<float>("value")}};
      case GgufType::F64:
        return {type, r_.read<double>("value")};
      case GgufType::BOOL: {
        const auto byte = r_.read<uint8_t>("value");
        if (byte > 1) r_.error("value", ": bool byte is ", int{byte}, ", expected 0 or 1");
        return {type, byte == 1};
      }
      case GgufType::STRING:
        return {type, r_.read_string("value")};
      case GgufType::ARRAY:
        return {type, read_array(depth)};
    }
    r_.error("value", ": bad value type ", static_cast<uint32_t>(type));
  }

 private:
  GgufArray read_array(int depth) {
    const auto elem_id = r_.read<uint32_t>("array element type");
    if (!is_known_value_type(elem_id)) {
      r_.error("value", ": bad array element type ", elem_id);
    }
    const auto elem_type = static_cast<GgufType>(elem_id);
    if (elem_type == GgufType::ARRAY && depth + 1 >= kMaxArrayDepth) {
      r_.error("value", ": arrays nested deeper than ", kMaxArrayDepth, " levels");
    }
    const auto count = r_.read<uint64_t>("array count");
    const uint64_t min_size = min_encoded_size(elem_type);
    if (count > r_.remaining() / min_size) {
      r_.error("value", ": array count ", count, " of ", gguf_type_name(elem_type),
               " exceeds what the ", r_.remaining(), " bytes left in the file can hold");
    }
    charge(count, "value");
    GgufArray array;
    array.elem_type = elem_type;
    array.items.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
    for (uint64_t i = 0; i < count; ++i) {
      r_.push_element(i);
      array.items.push_back(read_value(elem_type, depth + 1));
      r_.pop_element();
    }
    return array;
  }

  Reader& r_;
  uint64_t n_values_ = 0;
};

// Throws unless `value` is internally consistent (variant matches type, integers fit the
// declared width, array items all of the element type, nesting bounded).
void validate_value(const GgufValue& value, const std::string& where, int depth) {
  const auto expect = [&](bool ok) {
    check(ok, where, ": value of type ", gguf_type_name(value.type),
          " holds a mismatched or out-of-range payload");
  };
  switch (value.type) {
    case GgufType::U8:
    case GgufType::U16:
    case GgufType::U32:
    case GgufType::U64: {
      expect(std::holds_alternative<uint64_t>(value.value));
      const uint64_t v = std::get<uint64_t>(value.value);
      const unsigned bits = 8 * static_cast<unsigned>(scalar_size(value.type));
      expect(bits == 64 || v < (uint64_t{1} << bits));
      return;
    }
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64: {
      expect(std::holds_alternative<int64_t>(value.value));
      const int64_t v = std::get<int64_t>(value.value);
      const unsigned bits = 8 * static_cast<unsigned>(scalar_size(value.type));
      const int64_t limit = bits == 64 ? 0 : int64_t{1} << (bits - 1);
      expect(bits == 64 || (v >= -limit && v < limit));
      return;
    }
    case GgufType::F32:
    case GgufType::F64:
      expect(std::holds_alternative<double>(value.value));
      return;
    case GgufType::BOOL:
      expect(std::holds_alternative<bool>(value.value));
      return;
    case GgufType::STRING:
      expect(std::holds_alternative<std::string>(value.value));
      return;
    case GgufType::ARRAY: {
      expect(std::holds_alternative<GgufArray>(value.value));
      const auto& array = std::get<GgufArray>(value.value);
      check(is_known_value_type(static_cast<uint32_t>(array.elem_type)), where,
            ": bad array element type ", static_cast<uint32_t>(array.elem_type));
      check(depth + 1 < kMaxArrayDepth || array.elem_type != GgufType::ARRAY, where,
            ": arrays nested deeper than ", kMaxArrayDepth, " levels");
      for (const auto& item : array.items) {
        check(item.type == array.elem_type, where, ": array of ", gguf_type_name(array.elem_type),
              " holds an item of type ", gguf_type_name(item.type));
        validate_value(item, where, depth + 1);
      }
      return;
    }
  }
  fail(where, ": bad value type ", static_cast<uint32_t>(value.type));
}

// Checks a tensor shape and type; returns {n_elements, n_bytes}. `where` prefixes messages.
std::pair<uint64_t, uint64_t> tensor_size(const std::string& where, std::span<const uint64_t> dims,
                                          uint32_t type_id) {
  // Q8_K is not a weight type: it only ever holds activations.
  check(is_weight_type(type_id), where, ": unknown or unsupported tensor type id ", type_id);
  const TypeInfo& layout = type_info(static_cast<DType>(type_id));
  const auto block_elems = static_cast<uint64_t>(layout.block_elems);
  uint64_t n_elements = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    check(dims[d] >= 1, where, ": dims[", d, "] is 0 (every dimension must be at least 1)");
    const auto max_elements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    check(dims[d] <= max_elements / n_elements, where, ": dims overflow (element count exceeds ",
          max_elements, ")");
    n_elements *= dims[d];
  }
  check(dims[0] % block_elems == 0, where, ": dims[0] = ", dims[0],
        " is not a multiple of the block size ", block_elems, " of type ", layout.name);
  const uint64_t n_blocks = n_elements / block_elems;
  check(n_blocks <= std::numeric_limits<uint64_t>::max() / layout.block_bytes, where,
        ": byte size overflows");
  return {n_elements, n_blocks * layout.block_bytes};
}

uint64_t align_up(uint64_t value, uint64_t alignment) {
  const uint64_t rem = value % alignment;
  return rem == 0 ? value : value + (alignment - rem);
}

// Description of a value's kind for getter errors.
std::string kind_of(const GgufValue& value) {
  std::string s(gguf_type_name(value.type));
  if (value.type == GgufType::ARRAY) {
    s += " of ";
    s += gguf_type_name(std::get<GgufArray>(value.value).elem_type);
  }
  return s;
}

// general.alignment (a u32 power of two) where given, else the default. `who`
// prefixes messages (the file's path, or the writer).
uint32_t alignment_of(const GgufValue* value, const std::string& who) {
  if (value == nullptr) return kDefaultAlignment;
  check(value->type == GgufType::U32, who, ": metadata key 'general.alignment' must be u32, found ",
        kind_of(*value));
  const uint64_t a = std::get<uint64_t>(value->value);
  check(std::has_single_bit(a), who, ": general.alignment = ", a, " is not a nonzero power of two");
  return static_cast<uint32_t>(a);
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> items) {
  GgufValue v{GgufType::ARRAY, GgufArray{elem_type, std::move(items)}};
  validate_value(v, "GgufValue::array", 0);
  return v;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& items) {
  GgufArray array{GgufType::STRING, {}};
  array.items.reserve(items.size());
  for (const auto& s : items) array.items.push_back(string(s));
  return {GgufType::ARRAY, std::move(array)};
}

GgufValue GgufValue::f32_array(const std::vector<float>& items) {
  GgufArray array{GgufType::F32, {}};
  array.items.reserve(items.size());
  for (float f : items) array.items.push_back(f32(f));
  return {GgufType::ARRAY, std::move(array)};
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& items) {
  GgufArray array{GgufType::I32, {}};
  array.items.reserve(items.size());
  for (int32_t i : items) array.items.push_back(i32(i));
  return {GgufType::ARRAY, std::move(array)};
}

// ---------------------------------------------------------------------------------------------
// GgufFile

namespace {

std::atomic<WeightLoading> g_weight_loading{WeightLoading::kAuto};
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

bool should_copy(size_t size) {
  switch (weight_loading()) {
    case WeightLoading::kCopy:
      return true;
    case WeightLoading::kMap:
      return false;
    case WeightLoading::kAuto:
      break;
  }
  const char* env = std::getenv("PARSPEC_MMAP");
  if (env != nullptr && std::string_view(env) == "1") return false;
  return size >= kLargeFile;
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

void GgufFile::hold_in_memory(const std::vector<const GgufTensorInfo*>& tensors) {
  if (copied_ || mapping_ == nullptr) return;
  // Byte ranges of the file, merged where less than a huge page apart.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const GgufTensorInfo* t : tensors) {
    const size_t begin = static_cast<size_t>(data_offset_ + t->offset);
    ranges.emplace_back(begin, begin + static_cast<size_t>(t->n_bytes));
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + kHugePageBytes)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path_, ": cannot open: ", std::strerror(errno));
  auto* base = static_cast<char*>(mapping_);
  for (const auto& [first, last] : merged) {
    const size_t begin = first / kPage * kPage;
    const size_t end = std::min(round_up(last, kPage), round_up(size_, kPage));
    char* at = base + begin;
    // Anonymous pages replace the file's at the same addresses, then get its bytes.
    if (mmap(at, end - begin, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path_, ": cannot hold tensors in memory: ", std::strerror(err));
    }
    madvise(at, end - begin, MADV_HUGEPAGE);  // advice only
    const std::string error = read_fully(fd, at, std::min(end, size_) - begin, begin);
    if (!error.empty()) {
      ::close(fd);
      fail(path_, ": cannot read: ", error);
    }
    mprotect(at, end - begin, PROT_READ);
    held_bytes_ += end - begin;
  }
  ::close(fd);
}

bool GgufFile::transformed(const GgufTensorInfo& info) const {
  const size_t i = static_cast<size_t>(&info - tensors_.data());
  return i < transformed_.size() && transformed_[i];
}

void GgufFile::copy_to_huge_pages(int fd, const TransformChooser& choose) {
  if (!should_copy(size_)) return;
  const size_t rounded = round_up(size_, kHugePageBytes);
  void* memory = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;         // the mapping stays: slower, not wrong
  madvise(memory, rounded, MADV_HUGEPAGE);  // advice only: without THP it is 4 KiB pages
#ifdef MADV_POPULATE_WRITE
  // Every page faulted in now, in order: transforms write from several threads
  // at once, and their faults left ~40% of a 1B model in 4 KiB pages in most
  // checks.
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
  munmap(mapping_, mapped_size_);
  mapping_ = memory;
  mapped_size_ = rounded;
  base_ = dest;
  copied_ = true;
  transformed_ = std::move(transformed);
}

void set_weight_loading(WeightLoading mode) {
  g_weight_loading.store(mode);
}

WeightLoading weight_loading() {
  return g_weight_loading.load();
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, const TransformChooser& choose) {
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
  try {
    // Parsed from the mapping (only the header's pages are read), then, where
    // the policy says copy, read into memory with the tensors' transforms.
    file->parse();  // on throw, the destructor unmaps
    file->copy_to_huge_pages(fd, choose);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // a mapping keeps the file alive
  return file;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const uint8_t* data, size_t size,
                                                std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->base_ = data;
  file->size_ = size;
  file->parse();
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapped_size_);
}

namespace {

struct GgufHeader {
  uint32_t version;
  uint64_t tensor_count;
  uint64_t kv_count;
};

// Magic, version and the two counts; the counts are bounded by the bytes left
// so that a corrupt header cannot make us reserve or loop without end.
GgufHeader read_header(Reader& r, const std::string& path) {
  r.set_context("header");
  const auto magic = r.read<uint32_t>("magic");
  if (magic != kMagic) {
    char shown[5] = {};
    std::memcpy(shown, &magic, 4);
    for (char& c : shown) {
      if (c != 0 && (c < 0x20 || c > 0x7e)) c = '?';
    }
    fail(path, ": not a GGUF file (bad magic \"", shown, "\", expected \"GGUF\")");
  }
  GgufHeader h;
  h.version = r.read<uint32_t>("version");
  if (h.version != 2 && h.version != 3) {
    const uint32_t swapped = __builtin_bswap32(h.version);
    check(swapped != 2 && swapped != 3, path,
          ": big-endian GGUF files are not supported (version field reads ", h.version, ")");
    fail(path, ": unsupported GGUF version ", h.version, " (only versions 2 and 3 are supported)");
  }
  h.tensor_count = r.read<uint64_t>("tensor count");
  h.kv_count = r.read<uint64_t>("metadata kv count");
  if (h.kv_count > r.remaining() / kMinKvBytes) {
    fail(path, ": metadata kv count ", h.kv_count,
         " is impossible, the file is truncated or corrupt (the ", r.remaining(),
         " bytes left hold at most ", r.remaining() / kMinKvBytes, " entries)");
  }
  if (h.tensor_count > r.remaining() / kMinTensorInfoBytes) {
    fail(path, ": tensor count ", h.tensor_count,
         " is impossible, the file is truncated or corrupt (the ", r.remaining(),
         " bytes left hold at most ", r.remaining() / kMinTensorInfoBytes, " tensor infos)");
  }
  if (h.tensor_count > kMaxTensors) {
    fail(path, ": tensor count ", h.tensor_count, " exceeds the limit of ", kMaxTensors);
  }
  return h;
}

// Tensor info #i; `tensor_index` holds the names read so far (duplicates are an error).
GgufTensorInfo read_tensor_info(Reader& r, const std::string& path, uint64_t i, uint32_t alignment,
                                const std::map<std::string, size_t, std::less<>>& tensor_index) {
  r.set_context("tensor #" + std::to_string(i));
  GgufTensorInfo info;
  info.name = r.read_string("name");
  const std::string where =
      path + ": tensor #" + std::to_string(i) + " (" + quoted(info.name) + ")";
  if (const auto it = tensor_index.find(info.name); it != tensor_index.end()) {
    fail(path, ": duplicate tensor name ", quoted(info.name), " (tensors #", it->second, " and #",
         i, ")");
  }
  r.set_context("tensor #" + std::to_string(i) + " (" + quoted(info.name) + ")");
  const auto n_dims = r.read<uint32_t>("n_dims");
  check(n_dims >= 1 && n_dims <= kMaxDims, where, ": n_dims = ", n_dims, " is not in 1..",
        kMaxDims);
  uint64_t dims[kMaxDims] = {};
  for (uint32_t d = 0; d < n_dims; ++d) {
    dims[d] = r.read<uint64_t>("dims[" + std::to_string(d) + "]");
  }
  const auto type_id = r.read<uint32_t>("type");
  info.offset = r.read<uint64_t>("data offset");
  const auto [n_elements, n_bytes] = tensor_size(where, std::span(dims, n_dims), type_id);
  check(info.offset % alignment == 0, where, ": data offset ", info.offset,
        " is misaligned (not a multiple of the alignment ", alignment, ")");
  info.type = static_cast<DType>(type_id);
  info.dims.assign(dims, dims + n_dims);
  info.n_elements = n_elements;
  info.n_bytes = n_bytes;
  return info;
}

// Every tensor's bytes lie inside the data section and no two tensors overlap.
void check_tensor_extents(const std::string& path, const std::vector<GgufTensorInfo>& tensors,
                          uint64_t data_size) {
  for (const auto& t : tensors) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      fail(path, ": tensor ", quoted(t.name), " data (offset ", t.offset, ", ", t.n_bytes,
           " bytes) extends past the end of the file (data section holds ", data_size,
           " bytes); the file is truncated or corrupt");
    }
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors[order[k - 1]];
    const auto& cur = tensors[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes) {
      fail(path, ": tensors ", quoted(prev.name), " (offset ", prev.offset, ", ", prev.n_bytes,
           " bytes) and ", quoted(cur.name), " (offset ", cur.offset, ") overlap");
    }
  }
}

}  // namespace

void GgufFile::parse() {
  Reader r(path_, base_, size_);

  const GgufHeader header = read_header(r, path_);
  version_ = header.version;

  // Metadata.
  MetadataParser values(r);
  values.charge(header.kv_count, "metadata kv count");
  metadata_.reserve(static_cast<size_t>(std::min(header.kv_count, kMaxReserve)));
  for (uint64_t i = 0; i < header.kv_count; ++i) {
    r.set_context("metadata key #" + std::to_string(i));
    std::string key = r.read_string("name");
    if (const auto it = metadata_index_.find(key); it != metadata_index_.end()) {
      fail(path_, ": duplicate metadata key ", quoted(key), " (entries #", it->second, " and #", i,
           ")");
    }
    r.set_context("metadata key #" + std::to_string(i) + " (" + quoted(key) + ")");
    const auto type_id = r.read<uint32_t>("value type");
    if (!is_known_value_type(type_id)) r.error("", ": bad value type ", type_id);
    GgufValue value = values.read_value(static_cast<GgufType>(type_id), 0);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  alignment_ = alignment_of(find("general.alignment"), path_);

  // Tensor infos.
  tensors_.reserve(static_cast<size_t>(std::min(header.tensor_count, kMaxReserve)));
  for (uint64_t i = 0; i < header.tensor_count; ++i) {
    GgufTensorInfo info = read_tensor_info(r, path_, i, alignment_, tensor_index_);
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // Data section: starts at the aligned end of the header.
  data_offset_ = align_up(r.pos(), alignment_);
  if (data_offset_ > size_) {
    fail(path_, ": truncated: the data section would start at byte ", data_offset_, " (header end ",
         r.pos(), " aligned to ", alignment_, ") but the file has ", size_, " bytes");
  }
  check_tensor_extents(path_, tensors_, size_ - data_offset_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

[[noreturn]] void wrong_kind(const std::string& file, std::string_view key, const GgufValue& v,
                             std::string_view expected) {
  fail(file, ": metadata key ", quoted(key), " is ", kind_of(v), ", expected ", expected);
}

// Integer value (any integer type or bool) as int64, or nullopt if `v` is not one.
std::optional<int64_t> as_int(const std::string& file, std::string_view key, const GgufValue& v) {
  if (is_unsigned_int(v.type)) {
    const uint64_t u = std::get<uint64_t>(v.value);
    check(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), file, ": metadata key ",
          quoted(key), " value ", u, " does not fit in int64");
    return static_cast<int64_t>(u);
  }
  if (is_signed_int(v.type)) return std::get<int64_t>(v.value);
  if (v.type == GgufType::BOOL) return std::get<bool>(v.value) ? 1 : 0;
  return std::nullopt;
}

std::optional<double> as_float(const GgufValue& v) {
  if (is_unsigned_int(v.type)) return static_cast<double>(std::get<uint64_t>(v.value));
  if (is_signed_int(v.type)) return static_cast<double>(std::get<int64_t>(v.value));
  if (is_float(v.type)) return std::get<double>(v.value);
  return std::nullopt;
}

// The value of a metadata key that must be present.
const GgufValue& required(const GgufValue* v, const std::string& path, std::string_view key) {
  check(v != nullptr, path, ": missing metadata key ", quoted(key));
  return *v;
}

}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  if (v.type != GgufType::STRING) wrong_kind(path_, key, v, "a string");
  return std::get<std::string>(v.value);
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  const auto i = as_int(path_, key, v);
  if (!i) wrong_kind(path_, key, v, "an integer");
  return *i;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  const auto f = as_float(v);
  if (!f) wrong_kind(path_, key, v, "a number");
  return *f;
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  if (v.type != GgufType::BOOL) wrong_kind(path_, key, v, "a bool");
  return std::get<bool>(v.value);
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  if (v.type != GgufType::ARRAY || std::get<GgufArray>(v.value).elem_type != GgufType::STRING) {
    wrong_kind(path_, key, v, "an array of string");
  }
  std::vector<std::string> out;
  const auto& items = std::get<GgufArray>(v.value).items;
  out.reserve(items.size());
  for (const auto& item : items) out.push_back(std::get<std::string>(item.value));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  if (v.type != GgufType::ARRAY) wrong_kind(path_, key, v, "an array of integers");
  const auto& array = std::get<GgufArray>(v.value);
  if (!is_unsigned_int(array.elem_type) && !is_signed_int(array.elem_type)) {
    wrong_kind(path_, key, v, "an array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) out.push_back(*as_int(path_, key, item));
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = required(find(key), path_, key);
  if (v.type != GgufType::ARRAY) wrong_kind(path_, key, v, "an array of numbers");
  const auto& array = std::get<GgufArray>(v.value);
  if (!is_unsigned_int(array.elem_type) && !is_signed_int(array.elem_type) &&
      !is_float(array.elem_type)) {
    wrong_kind(path_, key, v, "an array of numbers");
  }
  std::vector<float> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) out.push_back(static_cast<float>(*as_float(item)));
  return out;
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
  const uint64_t data_size = size_ - data_offset_;
  check(info.offset <= data_size && info.n_bytes <= data_size - info.offset, path_, ": tensor ",
        quoted(info.name), " does not lie inside this file's data section");
  return base_ + data_offset_ + info.offset;
}

// ---------------------------------------------------------------------------------------------
// GgufWriter

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void put_value(const GgufValue& v) {
    switch (v.type) {
      case GgufType::U8:
        put(static_cast<uint8_t>(std::get<uint64_t>(v.value)));
        return;
      case GgufType::I8:
        put(static_cast<int8_t>(std::get<int64_t>(v.value)));
        return;
      case GgufType::U16:
        put(static_cast<uint16_t>(std::get<uint64_t>(v.value)));
        return;
      case GgufType::I16:
        put(static_cast<int16_t>(std::get<int64_t>(v.value)));
        return;
      case GgufType::U32:
        put(static_cast<uint32_t>(std::get<uint64_t>(v.value)));
        return;
      case GgufType::I32:
        put(static_cast<int32_t>(std::get<int64_t>(v.value)));
        return;
      case GgufType::U64:
        put(std::get<uint64_t>(v.value));
        return;
      case GgufType::I64:
        put(std::get<int64_t>(v.value));
        return;
      case GgufType::F32:
        put(static_cast<float>(std::get<double>(v.value)));
        return;
      case GgufType::F64:
        put(std::get<double>(v.value));
        return;
      case GgufType::BOOL:
        put<uint8_t>(std::get<bool>(v.value) ? 1 : 0);
        return;
      case GgufType::STRING:
        put_string(std::get<std::string>(v.value));
        return;
      case GgufType::ARRAY: {
        const auto& array = std::get<GgufArray>(v.value);
        put(static_cast<uint32_t>(array.elem_type));
        put<uint64_t>(array.items.size());
        for (const auto& item : array.items) put_value(item);
        return;
      }
    }
  }
  void pad_to(uint64_t alignment) { out_.resize(align_up(out_.size(), alignment), 0); }

 private:
  std::vector<uint8_t>& out_;
};

uint32_t writer_alignment(const std::vector<std::pair<std::string, GgufValue>>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key == "general.alignment") return alignment_of(&value, "GgufWriter");
  }
  return kDefaultAlignment;
}

void write_all(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t written = ::write(fd, data, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail(path, ": write failed: ", std::strerror(errno));
    }
    data += written;
    n -= static_cast<size_t>(written);
  }
}

}  // namespace

void GgufWriter::set(std::string key, GgufValue value) {
  check(!key.empty(), "GgufWriter: empty metadata key");
  validate_value(value, "GgufWriter: metadata key " + quoted(key), 0);
  for (auto& [existing, old] : metadata_) {
    if (existing == key) {
      old = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> dims, DType type,
                            const void* data, size_t n_bytes) {
  const std::string where = "GgufWriter: tensor " + quoted(name);
  for (const auto& t : tensors_) check(t.name != name, where, ": duplicate tensor name");
  check(!dims.empty() && dims.size() <= kMaxDims, where, ": n_dims = ", dims.size(),
        " is not in 1..", kMaxDims);
  std::vector<uint64_t> udims;
  for (size_t d = 0; d < dims.size(); ++d) {
    check(dims[d] >= 1, where, ": dims[", d, "] = ", dims[d], " (every dimension must be >= 1)");
    udims.push_back(static_cast<uint64_t>(dims[d]));
  }
  const auto [n_elements, expected_bytes] = tensor_size(where, udims, static_cast<uint32_t>(type));
  (void)n_elements;
  check(n_bytes == expected_bytes, where, ": got ", n_bytes, " bytes of data, expected ",
        expected_bytes);
  check(data != nullptr || n_bytes == 0, where, ": null data");
  const auto* bytes = static_cast<const uint8_t*>(data);
  tensors_.push_back({std::move(name), std::move(dims), type, {bytes, bytes + n_bytes}});
}

namespace {

// Header (magic .. tensor infos) padded to the alignment; offsets[i] is tensor i's data offset.
std::vector<uint8_t> build_header(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                  const auto& tensors, uint32_t alignment) {
  std::vector<uint8_t> out;
  ByteSink sink(out);
  sink.put(kMagic);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors.size());
  sink.put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    sink.put_string(key);
    sink.put(static_cast<uint32_t>(value.type));
    sink.put_value(value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
    sink.put(static_cast<uint32_t>(t.type));
    sink.put<uint64_t>(offset);
    offset = align_up(offset + t.data.size(), alignment);
  }
  sink.pad_to(alignment);
  return out;
}

}  // namespace

std::vector<uint8_t> GgufWriter::to_bytes() const {
  const uint32_t alignment = writer_alignment(metadata_);
  std::vector<uint8_t> out = build_header(metadata_, tensors_, alignment);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(align_up(out.size(), alignment), 0);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const uint32_t alignment = writer_alignment(metadata_);
  const std::vector<uint8_t> header = build_header(metadata_, tensors_, alignment);

  const std::string tmp_path = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp_path, ": cannot create: ", std::strerror(errno));
  try {
    // Header, then each tensor straight from its own buffer: the file is never assembled in memory.
    write_all(fd, header.data(), header.size(), tmp_path);
    const std::vector<uint8_t> zeros(alignment, 0);
    for (const auto& t : tensors_) {
      write_all(fd, t.data.data(), t.data.size(), tmp_path);
      const size_t pad = align_up(t.data.size(), alignment) - t.data.size();
      write_all(fd, zeros.data(), pad, tmp_path);
    }
    if (::fsync(fd) != 0) fail(tmp_path, ": fsync failed: ", std::strerror(errno));
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) fail(tmp_path, ": close failed: ", std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp_path.c_str());
    throw;
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path.c_str());
    fail(path, ": cannot rename ", tmp_path, " into place: ", std::strerror(err));
  }
}

}  // namespace parspec
