// Parsing a GGUF file's header, metadata and tensor infos (every offset, size
// and count bounds-checked), and the typed getters over what was read.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_format.h"

namespace parspec {

static_assert(std::endian::native == std::endian::little,
              "GGUF is read by memcpy: little-endian only");

using namespace gguf_format;

namespace {

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

std::unique_ptr<GgufFile> GgufFile::from_memory(const uint8_t* data, size_t size,
                                                std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->base_ = data;
  file->size_ = size;
  file->parse();
  return file;
}

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

bool GgufFile::transformed(const GgufTensorInfo& info) const {
  const size_t i = static_cast<size_t>(&info - tensors_.data());
  return i < transformed_.size() && transformed_[i];
}

}  // namespace parspec
