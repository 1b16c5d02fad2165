#pragma once
// Tensor element types as GGUF stores them (ids match the format), their block
// layouts, and row-wise conversion to and from f32.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace parspec {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q6_K = 14,
  Q8_K = 15,  // activations only (dot partner of Q4_K/Q6_K); never a weight type here
  BF16 = 30,
};

// One row per type: everything that differs between types outside matmul's
// kernels is here, so adding a type is one row in kTypes (quant.cpp).
struct TypeInfo {
  DType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q8_0", "q4_K", ...
  int64_t block_elems;    // elements per block
  size_t block_bytes;     // bytes per block
  bool weight;            // loadable as a tensor (and a target of parse_dtype)
  // llama.cpp's general.file_type ("mostly <type>") of a file whose linear
  // weights are all of this type; none for an activation-only type.
  std::optional<uint32_t> gguf_file_type;
  // n is a multiple of block_elems (checked by the free functions below).
  void (*dequantize_row)(const void* src, float* dst, int64_t n);
  void (*quantize_row)(const float* src, void* dst, int64_t n);  // reference quantizer
};

// True for the types parspec can load as tensors (the rows with `weight`: all but Q8_K).
bool is_weight_type(uint32_t id);
// Throws Error for an unknown id.
const TypeInfo& type_info(DType type);
// Parses a weight type's name, case-insensitive: "f32", "f16", "bf16", "q8_0", "q4_0",
// "q4_k", "q6_k".
DType parse_dtype(std::string_view name);
// Bytes of a row of n elements; throws Error unless n is a multiple of the block size.
size_t row_bytes(DType type, int64_t n);

constexpr int kQK = 32;    // elements per Q4_0 / Q8_0 block
constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
struct BlockQ4_K {
  uint16_t d;     // f16 super-block scale for the 6-bit scales
  uint16_t dmin;  // f16 super-block scale for the 6-bit mins
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // f16
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sums of each group of 16 qs
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// IEEE half and bfloat16 conversions (round to nearest even).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

// One Q8_0 block of 32 values, as quantize_row(DType::Q8_0) writes it; returns
// the sum of its quants.
int32_t quantize_block_q8_0(const float* x, BlockQ8_0& block);

// n must be a multiple of the type's block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Reference quantizer for every type (used by tools and tests; not a hot path).
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace parspec
