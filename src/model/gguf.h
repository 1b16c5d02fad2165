#pragma once
// GGUF v3 reader (read into memory, huge pages for large files, or memory-mapped; every
// offset/size/count bounds-checked) and writer. Format facts: the GGUF specification (ggml,
// docs/gguf.md there). Parsing and getters: gguf_reader.cpp; how the bytes are held:
// gguf_loading.cpp; the writer: gguf_writer.cpp; what they share: gguf_format.*.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/quant.h"
#include "model/mapped_file_guard.h"

namespace parspec {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_type_name(GgufType type);

struct GgufValue;
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> items;
};

// One metadata value. Integers are kept in the widest type of their
// signedness; `type` remembers what the file said.
struct GgufValue {
  GgufType type = GgufType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  static GgufValue u8(uint8_t v) { return {GgufType::U8, uint64_t{v}}; }
  static GgufValue u32(uint32_t v) { return {GgufType::U32, uint64_t{v}}; }
  static GgufValue i32(int32_t v) { return {GgufType::I32, int64_t{v}}; }
  static GgufValue u64(uint64_t v) { return {GgufType::U64, v}; }
  static GgufValue f32(float v) { return {GgufType::F32, double{v}}; }
  static GgufValue boolean(bool v) { return {GgufType::BOOL, v}; }
  static GgufValue string(std::string v) { return {GgufType::STRING, std::move(v)}; }
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> items);
  static GgufValue string_array(const std::vector<std::string>& items);
  static GgufValue f32_array(const std::vector<float>& items);
  static GgufValue i32_array(const std::vector<int32_t>& items);
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the contiguous dimension
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

// How GgufFile::open holds a file's bytes. kAuto and kCopy: read into anonymous
// memory, files of 64 MiB and more backed by 2 MiB pages (streaming the weights
// of a 1B-class model through 4 KiB page-cache mappings costs a TLB miss per
// page: decode measured 14-39% slower on AMD Zen 5); once read, a file that
// changes on disk changes nothing in the process. kMap: mapped (shared with the
// page cache, nothing copied; MPI ranks use it so that every rank reads only its
// own layers, Model::hold_in_memory); a mapped file that shrinks while mapped
// ends the process with a message naming it (MappedFileGuard), never SIGBUS.
// PARSPEC_MMAP=1 in the environment turns kAuto into kMap.
enum class WeightLoading { kAuto, kMap, kCopy };

// How a file that is copied into memory (WeightLoading) may have some tensors
// rewritten while it is read, in one pass: a loader repacks weights into a
// kernel layout (kernels/repack.h). TensorTransform fills `out` (the tensor's
// n_bytes) from `read`, which copies n bytes at byte `at` of the tensor's bytes
// in the file into dst (thread-safe; false on a read error, then the transform
// returns early and the open fails). The chooser returns no transform for a
// tensor that stays as the file has it; it sees the file (its metadata and
// every tensor's info, not yet its data) beside the tensor.
using TensorReader = std::function<bool(size_t at, size_t n, uint8_t* dst)>;
using TensorTransform = std::function<void(const TensorReader& read, uint8_t* out)>;
class GgufFile;
using TransformChooser =
    std::function<TensorTransform(const GgufFile& file, const GgufTensorInfo& tensor)>;

class GgufFile {
 public:
  // Maps or copies the file, as `loading` says, and validates it completely.
  // Throws Error naming the file and the problem (truncation, bad
  // magic/version/type, absurd count or size, misaligned or overlapping tensor
  // data, ...). `choose` applies to a copied file only (a mapped one stays as
  // the file has it): see TensorTransform.
  static std::unique_ptr<GgufFile> open(const std::string& path,
                                        WeightLoading loading = WeightLoading::kAuto,
                                        const TransformChooser& choose = nullptr);
  // Same checks over bytes in memory (tests and fuzzers). The bytes must
  // outlive the returned object.
  static std::unique_ptr<GgufFile> from_memory(const uint8_t* data, size_t size,
                                               std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  // Whether the bytes were copied into anonymous (huge-page) memory.
  bool copied() const { return copied_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw Error if the key is missing or of another kind.
  // get_int accepts every integer type and bool; get_float every numeric type.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  // Same, with a default when the key is absent (still throws on a wrong type).
  std::string get_string(std::string_view key, const std::string& fallback) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Pointer to a tensor's bytes inside the mapping (valid while *this lives).
  const uint8_t* tensor_data(const GgufTensorInfo& info) const;

  // A mapped file's tensors read into anonymous memory (2 MiB pages where the
  // kernel has them) at the same addresses, so pointers taken before stay
  // valid: an MPI stage maps the file and reads in only its own layers. The
  // pages around the tensors are read in too (whole pages, from the file).
  // Not thread-safe against readers of those tensors: call it before forwards
  // start. A no-op for copied files and files in memory; counts the bytes read
  // in (held_bytes()). Throws Error when the file cannot be read. `choose`
  // rewrites tensors as they are read in, as open() does for a copied file
  // (transformed() then says so).
  void hold_in_memory(const std::vector<const GgufTensorInfo*>& tensors,
                      const TransformChooser& choose = nullptr);
  uint64_t held_bytes() const { return held_bytes_; }

  // Whether open() or hold_in_memory() rewrote the tensor's bytes with a TensorTransform.
  bool transformed(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  void parse();
  // Where `loading` says copy: the file's bytes read into anonymous memory
  // advised to use 2 MiB pages, with the chosen tensors' transforms, replacing
  // the mapping. Keeps the mapping where that memory is not there; a read error
  // is an error (the file is unreadable).
  void copy_to_huge_pages(int fd, WeightLoading loading, const TransformChooser& choose);

  std::string path_;
  bool copied_ = false;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // non-null when we own a mapping (of mapped_size_ bytes)
  std::unique_ptr<MappedFileGuard> guard_;  // while the file's pages are mapped
  size_t mapped_size_ = 0;
  uint64_t held_bytes_ = 0;
  std::vector<bool> transformed_;                      // per tensor, in tensors_ order
  std::vector<std::pair<size_t, size_t>> held_pages_;  // file byte ranges hold_in_memory read in
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors aligned to
// general.alignment (32 unless set).
class GgufWriter {
 public:
  void set(std::string key, GgufValue value);  // replaces an existing key
  // `data` must hold exactly the bytes of a tensor of this type and shape; it is copied.
  void add_tensor(std::string name, std::vector<int64_t> dims, DType type, const void* data,
                  size_t n_bytes);
  // Writes to `path` atomically (temporary file + rename); throws Error on I/O failure.
  void write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace parspec
