// Building a GGUF v3 file in memory or on disk.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_format.h"

namespace parspec {

using namespace gguf_format;

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    // resize + memcpy, not insert: GCC 12 misreads the inserted range's size here
    // (-Wstringop-overflow) once the header builder is inlined.
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
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
